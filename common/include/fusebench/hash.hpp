// Digests of tensors and files (OpenSSL libcrypto): MD5 for the plan's output fingerprints,
// SHA-256 for kernel artifacts and cache keys.
#pragma once

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

}  // namespace fusebench
