// Reproducible random inputs: the counter-based Philox4x32-10 generator (Salmon et al., SC'11;
// checked against Random123's known-answer vectors) and an explicit construction of every value
// from its bits, so the same seed gives the same tensors on every platform, compiler and thread
// count. No std::*_distribution is used: their outputs differ between standard libraries.
//
// Element i of a tensor depends only on (seed, stream, i):
//   uniform U(low, high) in dtype D: k = (64-bit word i) >> 11, u = k * 2^-53 in [0, 1),
//       v = low + (high - low) * u evaluated in fp64 (two IEEE roundings), then rounded to D to
//       nearest even. Rounding to a narrow D can give exactly `high`.
//   normal N(mean, stddev^2): Box-Muller from Philox block i: u1 = (k1 + 1) * 2^-53 in (0, 1],
//       u2 = k2 * 2^-53; z = sqrt(-2 ln u1) * cos(2 pi u2), with ln and cos evaluated by this
//       library's own fixed polynomials (no libm: its last bits differ between libraries);
//       v = mean + stddev * z in fp64, then rounded to D.
#pragma once

#include <array>
#include <cstdint>

#include "fusebench/tensor.hpp"

namespace fusebench {

using PhiloxCounter = std::array<std::uint32_t, 4>;
using PhiloxKey = std::array<std::uint32_t, 2>;
PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key);

class CounterRng {
 public:
  explicit CounterRng(std::uint64_t seed, std::uint64_t stream = 0)
      : seed_(seed), stream_(stream) {}
  // Block `index` of four 32-bit words: counter = (index, stream), key = seed.
  PhiloxCounter block(std::uint64_t index) const;
  std::uint32_t u32(std::uint64_t index) const;  // word index % 4 of block index / 4
  std::uint64_t u64(std::uint64_t index) const;  // words of block index / 2
  double uniform(std::uint64_t index) const;     // [0, 1), 53 bits
  double normal(std::uint64_t index) const;      // standard normal, fp64
  std::uint64_t seed() const { return seed_; }
  std::uint64_t stream() const { return stream_; }

 private:
  std::uint64_t seed_, stream_;
};

Tensor random_uniform(DType dtype, Shape shape, double low, double high, std::uint64_t seed,
                      std::uint64_t stream = 0);
Tensor random_normal(DType dtype, Shape shape, double mean, double stddev, std::uint64_t seed,
                     std::uint64_t stream = 0);

// The portable elementary functions behind random_normal, exposed for their tests.
double portable_log(double x);         // x > 0, normal
double portable_cos_two_pi(double u);  // cos(2 pi u), u in [0, 1)

}  // namespace fusebench
