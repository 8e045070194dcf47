// Independent oracles for the toolkit's tests. None of them uses the toolkit's bit tricks:
// decoding is by formula (ldexp of integers), rounding is MPFR's, and ULP distance is a rank in the
// sorted list of representable values (or that rank computed from binade arithmetic in fp64).
#pragma once

#include <mpfr.h>

#include <cmath>
#include <cstdint>
#include <limits>

namespace fusebench::oracle {

struct Format {
  int exponent_bits, mantissa_bits;
  int bias() const { return (1 << (exponent_bits - 1)) - 1; }
  int emin() const { return 1 - bias(); }
  int emax() const { return bias(); }
  int precision() const { return mantissa_bits + 1; }
};
inline constexpr Format kHalf{5, 10}, kBFloat16{8, 7}, kFloat{8, 23};

// Value of a bit pattern by the IEEE formula.
inline double decode(const Format& f, std::uint64_t bits) {
  const int width = 1 + f.exponent_bits + f.mantissa_bits;
  const bool negative = (bits >> (width - 1)) & 1;
  const std::uint64_t exponent_field = (bits >> f.mantissa_bits) & ((1u << f.exponent_bits) - 1);
  const std::uint64_t mantissa = bits & ((std::uint64_t(1) << f.mantissa_bits) - 1);
  double magnitude;
  if (exponent_field == (1u << f.exponent_bits) - 1) {
    magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::quiet_NaN();
  } else if (exponent_field == 0) {
    magnitude = std::ldexp(double(mantissa), f.emin() - f.mantissa_bits);
  } else {
    magnitude = std::ldexp(double(mantissa + (std::uint64_t(1) << f.mantissa_bits)),
                           int(exponent_field) - f.bias() - f.mantissa_bits);
  }
  return negative ? -magnitude : magnitude;
}

// MPFR's round-to-nearest-even of x into the format, with IEEE subnormals and overflow (MPFR's
// documented recipe: emin/emax of the format, mpfr_check_range, mpfr_subnormalize).
inline double round_with_mpfr(const Format& f, double x) {
  if (std::isnan(x)) return x;
  const mpfr_exp_t saved_emin = mpfr_get_emin(), saved_emax = mpfr_get_emax();
  // MPFR's exponent convention is m * 2^e with m in [0.5, 1).
  mpfr_set_emin(f.emin() - f.mantissa_bits + 1);
  mpfr_set_emax(f.emax() + 1);
  mpfr_t value;
  mpfr_init2(value, f.precision());
  int ternary = mpfr_set_d(value, x, MPFR_RNDN);
  ternary = mpfr_check_range(value, ternary, MPFR_RNDN);
  mpfr_subnormalize(value, ternary, MPFR_RNDN);
  const double out = mpfr_get_d(value, MPFR_RNDN);
  mpfr_clear(value);
  mpfr_set_emin(saved_emin);
  mpfr_set_emax(saved_emax);
  return out;
}

// Rank of a finite or infinite value among the format's representable values on the real line:
// 0 at zero, +-(count of representable positive values up to and including |x|), with infinity one
// step beyond the largest finite value. Computed from binade arithmetic in fp64, not from bits.
inline double rank(const Format& f, double x) {
  const double magnitude = std::fabs(x);
  const double per_binade = std::ldexp(1.0, f.mantissa_bits);
  double r;
  if (std::isinf(magnitude)) {
    r = double(f.emax() - f.emin() + 2) * per_binade;  // subnormals + all normal binades, then +1
  } else {
    const double smallest_normal = std::ldexp(1.0, f.emin());
    if (magnitude < smallest_normal) {
      r = magnitude / std::ldexp(1.0, f.emin() - f.mantissa_bits);
    } else {
      int e;
      const double m = std::frexp(magnitude, &e);  // magnitude = m 2^e, m in [0.5, 1)
      const int binade = e - 1;                    // magnitude in [2^binade, 2^(binade+1))
      r = double(binade - f.emin() + 1) * per_binade + (2.0 * m - 1.0) * per_binade;
    }
  }
  return x < 0 ? -r : r;
}

}  // namespace fusebench::oracle
