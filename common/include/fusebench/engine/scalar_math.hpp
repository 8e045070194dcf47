// Per-element math shared by the eager kernels (compiled into the library) and the fused JIT
// kernels (this file's text is pasted into every generated source). Written once, so eager and
// fused results differ only by the mechanisms under study: where values are rounded to their
// storage dtype, reduction order, lowering and approximation knobs.
//
// It includes nothing of the project but float_formats.hpp, whose text the JIT prelude carries
// too.
// Every function is branch-free so that loops over it vectorise. fp32 transcendental functions
// are this file's own (expf: Cody-Waite reduction with Cephes' polynomial, < 2 ULP; gelu through
// the Numerical Recipes erfc with < 1.2e-7 relative error everywhere, and the tanh form through
// the exact identity 0.5 (1 + tanh u) = 1 / (1 + e^-2u)); fp64 uses the C library, which the
// fp64 reference also uses.
// Inside those functions the polynomials and the argument reduction are written with explicit
// std::fma. An fma is one correctly rounded IEEE operation, so the bits are the same in eager and
// fused code, with or without the FMA-contraction knob (which is about contracting the graph's
// own mul -> add), and on any machine; with FMA hardware it takes much of the work out of gelu.
// Without FMA hardware it becomes a libm call, correct but slow.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "fusebench/float_formats.hpp"
#if defined(__SSE__)
#include <immintrin.h>
#endif

