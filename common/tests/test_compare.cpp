// bit_equal, ulp_diff, ulp_error and error_stats on tensors.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "fusebench/compare.hpp"
#include "fusebench/error_stats.hpp"
#include "fusebench/rng.hpp"

namespace fusebench {
namespace {

Tensor f16(std::initializer_list<double> values) {
  std::vector<Half> halves;
  for (double v : values) halves.push_back(round_to<Half>(v));
  return Tensor::from_values<Half>({std::int64_t(halves.size())}, halves);
}
Tensor f16_bits(std::initializer_list<std::uint16_t> bits) {
  std::vector<Half> halves;
  for (auto b : bits) halves.push_back(Half{b});
  return Tensor::from_values<Half>({std::int64_t(halves.size())}, halves);
}
Tensor f64(const std::vector<double>& values) {
  return Tensor::from_values<double>({std::int64_t(values.size())}, values);
}

// ---- bit_equal
TEST(BitEqual, ReportsCountAndFirstIndices) {
  const Tensor a = f16({1, 2, 3, 4, 5});
  const Tensor b = f16({1, 2.001, 3, 4.01, 5});
  const auto result = bit_equal(a, b);
  EXPECT_FALSE(result.equal);
  EXPECT_EQ(result.mismatches, 2);
  EXPECT_EQ(result.first_mismatch_indices, (std::vector<std::int64_t>{1, 3}));
  EXPECT_TRUE(bit_equal(a, a.clone()).equal);
}

TEST(BitEqual, NanAndSignedZeroPolicies) {
  const Tensor a = f16_bits({0x7e00, 0x0000, 0x3c00});
  const Tensor b = f16_bits({0x7e01, 0x8000, 0x3c00});  // other NaN payload, -0
  EXPECT_EQ(bit_equal(a, b).mismatches, 2);
  EXPECT_EQ(bit_equal(a, b, {.nan = NanPolicy::AnyNanEqual}).mismatches, 1);
  EXPECT_EQ(bit_equal(a, b, {.zero = ZeroPolicy::SignedZerosEqual}).mismatches, 1);
  EXPECT_TRUE(
      bit_equal(a, b, {.nan = NanPolicy::AnyNanEqual, .zero = ZeroPolicy::SignedZerosEqual}).equal);
}

TEST(BitEqual, LargeTensorsAcrossBlocksAndIntegerDtypes) {
  Tensor a = random_uniform(DType::f32, {3, 5000}, -1, 1, 5);
  Tensor b = a.clone();
  b.span<float>()[12345] = std::nextafter(b.span<float>()[12345], 2.0f);
  const auto result = bit_equal(a, b);
  EXPECT_EQ(result.mismatches, 1);
  EXPECT_EQ(result.first_mismatch_indices.at(0), 12345);
  const std::vector<std::int32_t> x = {1, 2, 3}, y = {1, 5, 3};
  EXPECT_EQ(bit_equal(Tensor::from_values<std::int32_t>({3}, x),
                      Tensor::from_values<std::int32_t>({3}, y))
                .mismatches,
            1);
}

TEST(BitEqual, StridedViewsCompareByLogicalElement) {
  const Tensor a = random_uniform(DType::f16, {4, 6}, -1, 1, 1);
  EXPECT_TRUE(bit_equal(a.transpose(0, 1), a.transpose(0, 1).contiguous()).equal);
  EXPECT_FALSE(bit_equal(a.slice(1, 0, 3), a.slice(1, 3, 6)).equal);
}

// ---- ulp_diff
TEST(UlpDiff, DistancesHistogramAndNanFlags) {
  const Tensor a = f16_bits({0x3c00, 0x3c00, 0x0000, 0x7c00, 0x7e00, 0x3c00, 0x8001});
  const Tensor b = f16_bits({0x3c00, 0x3c03, 0x8000, 0x7bff, 0x3c00, 0x7e00, 0x0001});
  const auto result = ulp_diff(a, b, {.histogram_bins = 2});
  EXPECT_EQ(result.distance.dtype(), DType::u16);
  const auto d = result.distance.span<std::uint16_t>();
  EXPECT_EQ(d[0], 0);
  EXPECT_EQ(d[1], 3);
  EXPECT_EQ(d[2], 0);  // +0 vs -0
  EXPECT_EQ(d[3], 1);  // inf is one step beyond the largest finite value
  EXPECT_EQ(d[6], 2);  // the two smallest subnormals of opposite sign
  EXPECT_EQ(result.nan_pairs, 2u);
  EXPECT_EQ(result.first_nan_indices, (std::vector<std::int64_t>{4, 5}));
  EXPECT_EQ(result.max_distance, 3u);
  EXPECT_EQ(result.max_index, 1);
  // bins: 0 -> {0, 2}, 1 -> {3}, >=2 -> {1, 6}; NaN pairs are not binned
  EXPECT_EQ(result.histogram.counts, (std::vector<std::uint64_t>{2, 1, 2}));
  EXPECT_EQ(result.histogram.nan_pairs, 2u);
  EXPECT_EQ(result.histogram.total(), 5u);
}

TEST(UlpDiff, WidthsOfEveryDtype) {
  const Tensor a32 = random_uniform(DType::f32, {1000}, -1, 1, 3);
  EXPECT_EQ(ulp_diff(a32, a32).distance.dtype(), DType::u32);
  const Tensor a64 = a32.to(DType::f64);
  const auto r64 = ulp_diff(a64, a64.to(DType::f32).to(DType::f64));
  EXPECT_EQ(r64.distance.dtype(), DType::u64);
  EXPECT_EQ(r64.max_distance, 0u);
  // fp64 extreme: -max to +max does not overflow the u64 distance.
  const Tensor lo = f64({-std::numeric_limits<double>::max()}),
               hi = f64({std::numeric_limits<double>::max()});
  EXPECT_EQ(ulp_diff(lo, hi).max_distance, 2 * 0x7fefffffffffffffULL);
  const Tensor bf = random_uniform(DType::bf16, {100}, -1, 1, 3);
  EXPECT_EQ(ulp_diff(bf, bf).distance.dtype(), DType::u16);
}

TEST(UlpDiff, AgreesWithElementwiseDistanceAcrossManyBlocks) {
  const Tensor a = random_uniform(DType::f16, {100003}, -4, 4, 11);
  const Tensor b = random_uniform(DType::f16, {100003}, -4, 4, 12);
  const auto result = ulp_diff(a, b, {.histogram_bins = 4096});
  std::vector<std::uint64_t> expected(4097, 0);
  const auto pa = a.span<Half>(), pb = b.span<Half>();
  for (std::size_t i = 0; i < pa.size(); ++i) {
    const auto d = ulp_distance_bits<Half>(pa[i].bits, pb[i].bits);
    ASSERT_EQ(result.distance.span<std::uint16_t>()[i], d);
    ++expected[std::min<std::size_t>(d, 4096)];
  }
  EXPECT_EQ(result.histogram.counts, expected);
}

// The two ULP measures on a pair that straddles a binade: A = -0.00783 (0xa002) is 3 representable
// steps from B = -0.00781 (0x9fff), which is 5 spacings of B's binade. ulp_diff (and its histogram
// and summary) says 3, as numpy's nulp_diff does; ulp_error against B as a reference says 5.
TEST(UlpMeasures, PairStraddlingABinadeKeepsItsTwoMeasuresApart) {
  const Tensor a = f16_bits({0xa002}), b = f16_bits({0x9fff});
  const auto distance = ulp_diff(a, b);
  EXPECT_EQ(distance.max_distance, 3u);
  EXPECT_EQ(distance.histogram.counts[3], 1u);
  const auto summary = summarize(distance);
  EXPECT_EQ(summary.max, 3u);
  EXPECT_EQ(summary.mean, 3.0);
  EXPECT_EQ(summary.p50, 3.0);
  EXPECT_EQ(summary.p99, 3.0);
  const auto stats = error_stats(a, b.to(DType::f64));
  EXPECT_EQ(stats.ulp_error.max, 5.0);
  EXPECT_EQ(stats.ulp_diff_max, 3u);
  EXPECT_EQ(stats.ulp_diff_max_index, 0);
  EXPECT_EQ(stats.ulp_histogram.counts[3], 1u);
}

// Pairs near every binade edge of fp16 and bf16, both signs, up to three steps on either side:
// ulp_diff equals the number of steps counted by walking representable values in fp64 (an
// oracle that never looks at bit patterns), and ulp_error of the value just below an edge
// against the edge is half a spacing (the spacing halves below the edge; not below the smallest
// normal, where the subnormals keep it).
template <class T>
void check_binade_edges() {
  using F = FormatTraits<T>;
  // The next representable value above v (>= 0), from the format's spacing at v.
  auto next_up = [](double v) {
    const int exponent =
        v == 0 ? F::min_normal_exponent : std::max(std::ilogb(v), F::min_normal_exponent);
    return v + std::ldexp(1.0, exponent - F::mantissa_bits);
  };
  auto next_down = [](double v) {  // v > 0
    const double below = std::nextafter(v, 0.0);
    const int exponent = std::max(std::ilogb(below), F::min_normal_exponent);
    return v - std::ldexp(1.0, exponent - F::mantissa_bits);
  };
  for (int e = F::min_normal_exponent; e <= F::max_exponent; ++e) {
    const double edge = std::ldexp(1.0, e);
    std::vector<double> ladder = {edge};  // three steps down and three up, in order
    for (int k = 0; k < 3; ++k) ladder.insert(ladder.begin(), next_down(ladder.front()));
    for (int k = 0; k < 3 && ladder.back() < std::ldexp(2.0, F::max_exponent); ++k)
      ladder.push_back(next_up(ladder.back()));
    for (double sign : {1.0, -1.0}) {
      for (std::size_t i = 0; i < ladder.size(); ++i) {
        for (std::size_t j = 0; j < ladder.size(); ++j) {
          const T x = round_to<T>(sign * ladder[i]), y = round_to<T>(sign * ladder[j]);
          ASSERT_EQ(to_double(x), sign * ladder[i]) << "ladder value not representable";
          const std::vector<T> xs = {x}, ys = {y};
          const auto d = ulp_diff(Tensor::from_values<T>({1}, xs), Tensor::from_values<T>({1}, ys));
          const std::uint64_t expected = i > j ? i - j : j - i;
          ASSERT_EQ(d.max_distance, expected)
              << "edge 2^" << e << " steps " << i << " and " << j << " sign " << sign;
          ASSERT_EQ(summarize(d).mean, double(expected));
        }
      }
      // Just below the edge against the edge: half a spacing at the edge, except below the
      // smallest normal, where the subnormals keep its spacing.
      const std::vector<T> below = {round_to<T>(sign * ladder[2])};
      const auto error = ulp_error(Tensor::from_values<T>({1}, below), f64({sign * edge}));
      ASSERT_EQ(error.value_at(0), e == F::min_normal_exponent ? 1.0 : 0.5) << "edge 2^" << e;
    }
  }
}

TEST(UlpMeasures, PairsNearEveryBinadeEdgeFp16) { check_binade_edges<Half>(); }
TEST(UlpMeasures, PairsNearEveryBinadeEdgeBf16) { check_binade_edges<BFloat16>(); }

TEST(UlpMeasures, SummaryIsExactOverMixedDistancesAndSkipsNanPairs) {
  // distances 0, 1, 2, 3, 10 and one NaN pair: mean 16/5, P50 2, P99 = 3 + 0.96 * 7
  const Tensor a = f16_bits({0x3c00, 0x3c00, 0x3c00, 0x3c00, 0x3c00, 0x7e00});
  const Tensor b = f16_bits({0x3c00, 0x3c01, 0x3c02, 0x3c03, 0x3c0a, 0x3c00});
  const auto summary = summarize(ulp_diff(a, b));
  EXPECT_EQ(summary.compared, 5u);
  EXPECT_EQ(summary.max, 10u);
  EXPECT_DOUBLE_EQ(summary.mean, 16.0 / 5.0);
  EXPECT_DOUBLE_EQ(summary.p50, 2.0);
  EXPECT_DOUBLE_EQ(summary.p99, 3.0 + 0.96 * 7.0);
  const Tensor a32 = a.to(DType::f32), b32 = b.to(DType::f32);
  // the selection path, 8192 f32 steps per f16 step
  const auto wide = summarize(ulp_diff(a32, b32));
  EXPECT_EQ(wide.max, 10u * 8192u);
  EXPECT_DOUBLE_EQ(wide.p50, 2.0 * 8192);
  const auto none = summarize(ulp_diff(f16_bits({0x7e00}), f16_bits({0x3c00})));
  EXPECT_EQ(none.compared, 0u);
  EXPECT_TRUE(std::isnan(none.mean));
}

// The summary reads ranks (and, when every distance is binned exactly, the sum) from the
// histogram instead of passing over the distances: over seeded mixes of small and large distances,
// NaN pairs and every bin count, it equals a sort-based oracle exactly.
TEST(UlpMeasures, SummaryFromTheHistogramEqualsASortedOracle) {
  const CounterRng rng(2027, 5);
  std::uint64_t draw = 0;
  for (int large_every : {0, 3, 50, 1000}) {  // 0: no distance beyond 3 steps
    for (int bins : {1, 2, 4, 16, 64}) {
      const std::int64_t n = 5000;
      std::vector<Half> xs, ys;
      std::vector<std::uint64_t> kept;
      for (std::int64_t i = 0; i < n; ++i) {
        const std::uint16_t base = std::uint16_t(0x3000 + rng.u32(draw++) % 0x800);
        std::uint16_t step = std::uint16_t(rng.u32(draw++) % 4);
        if (large_every && rng.u32(draw++) % std::uint32_t(large_every) == 0)
          step = std::uint16_t(20 + rng.u32(draw++) % 300);
        const bool nan = rng.u32(draw++) % 97 == 0;
        xs.push_back(Half{nan ? std::uint16_t(0x7e00) : base});
        ys.push_back(Half{std::uint16_t(base + step)});
        if (!nan) kept.push_back(step);
      }
      const auto result = ulp_diff(Tensor::from_values<Half>({n}, xs),
                                   Tensor::from_values<Half>({n}, ys), {bins, 16});
      const auto summary = summarize(result);
      std::sort(kept.begin(), kept.end());
      auto linear = [&](double p) {  // numpy's "linear" percentile
        const double h = double(kept.size() - 1) * p;
        const auto low = std::size_t(std::floor(h));
        if (low + 1 >= kept.size()) return double(kept[low]);
        return double(kept[low]) + (h - double(low)) * (double(kept[low + 1]) - double(kept[low]));
      };
      std::uint64_t sum = 0;
      for (auto d : kept) sum += d;
      ASSERT_EQ(summary.compared, kept.size());
      EXPECT_EQ(summary.mean, double(sum) / double(kept.size()))
          << "bins " << bins << " large every " << large_every;
      EXPECT_EQ(summary.p50, linear(0.5)) << "bins " << bins << " large every " << large_every;
      EXPECT_EQ(summary.p99, linear(0.99)) << "bins " << bins << " large every " << large_every;
      EXPECT_EQ(summary.max, kept.back());
    }
  }
}

// ---- ulp_error
TEST(UlpError, FractionalErrorInTheResultFormat) {
  // 1 + 2^-10 is one fp16 ULP above 1; against ref 1 + 2^-11 it is half an ULP off.
  const Tensor y = f16({1 + std::ldexp(1.0, -10), 0, 1});
  const Tensor ref = f64({1 + std::ldexp(1.0, -11), std::ldexp(1.0, -26), 1});
  const auto e = ulp_error(y, ref);
  EXPECT_DOUBLE_EQ(e.value_at(0), 0.5);
  EXPECT_DOUBLE_EQ(e.value_at(1), 0.25);  // subnormal spacing 2^-24 is the floor
  EXPECT_DOUBLE_EQ(e.value_at(2), 0.0);
  // Non-finite: the same infinity agrees; NaN against a number is infinitely wrong.
  const auto special =
      ulp_error(f16_bits({0x7c00, 0x7e00, 0x7e00}), f64({INFINITY, std::nan(""), 1.0}));
  EXPECT_EQ(special.value_at(0), 0.0);
  EXPECT_EQ(special.value_at(1), 0.0);
  EXPECT_TRUE(std::isinf(special.value_at(2)));
  // fp64 results against an fp64 reference at the bottom of the subnormal range.
  const auto tiny = ulp_error(f64({std::ldexp(1.0, -1073)}), f64({std::ldexp(1.0, -1074)}));
  EXPECT_EQ(tiny.value_at(0), 1.0);
}

// ---- error_stats against a plain double-precision computation
struct PlainStats {
  std::vector<double> abs, rel, ulp;
  std::int64_t nan_y = 0, nan_ref = 0, inf_y = 0, inf_ref = 0, mismatches = 0;
};

double plain_percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const double h = double(v.size() - 1) * p;
  const auto lo = std::size_t(std::floor(h));
  const double hi_value = lo + 1 < v.size() ? v[lo + 1] : v[lo];
  return v[lo] + (h - double(lo)) * (hi_value - v[lo]);
}

template <class Y>
PlainStats plain_stats(const Tensor& y, const Tensor& ref) {
  using F = FormatTraits<Y>;
  PlainStats s;
  const double floor = std::ldexp(1.0, F::min_normal_exponent);
  for (std::int64_t i = 0; i < y.numel(); ++i) {
    const double a = y.value_at(i), r = ref.value_at(i);
    s.nan_y += std::isnan(a);
    s.nan_ref += std::isnan(r);
    s.inf_y += std::isinf(a);
    s.inf_ref += std::isinf(r);
    if (!std::isfinite(a) || !std::isfinite(r)) {
      if (!((std::isnan(a) && std::isnan(r)) || (std::isinf(a) && a == r))) ++s.mismatches;
      continue;
    }
    const double diff = std::fabs(a - r);
    s.abs.push_back(diff);
    s.rel.push_back(diff / std::max(std::fabs(r), floor));
    int e = std::ilogb(r == 0 ? floor : r);
    e = std::clamp(e, F::min_normal_exponent, F::max_exponent);
    s.ulp.push_back(diff / std::ldexp(1.0, e - F::mantissa_bits));
  }
  return s;
}

void expect_summary(const ErrorSummary& got, const std::vector<double>& values, const char* name) {
  SCOPED_TRACE(name);
  const double max = *std::max_element(values.begin(), values.end());
  double sum = 0;
  for (double v : values) sum += v;
  EXPECT_EQ(got.max, max);
  const double mean = sum / double(values.size());
  if (std::isinf(mean)) {
    EXPECT_EQ(got.mean, mean);
  } else {
    EXPECT_NEAR(got.mean, mean, 1e-12 * std::max(1.0, std::fabs(mean)));
  }
  EXPECT_EQ(got.p50, plain_percentile(values, 0.5));
  EXPECT_EQ(got.p99, plain_percentile(values, 0.99));
}

template <class Y>
ErrorStats check_against_plain(const Tensor& y, const Tensor& ref,
                               const ErrorStatsOptions& options = {}) {
  const auto stats = error_stats(y, ref, options);
  const auto plain = plain_stats<Y>(y, ref);
  EXPECT_EQ(stats.count, y.numel());
  EXPECT_EQ(stats.compared, std::int64_t(plain.abs.size()));
  EXPECT_EQ(stats.nan_y, plain.nan_y);
  EXPECT_EQ(stats.nan_ref, plain.nan_ref);
  EXPECT_EQ(stats.inf_y, plain.inf_y);
  EXPECT_EQ(stats.inf_ref, plain.inf_ref);
  EXPECT_EQ(stats.mismatches, plain.mismatches);
  expect_summary(stats.abs, plain.abs, "abs");
  expect_summary(stats.rel, plain.rel, "rel");
  expect_summary(stats.ulp_error, plain.ulp, "ulp_error");
  // the index of each max holds the max
  const auto per_element = ulp_error(y, ref);
  EXPECT_EQ(per_element.value_at(stats.ulp_error.max_index), stats.ulp_error.max);
  return stats;
}

// Every field, for results that must not depend on how they were computed.
void expect_same_stats(const ErrorStats& a, const ErrorStats& b) {
  EXPECT_EQ(a.compared, b.compared);
  EXPECT_EQ(a.nan_y, b.nan_y);
  EXPECT_EQ(a.inf_ref, b.inf_ref);
  EXPECT_EQ(a.mismatches, b.mismatches);
  EXPECT_EQ(a.first_mismatch_indices, b.first_mismatch_indices);
  const std::pair<const ErrorSummary*, const ErrorSummary*> pairs[] = {
      {&a.abs, &b.abs}, {&a.rel, &b.rel}, {&a.ulp_error, &b.ulp_error}};
  for (const auto& [x, y] : pairs) {
    // bit for bit: the same sums in the same order
    EXPECT_EQ(std::bit_cast<std::uint64_t>(x->mean), std::bit_cast<std::uint64_t>(y->mean));
    EXPECT_EQ(x->max, y->max);
    EXPECT_EQ(x->max_index, y->max_index);
    EXPECT_EQ(x->p50, y->p50);
    EXPECT_EQ(x->p99, y->p99);
  }
  EXPECT_EQ(a.ulp_histogram.counts, b.ulp_histogram.counts);
  EXPECT_EQ(a.ulp_histogram.nan_pairs, b.ulp_histogram.nan_pairs);
  EXPECT_EQ(a.ulp_diff_max, b.ulp_diff_max);
  EXPECT_EQ(a.ulp_diff_max_index, b.ulp_diff_max_index);
}

Tensor inject_specials(Tensor t, std::uint64_t seed) {
  const CounterRng rng(seed, 77);
  const std::vector<double> specials = {NAN,   INFINITY, -INFINITY, 0.0,   -0.0,
                                        1e-40, 6e-8,     -3e-5,     1e-310};
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    if (rng.u32(std::uint64_t(i)) % 50 != 0) continue;
    const double v = specials[rng.u32(std::uint64_t(i) + (1u << 30)) % specials.size()];
    visit_floating(t.dtype(), "inject", [&](auto tag) {
      using T = decltype(tag);
      t.span<T>()[std::size_t(i)] = round_to<T>(v);
    });
  }
  return t;
}

