// Bit-exact IEEE-754 helpers for the four floating formats fusebench compares: binary16 (fp16),
// bfloat16, binary32 and binary64.
//
// Narrowing always rounds to nearest, ties to even, keeps subnormals (no flush to zero), overflows
// to a signed infinity, and turns a NaN into a quiet NaN that keeps the payload's top bits (as the
// x86 F16C instructions do). Widening is exact and keeps NaN payloads bit for bit.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace fusebench {

// Storage-only 16-bit floats: arithmetic happens after an exact widening to fp32 or fp64.
struct Half {
  std::uint16_t bits = 0;
  friend constexpr bool operator==(Half, Half) = default;
};
struct BFloat16 {
  std::uint16_t bits = 0;
  friend constexpr bool operator==(BFloat16, BFloat16) = default;
};

// ---- format descriptions
template <class T>
struct FloatFormat;
template <>
struct FloatFormat<Half> {
  using Bits = std::uint16_t;
  static constexpr int exponent_bits = 5, mantissa_bits = 10;
};
template <>
struct FloatFormat<BFloat16> {
  using Bits = std::uint16_t;
  static constexpr int exponent_bits = 8, mantissa_bits = 7;
};
template <>
struct FloatFormat<float> {
  using Bits = std::uint32_t;
  static constexpr int exponent_bits = 8, mantissa_bits = 23;
};
template <>
struct FloatFormat<double> {
  using Bits = std::uint64_t;
  static constexpr int exponent_bits = 11, mantissa_bits = 52;
};

template <class T>
concept FloatingStorage = requires { typename FloatFormat<T>::Bits; };

// Derived constants of a format, all as raw bit patterns or exponents.
template <FloatingStorage T>
struct FormatTraits {
  using Bits = typename FloatFormat<T>::Bits;
  static constexpr int exponent_bits = FloatFormat<T>::exponent_bits;
  static constexpr int mantissa_bits = FloatFormat<T>::mantissa_bits;
  static constexpr int width = int(sizeof(Bits) * 8);
  static constexpr int bias = (1 << (exponent_bits - 1)) - 1;
  static constexpr int min_normal_exponent = 1 - bias;  // emin
  static constexpr int max_exponent = bias;             // emax
  static constexpr Bits sign_mask = Bits(Bits(1) << (width - 1));
  static constexpr Bits magnitude_mask = Bits(~sign_mask);
  static constexpr Bits infinity_bits = Bits(((Bits(1) << exponent_bits) - 1) << mantissa_bits);
  static constexpr Bits mantissa_mask = Bits((Bits(1) << mantissa_bits) - 1);
  static constexpr Bits quiet_bit = Bits(Bits(1) << (mantissa_bits - 1));
  static constexpr Bits max_finite_bits = Bits(infinity_bits - 1);
};

template <FloatingStorage T>
constexpr typename FloatFormat<T>::Bits bits_of(T value) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return value.bits;
  } else {
    return std::bit_cast<typename FloatFormat<T>::Bits>(value);
  }
}

template <FloatingStorage T>
constexpr T from_bits(typename FloatFormat<T>::Bits bits) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return T{bits};
  } else {
    return std::bit_cast<T>(bits);
  }
}

template <FloatingStorage T>
constexpr bool is_nan_bits(typename FloatFormat<T>::Bits bits) {
  using F = FormatTraits<T>;
  return (bits & F::magnitude_mask) > F::infinity_bits;
}
template <FloatingStorage T>
constexpr bool is_inf_bits(typename FloatFormat<T>::Bits bits) {
  using F = FormatTraits<T>;
  return (bits & F::magnitude_mask) == F::infinity_bits;
}

