// The chunked MD5 of task A's outputs: the same digest at every thread count (so on every
// machine), pinned to its definition, and sensitive to a single bit anywhere, the last chunk too.
#include <gtest/gtest.h>

#include <algorithm>
#include <span>
#include <string>

#include "fusebench/hash.hpp"
#include "fusebench/rng.hpp"

namespace fusebench {
namespace {

// Two whole chunks and a short third one (4,000 bytes), so the last chunk is a partial one.
Tensor three_chunk_tensor() {
  const auto elements = std::int64_t((2 * kMd5ChunkBytes + 4000) / 4);
  return random_uniform(DType::f32, {elements}, -1, 1, 2024);
}

std::string bytes_of_hex(const std::string& hex) {
  std::string bytes;
  for (std::size_t i = 0; i < hex.size(); i += 2)
    bytes += char(std::stoi(hex.substr(i, 2), nullptr, 16));
  return bytes;
}

TEST(ChunkedMd5, IsTheSameAtEveryThreadCount) {
  const Tensor t = three_chunk_tensor();
  const std::string one_thread = tensor_chunked_md5_hex(t, 1);
  for (int threads : {2, 3, 4, 16}) EXPECT_EQ(tensor_chunked_md5_hex(t, threads), one_thread);
  EXPECT_EQ(tensor_chunked_md5_hex(t), one_thread) << "every hardware thread";
}

TEST(ChunkedMd5, IsTheMd5OfTheHeaderAndTheChunksMd5s) {
  const Tensor t = three_chunk_tensor();
  const auto* bytes = t.raw_data();
  std::string concatenated = t.describe();
  for (std::size_t begin = 0; begin < t.nbytes(); begin += kMd5ChunkBytes) {
    const std::size_t size = std::min(kMd5ChunkBytes, t.nbytes() - begin);
    concatenated += bytes_of_hex(md5_hex(std::span(bytes + begin, size)));
  }
  EXPECT_EQ(concatenated.size(), t.describe().size() + 3 * 16);
  EXPECT_EQ(tensor_chunked_md5_hex(t, 2),
            md5_hex(std::as_bytes(std::span(concatenated.data(), concatenated.size()))));
  EXPECT_NE(tensor_chunked_md5_hex(t), tensor_md5_hex(t)) << "a different digest by definition";
}

TEST(ChunkedMd5, OneBitFlippedInTheLastChunkChangesIt) {
  const Tensor t = three_chunk_tensor();
  Tensor flipped = t.clone();
  flipped.raw_data()[flipped.nbytes() - 1] ^= std::byte{1};
  EXPECT_NE(tensor_chunked_md5_hex(flipped, 4), tensor_chunked_md5_hex(t, 4));
  Tensor first = t.clone();
  first.raw_data()[0] ^= std::byte{0x80};
  EXPECT_NE(tensor_chunked_md5_hex(first, 4), tensor_chunked_md5_hex(t, 4));
}

TEST(ChunkedMd5, NamesDtypeAndShapeAndTakesEmptyTensors) {
  const Tensor t = random_uniform(DType::f16, {4, 6}, -1, 1, 1);
  EXPECT_NE(tensor_chunked_md5_hex(t), tensor_chunked_md5_hex(t.reshape({6, 4})));
  const Tensor empty = Tensor::uninitialized(DType::f32, {0, 3});
  const std::string header = empty.describe();
  EXPECT_EQ(tensor_chunked_md5_hex(empty, 8),
            md5_hex(std::as_bytes(std::span(header.data(), header.size()))));
}

}  // namespace
}  // namespace fusebench
