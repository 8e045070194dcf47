// JSON forms of the toolkit's results, shared by fusebench-diff, the suites' dumps and the report.
#pragma once

#include <nlohmann/json.hpp>

#include "fusebench/compare.hpp"
#include "fusebench/error_stats.hpp"

namespace fusebench {

nlohmann::json to_json(const UlpHistogram& histogram);
nlohmann::json to_json(const BitEqualResult& result);
nlohmann::json to_json(const ErrorSummary& summary);
// {"max", "max_index", "mean", "p50", "p99", "compared"}: integer distances (ulp_diff)
nlohmann::json to_json(const UlpDiffSummary& summary);
// {"n", "compared", "dtype", "ref_dtype", "nan": {"y","ref"}, "inf": {"y","ref"}, "mismatches",
//  "first_mismatch_indices", "rel_floor", "abs": {...}, "rel": {...},
//  "ulp_error": {...} (fractional, against ref), "ulp_diff": {"max", "max_index", "hist"} (integer
//  distance to ref rounded to y's dtype)}
nlohmann::json to_json(const ErrorStats& stats);

}  // namespace fusebench