namespace fbk {

inline float bits_to_f32(std::uint32_t b) { return std::bit_cast<float>(b); }
inline std::uint32_t f32_to_bits(float f) { return std::bit_cast<std::uint32_t>(f); }

// ---- exp
// What a caller guarantees about the argument, so that exp skips work it cannot need. The values
// are the same either way, inside the guarantee (checked over every fp32 argument up to 43).
//   Any: any float.
//   AtMost43: never above 43, as softmax's x - max (<= 0): no upper clamp (its compare and blend
//   cost gelu measurably).
//   Minus130To43: inside [-130, 43], as gelu's erfc keeps it (it clamps its own operand more
//   cheaply): no clamp at all.
// With either bound, 2^n is built in one step instead of two (a measurably faster gelu).
enum class ExpArgument { Any, AtMost43, Minus130To43 };

template <ExpArgument Range = ExpArgument::Any>
inline float exp_f32(float x) {
  // Both comparisons are false for a NaN, so a NaN passes the clamps and every step after them:
  // exp(NaN) is NaN without a select of its own.
  float clamped = x;
  if constexpr (Range != ExpArgument::Minus130To43) clamped = clamped < -104.0f ? -104.0f : clamped;
  if constexpr (Range == ExpArgument::Any) clamped = clamped > 89.0f ? 89.0f : clamped;
  // n = round(x / ln 2) by the 1.5 * 2^23 trick (round to nearest even); compilers do not
  // vectorise std::floor without -fno-trapping-math. `shifted` holds n in its low mantissa bits.
  const float shifted = std::fma(clamped, 1.44269504088896341f, 12582912.0f);
  const float n = shifted - 12582912.0f;
  float r = std::fma(n, -0.693359375f, clamped);
  r = std::fma(n, 2.12194440e-4f, r);
  const float z = r * r;
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  const float y = std::fma(p, z, r) + 1.0f;
  // n is read from the bits of `shifted` (no float-to-int conversion). y * 2^n has to round
  // once, where it falls below the normal range, so 2^n is applied in normal-range pieces: y
  // times the first piece is exact, the second rounds.
  if constexpr (Range == ExpArgument::Any) {
    // n lies in [-150, 128]: two halves of n, each inside the normal exponent range.
    const std::int32_t ni = std::int32_t(f32_to_bits(shifted) - 0x4b400000u);
    const std::int32_t half = ni >> 1;
    const float scale1 = bits_to_f32(std::uint32_t(half + 127) << 23);
    const float scale2 = bits_to_f32(std::uint32_t(ni - half + 127) << 23);
    return y * scale1 * scale2;
  } else {
    // n lies in [-188, 62]: 2^(n + 64) is normal, then 2^-64.
    const float scale = bits_to_f32((f32_to_bits(shifted) + (127u + 64u - 0x4b400000u)) << 23);
    return y * scale * 0x1p-64f;
  }
}
inline double exp_f64(double x) { return std::exp(x); }

// ---- gelu
// gelu(x) = x Phi(x), Phi(x) = (1 + erf(z)) / 2 with z = x / sqrt 2. For x < 0, Phi is erfc(|z|) / 2
// directly, without cancellation. erfc(a) = t exp(-a^2 + p(t)), t = 1 / (1 + a / 2), p the
// Numerical Recipes Chebyshev fit (< 1.2e-7 relative error). It is evaluated as the halves
// h = t / 2 = 1 / (2 + a), which rounds exactly as t does, and p's coefficients times powers of
// two, so that each Horner step is p's own scaled by a power of two: the bits of t, p and erfc / 2,
// without multiplications by 1/2 for t or for Phi.
inline float gelu_erf_f32(float x) {
  const float z = x * 0.70710678118654752f;
  // a = min(|z|, 10.125) on the bits: non-negative floats are ordered as their bit patterns, and
  // an integer minimum is one instruction where a float compare-and-select is two. Above 10.125
  // erfc(a) < 2e-46 is zero in fp32 anyway, and exp's argument -a^2 + p stays above -111. A NaN
  // becomes 10.125 here and NaN again in the product with x.
  const std::uint32_t abs_bits = f32_to_bits(z) & 0x7fffffffu;
  const float a = bits_to_f32(abs_bits < 0x41220000u ? abs_bits : 0x41220000u);
  const float h = 1.0f / (a + 2.0f);
  float p = 0.17087277f * 0x1p9f;
  p = std::fma(p, h, -0.82215223f * 0x1p8f);
  p = std::fma(p, h, 1.48851587f * 0x1p7f);
  p = std::fma(p, h, -1.13520398f * 0x1p6f);
  p = std::fma(p, h, 0.27886807f * 0x1p5f);
  p = std::fma(p, h, -0.18628806f * 0x1p4f);
  p = std::fma(p, h, 0.09678418f * 0x1p3f);
  p = std::fma(p, h, 0.37409196f * 0x1p2f);
  p = std::fma(p, h, 1.00002368f * 0x1p1f);
  p = std::fma(p, h, -1.26551223f);
  // -a^2 + p lies in [-110.2, 7.6], inside Minus130To43: |p(t)| <= 7.6 (the sum of
  // |coefficients|) for t in (0, 1].
  const float half_erfc = h * exp_f32<ExpArgument::Minus130To43>(std::fma(-a, a, p));
  // 1 - half_erfc as 1 + (-half_erfc), the same bits (IEEE defines a - b as a + (-b)): the selects
  // then choose between values that cannot trap. The conditional subtraction could, and GCC's
  // default -ftrapping-math keeps it in a branch without AVX-512's masked instructions, which left
  // every loop that calls gelu scalar on AVX2 (the fused Chain ran at 5 % of the copy, slower than
  // eager; -fopt-info-vec: "not vectorized: control flow in loop").
  const float one_or_zero = z >= 0.0f ? 1.0f : 0.0f;
  const float signed_half_erfc = z >= 0.0f ? -half_erfc : half_erfc;
  return x * (one_or_zero + signed_half_erfc);
}
inline double gelu_erf_f64(double x) { return 0.5 * x * std::erfc(-x * 0.70710678118654752440); }

inline float gelu_tanh_f32(float x) {
  const float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
  return x / (1.0f + exp_f32(-2.0f * u));
}
inline double gelu_tanh_f64(double x) {
  const double u = 0.79788456080286535588 * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(u));
}

// The backward of gelu_tanh: dy * gelu'(x). With s = sigmoid(2u), u = c (x + 0.044715 x^3),
// gelu = x s and gelu' = s + 2 x s (1 - s) u', u' = c (1 + 3 * 0.044715 x^2). fp32 uses the
// forward's own exp (so eager and fused share its bits); fp64 the C library's tanh.
inline float gelu_tanh_backward_f32(float dy, float x) {
  const float x2 = x * x;
  const float u = 0.79788456080286536f * (x + 0.044715f * x2 * x);
  const float du = 0.79788456080286536f * (1.0f + 0.134145f * x2);
  const float s = 1.0f / (1.0f + exp_f32(-2.0f * u));
  return dy * (s + 2.0f * x * s * (1.0f - s) * du);
}
inline double gelu_tanh_backward_f64(double dy, double x) {
  const double u = 0.79788456080286535588 * (x + 0.044715 * x * x * x);
  const double du = 0.79788456080286535588 * (1.0 + 3.0 * 0.044715 * x * x);
  const double t = std::tanh(u);
  return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du);
}

