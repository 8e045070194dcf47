#include "fusebench/rng.hpp"

#include <bit>
#include <cmath>

namespace fusebench {

PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key) {
  constexpr std::uint32_t kMultiplier0 = 0xD2511F53u, kMultiplier1 = 0xCD9E8D57u;
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    const std::uint64_t product0 = std::uint64_t(kMultiplier0) * counter[0];
    const std::uint64_t product1 = std::uint64_t(kMultiplier1) * counter[2];
    counter = {std::uint32_t(product1 >> 32) ^ counter[1] ^ key[0], std::uint32_t(product1),
               std::uint32_t(product0 >> 32) ^ counter[3] ^ key[1], std::uint32_t(product0)};
  }
  return counter;
}

PhiloxCounter CounterRng::block(std::uint64_t index) const {
  return philox4x32_10({std::uint32_t(index), std::uint32_t(index >> 32), std::uint32_t(stream_),
                        std::uint32_t(stream_ >> 32)},
                       {std::uint32_t(seed_), std::uint32_t(seed_ >> 32)});
}

std::uint32_t CounterRng::u32(std::uint64_t index) const { return block(index / 4)[index % 4]; }

std::uint64_t CounterRng::u64(std::uint64_t index) const {
  const auto words = block(index / 2);
  const std::size_t first = 2 * (index % 2);
  return (std::uint64_t(words[first]) << 32) | words[first + 1];
}

namespace {
constexpr double kTwoToMinus53 = 1.0 / 9007199254740992.0;
}

double CounterRng::uniform(std::uint64_t index) const {
  return double(u64(index) >> 11) * kTwoToMinus53;
}

double CounterRng::normal(std::uint64_t index) const {
  const auto words = block(index);
  const std::uint64_t k1 = ((std::uint64_t(words[0]) << 32) | words[1]) >> 11;
  const std::uint64_t k2 = ((std::uint64_t(words[2]) << 32) | words[3]) >> 11;
  const double u1 = double(k1 + 1) * kTwoToMinus53;
  const double u2 = double(k2) * kTwoToMinus53;
  return std::sqrt(-2.0 * portable_log(u1)) * portable_cos_two_pi(u2);  // sqrt is IEEE-exact
}

// ---- portable elementary functions: only +, -, *, / and bit operations, evaluated in a fixed
// order (the project builds with -ffp-contract=off), hence identical bits everywhere.
double portable_log(double x) {
  const std::uint64_t bits = std::bit_cast<std::uint64_t>(x);
  int exponent = int(bits >> 52) - 1023;
  double m = std::bit_cast<double>((bits & ((1ULL << 52) - 1)) | (1023ULL << 52));  // [1, 2)
  if (m > 1.4142135623730951) {
    m *= 0.5;
    exponent += 1;
  }
  // log(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.1716: the odd series to s^25 is below
  // 1e-19 in its first omitted term.
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  double series = 1.0 / 25.0;
  for (int k = 23; k >= 1; k -= 2) series = series * s2 + 1.0 / double(k);
  const double log_m = 2.0 * s * series;
  constexpr double kLn2High = 0.6931471803691238;     // leading 32 bits of ln 2
  constexpr double kLn2Low = 1.9082149292705877e-10;  // ln 2 - kLn2High
  return double(exponent) * kLn2High + (log_m + double(exponent) * kLn2Low);
}

namespace {
// sin and cos of g * pi / 2 for g in [0, 0.5] (angles up to pi / 4), as nested Taylor series
// whose first omitted terms are below 1e-22.
double sin_quarter_turn(double g) {
  const double x = g * 1.5707963267948966;
  const double x2 = x * x;
  double r = 1.0;
  for (int k = 11; k >= 1; --k) r = 1.0 - x2 / double((2 * k) * (2 * k + 1)) * r;
  return x * r;
}
double cos_quarter_turn(double g) {
  const double x = g * 1.5707963267948966;
  const double x2 = x * x;
  double r = 1.0;
  for (int k = 11; k >= 1; --k) r = 1.0 - x2 / double((2 * k - 1) * (2 * k)) * r;
  return r;
}
}  // namespace

double portable_cos_two_pi(double u) {
  // Quarter-turn reduction is exact in binary: 4u and its fraction carry no rounding.
  const double turns = 4.0 * u;
  const int quadrant = int(turns) & 3;
  const double f = turns - std::floor(turns);
  const double cos_f = f <= 0.5 ? cos_quarter_turn(f) : sin_quarter_turn(1.0 - f);
  const double sin_f = f <= 0.5 ? sin_quarter_turn(f) : cos_quarter_turn(1.0 - f);
  switch (quadrant) {
    case 0:
      return cos_f;
    case 1:
      return -sin_f;
    case 2:
      return -cos_f;
    default:
      return sin_f;
  }
}

// ---- tensors
namespace {
template <class Fn>
Tensor fill_floating(DType dtype, Shape shape, std::string_view what, Fn&& value_of) {
  Tensor out = Tensor::uninitialized(dtype, std::move(shape));
  const std::int64_t n = out.numel();
  visit_floating(dtype, what, [&](auto tag) {
    using T = decltype(tag);
    T* data = reinterpret_cast<T*>(out.raw_data());
    for (std::int64_t i = 0; i < n; ++i) {
      const double v = value_of(std::uint64_t(i));
      if constexpr (std::is_same_v<T, float>) {
        data[i] = float(v);  // IEEE conversion: round to nearest even
      } else {
        data[i] = round_to<T>(v);
      }
    }
  });
  return out;
}
}  // namespace

Tensor random_uniform(DType dtype, Shape shape, double low, double high, std::uint64_t seed,
                      std::uint64_t stream) {
  if (!(low <= high) || !std::isfinite(low) || !std::isfinite(high)) {
    throw_input_error("random_uniform: invalid range U({}, {})", low, high);
  }
  const CounterRng rng(seed, stream);
  return fill_floating(dtype, std::move(shape), "random_uniform",
                       [&](std::uint64_t i) { return low + (high - low) * rng.uniform(i); });
}

Tensor random_normal(DType dtype, Shape shape, double mean, double stddev, std::uint64_t seed,
                     std::uint64_t stream) {
  if (!(stddev >= 0) || !std::isfinite(mean) || !std::isfinite(stddev)) {
    throw_input_error("random_normal: invalid parameters N({}, {}^2)", mean, stddev);
  }
  const CounterRng rng(seed, stream);
  return fill_floating(dtype, std::move(shape), "random_normal",
                       [&](std::uint64_t i) { return mean + stddev * rng.normal(i); });
}

}  // namespace fusebench
