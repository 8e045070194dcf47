// Block kernels shared by ulp_diff and error_stats (internal to the toolkit library).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

#include "fusebench/float_formats.hpp"

namespace fusebench::detail {

template <class T>
struct BlockSummary {
  std::uint64_t nan_pairs = 0;
  typename FloatFormat<T>::Bits max_distance = 0;  // over pairs without NaN
};

// Distances of one block; written branch-free on restrict pointers so that it vectorises.
template <class T>
inline BlockSummary<T> block_distances(const typename FloatFormat<T>::Bits* __restrict a,
                                       const typename FloatFormat<T>::Bits* __restrict b,
                                       typename FloatFormat<T>::Bits* __restrict distance,
                                       std::int64_t count) {
  using F = FormatTraits<T>;
  using Bits = typename F::Bits;
  // Masks instead of branches and bools: every value stays in the element width, which is what
  // lets the compiler keep 16 lanes per 256-bit register for the 16-bit formats.
  Bits nans = 0;  // a block has fewer elements than Bits can count
  Bits max_distance = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    const Bits x = a[i], y = b[i];
    const Bits magnitude_x = x & F::magnitude_mask, magnitude_y = y & F::magnitude_mask;
    const Bits larger = std::max(magnitude_x, magnitude_y),
               smaller = std::min(magnitude_x, magnitude_y);
    const Bits signs_differ = Bits(Bits(0) - Bits((x ^ y) >> (F::width - 1)));
    const Bits d = Bits((Bits(magnitude_x + magnitude_y) & signs_differ) |
                        (Bits(larger - smaller) & Bits(~signs_differ)));
    const Bits is_nan = Bits(larger > F::infinity_bits);
    const Bits nan_mask = Bits(Bits(0) - is_nan);
    distance[i] = Bits(d | nan_mask);
    nans = Bits(nans + is_nan);
    max_distance = std::max(max_distance, Bits(d & Bits(~nan_mask)));
  }
  return {nans, max_distance};
}

// How many of count distances equal value. Kept out of line on purpose: inlined into the loop
// over bins, the compiler vectorises that outer loop instead of this one, which is many times
// slower.
template <class Bits>
[[gnu::noinline]] inline std::uint16_t count_equal(const Bits* __restrict distance,
                                                   std::int64_t count, Bits value) {
  std::uint16_t in_bin = 0;  // a block has fewer than 2^16 elements
  for (std::int64_t i = 0; i < count; ++i) in_bin += distance[i] == value;
  return in_bin;
}

// Histogram of one block's distances, clamped into exact_bins + 1 bins. Small bin counts use one
// vectorised counting sweep per bin over the (cache-resident) block; scattered increments would
// serialise when most distances are equal.
template <class Bits>
inline void block_histogram(const Bits* __restrict distance, std::int64_t count, int exact_bins,
                            std::uint64_t* counts) {
  constexpr int kSweepLimit = 32;
  if (exact_bins <= kSweepLimit && count <= 65535) {
    std::uint64_t binned = 0;
    // small distances fill the block early
    for (int k = 0; k < exact_bins && binned < std::uint64_t(count); ++k) {
      const std::uint16_t in_bin = count_equal(distance, count, Bits(k));
      counts[k] += in_bin;
      binned += in_bin;
    }
    counts[exact_bins] += std::uint64_t(count) - binned;
    return;
  }
  const std::uint64_t clamp = std::uint64_t(exact_bins);
  for (std::int64_t i = 0; i < count; ++i) ++counts[std::min<std::uint64_t>(distance[i], clamp)];
}

}  // namespace fusebench::detail
