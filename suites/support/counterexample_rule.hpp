// Task B's counter-example on its deciding measure, the conditioned error (docs/conditioned-error.md,
// docs/fusion-switches.md), and what the suite records instead where only the ULP error differs.
//
// An input set is a counter-example when fused's set-max conditioned error exceeds eager's by more
// than the margin: by more than one unit of the bound AND by more than 10 % of eager's. Only
// counter-examples are attributed (the switch search). A set where only the ULP error is worse is
// "at cancellation" when the element of fused's worst ULP error is ill-conditioned (neither path
// can be accurate there), else "within the margin"; neither is attributed or counted as a
// counter-example. A set where both paths miss fp64 by far more than the bound is a shared error:
// a finding about the framework's (or engine's) kernel, not about fusion.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace fusebench::suite {

struct CounterexampleMargin {
  double units_of_bound = 1.0;  // fused - eager above this many units of the bound ...
  double relative = 0.10;       // ... and fused above (1 + this) x eager

  // fused's set-max conditioned error is worse than eager's beyond the margin
  bool exceeded(double fused, double eager) const {
    return fused - eager > units_of_bound && fused > (1 + relative) * eager;
  }
  // the largest fused figure that is no counter-example against eager's
  double allowed(double eager) const;
  // the dump header's "counterexample_margin": measure, both parts, the rule in words
  nlohmann::json to_json() const;
};

inline constexpr CounterexampleMargin kCounterexampleMargin{};

// A set's worst element is ill-conditioned when its bound exceeds this many times the output's own
// rounding, u |ref| (the computation amplifies its roundings a hundred-fold, about 6.6 bits).
inline constexpr double kIllConditioned = 100;

// Both paths' set-max conditioned error above this: a shared error (the kernel, not fusion).
inline constexpr double kSharedErrorAbove = 100;

// One input set's figures the rule reads.
struct SetComparison {
  double eager_cond_max = 0, fused_cond_max = 0;
  double eager_ulp_max = 0, fused_ulp_max = 0;
  // condition (bound / (u |ref|)) at the element of fused's worst ULP error; may be inf
  double condition_at_fused_ulp_max = 1;
};

enum class SetVerdict {
  Counterexample,   // fused worse on the conditioned error beyond the margin: attributed
  AtCancellation,   // only the ULP error worse, at an ill-conditioned element: recorded apart
  UlpWithinMargin,  // only the ULP error worse, at a well-conditioned element, within the margin
  None,             // fused no worse on either measure
};

SetVerdict classify_set(const SetComparison& set,
                        const CounterexampleMargin& margin = kCounterexampleMargin);
const char* verdict_name(SetVerdict verdict);  // "counterexample", "at cancellation", ...

// Both paths miss fp64 by far more than the bound on this set.
inline bool shared_error(double eager_cond_max, double fused_cond_max) {
  return eager_cond_max > kSharedErrorAbove && fused_cond_max > kSharedErrorAbove;
}

}  // namespace fusebench::suite
