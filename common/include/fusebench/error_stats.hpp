// Error statistics of a result y against a reference ref (normally the fp64 reference).
//
// Definitions (all over the pairs where both y and ref are finite, "compared"):
//   abs = |y - ref|, computed in fp64.
//   rel = |y - ref| / max(|ref|, smallest normal of y's dtype). The floor keeps rel finite and
//         meaningful at ref = 0 and among subnormals, where a relative error says nothing; at
//         ref = 0 it equals abs divided by the smallest normal.
//   ulp_error = the fractional ULP error in y's format (see ulp_error in compare.hpp).
// Each metric reports max (with the first index where it occurs), mean, and the exact P50 and
// P99: no sampling; the percentile is numpy's default ("linear": sorted x, h = (n-1)p,
// x[floor h] + (h - floor h)(x[floor h + 1] - x[floor h])).
// Non-finite pairs are counted, never averaged: NaN and inf counts on each side, and
// "mismatches" where y and ref disagree (NaN against a number, inf against a finite value or
// against the other infinity).
// Apart from those, the integer ULP distance (ulp_diff in compare.hpp) between y and ref rounded to
// y's dtype (0 means y is the correctly rounded reference) is binned in ulp_histogram and its
// maximum kept in ulp_diff_max; both cover every pair without a NaN (an infinity is one step beyond
// the largest finite value). The two ULP measures answer different questions and are never mixed:
// ulp_error is "how far from the truth, in spacings of y's format", ulp_diff "how many representable
// values apart from the correctly rounded truth".
#pragma once

#include <cstdint>
#include <vector>

#include "fusebench/compare.hpp"
#include "fusebench/tensor.hpp"

namespace fusebench {

struct ErrorSummary {
  double max = 0, mean = 0, p50 = 0, p99 = 0;
  std::int64_t max_index = -1;  // -1 when nothing was compared
};

struct ErrorStatsOptions {
  int histogram_bins = 16;
  std::size_t max_reported_indices = 16;
  // Worker threads for inputs of 2^20 elements or more (0: one per hardware thread). The results
  // are the same for any count: the work is split into fixed chunks merged in order.
  int threads = 0;
  // Inputs larger than 2^18 pairs: a stratified sample of this many pairs predicts, per metric, a
  // narrow window of values around each wanted rank; one pass then counts the values below each
  // window and keeps those inside, which gives the exact order statistics. A window that misses
  // its rank (unlikely, but possible with any sample) falls back to the radix selection's extra
  // passes over the input, with the same result. 0: the radix selection only.
  std::int64_t rank_sample_size = std::int64_t(1) << 16;
};

struct ErrorStats {
  DType dtype = DType::f32;      // y's
  DType ref_dtype = DType::f64;  // ref's
  std::int64_t count = 0;        // all elements
  std::int64_t compared = 0;     // pairs with both sides finite
  std::int64_t nan_y = 0, nan_ref = 0, inf_y = 0, inf_ref = 0;
  std::int64_t mismatches = 0;  // non-finite disagreements
  std::vector<std::int64_t> first_mismatch_indices;
  double rel_floor = 0;              // the denominator floor used for rel
  ErrorSummary abs, rel, ulp_error;  // ulp_error: fractional, in spacings of y's format at ref
  UlpHistogram ulp_histogram;        // integer distances to ref rounded to y's dtype
  std::uint64_t ulp_diff_max = 0;    // the largest of those distances (over pairs without NaN)
  std::int64_t ulp_diff_max_index = -1;
  int passes = 0;  // passes over the input: 1, or more where a percentile needed radix passes
};

namespace detail {
// The index of the i-th of `samples` pairs drawn from n: one per stratum of n / samples pairs, at
// a hashed offset inside it. Exposed for the tests, which build inputs that mislead the sample.
std::int64_t rank_sample_position(std::int64_t i, std::int64_t n, std::int64_t samples);
}  // namespace detail

// y: f16, bf16, f32 or f64; ref: any floating dtype of the same shape.
ErrorStats error_stats(const Tensor& y, const Tensor& ref, const ErrorStatsOptions& options = {});

// Exact percentile (numpy "linear") of values; p in [0, 1]. Reorders values. NaN if empty.
double percentile(std::vector<double>& values, double p);

}  // namespace fusebench