TEST(ErrorStats, Fp16AgainstFp64WithNanInfSubnormals) {
  const Tensor ref = inject_specials(random_normal(DType::f64, {50000}, 0, 2, 1), 2);
  const Tensor y = inject_specials(ref.to(DType::f16), 3);
  check_against_plain<Half>(y, ref);
}

TEST(ErrorStats, Bf16AndFp32AndFp64ResultsAndSameDtypeReference) {
  const Tensor ref = inject_specials(random_uniform(DType::f64, {30011}, -3, 3, 4), 5);
  check_against_plain<BFloat16>(inject_specials(ref.to(DType::bf16), 6), ref);
  check_against_plain<float>(inject_specials(random_uniform(DType::f32, {30011}, -3, 3, 4), 7),
                             ref);
  check_against_plain<double>(random_uniform(DType::f64, {30011}, -3, 3, 8), ref);
  const Tensor ref16 = random_uniform(DType::f16, {20000}, -1, 1, 9);
  check_against_plain<Half>(random_uniform(DType::f16, {20000}, -1, 1, 10), ref16);
}

TEST(ErrorStats, LargeInputWhereManyValuesShareARadixBin) {
  // Errors of the correctly rounded fp16 of U(1, 2) all lie in a narrow band: the radix bins
  // hold many values each, and the second pass must still find the exact order statistics.
  // Both selections: the sampled windows (one pass) and the radix selection alone.
  const Tensor ref = random_uniform(DType::f64, {1 << 20}, 1, 2, 13);
  const auto sampled = check_against_plain<Half>(ref.to(DType::f16), ref);
  EXPECT_EQ(sampled.passes, 1);
  const auto radix = check_against_plain<Half>(ref.to(DType::f16), ref, {.rank_sample_size = 0});
  EXPECT_GT(radix.passes, 1);
}

