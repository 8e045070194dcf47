// libFuzzer harness for the .npy reader: parse_npy must either return a tensor whose size matches
// what the header promised or throw InputError; never crash, hang, allocate what the file cannot
// back, or read out of bounds (built with AddressSanitizer and UBSan).
#include <cstddef>
#include <cstdint>
#include <span>

#include "fusebench/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const fusebench::Tensor tensor = fusebench::parse_npy(bytes, "fuzz.npy");
    // A tensor read is never larger than the file that held it.
    if (tensor.nbytes() > size) __builtin_trap();
    // Round trip: what we parsed serializes and parses back to the same bytes.
    const auto again = fusebench::parse_npy(fusebench::serialize_npy(tensor), "again.npy");
    if (again.nbytes() != tensor.nbytes() || again.dtype() != tensor.dtype() ||
        again.shape() != tensor.shape()) {
      __builtin_trap();
    }
  } catch (const fusebench::InputError&) {
  }
  return 0;
}