// ---- log: the C library's (one function for eager and fused, so the same bits in both)
inline float log_f32(float x) { return std::log(x); }
inline double log_f64(double x) { return std::log(x); }

// ---- rsqrt and division: IEEE, or Newton-Raphson from a seed
inline float rsqrt_seed_bit_trick(float x) { return bits_to_f32(0x5f3759dfu - (f32_to_bits(x) >> 1)); }
inline float recip_seed_bit_trick(float x) { return bits_to_f32(0x7ef311c7u - f32_to_bits(x)); }
#if defined(__SSE__)
inline float rsqrt_seed_hardware(float x) { return _mm_cvtss_f32(_mm_rsqrt_ss(_mm_set_ss(x))); }
inline float recip_seed_hardware(float x) { return _mm_cvtss_f32(_mm_rcp_ss(_mm_set_ss(x))); }
#define FUSEBENCH_HARDWARE_SEEDS 1
#elif defined(__CUDACC_RTC__) || defined(__CUDA_ARCH__)
// A GPU kernel (the CUDA emitter pastes this file): the approximate instructions MUFU.RSQ and
// MUFU.RCP, without flushing subnormals (the .ftz forms would).
inline float rsqrt_seed_hardware(float x) {
  float y;
  asm("rsqrt.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
inline float recip_seed_hardware(float x) {
  float y;
  asm("rcp.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
#define FUSEBENCH_HARDWARE_SEEDS 1
#endif

template <int Iterations>
inline float rsqrt_newton(float x, float y) {
  for (int i = 0; i < Iterations; ++i) y = y * (1.5f - (0.5f * x * y) * y);
  return y;
}
template <int Iterations>
inline float recip_newton(float x, float r) {
  for (int i = 0; i < Iterations; ++i) r = r * (2.0f - x * r);
  return r;
}

inline float rsqrt_ieee_f32(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt_ieee_f64(double x) { return 1.0 / std::sqrt(x); }

// ---- rounding to a storage dtype and back (what a store and a reload do)
inline float round_f16(float x) { return fusebench::fp16_bits_to_fp32(fusebench::fp32_to_fp16_bits(x)); }
inline float round_bf16(float x) { return fusebench::bf16_bits_to_fp32(fusebench::fp32_to_bf16_bits(x)); }


// ---- f16 <-> fp32 over a run of elements, with the F16C instructions where the target has them
// (one instruction per 8 or 16 values instead of a dozen integer operations each). Both
// directions round exactly like fp16_bits_to_fp32 / fp32_to_fp16_bits; the one difference is
// that the hardware quiets a signalling NaN on widening. Tails go through a padded vector, so
// every element of a run takes the same path. (The zero-masked AVX-512 forms compile to the
// plain instructions; the unmasked intrinsics trip GCC 12's -Wmaybe-uninitialized.)
inline void f16_to_f32_n(const std::uint16_t* src, float* dst, std::int64_t n) {
#if defined(__AVX512F__)
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(dst + i, _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  }
  if (i < n) {
    alignas(64) std::uint16_t in[16] = {};
    alignas(64) float out[16];
    std::memcpy(in, src + i, std::size_t(n - i) * sizeof(std::uint16_t));
    _mm512_store_ps(out, _mm512_maskz_cvtph_ps(0xffff, _mm256_load_si256(reinterpret_cast<const __m256i*>(in))));
    std::memcpy(dst + i, out, std::size_t(n - i) * sizeof(float));
  }
#elif defined(__F16C__)
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
  if (i < n) {
    alignas(32) std::uint16_t in[8] = {};
    alignas(32) float out[8];
    std::memcpy(in, src + i, std::size_t(n - i) * sizeof(std::uint16_t));
    _mm256_store_ps(out, _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(in))));
    std::memcpy(dst + i, out, std::size_t(n - i) * sizeof(float));
  }
#else
  for (std::int64_t i = 0; i < n; ++i) dst[i] = fusebench::fp16_bits_to_fp32(src[i]);
#endif
}
inline void f32_to_f16_n(const float* src, std::uint16_t* dst, std::int64_t n) {
#if defined(__AVX512F__)
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_maskz_cvtps_ph(0xffff, _mm512_loadu_ps(src + i), kRound));
  }
  if (i < n) {
    alignas(64) float in[16] = {};
    alignas(64) std::uint16_t out[16];
    std::memcpy(in, src + i, std::size_t(n - i) * sizeof(float));
    _mm256_store_si256(reinterpret_cast<__m256i*>(out), _mm512_maskz_cvtps_ph(0xffff, _mm512_load_ps(in), kRound));
    std::memcpy(dst + i, out, std::size_t(n - i) * sizeof(std::uint16_t));
  }
#elif defined(__F16C__)
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), kRound));
  }
  if (i < n) {
    alignas(32) float in[8] = {};
    alignas(32) std::uint16_t out[8];
    std::memcpy(in, src + i, std::size_t(n - i) * sizeof(float));
    _mm_store_si128(reinterpret_cast<__m128i*>(out), _mm256_cvtps_ph(_mm256_load_ps(in), kRound));
    std::memcpy(dst + i, out, std::size_t(n - i) * sizeof(std::uint16_t));
  }