// Inputs above 2^20 pairs run on several threads, in chunks merged in order: every figure,
// means included, is the same bit for bit for any thread count and either selection, with NaN,
// infinities and subnormals present (their blocks take the masked paths).
TEST(ErrorStats, SameResultsForAnyThreadCountAndSelection) {
  const std::int64_t n = (std::int64_t(1) << 21) + 777;
  const Tensor ref = inject_specials(random_normal(DType::f64, {n}, 0, 2, 31), 32);
  const Tensor y = inject_specials(ref.to(DType::f16), 33);
  const auto one_thread = check_against_plain<Half>(y, ref, {.threads = 1});
  EXPECT_EQ(one_thread.passes, 1);
  for (const int threads : {2, 3}) {
    SCOPED_TRACE(threads);
    expect_same_stats(error_stats(y, ref, {.threads = threads}), one_thread);
    expect_same_stats(error_stats(y, ref, {.threads = threads, .rank_sample_size = 0}), one_thread);
  }
}

// Above 2^18 pairs the pass computes the metrics of a vector of pairs at a time in registers (where
// the build has AVX-512, or AVX2 and F16C for results narrower than fp64), and the radix
// selection's replays compute them per block: for every pair of
// formats, with specials, both agree with each other and with the plain computation, bit for bit.
TEST(ErrorStats, EveryFormatPairAgreesInTheVectorPassAndTheBlockPass) {
  const std::int64_t n = (std::int64_t(1) << 19) + 13;
  const Tensor wide = inject_specials(random_normal(DType::f64, {n}, 0, 3, 41), 42);
  auto check = [&]<class Y>(Y, DType y_dtype, DType ref_dtype) {
    SCOPED_TRACE(std::string(dtype_name(y_dtype)) + " against " +
                 std::string(dtype_name(ref_dtype)));
    const Tensor ref = wide.to(ref_dtype);
    const Tensor y = inject_specials(random_normal(DType::f64, {n}, 0, 3, 43), 44).to(y_dtype);
    // y close to ref: most pairs a few units apart, as a fused kernel's results are
    Tensor near = wide.to(y_dtype);
    const auto from = y.span<Y>();
    auto to = near.span<Y>();
    for (std::size_t i = 0; i < to.size(); i += 3) to[i] = from[i];
    const auto one_pass = check_against_plain<Y>(near, ref, {.threads = 2});
    EXPECT_EQ(one_pass.passes, 1);
    expect_same_stats(error_stats(near, ref, {.threads = 2, .rank_sample_size = 0}), one_pass);
  };
  check(Half{}, DType::f16, DType::f16);
  check(BFloat16{}, DType::bf16, DType::f32);
  check(BFloat16{}, DType::bf16, DType::f16);
  check(float{}, DType::f32, DType::f64);
  check(double{}, DType::f64, DType::f64);
}

