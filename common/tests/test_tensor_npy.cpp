#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "fusebench/compare.hpp"
#include "fusebench/hash.hpp"
#include "fusebench/npy.hpp"
#include "fusebench/rng.hpp"

namespace fusebench {
namespace {

namespace fs = std::filesystem;

fs::path scratch_dir() {
  const auto dir = fs::temp_directory_path() / fmt::format("fusebench-test-{}", ::getpid());
  fs::create_directories(dir);
  return dir;
}

template <class Fn>
void expect_input_error(Fn&& fn, const std::string& fragment) {
  try {
    fn();
    FAIL() << "no error; expected one mentioning '" << fragment << "'";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Tensor, ViewsShareStorageAndCopiesDoNot) {
  const Tensor t = random_uniform(DType::f32, {2, 3, 4}, -1, 1, 1);
  const Tensor swapped = t.transpose(0, 2);
  EXPECT_EQ(swapped.shape(), (Shape{4, 3, 2}));
  EXPECT_FALSE(swapped.is_contiguous());
  EXPECT_EQ(swapped.value_at(1 * 6 + 2 * 2 + 1), t.value_at(1 * 12 + 2 * 4 + 1));
  const Tensor sliced = t.slice(1, 1, 3);
  EXPECT_EQ(sliced.shape(), (Shape{2, 2, 4}));
  EXPECT_EQ(sliced.value_at(0), t.value_at(4));
  EXPECT_EQ(sliced.contiguous().value_at(9), t.value_at(12 + 4 + 1));
  EXPECT_EQ(t.reshape({6, -1}).shape(), (Shape{6, 4}));
  Tensor copy = t.clone();
  copy.span<float>()[0] = 42;
  EXPECT_NE(t.value_at(0), 42);
  EXPECT_EQ(t.describe(), "f32[2, 3, 4]");
}

TEST(Tensor, ConversionsRoundOnceToNearestEven) {
  const std::vector<double> values = {1.0 + std::ldexp(1.0, -11), 65520.0, -0.0, 1e-8};
  const Tensor wide = Tensor::from_values<double>({4}, values);
  const Tensor half = wide.to(DType::f16);
  EXPECT_EQ(half.bits_at(0), 0x3c00u);  // tie to even
  EXPECT_EQ(half.bits_at(1), 0x7c00u);  // overflow
  EXPECT_EQ(half.bits_at(2), 0x8000u);
  EXPECT_EQ(half.bits_at(3), 0x0000u);  // below half the smallest subnormal (5.96e-8)
  EXPECT_EQ(half.to(DType::f32).to(DType::f16).bits_at(0), 0x3c00u);
}

TEST(Tensor, LargeBuffersAreReusedAtTheirExactSizeAndZeroFilledWhenAskedFor) {
  const Shape large = {std::int64_t(1) << 20};  // 4 MiB of f32: kept for reuse when freed
  const std::byte* first = nullptr;
  {
    Tensor t = Tensor::uninitialized(DType::f32, large);
    std::fill(t.span<float>().begin(), t.span<float>().end(), 3.0f);
    first = t.raw_data();
  }
  // same size: the cached buffer, zero-filled as the constructor promises
  Tensor again(DType::f32, large);
  EXPECT_EQ(again.raw_data(), first);
  EXPECT_TRUE(std::all_of(again.span<float>().begin(), again.span<float>().end(),
                          [](float v) { return v == 0.0f; }));
  const Tensor other = Tensor::uninitialized(DType::f32, {(std::int64_t(1) << 20) + 4096});
  EXPECT_NE(other.raw_data(), first);  // a buffer in use is never handed out twice
}

// A one-off computation that fills the cache must not push a repeated run's buffers out for good
// (it did: an fp64 reference filled 1 GiB and a benchmark's outputs were evicted every run).
TEST(Tensor, AFullBufferCacheLetsTheOldestBuffersGo) {
  const std::size_t limit = buffer_cache_state().limit_bytes;
  constexpr std::size_t kMiB = std::size_t(1) << 20;
  if (limit < 8 * kMiB) GTEST_SKIP() << "FUSEBENCH_BUFFER_CACHE_MB is below 8";
  // Fill the cache with one untouched block (virtual memory only) the size of the limit.
  void* filler = allocate_buffer(limit / (2 * kMiB) * (2 * kMiB));
  release_buffer(filler, limit / (2 * kMiB) * (2 * kMiB));
  // A working-set buffer released now is kept: the filler goes instead.
  void* working = allocate_buffer(4 * kMiB);
  release_buffer(working, 4 * kMiB);
  EXPECT_EQ(buffer_cache_state().cached_bytes, 4 * kMiB);
  void* again = allocate_buffer(4 * kMiB);
  EXPECT_EQ(again, working);
  EXPECT_EQ(buffer_cache_state().cached_bytes, 0u);
  release_buffer(again, 4 * kMiB);
}

TEST(Tensor, BadShapesAndViews) {
  const Tensor t(DType::f16, {2, 3});
  expect_input_error([&] { t.reshape({4, 2}); }, "6 elements cannot become 8");
  expect_input_error([&] { t.slice(1, 2, 5); }, "range [2, 5) outside axis 1 of extent 3");
  expect_input_error([&] { t.permute({0, 0}); }, "not a permutation");
  expect_input_error([&] { t.transpose(0, 1).reshape({6}); }, "strided view");
  expect_input_error([&] { (void)t.span<float>(); },
                     "requested f32 elements from a f16[2, 3] tensor");
  expect_input_error([&] { Tensor(DType::f32, {-1}); }, "negative extent");
}

TEST(Npy, RoundTripsEveryDtype) {
  const auto dir = scratch_dir();
  for (DType dtype : {DType::f16, DType::bf16, DType::f32, DType::f64}) {
    const Tensor t = random_normal(dtype, {3, 5, 7}, 0, 10, 2);
    write_npy(dir / "t.npy", t);
    const Tensor back = read_npy(dir / "t.npy");
    EXPECT_EQ(back.dtype(), dtype);
    EXPECT_EQ(back.shape(), t.shape());
    EXPECT_TRUE(bit_equal(back, t).equal) << dtype_name(dtype);
  }
  for (DType dtype : {DType::i8, DType::i16, DType::i32, DType::i64, DType::u8, DType::u16,
                      DType::u32, DType::u64, DType::boolean}) {
    const Tensor t = random_uniform(DType::f64, {11}, 0, 200, 3).to(DType::i64).to(dtype);
    write_npy(dir / "i.npy", t);
    EXPECT_TRUE(bit_equal(read_npy(dir / "i.npy"), t).equal) << dtype_name(dtype);
  }
  // 0-d and empty tensors
  write_npy(dir / "scalar.npy", Tensor(DType::f32, {}));
  EXPECT_EQ(read_npy(dir / "scalar.npy").rank(), 0);
  write_npy(dir / "empty.npy", Tensor(DType::f16, {0, 4}));
  EXPECT_EQ(read_npy(dir / "empty.npy").shape(), (Shape{0, 4}));
  // nothing half-written is left behind
  for (const auto& entry : fs::directory_iterator(dir)) {
    EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << entry.path();
  }
  fs::remove_all(dir);
}

TEST(Npy, HeadersAreWhatNumpyWrites) {
  const auto bytes = serialize_npy(Tensor(DType::bf16, {2, 3}));
  const std::string text(reinterpret_cast<const char*>(bytes.data()), 128);
  EXPECT_NE(text.find("{'descr': [('bf16', '<u2')], 'fortran_order': False, 'shape': (2, 3), }"),
            std::string::npos);
  const auto f16 = serialize_npy(Tensor(DType::f16, {5}));
  const std::string text16(reinterpret_cast<const char*>(f16.data()), 64);
  EXPECT_NE(text16.find("'descr': '<f2'"), std::string::npos);
  EXPECT_NE(text16.find("'shape': (5,)"), std::string::npos);
  EXPECT_EQ((bytes.size() - 12) % 64, 0u);  // data aligned to 64 bytes
}

std::vector<std::byte> npy_with_header(const std::string& header, std::size_t data_bytes) {
  std::string padded = header;
  padded.append((64 - (10 + padded.size() + 1) % 64) % 64, ' ');
  padded.push_back('\n');
  std::vector<std::byte> out(10 + padded.size() + data_bytes, std::byte{0});
  std::memcpy(out.data(), "\x93NUMPY\x01\x00", 8);
  out[8] = std::byte(padded.size() & 0xff);
  out[9] = std::byte(padded.size() >> 8);
  std::memcpy(out.data() + 10, padded.data(), padded.size());
  return out;
}

TEST(Npy, BigEndianAndFortranOrderAreConverted) {
  auto be = npy_with_header("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8);
  const float one = 1.0f;
  std::uint32_t bits = std::bit_cast<std::uint32_t>(one);
  for (int b = 0; b < 4; ++b)
    be[be.size() - 8 + std::size_t(b)] = std::byte((bits >> (24 - 8 * b)) & 0xff);
  EXPECT_EQ(parse_npy(be, "be.npy").value_at(0), 1.0);
  auto fortran = npy_with_header("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }", 24);
  for (int i = 0; i < 6; ++i) fortran[fortran.size() - 24 + std::size_t(4 * i)] = std::byte(i);
  const Tensor t = parse_npy(fortran, "f.npy");
  // column-major 0..5 in a 2x3 array: row 0 is 0 2 4, row 1 is 1 3 5
  EXPECT_EQ(t.value_at(1), 2);
  EXPECT_EQ(t.value_at(3), 1);
}

TEST(Npy, MalformedFilesGiveErrorsNamingFileAndProblem) {
  const auto good = serialize_npy(random_uniform(DType::f16, {4, 4}, -1, 1, 1));
  auto truncated = good;
  truncated.resize(good.size() - 3);
  expect_input_error(
      [&] { parse_npy(truncated, "cut.npy"); },
      "cut.npy: truncated .npy data: shape [4, 4] of f16 needs 32 bytes, file has 29");
  auto header_cut = good;
  header_cut.resize(40);
  expect_input_error([&] { parse_npy(header_cut, "h.npy"); }, "h.npy: truncated .npy header");
  std::vector<std::byte> junk(64, std::byte{'x'});
  expect_input_error([&] { parse_npy(junk, "junk.npy"); }, "junk.npy: not a .npy file");
  expect_input_error(
      [&] {
        parse_npy(npy_with_header("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16),
                  "c.npy");
      },
      "c.npy: unsupported .npy dtype '<c8'");
  expect_input_error(
      [&] {
        parse_npy(npy_with_header(
                      "{'descr': [('x', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8),
                  "r.npy");
      },
      "unsupported structured .npy dtype");
  expect_input_error(
      [&] { parse_npy(npy_with_header("{'descr': '<f4', 'shape': (2,), }", 8), "o.npy"); },
      "o.npy: malformed .npy header (no boolean 'fortran_order')");
  expect_input_error(
      [&] {
        parse_npy(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }", 8),
                  "s.npy");
      },
      "s.npy: malformed .npy header (unexpected character 'x' at byte 54)");
  auto extra = good;
  extra.push_back(std::byte{0});
  expect_input_error([&] { parse_npy(extra, "x.npy"); }, "1 trailing bytes");
  expect_input_error([&] { read_npy("/nonexistent/dir/a.npy"); },
                     "/nonexistent/dir/a.npy: no such file");
  expect_input_error([&] { read_npy(std::filesystem::temp_directory_path()); },
                     ": is a directory, not a .npy file");
  // A header that promises more than the file holds fails before anything is allocated, also when
  // the promise does not fit in 64 bits.
  expect_input_error(
      [&] {
        parse_npy(
            npy_with_header(
                "{'descr': '<f2', 'fortran_order': False, 'shape': (99999999999999999,), }", 0),
            "big.npy");
      },
      "big.npy: truncated .npy data: shape [99999999999999999] of f16 needs 199999999999999998 "
      "bytes, file has 0");
  expect_input_error(
      [&] {
        parse_npy(
            npy_with_header(
                "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", 0),
            "wide.npy");
      },
      "wide.npy: the .npy header's shape [4294967296, 4294967296] of f64 does not fit in 64 bits");
  expect_input_error(
      [&] {
        parse_npy(
            npy_with_header(
                "{'descr': '<f2', 'fortran_order': False, 'shape': (99999999999999999999,), }", 0),
            "long.npy");
      },
      "long.npy: malformed .npy header (integer out of range");
  expect_input_error(
      [&] {
        parse_npy(npy_with_header("{'descr': '<f2', 'fortran_order': False, 'shape': "
                                  "((((((((((1,),),),),),),),),),), }",
                                  0),
                  "deep.npy");
      },
      "deep.npy: malformed .npy header (nested too deeply");
  expect_input_error([&] { write_npy("/nonexistent/dir/a.npy", Tensor(DType::f16, {1})); },
                     "cannot open for writing");
}

TEST(Hash, KnownDigests) {
  const std::string abc = "abc";
  EXPECT_EQ(md5_hex(std::as_bytes(std::span(abc.data(), abc.size()))),
            "900150983cd24fb0d6963f7d28e17f72");
  EXPECT_EQ(sha256_hex(abc), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // A tensor digest covers dtype and shape: same bytes, other shape, other digest.
  const Tensor t(DType::f16, {2, 2});
  EXPECT_NE(tensor_md5_hex(t), tensor_md5_hex(t.reshape({4})));
}

}  // namespace
}  // namespace fusebench
