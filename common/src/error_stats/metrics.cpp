// The metrics of a block of pairs, for every pair of floating formats error_stats accepts.
#include "metrics.hpp"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace fusebench::error_stats_internal {

namespace {
// values[from, count) to fp64. fp16 through F16C where the build has it (its loop of bit
// operations does not vectorise); the same values, NaN aside (F16C quiets a signalling NaN,
// which only ever counts as a NaN).
template <class T>
void widen(const T* __restrict values, double* __restrict out, std::int64_t from,
           std::int64_t count) {
  std::int64_t i = from;
#if defined(__F16C__) && defined(__AVX__)
  if constexpr (std::is_same_v<T, Half>) {
    for (; i + 8 <= count; i += 8) {
      const __m256 wide =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values + i)));
      _mm256_storeu_pd(out + i, _mm256_cvtps_pd(_mm256_castps256_ps128(wide)));
      _mm256_storeu_pd(out + i + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(wide, 1)));
    }
  }
#endif
  for (; i < count; ++i) out[i] = to_double(values[i]);
}
}  // namespace

template <class Y, class R>
void BlockMetrics<Y, R>::compute(const Y* y, const R* ref, std::int64_t count, double rel_floor) {
  size = count;
  nonfinite = 0;
  std::int64_t i = 0;
#if defined(FUSEBENCH_ERROR_STATS_VECTORS)
  if constexpr (VectorMetrics<Y, R>::kAvailable) {
    const VectorMetrics<Y, R> metrics(rel_floor);
    for (; i + kVectorLanes <= count; i += kVectorLanes) {
      const auto p = metrics(y + i, ref + i);
      vector_store(&y_value[std::size_t(i)], p.y);
      vector_store(&ref_value[std::size_t(i)], p.ref);
      vector_store(&metric[0][std::size_t(i)], p.abs);
      vector_store(&metric[1][std::size_t(i)], p.rel);
      vector_store(&metric[2][std::size_t(i)], p.ulp);
      for (int l = 0; l < kVectorLanes; ++l)
        finite[std::size_t(i + l)] = ((p.nonfinite >> l) & 1) == 0;
      nonfinite += std::popcount(unsigned(p.nonfinite));
    }
  }
#endif
  // The rest (all of it without vector metrics) in loops of one kind each, which the compiler vectorises:
  // the widening of either side, the three metrics, the finiteness flags.
  const std::int64_t from = i;
  widen(y, y_value.data(), from, count);
  widen(ref, ref_value.data(), from, count);
  for (i = from; i < count; ++i) {
    const auto k = std::size_t(i);
    const double yv = y_value[k], rv = ref_value[k];
    // The difference of every pair, kept by a mask where both sides are finite: a conditional
    // subtraction is control flow that the compiler may not flatten (it could raise a flag).
    const std::uint64_t keep = std::uint64_t(0) - std::uint64_t(finite_bits(yv) & finite_bits(rv));
    const double diff =
        std::bit_cast<double>(std::bit_cast<std::uint64_t>(std::fabs(yv - rv)) & keep);
    const double magnitude = std::fabs(rv);
    metric[0][k] = diff;
    metric[1][k] = diff / (magnitude > rel_floor ? magnitude : rel_floor);
    metric[2][k] = PairMetric<Y>::ulp(diff, rv);
  }
  std::int64_t not_finite = 0;  // in a register, not the member
  for (i = from; i < count; ++i) {
    const auto k = std::size_t(i);
    const bool ok = finite_bits(y_value[k]) & finite_bits(ref_value[k]);
    finite[k] = ok;
    not_finite += !ok;
  }
  nonfinite += not_finite;
}

#define FUSEBENCH_DEFINE_BLOCK_METRICS(Y, R) template struct BlockMetrics<Y, R>;
FUSEBENCH_BLOCK_METRICS_PAIRS(FUSEBENCH_DEFINE_BLOCK_METRICS)
#undef FUSEBENCH_DEFINE_BLOCK_METRICS

}  // namespace fusebench::error_stats_internal