// The vector pass tells a pair with a NaN or an infinity from the difference of its two sides
// where they are narrower than fp64 (the difference of finite values then stays finite), and finds
// the first index of a block's rising maximum in the metrics it stored. Every pair of special
// values (NaN, +-inf, +-0, the smallest subnormal, +-the largest finite, +-1) on the two sides, for
// every kind of format pair, in a block of its own among finite blocks: the same figures as the
// block pass (the radix selection's, which computes each element's flags) and the plain
// computation. Then a maximum tied at two places of an all-finite block that follows a block with
// NaN at those places: the first of the two is its index, for each metric.
TEST(ErrorStats, VectorPassClassifiesEveryPairOfSpecialsAndFindsTheFirstMaximum) {
  const std::int64_t n = (std::int64_t(1) << 19) + 5 * 2048;
  const Tensor x = random_uniform(DType::f64, {n}, -1, 1, 61);
  const Tensor u = random_uniform(DType::f64, {n}, -1, 1, 62);
  Tensor near = Tensor::uninitialized(DType::f64, {n});
  const auto px = x.span<double>(), pu = u.span<double>();
  auto pn = near.span<double>();
  for (std::size_t k = 0; k < pn.size(); ++k) pn[k] = px[k] * (1 + std::ldexp(1.0, -9) * pu[k]);
  auto check = [&]<class Y, class R>(Y, R, DType y_dtype, DType ref_dtype) {
    SCOPED_TRACE(std::string(dtype_name(y_dtype)) + " against " +
                 std::string(dtype_name(ref_dtype)));
    // the largest finite value and the smallest subnormal that both formats hold
    const double largest = std::min(to_double(from_bits<Y>(FormatTraits<Y>::max_finite_bits)),
                                    to_double(from_bits<R>(FormatTraits<R>::max_finite_bits)));
    const double tiny = std::max(to_double(from_bits<Y>(1)), to_double(from_bits<R>(1)));
    const std::vector<double> specials = {NAN,  INFINITY, -INFINITY, 0.0, -0.0,
                                          tiny, largest,  -largest,  1.0, -1.0};
    Tensor y = near.to(y_dtype), ref = x.to(ref_dtype);
    auto py = y.span<Y>();
    auto pr = ref.span<R>();
    std::size_t at = 3 * 2048;  // block 3, finite blocks around it
    for (double a : specials) {
      for (double b : specials) {
        py[at] = round_to<Y>(a);
        pr[at] = round_to<R>(b);
        ++at;
      }
    }
    const auto one_pass = check_against_plain<Y>(y, ref, {.threads = 2});
    EXPECT_EQ(one_pass.passes, 1);
    expect_same_stats(error_stats(y, ref, {.threads = 2, .rank_sample_size = 0}), one_pass);
    // one row of the square each: NaN on a side, and +inf and -inf
    const auto row = std::int64_t(specials.size());
    EXPECT_EQ(one_pass.nan_y, row);
    EXPECT_EQ(one_pass.nan_ref, row);
    EXPECT_EQ(one_pass.inf_y, 2 * row);
    EXPECT_EQ(one_pass.inf_ref, 2 * row);

    // The largest error of every metric, 1.5 against 1, at two places of block 11; block 10 has
    // NaN at both places, and block 12 the same error again.
    Tensor tied_y = near.to(y_dtype), tied_ref = x.to(ref_dtype);
    auto ty = tied_y.span<Y>();
    auto tr = tied_ref.span<R>();
    const std::size_t first = 11 * 2048 + 100, second = 11 * 2048 + 700, later = 12 * 2048 + 5;
    for (const std::size_t k : {first, second, later}) {
      ty[k] = round_to<Y>(1.5);
      tr[k] = round_to<R>(1.0);
    }
    ty[first - 2048] = round_to<Y>(NAN);
    ty[second - 2048] = round_to<Y>(NAN);
    const auto tied = check_against_plain<Y>(tied_y, tied_ref, {.threads = 2});
    EXPECT_EQ(tied.passes, 1);
    for (const ErrorSummary* s : {&tied.abs, &tied.rel, &tied.ulp_error})
      EXPECT_EQ(s->max_index, std::int64_t(first));
    expect_same_stats(error_stats(tied_y, tied_ref, {.threads = 2, .rank_sample_size = 0}), tied);
  };
  check(Half{}, Half{}, DType::f16, DType::f16);
  check(BFloat16{}, BFloat16{}, DType::bf16, DType::bf16);
  check(float{}, float{}, DType::f32, DType::f32);
  check(Half{}, double{}, DType::f16, DType::f64);
  check(BFloat16{}, float{}, DType::bf16, DType::f32);
  check(float{}, double{}, DType::f32, DType::f64);
  check(double{}, double{}, DType::f64, DType::f64);
}

