#include "fusebench/diff.hpp"

#include <fmt/format.h>

#include "fusebench/error_stats.hpp"
#include "fusebench/json.hpp"

namespace fusebench {

nlohmann::json diff_json(const Tensor& a, const Tensor& b, const Tensor* ref,
                         const DiffOptions& options) {
  check_same_shape(a, b, fmt::format("diff {} vs {}", options.a_name, options.b_name));
  if (!is_floating(a.dtype()) || !is_floating(b.dtype())) {
    throw_input_error("diff: {} is {} and {} is {}; both must be floating (f16, bf16, f32, f64)",
                      options.a_name, a.describe(), options.b_name, b.describe());
  }
  if (ref != nullptr) {
    check_same_shape(a, *ref,
                     fmt::format("diff {} vs reference {}", options.a_name, options.ref_name));
    if (!is_floating(ref->dtype())) {
      throw_input_error("diff: reference {} is {}; it must be floating", options.ref_name,
                        ref->describe());
    }
  }
  const bool same_dtype = a.dtype() == b.dtype();
  BitEqualResult equality{false, a.numel(), a.numel(), {}};
  if (same_dtype) equality = bit_equal(a, b, {.nan = options.nan, .zero = options.zero});
  const ErrorStatsOptions stats_options{.histogram_bins = options.histogram_bins};
  // abs, rel and the non-finite counts of A against B as the baseline.
  const ErrorStats a_vs_b = error_stats(a, b, stats_options);
  const UlpDiffResult distances =
      ulp_diff(a, same_dtype ? b : b.to(a.dtype()), {.histogram_bins = options.histogram_bins});
  nlohmann::json ulp = to_json(summarize(distances));
  ulp["nan_pairs"] = distances.nan_pairs;
  ulp["hist"] = to_json(distances.histogram);

  nlohmann::json out = {
      {"a", options.a_name},
      {"b", options.b_name},
      {"shape", a.shape()},
      {"dtype", dtype_name(a.dtype())},
      {"dtype_b", dtype_name(b.dtype())},
      {"n", a.numel()},
      {"bit_equal", equality.equal},
      {"mismatches", equality.mismatches},
      {"first_mismatch_indices", equality.first_mismatch_indices},
      {"policies",
       {{"nan", options.nan == NanPolicy::AnyNanEqual ? "any-nan-equal" : "bitwise"},
        {"signed_zero", options.zero == ZeroPolicy::SignedZerosEqual ? "equal" : "bitwise"}}},
      {"ulp_diff", ulp},
      {"compared", a_vs_b.compared},
      {"abs", to_json(a_vs_b.abs)},
      {"rel", to_json(a_vs_b.rel)},
      {"rel_floor", a_vs_b.rel_floor},
      {"nan", {{"a", a_vs_b.nan_y}, {"b", a_vs_b.nan_ref}}},
      {"inf", {{"a", a_vs_b.inf_y}, {"b", a_vs_b.inf_ref}}},
      {"nonfinite_mismatches", a_vs_b.mismatches},
      {"first_nonfinite_mismatch_indices", a_vs_b.first_mismatch_indices}};
  if (ref != nullptr) {
    out["against_ref"] = {{"ref", options.ref_name},
                          {"ref_dtype", dtype_name(ref->dtype())},
                          {"a", to_json(error_stats(a, *ref, stats_options))},
                          {"b", to_json(error_stats(b, *ref, stats_options))}};
  }
  return out;
}

}  // namespace fusebench
