// The GPU row kernels' warp reductions (warp_rows.cuh) against the CPU engine's (scalar_math.hpp),
// bit for bit, without a GPU: the same text runs on an emulated warp of 32 host threads
// (warp_emulation.hpp). The rows mix magnitudes over forty binades, so that a sum in any other
// order gives other bits (checked below: the test can fail).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "fusebench/engine/scalar_math.hpp"
#include "warp_emulation.hpp"
#include "warp_rows.cuh"

namespace fusebench::cuda {
namespace {

using testing::EmulatedWarp;
using testing::run_warp;

template <class C>
std::vector<C> wide_row(std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> mantissa(-1, 1);
  std::uniform_int_distribution<int> exponent(-20, 20);
  std::vector<C> row(static_cast<std::size_t>(n));
  for (C& v : row) v = C(std::ldexp(mantissa(rng), exponent(rng)));
  return row;
}

template <class C>
std::uint64_t bits(C v) {
  if constexpr (sizeof(C) == 4) {
    return std::bit_cast<std::uint32_t>(v);
  } else {
    return std::bit_cast<std::uint64_t>(v);
  }
}

// Row lengths and tiles: whole and partial groups of 32, tiles shorter than a warp, not a multiple
// of 32, and longer than the row.
struct Shape {
  std::int64_t n, tile;
};
const std::vector<Shape> kShapes = {
    {1, 1},     {5, 3},     {31, 1024},   {32, 32},    {33, 7},      {100, 1},     {100, 33},
    {777, 100}, {1000, 64}, {1024, 1024}, {1500, 256}, {4097, 1024}, {5000, 5000}, {3000, 45}};

template <class C, class Round>
void expect_tiled_sums_match(Round round, const char* what) {
  std::uint64_t seed = 1;
  for (const Shape& s : kShapes) {
    const std::vector<C> row = wide_row<C>(s.n, seed++);
    const C cpu = fbk::tiled_sum(row.data(), s.n, s.tile, round);
    const std::vector<C> lanes = run_warp<C>([&](const EmulatedWarp& warp) {
      return fbw::tiled_sum_of<C>(warp, s.n, s.tile, round,
                                  [&](long long i) { return row[std::size_t(i)]; });
    });
    for (int l = 0; l < EmulatedWarp::kLanes; ++l) {
      ASSERT_EQ(bits(lanes[std::size_t(l)]), bits(cpu))
          << what << " n=" << s.n << " tile=" << s.tile << " lane " << l << ": warp "
          << lanes[std::size_t(l)] << ", cpu " << cpu;
    }
  }
}

TEST(WarpRows, TiledSumIsTheCpuOrderBitForBit) {
  expect_tiled_sums_match<float>(fbk::NoRounding{}, "f32");
  expect_tiled_sums_match<float>(fbk::RoundF16{}, "f32, f16 accumulator");
  expect_tiled_sums_match<float>(fbk::RoundBF16{}, "f32, bf16 accumulator");
  expect_tiled_sums_match<double>(fbk::NoRounding{}, "f64");
}

// The rows are order-sensitive: the lanes' tree combined in another order (lane by lane) gives
// other bits for some of them, so the equality above is not a property of the data.
TEST(WarpRows, RowsAreSensitiveToTheOrder) {
  int differing = 0;
  std::uint64_t seed = 1;
  for (const Shape& s : kShapes) {
    const std::vector<float> row = wide_row<float>(s.n, seed++);
    const float cpu = fbk::tiled_sum(row.data(), s.n, s.tile, fbk::NoRounding{});
    float sequential = 0;
    for (float v : row) sequential += v;
    differing += std::bit_cast<std::uint32_t>(sequential) != std::bit_cast<std::uint32_t>(cpu);
  }
  EXPECT_GE(differing, 5) << "of " << kShapes.size() << " rows";
}

template <class C, class Rsqrt>
void expect_layernorm_matches(Rsqrt rsqrt, const char* what) {
  std::uint64_t seed = 100;
  for (const Shape& s : kShapes) {
    const std::vector<C> x = wide_row<C>(s.n, seed++), w = wide_row<C>(s.n, seed++),
                         b = wide_row<C>(s.n, seed++);
    std::vector<C> cpu(x.size());
    const C eps = C(1e-5);
    fbk::layernorm_row(x.data(), w.data(), b.data(), cpu.data(), s.n, s.tile, eps,
                       fbk::NoRounding{}, rsqrt);
    const auto stats = run_warp<fbw::RowStatistics<C>>([&](const EmulatedWarp& warp) {
      return fbw::layernorm_statistics<C>(warp, x.data(), s.n, s.tile, eps, fbk::NoRounding{},
                                          rsqrt);
    });
    for (std::size_t i = 0; i < x.size(); ++i) {
      const C gpu = fbw::layernorm_element(x[i], stats[i % 32], w[i], b[i]);
      ASSERT_EQ(bits(gpu), bits(cpu[i]))
          << what << " n=" << s.n << " tile=" << s.tile << " element " << i << ": warp " << gpu
          << ", cpu " << cpu[i];
    }
  }
}

TEST(WarpRows, LayerNormIsTheCpuRowBitForBit) {
  expect_layernorm_matches<float>(fbk::RsqrtIeee{}, "f32 ieee");
  expect_layernorm_matches<float>(fbk::RsqrtNewtonBitTrick<1>{}, "f32 newton");
  expect_layernorm_matches<double>(fbk::RsqrtIeee{}, "f64");
}

template <class C>
void expect_softmax_matches(const char* what) {
  std::uint64_t seed = 200;
  for (const Shape& s : kShapes) {
    std::vector<C> x = wide_row<C>(s.n, seed++);
    for (C& v : x) v = C(std::fmod(double(v), 40.0));  // logits, not overflowing exp
    if (s.n > 3) {
      x[1] = -INFINITY;  // a masked position
      x[2] = C(-0.0);
    }
    std::vector<C> cpu(x.size());
    fbk::softmax_row(x.data(), cpu.data(), s.n, s.tile, fbk::NoRounding{}, fbk::DivIeee{});
    std::vector<C> row = x;  // the kernel's row in shared memory, exponentiated in place
    const std::vector<C> sums = run_warp<C>([&](const EmulatedWarp& warp) {
      return fbw::softmax_exp<C>(warp, row.data(), s.n, s.tile, fbk::NoRounding{});
    });
    const C inverse = fbk::DivIeee{}(C(1), sums[0]);
    for (std::size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(bits(row[i] * inverse), bits(cpu[i]))
          << what << " n=" << s.n << " tile=" << s.tile << " element " << i;
    }
  }
}

TEST(WarpRows, SoftmaxIsTheCpuRowBitForBit) {
  expect_softmax_matches<float>("f32");
  expect_softmax_matches<double>("f64");
}

TEST(WarpRows, RowMaxPropagatesNaNInEveryLane) {
  std::vector<float> x = wide_row<float>(1000, 7);
  EXPECT_EQ(
      run_warp<float>([&](const EmulatedWarp& w) { return fbw::row_max(w, x.data(), 1000LL); })[5],
      fbk::row_max(x.data(), 1000));
  x[613] = NAN;
  for (float m :
       run_warp<float>([&](const EmulatedWarp& w) { return fbw::row_max(w, x.data(), 1000LL); }))
    EXPECT_TRUE(std::isnan(m));
}

}  // namespace
}  // namespace fusebench::cuda