// Almost every pair NaN: every block has NaN pairs, whose metric (0) the window counts must take
// back; with one finite pair in 400 the sample still places windows (P99's open above), with one
// in 2000 it has too few values and the radix selection runs.
TEST(ErrorStats, MostlyNonFiniteInput) {
  for (const std::uint32_t finite_one_in : {400u, 2000u}) {
    SCOPED_TRACE(finite_one_in);
    const std::int64_t n = std::int64_t(1) << 20;
    Tensor ref = random_uniform(DType::f64, {n}, -2, 2, 51);
    const CounterRng rng(52);
    auto pr = ref.span<double>();
    for (std::int64_t i = 0; i < n; ++i) {
      if (rng.u32(std::uint64_t(i)) % finite_one_in != 0) pr[std::size_t(i)] = NAN;
    }
    const auto stats = check_against_plain<Half>(ref.to(DType::f16), ref);
    EXPECT_LT(stats.compared, 2 * n / finite_one_in);
    if (finite_one_in == 400) {
      EXPECT_EQ(stats.passes, 1);
    } else {
      EXPECT_GT(stats.passes, 1);
    }
  }
}

// A sample that misleads: every sampled pair is exact while the others are not, so the windows
// put P50 and P99 at 0. The windows then miss their ranks, and the radix passes must still give
// the exact figures.
TEST(ErrorStats, MisleadingSampleFallsBackToTheRadixSelection) {
  const std::int64_t n = std::int64_t(1) << 20;
  const std::int64_t samples = ErrorStatsOptions{}.rank_sample_size;
  const Tensor ref = random_uniform(DType::f64, {n}, 1, 2, 41);
  Tensor y = ref.to(DType::f16).to(DType::f64);
  auto py = y.span<double>();
  const auto pr = ref.span<double>();
  for (std::int64_t i = 0; i < samples; ++i) {
    const std::int64_t at = detail::rank_sample_position(i, n, samples);
    py[std::size_t(at)] = pr[std::size_t(at)];
  }
  const auto stats = check_against_plain<double>(y, ref);
  EXPECT_GT(stats.passes, 1);
  EXPECT_GT(stats.abs.p50, 0.0);
}

// The other way to mislead: the sample spreads the errors over [0, 2^-20), while every other
// pair's error lies inside the sample's P50 window. The window then keeps far more values than
// planned; it gives up keeping them (memory stays bounded) and the radix passes take over.
// Discrete errors on two values, 1 and 2: the sample sees nothing strictly between
// the ends of the median's interval, so the values there are counted, not kept. Where unsampled
// values do lie there and hold the median, it is not found in one pass: the radix selection
// finds it. Without them, one pass.
TEST(ErrorStats, CountedButNotKeptValuesHoldingARankFallBack) {
  const std::int64_t n = std::int64_t(1) << 20;
  const std::int64_t samples = ErrorStatsOptions{}.rank_sample_size;
  Tensor ref = Tensor::uninitialized(DType::f64, {n});
  std::fill_n(ref.span<double>().begin(), n, 1.0);
  Tensor y = Tensor::uninitialized(DType::f64, {n});
  auto py = y.span<double>();
  // errors 1 and 2
  for (std::int64_t i = 0; i < n; ++i) py[std::size_t(i)] = i % 2 == 0 ? 2.0 : 3.0;
  const auto two_valued = check_against_plain<double>(y, ref);
  EXPECT_EQ(two_valued.passes, 1);
  std::vector<bool> sampled(std::size_t(n), false);
  for (std::int64_t i = 0; i < samples; ++i)
    sampled[std::size_t(detail::rank_sample_position(i, n, samples))] = true;
  // An error of 1.5 in 2,000 unsampled places, half taken from the 1s and half from the 2s: the
  // median's ranks (n/2 - 1, n/2) fall among them.
  std::int64_t from_ones = 0, from_twos = 0;
  for (std::int64_t i = 0; i < n && (from_ones < 1000 || from_twos < 1000); ++i) {
    if (sampled[std::size_t(i)]) continue;
    std::int64_t& taken = py[std::size_t(i)] == 2.0 ? from_ones : from_twos;
    if (taken < 1000) {
      py[std::size_t(i)] = 2.5;
      ++taken;
    }
  }
  const auto stats = check_against_plain<double>(y, ref);
  EXPECT_GT(stats.passes, 1);
  EXPECT_EQ(stats.abs.p50, 1.5);
}

