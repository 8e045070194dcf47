// Element-wise comparison of two tensors of the same floating dtype and shape: bitwise equality
// and ULP distance. Both work on contiguous tensors (strided views are copied first).
#pragma once

#include <cstdint>
#include <vector>

#include "fusebench/tensor.hpp"

namespace fusebench {

// ---- bit_equal
// NaN policy: Bitwise compares NaNs by their bits (payload and sign included), so two NaNs with
// different payloads differ. AnyNanEqual treats every NaN as equal to every NaN.
enum class NanPolicy { Bitwise, AnyNanEqual };
// Signed-zero policy: Bitwise tells +0 from -0 (the default: a sign flip is a real difference in
// a dump); SignedZerosEqual treats them as equal.
enum class ZeroPolicy { Bitwise, SignedZerosEqual };

struct BitEqualOptions {
  NanPolicy nan = NanPolicy::Bitwise;
  ZeroPolicy zero = ZeroPolicy::Bitwise;
  std::size_t max_reported_indices = 16;
};

struct BitEqualResult {
  bool equal = true;
  std::int64_t count = 0;                            // elements compared
  std::int64_t mismatches = 0;                       // elements that differ under the policies
  std::vector<std::int64_t> first_mismatch_indices;  // row-major, ascending
  explicit operator bool() const { return equal; }
};

// Any dtype (integers compare bitwise; the policies apply to floating dtypes). InputError on a
// dtype or shape mismatch.
BitEqualResult bit_equal(const Tensor& a, const Tensor& b, const BitEqualOptions& options = {});

// ---- integer ULP distance
// A histogram of integer ULP distances: counts[k] for k < exact_bins(), then one bin for
// ">= exact_bins()". NaN pairs are counted apart, never binned.
struct UlpHistogram {
  std::vector<std::uint64_t> counts;  // exact_bins() + 1 entries
  std::uint64_t nan_pairs = 0;
  int exact_bins() const { return int(counts.size()) - 1; }
  std::uint64_t total() const;  // binned pairs, NaN pairs excluded
  void merge(const UlpHistogram& other);
};

struct UlpDiffOptions {
  int histogram_bins = 16;  // bins 0 .. N-1 exact, then ">= N"
  std::size_t max_reported_indices = 16;
};

// distance has the unsigned dtype of the operands' width (u16 for f16/bf16, u32 for f32, u64 for
// f64): every distance fits exactly. A pair with a NaN on either side has no distance: it is
// counted in nan_pairs, listed in first_nan_indices, and its distance entry holds the type's
// maximum, which is not a distance (always read nan_pairs first).
struct UlpDiffResult {
  Tensor distance;
  std::uint64_t max_distance = 0;  // over pairs without NaN
  std::int64_t max_index = -1;     // first index of max_distance; -1 when nothing compared
  std::uint64_t nan_pairs = 0;
  std::vector<std::int64_t> first_nan_indices;
  UlpHistogram histogram;
};

UlpDiffResult ulp_diff(const Tensor& a, const Tensor& b, const UlpDiffOptions& options = {});

// Exact statistics of the integer distances of a ulp_diff result, over the pairs without NaN:
// mean, and P50 / P99 by numpy's default ("linear") rule. NaN statistics when nothing compared.
struct UlpDiffSummary {
  std::uint64_t max = 0;
  std::int64_t max_index = -1;
  double mean = 0, p50 = 0, p99 = 0;
  std::uint64_t compared = 0;  // pairs without NaN
};
UlpDiffSummary summarize(const UlpDiffResult& result);

// ---- fractional ULP error against a reference
// |y - ref| / ulp_y(ref) where ulp_y(ref) is the spacing of y's format at ref: 2^(e - p + 1) for
// ref in [2^e, 2^(e+1)), floored at the subnormal spacing and capped at the top binade's. ref may
// have any floating dtype (normally f64). The difference is taken in fp64. Non-finite pairs: 0
// when both are the same infinity or both NaN, +inf otherwise. Returns an f64 tensor.
Tensor ulp_error(const Tensor& y, const Tensor& ref);

}  // namespace fusebench