// ---- narrowing from fp64: one rounding, so fp32 -> fp16 through this is also correctly rounded
// (every fp32 value is exact in fp64).
template <FloatingStorage T>
constexpr typename FloatFormat<T>::Bits round_to_format_bits(double value) {
  using F = FormatTraits<T>;
  using Bits = typename F::Bits;
  static_assert(F::exponent_bits < 11, "narrowing only");
  constexpr int M = F::mantissa_bits;
  const std::uint64_t in = std::bit_cast<std::uint64_t>(value);
  const Bits sign = (in >> 63) ? F::sign_mask : Bits(0);
  const std::uint64_t magnitude = in & 0x7fff'ffff'ffff'ffffULL;
  constexpr std::uint64_t double_infinity = 0x7ff0'0000'0000'0000ULL;
  if (magnitude > double_infinity) {  // NaN: quiet, keep the top payload bits
    const Bits payload = Bits((magnitude >> (52 - M)) & F::mantissa_mask);
    return Bits(sign | F::infinity_bits | F::quiet_bit | payload);
  }
  if (magnitude == double_infinity) return Bits(sign | F::infinity_bits);
  const int raw_exponent = int(magnitude >> 52);
  // fp64 subnormals lie far below half the smallest subnormal of every narrower format.
  if (raw_exponent == 0) return sign;
  const int exponent = raw_exponent - 1023;
  if (exponent > F::max_exponent) return Bits(sign | F::infinity_bits);
  const std::uint64_t significand = (magnitude & ((1ULL << 52) - 1)) | (1ULL << 52);
  int shift = 52 - M;
  if (exponent < F::min_normal_exponent) shift += F::min_normal_exponent - exponent;
  if (shift >= 54) return sign;  // below half the smallest subnormal
  std::uint64_t kept = significand >> shift;
  const std::uint64_t rest = significand & ((1ULL << shift) - 1);
  const std::uint64_t halfway = 1ULL << (shift - 1);
  if (rest > halfway || (rest == halfway && (kept & 1))) ++kept;
  // A normal result adds the implicit bit of `kept` into the exponent field; a rounding carry
  // propagates into the exponent (and into infinity) by the same addition.
  const std::uint64_t magnitude_out =
      exponent < F::min_normal_exponent
          ? kept
          : (std::uint64_t(exponent + F::bias - 1) << M) + kept;
  return Bits(sign | Bits(magnitude_out));
}

template <FloatingStorage T>
constexpr T round_to(double value) {
  if constexpr (std::is_same_v<T, double>) {
    return value;
  } else {
    return from_bits<T>(round_to_format_bits<T>(value));
  }
}

// ---- the fast scalar paths used in loops; branch-free so that compilers vectorise them.
// fp32 -> fp16, round to nearest even (F. Giesen's magic-number method).
constexpr std::uint16_t fp32_to_fp16_bits(float value) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fff'ffffu;
  const bool nan = u > 0x7f80'0000u;
  const bool overflow = u >= 0x4780'0000u;  // >= 65536 before rounding: inf
  // Subnormal results: adding 0.5 aligns the 10 result bits at the bottom of the float and the
  // FPU's own round-to-nearest-even does the rounding.
  constexpr std::uint32_t denormal_magic = ((127 - 15) + (23 - 10) + 1) << 23;
  const float shifted = std::bit_cast<float>(u) + std::bit_cast<float>(denormal_magic);
  const std::uint32_t subnormal = std::bit_cast<std::uint32_t>(shifted) - denormal_magic;
  const std::uint32_t mantissa_odd = (u >> 13) & 1u;
  const std::uint32_t normal = (u + ((15u - 127u) << 23) + 0xfffu + mantissa_odd) >> 13;
  std::uint32_t out = u < (113u << 23) ? subnormal : normal;
  out = overflow ? 0x7c00u : out;
  out = nan ? (0x7e00u | ((u >> 13) & 0x3ffu)) : out;
  return std::uint16_t(out | sign);
}

constexpr float fp16_bits_to_fp32(std::uint16_t h) {
  const std::uint32_t shifted = std::uint32_t(h & 0x7fffu) << 13;
  const std::uint32_t exponent = shifted & (0x7c00u << 13);
  const std::uint32_t rebiased = shifted + ((127u - 15u) << 23);
  const std::uint32_t inf_nan = rebiased + ((128u - 16u) << 23);
  // Subnormal: build 2^-14 * (1 + m/1024) and subtract 2^-14, exact in fp32.
  const float subnormal =
      std::bit_cast<float>(rebiased + (1u << 23)) - std::bit_cast<float>(113u << 23);
  std::uint32_t out = rebiased;
  out = exponent == (0x7c00u << 13) ? inf_nan : out;
  // A mask, not a select: GCC moves the subtraction into the arm of a select that uses it, where
  // under its default -ftrapping-math it may not be executed unconditionally, and without
  // AVX-512's masked instructions the loop then stays scalar (LayerNorm's fused kernel widened its
  // weights and biases one element at a time on AVX2).
  const std::uint32_t is_subnormal = 0u - std::uint32_t(exponent == 0);
  out = (out & ~is_subnormal) | (std::bit_cast<std::uint32_t>(subnormal) & is_subnormal);
  return std::bit_cast<float>(out | (std::uint32_t(h & 0x8000u) << 16));
}

