// One case's attribution search on the configured device (engine/attribution.hpp has the method):
// the switches the device realises, the fused executors by switch set, and on a framework device
// the cap on the switch sets it compiles. Tasks B, D and E attribute their differences through it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fusebench/engine/attribution.hpp"
#include "support/engine_support.hpp"

namespace fusebench::suite {

// Distinct switch sets a case compiles on a framework device for attribution (each is a compile
// of the graph, seconds on Inductor; Inductor's FX graph cache keeps them for the next run). Per
// case, so that every case gets its search: a case's sets recur across its counter-examples, and
// its 4-7 candidates, each tried alone where all together fail, need at most about 12.
constexpr int kFrameworkCompileBudget = 12;
// XLA:CPU compiles task B's graphs in a few tenths of a second, and XLA has a per-op switch of
// each kind (rounding and a split) at every op: its cases get more sets.
constexpr int kXlaCompileBudget = 40;

class CaseAttribution {
 public:
  CaseAttribution(const SuiteConfig& config, const engine::Graph& graph,
                  engine::EngineOptions eager, engine::EngineOptions fused,
                  engine::SwitchScope scope = engine::SwitchScope::PerOp);

  const std::vector<engine::Switch>& candidates() const { return candidates_; }
  // Why no difference of this case can be attributed here (every candidate refused by the
  // device), else empty.
  const std::string& not_applicable() const { return not_applicable_; }
  const std::string& budget_note() const { return budget_note_; }
  int reruns() const { return reruns_; }
  bool framework() const { return framework_; }

  // The fused executor with `switches` applied, made once per distinct set. A counted new set on a
  // framework device spends the budget and throws SearchBudgetSpent once it is spent; a cost
  // measurement passes counted = false.
  engine::Executor& fused_with(const std::vector<engine::Switch>& switches, bool counted = true);

  struct Outcome {
    // "explained", "unexplained", "not attempted" (the budget ran out) or "n/a"
    std::string status;
    engine::Attribution attribution;
    nlohmann::json json;  // the evidence's "attribution" object, with `criterion`
  };
  // The smallest set of switches after which `removed(executor)` holds (the difference is gone on
  // the fused executor with the set applied).
  Outcome attribute(const std::function<bool(engine::Executor&)>& removed,
                    const std::string& criterion);
  // The same where a rerun needs the options rather than one executor (a training run builds its
  // own): `removed(options)` with the fused options and the set applied. On a framework device
  // each distinct set spends the budget.
  Outcome attribute_by_options(const std::function<bool(const engine::EngineOptions&)>& removed,
                               const std::string& criterion);

 private:
  Outcome search(const engine::RemovesDifference& removes, const std::string& criterion);
  void spend(const engine::EngineOptions& options);

  const SuiteConfig& config_;
  engine::EngineOptions fused_options_;
  std::vector<engine::Switch> candidates_;
  std::string not_applicable_, budget_note_;
  std::string only_op_;  // the graph's one compute op, where it has one
  bool framework_ = false;
  int budget_ = kFrameworkCompileBudget;
  int reruns_ = 0;
  std::map<std::string, std::unique_ptr<engine::Executor>> switched_;  // by knobs described
  std::set<std::string> spent_;                                        // sets compiled, described
};

}  // namespace fusebench::suite