#else
  for (std::int64_t i = 0; i < n; ++i) dst[i] = fusebench::fp32_to_fp16_bits(src[i]);
#endif
}

// f32_to_f16_n of src[i] * scale, each product rounded to fp32 first (the bits of a multiply,
// a store and a conversion) without the intermediate pass: softmax's last step.
inline void f32_scaled_to_f16_n(const float* src, float scale, std::uint16_t* dst, std::int64_t n) {
#if defined(__AVX512F__)
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m512 factor = _mm512_set1_ps(scale);
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 product = _mm512_mul_ps(_mm512_loadu_ps(src + i), factor);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_maskz_cvtps_ph(0xffff, product, kRound));
  }
  for (; i < n; ++i) dst[i] = fusebench::fp32_to_fp16_bits(src[i] * scale);
#else
  constexpr std::int64_t kRun = 128;
  alignas(64) float products[kRun];
  for (std::int64_t i = 0; i < n; i += kRun) {
    const std::int64_t count = n - i < kRun ? n - i : kRun;
    for (std::int64_t j = 0; j < count; ++j) products[j] = src[i + j] * scale;
    f32_to_f16_n(products, dst + i, count);
  }
#endif
}

// ---- per-dtype spellings, so that templates over the compute type C call the right one
template <ExpArgument Range = ExpArgument::Any>
inline float exp_c(float x) { return exp_f32<Range>(x); }
template <ExpArgument Range = ExpArgument::Any>
inline double exp_c(double x) { return exp_f64(x); }
inline float gelu_erf_c(float x) { return gelu_erf_f32(x); }
inline double gelu_erf_c(double x) { return gelu_erf_f64(x); }
inline float gelu_tanh_c(float x) { return gelu_tanh_f32(x); }
inline double gelu_tanh_c(double x) { return gelu_tanh_f64(x); }
inline float gelu_tanh_backward_c(float dy, float x) { return gelu_tanh_backward_f32(dy, x); }
inline double gelu_tanh_backward_c(double dy, double x) { return gelu_tanh_backward_f64(dy, x); }
inline float log_c(float x) { return log_f32(x); }
inline double log_c(double x) { return log_f64(x); }

// Identity "rounding" of an accumulator kept in the compute type.
struct NoRounding {
  template <class C>
  C operator()(C x) const { return x; }
};
// Rounding of an accumulator kept in a 16-bit storage dtype.
struct RoundF16 {
  float operator()(float x) const { return round_f16(x); }
};
struct RoundBF16 {
  float operator()(float x) const { return round_bf16(x); }
};

// Reductions consume their rows in groups of kReduceLanes elements (below).
inline constexpr int kReduceLanes = 32;