// A window whose ends the sample saw tied only a few times is half-open: the values equal to lo
// are kept with those inside, and those equal to hi are neither kept nor counted. Continuous
// errors, with the sample seeing its median window's lo (or hi) twice, and unsampled pairs moved
// from inside the window onto that end, so that the median's ranks fall among them: at lo
// they are found in one pass, at hi the radix selection finds them. Both exact.
TEST(ErrorStats, FewTiesAtAWindowsEndKeepItHalfOpen) {
  const std::int64_t n = std::int64_t(1) << 20;
  const std::int64_t samples = ErrorStatsOptions{}.rank_sample_size;
  Tensor ref = Tensor::uninitialized(DType::f64, {n});
  std::ranges::fill(ref.span<double>(), 1.0);
  const Tensor u = random_uniform(DType::f64, {n}, 1, 2, 47);
  std::vector<std::int64_t> positions;
  std::vector<bool> sampled(std::size_t(n), false);
  for (std::int64_t i = 0; i < samples; ++i) {
    positions.push_back(detail::rank_sample_position(i, n, samples));
    sampled[std::size_t(positions.back())] = true;
  }
  // The sample ranks of the median window's ends, as error_stats plans them.
  const std::int64_t rank = (samples - 1) / 2;
  const auto margin = std::int64_t(std::ceil(5 * std::sqrt(double(samples) * 0.25))) + 1;
  for (const bool at_lo : {true, false}) {
    SCOPED_TRACE(at_lo ? "ties at lo" : "ties at hi");
    Tensor y = Tensor::uninitialized(DType::f64, {n});
    auto py = y.span<double>();
    const auto pu = u.span<double>();
    for (std::int64_t i = 0; i < n; ++i)
      py[std::size_t(i)] = 1.0 + std::ldexp(pu[std::size_t(i)], -20);
    std::vector<std::pair<double, std::int64_t>> sample;
    for (const std::int64_t at : positions) sample.emplace_back(py[std::size_t(at)], at);
    std::ranges::sort(sample);
    const double lo = sample[std::size_t(rank - margin)].first;
    const double hi = sample[std::size_t(rank + 1 + margin)].first;
    const double end = at_lo ? lo : hi;
    // The largest sampled error takes the end's value: a second tie in the sample, and the sample
    // ranks up to the end unchanged.
    py[std::size_t(sample.back().second)] = end;
    // As many as put the median's ranks (n/2 - 1, n/2) a thousand ranks inside the end's ties.
    const auto below = [&](double v) {
      return std::int64_t(std::ranges::count_if(py, [&](double x) { return x < v; }));
    };
    const std::int64_t to_move = at_lo ? n / 2 + 1000 - below(lo) - 2 : below(hi) - (n / 2 - 1000);
    std::int64_t moved = 0;
    for (std::int64_t i = 0; i < n && moved < to_move; ++i) {
      const double v = py[std::size_t(i)];
      if (!sampled[std::size_t(i)] && v > lo && v < hi) {
        py[std::size_t(i)] = end;
        ++moved;
      }
    }
    ASSERT_EQ(moved, to_move);
    ASSERT_GT(to_move, 0);
    const auto stats = check_against_plain<double>(y, ref);
    EXPECT_EQ(stats.abs.p50, end - 1.0);
    if (at_lo) {
      EXPECT_EQ(stats.passes, 1);
    } else {
      EXPECT_GT(stats.passes, 1);
    }
  }
}

TEST(ErrorStats, OvercrowdedWindowFallsBackToTheRadixSelection) {
  const std::int64_t n = std::int64_t(1) << 20;
  const std::int64_t samples = ErrorStatsOptions{}.rank_sample_size;
  const Tensor ref = random_uniform(DType::f64, {n}, 1, 2, 43);
  const Tensor u = random_uniform(DType::f64, {n}, 0, 1, 44);
  Tensor y = ref.clone();
  auto py = y.span<double>();
  const auto pr = ref.span<double>(), pu = u.span<double>();
  for (std::int64_t i = 0; i < n; ++i) {  // errors near the middle of the range, all distinct
    py[std::size_t(i)] = pr[std::size_t(i)] + std::ldexp(0.5 + 1e-4 * pu[std::size_t(i)], -20);
  }
  for (std::int64_t i = 0; i < samples; ++i) {  // the sample: spread evenly
    const std::int64_t at = detail::rank_sample_position(i, n, samples);
    py[std::size_t(at)] = pr[std::size_t(at)] + std::ldexp(pu[std::size_t(at)], -20);
  }
  const auto stats = check_against_plain<double>(y, ref);
  EXPECT_GT(stats.passes, 1);
}

// Discrete errors crowd a few radix bins with more values than are stored (2^18): the exact
// percentiles then come from the distinct-value counts (few values per bin) or from a second
// 16-bit level (many values per bin). Both paths against the plain computation.
TEST(ErrorStats, CrowdedBinsWithFewAndManyDistinctValues) {
  for (const std::uint32_t distinct : {40u, 1600u}) {
    SCOPED_TRACE(distinct);
    const std::int64_t n = std::int64_t(1) << 21;
    const Tensor ref = random_uniform(DType::f64, {n}, 1, 2, 21);
    Tensor y = ref.clone();
    const CounterRng rng(22);
    auto py = y.span<double>();
    const auto pr = ref.span<double>();
    for (std::int64_t i = 0; i < n; ++i) {
      const double step = double(8192 + rng.u32(std::uint64_t(i)) % distinct);
      // exact: the sum fits 53 bits
      py[std::size_t(i)] = pr[std::size_t(i)] + std::ldexp(step, -43);
    }
    check_against_plain<double>(y, ref);
    check_against_plain<double>(y, ref, {.rank_sample_size = 0});
  }
}

