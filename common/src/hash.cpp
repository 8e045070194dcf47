#include "fusebench/hash.hpp"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include "error_stats/parallel.hpp"  // the toolkit's fan-out of chunks to threads

namespace fusebench {

namespace {
class Digest {
 public:
  explicit Digest(const EVP_MD* algorithm) : context_(EVP_MD_CTX_new(), &EVP_MD_CTX_free) {
    if (!context_ || EVP_DigestInit_ex(context_.get(), algorithm, nullptr) != 1) {
      throw std::runtime_error("OpenSSL: digest initialisation failed");
    }
  }
  void update(const void* data, std::size_t size) {
    if (EVP_DigestUpdate(context_.get(), data, size) != 1)
      throw std::runtime_error("OpenSSL: digest update failed");
  }
  std::string hex() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    if (EVP_DigestFinal_ex(context_.get(), digest, &length) != 1) {
      throw std::runtime_error("OpenSSL: digest finalisation failed");
    }
    std::string out;
    out.reserve(2 * length);
    for (unsigned int i = 0; i < length; ++i) out += fmt::format("{:02x}", digest[i]);
    return out;
  }
  // The raw digest (MD5: 16 bytes), for digests of digests.
  std::array<unsigned char, 16> md5_bytes() {
    std::array<unsigned char, 16> digest{};
    unsigned char full[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    if (EVP_DigestFinal_ex(context_.get(), full, &length) != 1 || length != digest.size()) {
      throw std::runtime_error("OpenSSL: MD5 finalisation failed");
    }
    std::copy(full, full + length, digest.begin());
    return digest;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context_;
};
}  // namespace

std::string md5_hex(std::span<const std::byte> bytes) {
  Digest digest(EVP_md5());
  digest.update(bytes.data(), bytes.size());
  return digest.hex();
}

std::string sha256_hex(std::span<const std::byte> bytes) {
  Digest digest(EVP_sha256());
  digest.update(bytes.data(), bytes.size());
  return digest.hex();
}

std::string sha256_hex(std::string_view text) {
  return sha256_hex(std::as_bytes(std::span(text.data(), text.size())));
}

std::string sha256_file_hex(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_input_error("{}: cannot open for hashing", path.string());
  Digest digest(EVP_sha256());
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), std::streamsize(buffer.size()));
    digest.update(buffer.data(), std::size_t(in.gcount()));
  }
  return digest.hex();
}

std::string tensor_md5_hex(const Tensor& tensor_in) {
  const Tensor tensor = tensor_in.contiguous();
  Digest digest(EVP_md5());
  const std::string header = tensor.describe();
  digest.update(header.data(), header.size());
  digest.update(tensor.raw_data(), tensor.nbytes());
  return digest.hex();
}

std::string tensor_chunked_md5_hex(const Tensor& tensor_in, int threads) {
  const Tensor tensor = tensor_in.contiguous();
  const std::byte* bytes = tensor.raw_data();
  const std::size_t size = tensor.nbytes();
  const std::size_t chunks = (size + kMd5ChunkBytes - 1) / kMd5ChunkBytes;
  std::vector<std::array<unsigned char, 16>> chunk_digests(chunks);
  const int available =
      threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency()));
  const int workers =
      int(std::min<std::size_t>(std::size_t(available), std::max<std::size_t>(chunks, 1)));
  error_stats_internal::for_each_chunk(std::int64_t(chunks), workers, [&](int, std::int64_t c) {
    const std::size_t begin = std::size_t(c) * kMd5ChunkBytes;
    Digest digest(EVP_md5());
    digest.update(bytes + begin, std::min(kMd5ChunkBytes, size - begin));
    chunk_digests[std::size_t(c)] = digest.md5_bytes();
  });
  Digest digest(EVP_md5());
  const std::string header = tensor.describe();
  digest.update(header.data(), header.size());
  for (const auto& d : chunk_digests) digest.update(d.data(), d.size());
  return digest.hex();
}

}  // namespace fusebench
