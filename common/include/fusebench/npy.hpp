// NumPy .npy files (format versions 1.0, 2.0 and 3.0).
//
// Layout of each dtype on disk:
//   f16 '<f2', f32 '<f4', f64 '<f8', integers '<i2' ... '|u1', bool '|b1' as numpy writes them.
//   bf16: numpy has no bfloat16, so it is stored as a structured dtype with one uint16 field,
//         descr [('bf16', '<u2')], holding the raw bits. np.load reads it without extra packages:
//         a['bf16'] is the uint16 bit array; (a['bf16'].astype(np.uint32) << 16).view(np.float32)
//         gives exact fp32 values, and a['bf16'].view(ml_dtypes.bfloat16) the bfloat16 array.
// Reading also accepts big-endian data (byte-swapped) and fortran_order=True (made C order).
// Every malformed file raises InputError naming the file and the problem.
#pragma once

#include <filesystem>
#include <span>

#include "fusebench/tensor.hpp"

namespace fusebench {

Tensor read_npy(const std::filesystem::path& path);
Tensor parse_npy(std::span<const std::byte> file_bytes, const std::string& source_name);
// Writes to a temporary file beside `path`, then renames it: a reader never sees half a file.
void write_npy(const std::filesystem::path& path, const Tensor& tensor);
std::vector<std::byte> serialize_npy(const Tensor& tensor);

// Writes `bytes` to path atomically (temporary file in the same directory, then rename).
void write_file_atomically(const std::filesystem::path& path, std::span<const std::byte> bytes);
void write_file_atomically(const std::filesystem::path& path, std::string_view text);

}  // namespace fusebench