// The case error_stats exists for: an f16, bf16 or f32 result against its fp64 reference, above
// the sizes where the sampled windows and the vector/blocked passes run. Every figure against the
// sort-based computation, and the integer histogram against ulp_diff with the reference rounded to
// the result's format, for continuous errors, for errors with many ties (exact results and a
// reference of few distinct values), and with NaN, infinities, zeros and subnormals on both sides.
// Each window of the one-pass selection is counted by a loop compiled for its kind (half-open,
// collapsed onto one value, keeping or only counting the values inside): inputs that give each
// kind to each metric, past 2^20 pairs so that the sampled windows, the vector pass and the
// threads run, on one thread and on three, agree bit for bit with the sorted computation. The
// inputs are adversarial for a selection: every error equal (zero, and a non-zero constant), two
// values only, heavy ties among a few ULP, and continuous errors with NaN, infinities, +-0 and
// subnormals mixed in.
TEST(ErrorStats, EveryWindowKindMatchesTheSortedComputation) {
  const std::int64_t n = (std::int64_t(1) << 20) + 13;
  const Tensor x = random_uniform(DType::f64, {n}, -1, 1, 91);
  const Tensor u = random_uniform(DType::f64, {n}, -1, 1, 92);
  const Tensor x16 = x.to(DType::f16);
  Tensor shifted = Tensor::uninitialized(DType::f64, {n}), two_valued = x16.to(DType::f64),
         few_ulp = Tensor::uninitialized(DType::f64, {n}), continuous = x.clone();
  const auto px = x.span<double>(), pu = u.span<double>();
  auto ps = shifted.span<double>(), pt = two_valued.span<double>(), pf = few_ulp.span<double>(),
       pc = continuous.span<double>();
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = std::size_t(i);
    ps[k] = 1.5;  // against 1.0: every error the same, not 0
    if (i % 2 == 1) pt[k] = std::nextafter(float(pt[k]), 2.0f);  // half 0, half one fp32 step off
    pf[k] = px[k] * (1 + std::ldexp(1.0, -9) * pu[k]);           // 0 to a few f16 ULP, tied
    pc[k] *= 1 + std::ldexp(2.0, -10) * pu[k];                   // continuous against fp64
  }
  Tensor ones = Tensor::uninitialized(DType::f64, {n});
  std::ranges::fill(ones.span<double>(), 1.0);
  struct Case {
    const char* name;
    Tensor y, ref;
  };
  const Case cases[] = {
      {"all equal, zero error", x16, x16.to(DType::f64)},
      {"all equal, constant error", shifted.to(DType::f16), ones},
      {"two values", two_valued.to(DType::f32), x16.to(DType::f64)},
      {"ties among a few ULP, with specials", inject_specials(few_ulp.to(DType::f16), 93),
       inject_specials(x16.clone(), 94)},
      {"continuous, with specials", inject_specials(continuous.to(DType::f16), 95),
       inject_specials(x.clone(), 96)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const auto check = [&]<class Y>(Y) {
      const auto one_thread = check_against_plain<Y>(c.y, c.ref, {.threads = 1});
      expect_same_stats(error_stats(c.y, c.ref, {.threads = 3}), one_thread);
    };
    if (c.y.dtype() == DType::f16) {
      check(Half{});
    } else {
      check(float{});
    }
  }
}

TEST(ErrorStats, ResultsAgainstFp64ReferenceMatchTheSortedComputation) {
  const std::int64_t n = (std::int64_t(1) << 20) + 777;
  auto check = [&]<class Y>(Y, DType dtype) {
    const double two_eps = std::ldexp(2.0, -FormatTraits<Y>::mantissa_bits);
    const Tensor x = random_normal(DType::f64, {n}, 0, 2, 61);
    const Tensor u = random_uniform(DType::f64, {n}, -1, 1, 62);
    Tensor continuous = x.clone(), tied_ref = x.clone();
    auto pc = continuous.span<double>(), pt = tied_ref.span<double>();
    const auto pu = u.span<double>();
    for (std::int64_t i = 0; i < n; ++i) {
      const auto k = std::size_t(i);
      pc[k] *= 1 + two_eps * pu[k];
      pt[k] = std::round(pt[k] * 16) / 16;  // a few hundred distinct values, each many times
    }
    Tensor tied_y = tied_ref.to(dtype);  // exact where the value fits the format
    {
      const Tensor perturbed = continuous.to(dtype);
      auto py = tied_y.span<Y>();
      const auto pp = perturbed.span<Y>();
      for (std::size_t k = 0; k < py.size(); k += 3) py[k] = pp[k];
    }
    struct Case {
      const char* name;
      Tensor y, ref;
    };
    const Case cases[] = {
        {"continuous", continuous.to(dtype), x},
        {"ties", tied_y, tied_ref},
        {"non-finite", inject_specials(continuous.to(dtype), 63), inject_specials(x, 64)},
    };
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + c.name);
      const auto stats = check_against_plain<Y>(c.y, c.ref, {.threads = 2});
      EXPECT_EQ(stats.passes, 1);
      const auto distances =
          ulp_diff(c.y, c.ref.to(dtype), {.histogram_bins = ErrorStatsOptions{}.histogram_bins});
      EXPECT_EQ(stats.ulp_histogram.counts, distances.histogram.counts);
      EXPECT_EQ(stats.ulp_histogram.nan_pairs, distances.nan_pairs);
      EXPECT_EQ(stats.ulp_diff_max, distances.max_distance);
      EXPECT_EQ(stats.ulp_diff_max_index, distances.max_index);
      expect_same_stats(error_stats(c.y, c.ref, {.threads = 1, .rank_sample_size = 0}), stats);
    }
  };
  check(Half{}, DType::f16);
  check(BFloat16{}, DType::bf16);
  check(float{}, DType::f32);
}

// Rounding the fp64 reference to a 16-bit result format (for the integer distances) on every
// kind of fp64 value: random bit patterns over all exponents, exact halfway cases of both formats
// and their neighbours, beyond the formats' ranges and below their subnormals.
TEST(ErrorStats, ReferenceRoundedToTheResultFormatForTheDistances) {
  const std::int64_t n = std::int64_t(1) << 19;
  Tensor ref = Tensor::uninitialized(DType::f64, {n});
  auto pr = ref.span<double>();
  const CounterRng rng(65);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint64_t r = rng.u64(std::uint64_t(i));
    const auto k = std::size_t(i);
    switch (i % 4) {
      case 0:
        pr[k] = std::bit_cast<double>(r);
        break;  // any pattern, NaN and infinities included
      // halfway
      case 1:
        pr[k] = std::ldexp(double(r % 4096) + 0.5, int((r >> 12) % 300) - 160);
        break;
      case 2:
        pr[k] = std::nextafter(pr[k - 1], 0.0);
        break;
      default:
        pr[k] = std::nextafter(pr[k - 2], INFINITY);
        break;
    }
  }
  for (const DType dtype : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor y = random_uniform(DType::f64, {n}, -1, 1, 66).to(dtype);
    const auto stats = error_stats(y, ref, {.histogram_bins = 64});
    const auto distances = ulp_diff(y, ref.to(dtype), {.histogram_bins = 64});
    EXPECT_EQ(stats.ulp_histogram.counts, distances.histogram.counts);
    EXPECT_EQ(stats.ulp_histogram.nan_pairs, distances.nan_pairs);
    EXPECT_EQ(stats.ulp_diff_max, distances.max_distance);
    EXPECT_EQ(stats.ulp_diff_max_index, distances.max_index);
  }
}