// ---- prefetching the next row
// Row kernels read a row, then compute on it from L1 for far longer than the read took, so the
// next row's memory latency is not hidden: the hardware prefetcher runs only ~20 lines ahead,
// and the row's f16 stores each wait for a read-for-ownership of their line. RowPrefetch asks
// for the next row's input lines (for reading) and output lines (for writing) a piece per group
// of kReduceLanes elements of the current row's longest pass, spreading the misses over that
// pass. On the Engine suite's f16 softmax the two together raised its share of the copy
// bandwidth well beyond the input prefetch alone (a burst of prefetches at the row's start did
// not help). It only moves data into L2 earlier; no value changes.
//
// One cache line into L2, for reading or for writing. Inline assembly on x86-64: GCC drops
// __builtin_prefetch from loops it vectorises, and it did so here (a kernel compiled without a
// single prefetch instruction).
inline void prefetch_line(const char* p, bool for_write) {
#if defined(__x86_64__) && defined(__PRFCHW__)
  if (for_write) {
    asm volatile("prefetchw %0" : : "m"(*p));
  } else {
    asm volatile("prefetcht1 %0" : : "m"(*p));
  }
#elif defined(__x86_64__)
  asm volatile("prefetcht1 %0" : : "m"(*p));
  (void)for_write;
#else
  if (for_write) {
    __builtin_prefetch(p, 1, 2);
  } else {
    __builtin_prefetch(p, 0, 2);
  }
#endif
}
// Every cache line of `bytes` bytes from p.
inline void prefetch_lines(const char* p, std::int64_t bytes, bool for_write) {
  for (std::int64_t b = 0; b < bytes; b += 64) prefetch_line(p + b, for_write);
}
struct NoPrefetch {
  void operator()(std::int64_t) const {}
};
struct RowPrefetch {
  const char* next_in = nullptr;  // nullptr: nothing to fetch
  std::int64_t in_bytes = 0;      // per element of the input's storage dtype
  char* next_out = nullptr;
  std::int64_t out_bytes = 0;
  void operator()(std::int64_t i) const {
    if (next_in != nullptr) prefetch_lines(next_in + i * in_bytes, kReduceLanes * in_bytes, false);
    if (next_out != nullptr) prefetch_lines(next_out + i * out_bytes, kReduceLanes * out_bytes, true);
  }
};

// Element-wise kernels stream several inputs at once (the chain: four f16 inputs and one
// output per core), and their per-element work is long enough that the hardware prefetcher falls
// behind at each new page of each stream. prefetch_run asks for `count` elements from p for
// reading; the pointwise kernels call it on each staged input a few blocks ahead. On the Engine
// suite's f16 mul -> add -> gelu -> mul chain it shortened the run at 512 elements ahead (256 to
// 2048 were alike; prefetching the output for writing added nothing).
template <class T>
inline void prefetch_run(const T* p, std::int64_t count) {
  prefetch_lines(reinterpret_cast<const char*>(p), count * std::int64_t(sizeof(T)), false);
}

// ---- reduction order, shared by eager and fused execution
// The sum of n values is the in-order sum of tiles of `tile` elements; within a tile, element j
// goes to lane j mod 32 (two 512-bit vectors of independent accumulators: one running sum would
// be bound by the latency of its additions), and the 32 lanes combine as a pairwise tree at the
// tile's end. `round` is applied after every addition (the accumulator dtype knob).
// tiled_sum_of sums value(i) for i in [0, n) in that order without materialising the values;
// `step(i)` runs before each group of 32 (a row prefetch, above), outside the arithmetic.
template <class C, class Round, class Value, class Step = NoPrefetch>
inline C tiled_sum_of(std::int64_t n, std::int64_t tile, Round round, Value value, Step step = {}) {
  C total = 0;
  for (std::int64_t start = 0; start < n; start += tile) {
    const std::int64_t end = start + tile < n ? start + tile : n;
    C lane[kReduceLanes] = {};
    std::int64_t i = start;
    for (; i + kReduceLanes <= end; i += kReduceLanes) {
      step(i);
      for (int l = 0; l < kReduceLanes; ++l) lane[l] = round(lane[l] + value(i + l));
    }
    for (int l = 0; i < end; ++i, ++l) lane[l] = round(lane[l] + value(i));
    for (int width = kReduceLanes / 2; width >= 1; width /= 2) {
      for (int l = 0; l < width; ++l) lane[l] = round(lane[l] + lane[l + width]);
    }
    total = round(total + lane[0]);
  }
  return total;
}
template <class C, class Round>
inline C tiled_sum(const C* x, std::int64_t n, std::int64_t tile, Round round) {
  return tiled_sum_of<C>(n, tile, round, [x](std::int64_t i) { return x[i]; });
}

// Maximum that propagates NaN; the order of a max does not change its value.
template <class C>
inline C row_max(const C* x, std::int64_t n) {
  C lane[kReduceLanes];
  for (int l = 0; l < kReduceLanes; ++l) lane[l] = -INFINITY;
  std::int64_t i = 0;
  for (; i + kReduceLanes <= n; i += kReduceLanes) {
    for (int l = 0; l < kReduceLanes; ++l) {
      const C v = x[i + l];
      lane[l] = (v > lane[l] || v != v) ? v : lane[l];
    }
  }
  C m = -INFINITY;
  for (; i < n; ++i) m = (x[i] > m || x[i] != x[i]) ? x[i] : m;
  for (int l = 0; l < kReduceLanes; ++l) m = (lane[l] > m || lane[l] != lane[l]) ? lane[l] : m;
  return m;
}

