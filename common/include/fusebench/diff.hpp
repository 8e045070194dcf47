// The comparison of two dumps (and of each against a reference) that `fusebench-diff --json`
// prints and the Python package's `fusebench.diff` returns: one function, so the two can never
// disagree on a field.
//
// A against B (no reference involved):
//   bit_equal / mismatches  bitwise, under the NaN and signed-zero policies (dtypes must match);
//   ulp_diff                the integer distance (compare.hpp) of A against B rounded to A's dtype
//                           (B itself when the dtypes match): max, mean, P50, P99, histogram;
//                           ±inf is one step beyond the largest finite value, NaN pairs are counted;
//   abs / rel               |A - B| and |A - B| / max(|B|, smallest normal of A's dtype), over the
//                           pairs where both are finite;
//   nan / inf / nonfinite_mismatches  counted per side, apart from the distances.
// Against a reference (optional): error_stats of A and of B against it, whose ulp_error is the
// fractional error in spacings of the result's format and whose ulp_diff is the integer distance
// to the reference rounded to the result's dtype.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "fusebench/compare.hpp"
#include "fusebench/tensor.hpp"

namespace fusebench {

struct DiffOptions {
  int histogram_bins = 16;
  NanPolicy nan = NanPolicy::Bitwise;
  ZeroPolicy zero = ZeroPolicy::Bitwise;
  std::string a_name = "a", b_name = "b", ref_name = "ref";  // paths, or labels
};

// InputError when the shapes differ or a tensor is not floating (the message names a_name etc.).
nlohmann::json diff_json(const Tensor& a, const Tensor& b, const Tensor* ref,
                         const DiffOptions& options = {});

}  // namespace fusebench
