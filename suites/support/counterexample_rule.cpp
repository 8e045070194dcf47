#include "support/counterexample_rule.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace fusebench::suite {

double CounterexampleMargin::allowed(double eager) const {
  return std::max(eager + units_of_bound, (1 + relative) * eager);
}

nlohmann::json CounterexampleMargin::to_json() const {
  return {{"measure", "cond_max"},
          {"units_of_bound", units_of_bound},
          {"relative", relative},
          {"rule", fmt::format("a counter-example: fused cond_max - eager cond_max > {} and fused "
                               "cond_max > {} x eager cond_max (the set's maxima of the "
                               "conditioned error, in units of the bound)",
                               units_of_bound, 1 + relative)}};
}

SetVerdict classify_set(const SetComparison& set, const CounterexampleMargin& margin) {
  if (margin.exceeded(set.fused_cond_max, set.eager_cond_max)) return SetVerdict::Counterexample;
  if (!(set.fused_ulp_max > set.eager_ulp_max)) return SetVerdict::None;
  // NaN or inf (a zero reference) reads as ill-conditioned
  return !(set.condition_at_fused_ulp_max <= kIllConditioned) ? SetVerdict::AtCancellation
                                                              : SetVerdict::UlpWithinMargin;
}

const char* verdict_name(SetVerdict verdict) {
  switch (verdict) {
    case SetVerdict::Counterexample:
      return "counterexample";
    case SetVerdict::AtCancellation:
      return "at cancellation";
    case SetVerdict::UlpWithinMargin:
      return "ulp within margin";
    case SetVerdict::None:
      break;
  }
  return "none";
}

}  // namespace fusebench::suite
