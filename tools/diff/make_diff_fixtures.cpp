// Writes the dumps that test_fusebench_diff.py feeds to fusebench-diff, with known differences:
//   ref.npy   f64 [64, 32] U(-1, 1), seed 1
//   a.npy     f16: ref rounded to nearest even
//   b.npy     a with element 5 moved 3 ULP up and element 7 replaced by a quiet NaN
//   a_bf16.npy, short.npy (f16 [10]), ints.npy (i32 [64, 32]), truncated.npy
#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "fusebench/npy.hpp"
#include "fusebench/rng.hpp"

namespace fb = fusebench;

int main(int argc, char** argv) {
  if (argc != 2) {
    fmt::print(stderr, "usage: make_diff_fixtures DIR\n");
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  const fb::Tensor ref = fb::random_uniform(fb::DType::f64, {64, 32}, -1, 1, 1);
  const fb::Tensor a = ref.to(fb::DType::f16);
  fb::Tensor b = a.clone();
  auto halves = b.span<fb::Half>();
  for (int step = 0; step < 3; ++step) halves[5] = fb::next_up(halves[5]);
  halves[7] = fb::Half{0x7e00};
  fb::write_npy(dir / "ref.npy", ref);
  fb::write_npy(dir / "a.npy", a);
  fb::write_npy(dir / "b.npy", b);
  fb::write_npy(dir / "a_bf16.npy", ref.to(fb::DType::bf16));
  fb::write_npy(dir / "short.npy", fb::Tensor(fb::DType::f16, {10}));
  fb::write_npy(dir / "ints.npy", ref.to(fb::DType::i32));
  auto bytes = fb::serialize_npy(a);
  bytes.resize(bytes.size() - 100);
  fb::write_file_atomically(dir / "truncated.npy", bytes);
  return 0;
}
