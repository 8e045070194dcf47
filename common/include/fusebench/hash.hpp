// Digests of tensors and files (OpenSSL libcrypto): MD5 for the plan's output fingerprints,
// SHA-256 for kernel artifacts and cache keys.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>

#include "fusebench/tensor.hpp"

namespace fusebench {

std::string md5_hex(std::span<const std::byte> bytes);
std::string sha256_hex(std::span<const std::byte> bytes);
std::string sha256_hex(std::string_view text);
std::string sha256_file_hex(const std::filesystem::path& path);
// Over dtype, shape and contents, so equal digests mean equal tensors, not just equal bytes.
std::string tensor_md5_hex(const Tensor& tensor);

// The chunk size of tensor_chunked_md5_hex. Fixed, not derived from the thread count, so that a
// digest is the same on every machine.
inline constexpr std::size_t kMd5ChunkBytes = std::size_t{4} << 20;
// MD5 of the dtype and shape (as tensor_md5_hex's header) followed by the 16-byte MD5 of every
// kMd5ChunkBytes chunk of the contents (the last chunk shorter), the chunks hashed on `threads`
// threads (0: every hardware thread). Equal digests mean equal tensors, as with tensor_md5_hex,
// whose digests these are not; it is for outputs too large to hash on one thread between runs
// (task A: 128 MiB, 1,000 times a round).
std::string tensor_chunked_md5_hex(const Tensor& tensor, int threads = 0);

}  // namespace fusebench
