// JSON forms of the toolkit's results, shared by fusebench-diff, the suites' dumps and the report.
#pragma once

#include <nlohmann/json.hpp>

#include "fusebench/compare.hpp"
#include "fusebench/error_stats.hpp"

namespace fusebench {

nlohmann::json to_json(const UlpHistogram& histogram);
nlohmann::json to_json(const BitEqualResult& result);
nlohmann::json to_json(const ErrorSummary& summary);
// {"n", "compared", "dtype", "ref_dtype", "nan": {"y","ref"}, "inf": {"y","ref"}, "mismatches",
//  "first_mismatch_indices", "rel_floor", "abs": {...}, "rel": {...}, "ulp": {..., "hist"}}
nlohmann::json to_json(const ErrorStats& stats);

}  // namespace fusebench
