// The metrics of error_stats' pairs (internal to the toolkit library): abs, rel and ULP error of one
// pair, of a vector of pairs in registers (AVX-512 or AVX2), and of a block of pairs stored for the passes that need
// each element; and the compensated sum their means are accumulated in.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "fusebench/float_formats.hpp"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif
#if defined(__AVX512F__)
// GCC 12 warns inside its own AVX-512 headers (the _mm512_undefined_pd placeholder of
// _mm512_max_pd) wherever they are inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace fusebench::error_stats_internal {

constexpr std::int64_t kBlock = 2048;
constexpr int kMetrics = 3;  // abs, rel, ulp

template <class Y>
typename FloatFormat<Y>::Bits to_format_bits(double value) {
  if constexpr (std::is_same_v<Y, double>) {
    return std::bit_cast<std::uint64_t>(value);
  } else if constexpr (std::is_same_v<Y, float>) {
    return std::bit_cast<std::uint32_t>(float(value));
  } else {
    return round_to_format_bits<Y>(value);
  }
}

inline bool finite_bits(double v) {
  return (std::bit_cast<std::uint64_t>(v) & 0x7ff0'0000'0000'0000ULL) != 0x7ff0'0000'0000'0000ULL;
}

// ---- the metrics of a pair: abs = |y - ref|, rel = abs / max(|ref|, rel_floor), ulp = abs in
// spacings of y's format at ref: abs * 2^(p - 1 - e), e = floor(log2 |ref|) clamped to the
// format's exponent range, rounded once (ldexp; scalef in vectors). A pair with a NaN or an
// infinity gets 0 for all three and is not compared.
template <class Y>
struct PairMetric {
  using F = FormatTraits<Y>;
  static double ulp(double diff, double ref) {
    if constexpr (std::is_same_v<Y, double>) {
      std::int64_t exponent =
          std::int64_t((std::bit_cast<std::uint64_t>(ref) >> 52) & 0x7ff) - 1023;
      exponent = std::clamp<std::int64_t>(exponent, F::min_normal_exponent, F::max_exponent);
      return std::ldexp(diff, int(F::mantissa_bits - exponent));
    } else {
      // For the narrower formats 2^(p - 1 - e) is a normal fp64, and a product with an exact power
      // of two rounds once, as ldexp does: the same bits, without a call per pair. The clamp is
      // applied to |ref| (to the format's smallest normal and the largest fp64 of its top
      // binade), whose exponent field is then e's: comparisons of doubles, which vectorise where
      // 64-bit integer minima do not. (A NaN or infinite ref comes with diff = 0, and gives 0.)
      constexpr double smallest = std::ldexp(1.0, F::min_normal_exponent);
      constexpr double top = std::ldexp(2.0 - std::ldexp(1.0, -52), F::max_exponent);
      double magnitude = std::fabs(ref);
      magnitude = magnitude < smallest ? smallest : magnitude;
      magnitude = magnitude > top ? top : magnitude;
      const std::uint64_t field = std::bit_cast<std::uint64_t>(magnitude) >> 52;  // e + 1023
      return diff * std::bit_cast<double>((2046 + F::mantissa_bits - field) << 52);
    }
  }
};

// ---- the reference rounded to y's format, for the integer ULP distances: the bits of
// to_format_bits<Y>(to_double(ref[i])) for a block, in loops without branches that the compiler
// vectorises (round_to_format_bits branches on the rounding direction, which continuous values
// mispredict half the time).
// fp64 to a 16-bit format goes through fp32 rounded to odd: truncated, its last bit set when
// inexact. fp32 holds at least two more bits than either 16-bit format, subnormals included, and
// rounding to nearest even from a value rounded to odd at such a precision is the correct rounding
// of the original (Boldo and Melquiond, "Emulation of FMA and correctly rounded sums: proved
// algorithms using rounding to odd", IEEE Trans. Computers 57(4), 2008). Infinities, NaN and
// values beyond fp32's range come out as the direct rounding's: inf stays inf, a finite value
// above fp32's largest becomes that largest (odd), which rounds to inf in both formats, and a NaN
// stays a NaN (the distances only ask whether it is one).
inline float round_to_odd_float(double value) {
  const float nearest = float(value);
  const double back = double(nearest);
  const std::uint32_t away = std::fabs(back) > std::fabs(value);  // rounded up in magnitude
  const std::uint32_t inexact = back != value;
  return std::bit_cast<float>((std::bit_cast<std::uint32_t>(nearest) - away) | inexact);
}

#if defined(__AVX512F__) && defined(__AVX512VL__) && defined(__F16C__)
// The same rounding of eight fp64 values to fp16 in registers, for the fused pass: fp32 rounded to
// odd is the truncation (the conversion's round-toward-zero mode) with its last bit set when
// inexact, including beyond fp32's range (the largest fp32, odd) and for NaN (a NaN); the
// conversion to fp16 rounds to nearest even.
inline __m128i round_to_half_bits(__m512d value) {
  const __m256 truncated = _mm512_cvt_roundpd_ps(value, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __mmask8 inexact = _mm512_cmp_pd_mask(_mm512_cvtps_pd(truncated), value, _CMP_NEQ_UQ);
  const __m256i bits = _mm256_castps_si256(truncated);
  const __m256i odd = _mm256_mask_or_epi32(bits, inexact, bits, _mm256_set1_epi32(1));
  return _mm256_cvtps_ph(_mm256_castsi256_ps(odd), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
#endif

template <class Y, class R>
void round_to_format(const R* __restrict ref, typename FloatFormat<Y>::Bits* __restrict out,
                     std::int64_t count) {
  constexpr bool narrow16 = std::is_same_v<Y, Half> || std::is_same_v<Y, BFloat16>;
  if constexpr (narrow16 && (std::is_same_v<R, double> || std::is_same_v<R, float>)) {
    // Two loops over pieces, one per conversion: each vectorises alone, the two fused do not.
    constexpr std::int64_t kPiece = 256;
    alignas(64) std::array<float, kPiece> wide;
    for (std::int64_t begin = 0; begin < count; begin += kPiece) {
      const std::int64_t n = std::min(kPiece, count - begin);
      for (std::int64_t i = 0; i < n; ++i) {
        if constexpr (std::is_same_v<R, double>) {
          wide[std::size_t(i)] = round_to_odd_float(ref[begin + i]);
        } else {
          wide[std::size_t(i)] = ref[begin + i];  // one rounding, from fp32
        }
      }
      for (std::int64_t i = 0; i < n; ++i) {
        if constexpr (std::is_same_v<Y, Half>) {
          out[begin + i] = fp32_to_fp16_bits(wide[std::size_t(i)]);
        } else {
          out[begin + i] = fp32_to_bf16_bits(wide[std::size_t(i)]);
        }
      }
    }
  } else {
    for (std::int64_t i = 0; i < count; ++i) out[i] = to_format_bits<Y>(to_double(ref[i]));
  }
}

#if defined(__AVX512F__)
// The same metrics for eight pairs at a time, operation for operation: the same bits.
template <class Y, class R>
class VectorMetrics {
  using F = FormatTraits<Y>;

 public:
  static constexpr bool kAvailable = true;
  struct Pairs {
    __m512d y, ref, abs, rel, ulp;
    __mmask8 nonfinite;
  };

  explicit VectorMetrics(double rel_floor) : rel_floor_(_mm512_set1_pd(rel_floor)) {}

  Pairs operator()(const Y* y, const R* ref) const {
    Pairs p;
    p.y = widen(y);
    p.ref = widen(ref);
    const __m512d difference = _mm512_sub_pd(p.y, p.ref);
    // fpclass 0x99: NaN (quiet, signalling) or +-inf
    if constexpr (kDifferenceStaysFinite) {
      // The difference is NaN or infinite exactly when a side is: one test instead of two.
      p.nonfinite = _mm512_fpclass_pd_mask(difference, 0x99);
      p.abs = _mm512_mask_mov_pd(_mm512_and_pd(difference, magnitude_mask_), p.nonfinite,
                                 _mm512_setzero_pd());
    } else {
      p.nonfinite =
          __mmask8(_mm512_fpclass_pd_mask(p.y, 0x99) | _mm512_fpclass_pd_mask(p.ref, 0x99));
      p.abs = _mm512_maskz_and_pd(__mmask8(~p.nonfinite), difference, magnitude_mask_);
    }
    const __m512d magnitude = _mm512_and_pd(p.ref, magnitude_mask_);
    // max: magnitude > floor ? magnitude : floor
    p.rel = _mm512_div_pd(p.abs, _mm512_max_pd(magnitude, rel_floor_));
    // getexp gives floor(log2 |ref|) (-inf for 0, NaN for NaN); the clamp is the raw exponent
    // field's (max and min return their second operand where the first is NaN)
    const __m512d exponent =
        _mm512_min_pd(_mm512_max_pd(_mm512_getexp_pd(p.ref), min_exponent_), max_exponent_);
    p.ulp = _mm512_scalef_pd(p.abs, _mm512_sub_pd(mantissa_bits_, exponent));
    return p;
  }

 private:
  // The difference of two finite values overflows fp64 only when both are fp64 (near its largest):
  // with a narrower side, |y - ref| <= |ref| + 2^128 rounds to at most fp64's largest.
  static constexpr bool kDifferenceStaysFinite =
      !(std::is_same_v<Y, double> && std::is_same_v<R, double>);

  template <class T>
  static __m512d widen(const T* p) {
    if constexpr (std::is_same_v<T, double>) {
      return _mm512_loadu_pd(p);
    } else if constexpr (std::is_same_v<T, float>) {
      return _mm512_cvtps_pd(_mm256_loadu_ps(p));
    } else if constexpr (std::is_same_v<T, BFloat16>) {
      const __m256i wide =
          _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      return _mm512_cvtps_pd(_mm256_castsi256_ps(_mm256_slli_epi32(wide, 16)));
    } else {
      static_assert(std::is_same_v<T, Half>);
#if defined(__AVX512FP16__)
      // one conversion instead of two (fp16 to fp64 is exact either way)
      return _mm512_cvtph_pd(
          _mm_castsi128_ph(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#else
      return _mm512_cvtps_pd(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#endif
    }
  }

  __m512d rel_floor_;
  __m512d magnitude_mask_ = _mm512_castsi512_pd(_mm512_set1_epi64(0x7fff'ffff'ffff'ffffLL));
  __m512d min_exponent_ = _mm512_set1_pd(F::min_normal_exponent),
          max_exponent_ = _mm512_set1_pd(F::max_exponent);
  __m512d mantissa_bits_ = _mm512_set1_pd(F::mantissa_bits);
};

// The vector the fused pass keeps its sums and maxima in, and what it does with one.
using MetricVector = __m512d;
constexpr int kVectorLanes = 8;
inline __m512d vector_zero() { return _mm512_setzero_pd(); }
inline __m512d vector_add(__m512d a, __m512d b) { return _mm512_add_pd(a, b); }
inline __m512d vector_max(__m512d v, __m512d max) { return _mm512_max_pd(v, max); }
inline __m512d vector_load(const double* p) { return _mm512_loadu_pd(p); }
inline void vector_store(double* p, __m512d v) { _mm512_storeu_pd(p, v); }

#elif defined(__AVX2__) && defined(__F16C__)
// The same metrics four pairs at a time, for processors without AVX-512, operation for operation
// PairMetric's and BlockMetrics::compute's: the same bits. Not for an fp64 result, whose ULP scale
// 2^(p - 1 - e) can exceed fp64's range (PairMetric uses ldexp there, AVX-512 scalef).
template <class Y, class R>
class VectorMetrics {
  using F = FormatTraits<Y>;

 public:
  static constexpr bool kAvailable = !std::is_same_v<Y, double>;
  struct Pairs {
    __m256d y, ref, abs, rel, ulp;
    unsigned nonfinite;  // a bit per lane
  };

  explicit VectorMetrics(double rel_floor) : rel_floor_(_mm256_set1_pd(rel_floor)) {}

  Pairs operator()(const Y* y, const R* ref) const {
    Pairs p;
    p.y = widen(y);
    p.ref = widen(ref);
    const __m256d difference = _mm256_and_pd(_mm256_sub_pd(p.y, p.ref), magnitude_mask_);
    // With a side narrower than fp64 the difference of finite values stays finite (see the
    // AVX-512 class): |y - ref| < inf exactly when both sides are finite (NaN compares false).
    const __m256d finite = _mm256_cmp_pd(difference, infinity_, _CMP_LT_OQ);
    p.nonfinite = unsigned(_mm256_movemask_pd(finite)) ^ 0xfu;
    p.abs = _mm256_and_pd(difference, finite);
    const __m256d magnitude = _mm256_and_pd(p.ref, magnitude_mask_);
    // max(a, b) = a > b ? a : b, PairMetric's and BlockMetrics' choices where neither is NaN
    // (a NaN reference comes with abs = 0, and gives 0 either way)
    p.rel = _mm256_div_pd(p.abs, _mm256_max_pd(magnitude, rel_floor_));
    const __m256d clamped =
        _mm256_min_pd(_mm256_max_pd(magnitude, smallest_normal_), top_of_format_);
    const __m256i field = _mm256_srli_epi64(_mm256_castpd_si256(clamped), 52);
    const __m256i scale = _mm256_slli_epi64(_mm256_sub_epi64(scale_base_, field), 52);
    p.ulp = _mm256_mul_pd(p.abs, _mm256_castsi256_pd(scale));
    return p;
  }

 private:
  template <class T>
  static __m256d widen(const T* p) {
    if constexpr (std::is_same_v<T, double>) {
      return _mm256_loadu_pd(p);
    } else if constexpr (std::is_same_v<T, float>) {
      return _mm256_cvtps_pd(_mm_loadu_ps(p));
    } else if constexpr (std::is_same_v<T, BFloat16>) {
      const __m128i wide = _mm_cvtepu16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
      return _mm256_cvtps_pd(_mm_castsi128_ps(_mm_slli_epi32(wide, 16)));
    } else {
      static_assert(std::is_same_v<T, Half>);
      return _mm256_cvtps_pd(_mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
    }
  }

  __m256d rel_floor_;
  __m256d magnitude_mask_ = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fff'ffff'ffff'ffffLL));
  __m256d infinity_ = _mm256_set1_pd(std::numeric_limits<double>::infinity());
  __m256d smallest_normal_ = _mm256_set1_pd(std::ldexp(1.0, F::min_normal_exponent));
  __m256d top_of_format_ = _mm256_set1_pd(std::ldexp(2.0 - std::ldexp(1.0, -52), F::max_exponent));
  __m256i scale_base_ = _mm256_set1_epi64x(2046 + F::mantissa_bits);
};

using MetricVector = __m256d;
constexpr int kVectorLanes = 4;
inline __m256d vector_zero() { return _mm256_setzero_pd(); }
inline __m256d vector_add(__m256d a, __m256d b) { return _mm256_add_pd(a, b); }
inline __m256d vector_max(__m256d v, __m256d max) { return _mm256_max_pd(v, max); }
inline __m256d vector_load(const double* p) { return _mm256_loadu_pd(p); }
inline void vector_store(double* p, __m256d v) { _mm256_storeu_pd(p, v); }
#endif
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__F16C__))
#define FUSEBENCH_ERROR_STATS_VECTORS 1
#endif

// The three metrics of one block, stored; non-finite pairs get 0 and finite[i] = 0.
template <class Y, class R>
struct BlockMetrics {
  std::array<double, kBlock> y_value, ref_value;
  std::array<std::array<double, kBlock>, kMetrics> metric;
  std::array<std::uint8_t, kBlock> finite;
  std::int64_t size = 0;
  std::int64_t nonfinite = 0;

  void compute(const Y* y, const R* ref, std::int64_t count, double rel_floor);
};

// compute() is defined in metrics.cpp, for every pair of floating formats.
// One row per result type (clang-format's layout of this macro is not stable between runs).
// clang-format off
#define FUSEBENCH_BLOCK_METRICS_PAIRS(X)                                                   \
  X(Half, Half)      X(Half, BFloat16)      X(Half, float)      X(Half, double)          \
  X(BFloat16, Half)  X(BFloat16, BFloat16)  X(BFloat16, float)  X(BFloat16, double)      \
  X(float, Half)     X(float, BFloat16)     X(float, float)     X(float, double)         \
  X(double, Half)    X(double, BFloat16)    X(double, float)    X(double, double)
// clang-format on
#define FUSEBENCH_DECLARE_BLOCK_METRICS(Y, R) extern template struct BlockMetrics<Y, R>;
FUSEBENCH_BLOCK_METRICS_PAIRS(FUSEBENCH_DECLARE_BLOCK_METRICS)
#undef FUSEBENCH_DECLARE_BLOCK_METRICS

// Neumaier summation: a running sum and the rounding errors it dropped.
struct CompensatedSum {
  double sum = 0, compensation = 0;
  void add(double value) {
    const double t = sum + value;
    if (!std::isfinite(t)) {  // an overflowing sum stays +inf; no compensation to carry
      sum = t;
      compensation = 0;
      return;
    }
    compensation += std::fabs(sum) >= std::fabs(value) ? (sum - t) + value : (value - t) + sum;
    sum = t;
  }
};

}  // namespace fusebench::error_stats_internal
