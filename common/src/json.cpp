#include "fusebench/json.hpp"

#include <cmath>

namespace fusebench {

namespace {
// JSON has no NaN: an undefined statistic (nothing compared) is null.
nlohmann::json number(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}
}  // namespace

nlohmann::json to_json(const UlpHistogram& histogram) {
  nlohmann::json bins = nlohmann::json::array();
  for (int k = 0; k < histogram.exact_bins(); ++k)
    bins.push_back({{"ulp", k}, {"count", histogram.counts[std::size_t(k)]}});
  return {{"bins", bins},
          {"at_least", {{"ulp", histogram.exact_bins()}, {"count", histogram.counts.back()}}},
          {"nan_pairs", histogram.nan_pairs}};
}

nlohmann::json to_json(const BitEqualResult& result) {
  return {{"bit_equal", result.equal},
          {"n", result.count},
          {"mismatches", result.mismatches},
          {"first_mismatch_indices", result.first_mismatch_indices}};
}

nlohmann::json to_json(const ErrorSummary& summary) {
  return {{"max", number(summary.max)},
          {"max_index", summary.max_index},
          {"mean", number(summary.mean)},
          {"p50", number(summary.p50)},
          {"p99", number(summary.p99)}};
}

nlohmann::json to_json(const UlpDiffSummary& summary) {
  return {{"max", summary.compared == 0 ? nlohmann::json(nullptr) : nlohmann::json(summary.max)},
          {"max_index", summary.max_index},
          {"mean", number(summary.mean)},
          {"p50", number(summary.p50)},
          {"p99", number(summary.p99)},
          {"compared", summary.compared}};
}

nlohmann::json to_json(const ErrorStats& stats) {
  const bool any_distance = stats.ulp_diff_max_index >= 0;
  const nlohmann::json ulp_diff = {
      {"max", any_distance ? nlohmann::json(stats.ulp_diff_max) : nlohmann::json(nullptr)},
      {"max_index", stats.ulp_diff_max_index},
      {"hist", to_json(stats.ulp_histogram)}};
  return {{"n", stats.count},
          {"compared", stats.compared},
          {"dtype", dtype_name(stats.dtype)},
          {"ref_dtype", dtype_name(stats.ref_dtype)},
          {"nan", {{"y", stats.nan_y}, {"ref", stats.nan_ref}}},
          {"inf", {{"y", stats.inf_y}, {"ref", stats.inf_ref}}},
          {"mismatches", stats.mismatches},
          {"first_mismatch_indices", stats.first_mismatch_indices},
          {"rel_floor", stats.rel_floor},
          {"abs", to_json(stats.abs)},
          {"rel", to_json(stats.rel)},
          {"ulp_error", to_json(stats.ulp_error)},
          {"ulp_diff", ulp_diff}};
}

}  // namespace fusebench