constexpr std::uint16_t fp32_to_bf16_bits(float value) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(value);
  const bool nan = (u & 0x7fff'ffffu) > 0x7f80'0000u;
  // Adding 0x7fff plus the lowest kept bit rounds to nearest even; a carry runs into the exponent.
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return std::uint16_t(nan ? ((u >> 16) | 0x0040u) : rounded);
}

constexpr float bf16_bits_to_fp32(std::uint16_t b) {
  return std::bit_cast<float>(std::uint32_t(b) << 16);
}

// ---- generic conversions between any two storage formats
template <FloatingStorage T>
constexpr float to_float(T value) {
  if constexpr (std::is_same_v<T, Half>) {
    return fp16_bits_to_fp32(value.bits);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return bf16_bits_to_fp32(value.bits);
  } else {
    return float(value);  // fp64 -> fp32 rounds to nearest even (the default FP environment)
  }
}

template <FloatingStorage T>
constexpr double to_double(T value) {
  if constexpr (std::is_same_v<T, double>) {
    return value;
  } else if constexpr (std::is_same_v<T, float>) {
    return double(value);
  } else {
    return double(to_float(value));  // exact: both 16-bit formats fit in fp32
  }
}

template <FloatingStorage T>
constexpr T from_float(float value) {
  if constexpr (std::is_same_v<T, Half>) {
    return Half{fp32_to_fp16_bits(value)};
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return BFloat16{fp32_to_bf16_bits(value)};
  } else {
    return T(value);
  }
}

// ---- neighbours: the next representable value towards +inf / -inf (NaN stays NaN; the infinity in
// the direction of travel is a fixed point; -0 and +0 both step to the smallest subnormal).
template <FloatingStorage T>
constexpr T next_up(T value) {
  using F = FormatTraits<T>;
  using Bits = typename F::Bits;
  const Bits b = bits_of(value);
  if (is_nan_bits<T>(b) || b == F::infinity_bits) return value;
  if ((b & F::magnitude_mask) == 0) return from_bits<T>(Bits(1));
  return from_bits<T>((b & F::sign_mask) ? Bits(b - 1) : Bits(b + 1));
}
template <FloatingStorage T>
constexpr T next_down(T value) {
  using F = FormatTraits<T>;
  using Bits = typename F::Bits;
  const Bits b = bits_of(value);
  if (is_nan_bits<T>(b) || b == Bits(F::sign_mask | F::infinity_bits)) return value;
  if ((b & F::magnitude_mask) == 0) return from_bits<T>(Bits(F::sign_mask | 1));
  return from_bits<T>((b & F::sign_mask) ? Bits(b + 1) : Bits(b - 1));
}

// ---- ULP distance on the monotone integer mapping: the number of representable values between
// a and b. +0 and -0 are 0 apart; an infinity is one step beyond the largest finite value. The
// result always fits the format's own width. NaN operands have no distance: callers check first.
template <FloatingStorage T>
constexpr typename FloatFormat<T>::Bits ulp_distance_bits(typename FloatFormat<T>::Bits a,
                                                          typename FloatFormat<T>::Bits b) {
  using F = FormatTraits<T>;
  using Bits = typename F::Bits;
  const Bits magnitude_a = a & F::magnitude_mask;
  const Bits magnitude_b = b & F::magnitude_mask;
  const bool same_sign = ((a ^ b) & F::sign_mask) == 0;
  const Bits apart = magnitude_a > magnitude_b ? Bits(magnitude_a - magnitude_b)
                                               : Bits(magnitude_b - magnitude_a);
  return same_sign ? apart : Bits(magnitude_a + magnitude_b);
}

// Spacing exponent of format T at |x|: ulp(x) = 2^spacing_exponent, with the subnormal spacing as
// the floor and the top binade's spacing above the largest finite value.
template <FloatingStorage T>
constexpr int spacing_exponent(double x) {
  using F = FormatTraits<T>;
  const std::uint64_t magnitude = std::bit_cast<std::uint64_t>(x) & 0x7fff'ffff'ffff'ffffULL;
  int exponent = int(magnitude >> 52) - 1023;  // floor(log2 |x|) for normal fp64
  exponent = exponent < F::min_normal_exponent ? F::min_normal_exponent : exponent;
  exponent = exponent > F::max_exponent ? F::max_exponent : exponent;
  return exponent - F::mantissa_bits;
}

}  // namespace fusebench