// The fused pass rounds an fp64 reference to fp16 in registers (fp32 rounded to odd, then to
// nearest even); the replays and ulp_diff round it in scalar code. On the values where the two
// roundings could part: exact halfway points between neighbouring fp16 values (normal and
// subnormal, up to the overflow threshold 65520), one fp64 step to either side, a part far below
// fp32's precision to either side (which only the sticky bit of rounding to odd keeps), and values
// beyond fp32's and below fp16's ranges, NaN, infinities and zeros. The result is the lower
// neighbour, so that a rounding one step off moves a pair between the histogram's bins.
TEST(ErrorStats, Fp16AgainstFp64RoundedInRegistersAsInScalarCode) {
  const std::int64_t n = (std::int64_t(1) << 20) + 7;
  Tensor y = Tensor::uninitialized(DType::f16, {n});
  Tensor ref = Tensor::uninitialized(DType::f64, {n});
  auto py = y.span<Half>();
  auto pr = ref.span<double>();
  const CounterRng rng(67);
  const double specials[] = {NAN,    INFINITY, -INFINITY, 0.0,    -0.0,     1e-30,
                             -1e-50, 1e300,    -1e300,    65520., 65519.99, -65520.};
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = std::size_t(i);
    const std::uint64_t r = rng.u64(std::uint64_t(i));
    // a finite fp16 below the largest, and its upper neighbour in magnitude
    const auto low_bits = std::uint16_t((r % 0x7bff) | ((r >> 20) & 1 ? 0x8000 : 0));
    const double low = to_double(std::bit_cast<Half>(low_bits));
    const double high = to_double(std::bit_cast<Half>(std::uint16_t(low_bits + 1)));
    const double halfway = (low + high) / 2;
    const double part = std::fabs(high - low) * std::ldexp(1.0, -30);
    py[k] = std::bit_cast<Half>(low_bits);
    switch (i % 6) {
      case 0:
        pr[k] = halfway;
        break;
      case 1:
        pr[k] = std::nextafter(halfway, INFINITY);
        break;
      case 2:
        pr[k] = std::nextafter(halfway, -INFINITY);
        break;
      case 3:
        pr[k] = halfway + part;
        break;
      case 4:
        pr[k] = halfway - part;
        break;
      default:
        pr[k] = (r >> 32) % 8 == 0 ? specials[(r >> 40) % std::size(specials)] : halfway;
        break;
    }
  }
  const ErrorStatsOptions options{.histogram_bins = 3, .threads = 2};
  const auto stats = error_stats(y, ref, options);
  EXPECT_EQ(stats.passes, 1);  // the one pass over sampled windows: the fused pass where built
  const auto distances = ulp_diff(y, ref.to(DType::f16), {.histogram_bins = 3});
  EXPECT_EQ(stats.ulp_histogram.counts, distances.histogram.counts);
  EXPECT_EQ(stats.ulp_histogram.nan_pairs, distances.nan_pairs);
  EXPECT_EQ(stats.ulp_diff_max, distances.max_distance);
  EXPECT_EQ(stats.ulp_diff_max_index, distances.max_index);
  // the radix selection's block pass, which rounds in scalar code
  auto block_pass = options;
  block_pass.rank_sample_size = 0;
  expect_same_stats(error_stats(y, ref, block_pass), stats);
}

TEST(ErrorStats, IntegerUlpHistogramAgainstReferenceRoundedToResultFormat) {
  const Tensor ref = f64({1.0, 1.0 + std::ldexp(1.0, -11) * 1.1, 1.0, 2.0, NAN});
  const Tensor y = f16({1.0, 1.0, 1.0 + std::ldexp(1.0, -10), 2.0 + std::ldexp(1.0, -9) * 3, 1.0});
  const auto stats = error_stats(y, ref, {.histogram_bins = 3});
  // distances: 0, 1 (ref rounds up to 1 + 2^-10), 1, 3 (in the >= 3 bin), NaN pair
  EXPECT_EQ(stats.ulp_histogram.counts, (std::vector<std::uint64_t>{1, 2, 0, 1}));
  EXPECT_DOUBLE_EQ(stats.ulp_error.max, 3.0);  // fp16 spacing in [2, 4) is 2^-9
  EXPECT_EQ(stats.ulp_histogram.nan_pairs, 1u);
  EXPECT_EQ(stats.mismatches, 1);
  EXPECT_EQ(stats.first_mismatch_indices, (std::vector<std::int64_t>{4}));
}

TEST(ErrorStats, SmallAndDegenerateInputs) {
  const auto one = error_stats(f16({1.5}), f64({1.5}));
  EXPECT_EQ(one.compared, 1);
  EXPECT_EQ(one.ulp_error.p99, 0.0);
  EXPECT_EQ(one.abs.max_index, 0);
  const auto none = error_stats(f16_bits({0x7e00}), f64({1.0}));
  EXPECT_EQ(none.compared, 0);
  EXPECT_TRUE(std::isnan(none.abs.p50));
  const auto zero_ref = error_stats(f16({std::ldexp(1.0, -20)}), f64({0.0}));
  // rel at ref = 0 is abs over the smallest normal, 2^-14
  EXPECT_DOUBLE_EQ(zero_ref.rel.max, std::ldexp(1.0, -6));
  EXPECT_EQ(zero_ref.rel_floor, std::ldexp(1.0, -14));
}

TEST(Percentile, MatchesNumpyLinearDefinition) {
  std::vector<double> v = {5, 1, 4, 2, 3};
  EXPECT_EQ(percentile(v, 0.5), 3.0);
  v = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(percentile(v, 0.99), 3.97);
  std::vector<double> empty;
  EXPECT_TRUE(std::isnan(percentile(empty, 0.5)));
}

// ---- bad input
TEST(BadInput, MismatchesAndUnsupportedDtypesNameTheProblem) {
  const Tensor a = f16({1, 2, 3});
  auto expect_error = [](auto&& fn, const std::string& fragment) {
    try {
      fn();
      FAIL() << "no error; expected one mentioning '" << fragment << "'";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_error([&] { bit_equal(a, f16({1, 2})); }, "shape mismatch, f16[3] vs f16[2]");
  expect_error([&] { ulp_diff(a, a.to(DType::f32)); }, "dtype mismatch, f16[3] vs f32[3]");
  const std::vector<std::int32_t> ints = {1, 2, 3};
  const Tensor i = Tensor::from_values<std::int32_t>({3}, ints);
  expect_error([&] { ulp_diff(i, i); }, "ulp_diff: dtype i32 is not a floating type");
  expect_error([&] { error_stats(a, f64({1, 2})); }, "error_stats: shape mismatch");
  expect_error([&] { error_stats(i, f64({1, 2, 3})); }, "error_stats (y): dtype i32");
  expect_error([&] { ulp_diff(a, a, {.histogram_bins = 0}); }, "histogram_bins must be >= 1");
  expect_error([&] { parse_dtype("float8"); }, "unknown dtype 'float8'");
}

}  // namespace
}  // namespace fusebench