// Layer normalisation of one row: y = ((x - mean) * rsqrt(var + eps)) * w + b, with mean and the
// biased variance as tiled sums divided by n (the squared deviations are summed as they are
// computed: a row fewer in cache than storing them first, the same order and values).
// `prefetch` (NoPrefetch or RowPrefetch) runs in the variance pass.
template <class C, class Round, class Rsqrt, class Prefetch = NoPrefetch>
inline void layernorm_row(const C* x, const C* w, const C* b, C* y, std::int64_t n, std::int64_t tile, C eps,
                          Round round, Rsqrt rsqrt, Prefetch prefetch = {}) {
  const C mean = tiled_sum(x, n, tile, round) / C(n);
  const C var = tiled_sum_of<C>(n, tile, round, [x, mean](std::int64_t i) { return (x[i] - mean) * (x[i] - mean); },
                                prefetch) / C(n);
  const C r = rsqrt(var + eps);
  for (std::int64_t i = 0; i < n; ++i) y[i] = ((x[i] - mean) * r) * w[i] + b[i];
}

// Softmax of one row: e = exp(x - max), y = e * (1 / sum(e)), the reciprocal taken once per row
// with the division knob. Multiplying by the reciprocal is how PyTorch's CPU softmax normalises;
// it costs at most one more fp32 rounding than e / sum (a per-element division made the
// normalisation a large share of the row's work). `prefetch` runs in the exponential pass.
// softmax_exp_row is the first part: it writes e to y and returns sum(e), so that a kernel
// storing f16 can fold the last multiply into the narrowing (f32_scaled_to_f16_n).
template <class C, class Round, class Prefetch = NoPrefetch>
inline C softmax_exp_row(const C* x, C* y, std::int64_t n, std::int64_t tile, Round round, Prefetch prefetch = {}) {
  const C m = row_max(x, n);
  // The exponentials are summed as they are stored: one pass fewer, the same order and values.
  // x - max is never above 0 (or NaN), so exp's upper clamp is left out.
  return tiled_sum_of<C>(n, tile, round, [x, y, m](std::int64_t i) { return y[i] = exp_c<ExpArgument::AtMost43>(x[i] - m); }, prefetch);
}
template <class C, class Round, class Div, class Prefetch = NoPrefetch>
inline void softmax_row(const C* x, C* y, std::int64_t n, std::int64_t tile, Round round, Div div, Prefetch prefetch = {}) {
  const C inverse = div(C(1), softmax_exp_row(x, y, n, tile, round, prefetch));
  for (std::int64_t i = 0; i < n; ++i) y[i] = y[i] * inverse;
}

// ---- the rsqrt and division knobs as function objects
struct RsqrtIeee {
  float operator()(float x) const { return rsqrt_ieee_f32(x); }
  double operator()(double x) const { return rsqrt_ieee_f64(x); }
};
template <int Iterations>
struct RsqrtNewtonBitTrick {
  float operator()(float x) const { return rsqrt_newton<Iterations>(x, rsqrt_seed_bit_trick(x)); }
  double operator()(double x) const { return rsqrt_ieee_f64(x); }  // fp64 stays IEEE
};
struct DivIeee {
  template <class C>
  C operator()(C a, C b) const { return a / b; }
};
template <int Iterations>
struct DivNewtonBitTrick {
  float operator()(float a, float b) const { return a * recip_newton<Iterations>(b, recip_seed_bit_trick(b)); }
  double operator()(double a, double b) const { return a / b; }
};
#if defined(FUSEBENCH_HARDWARE_SEEDS)
template <int Iterations>
struct RsqrtNewtonHardware {
  float operator()(float x) const { return rsqrt_newton<Iterations>(x, rsqrt_seed_hardware(x)); }
  double operator()(double x) const { return rsqrt_ieee_f64(x); }
};
template <int Iterations>
struct DivNewtonHardware {
  float operator()(float a, float b) const { return a * recip_newton<Iterations>(b, recip_seed_hardware(b)); }
  double operator()(double a, double b) const { return a / b; }
};
#endif

}  // namespace fbk
