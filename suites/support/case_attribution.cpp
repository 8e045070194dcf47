#include "support/case_attribution.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace fusebench::suite {

CaseAttribution::CaseAttribution(const SuiteConfig& config, const engine::Graph& graph,
                                 engine::EngineOptions eager, engine::EngineOptions fused,
                                 engine::SwitchScope scope)
    : config_(config), fused_options_(std::move(fused)) {
  framework_ = !engine_device(config);
  int compute_ops = 0;
  for (const engine::Node& n : graph.nodes()) {
    if (n.kind != engine::OpKind::Input && !engine::is_data_movement(n.kind)) {
      ++compute_ops;
      only_op_ = n.name;
    }
  }
  if (compute_ops != 1) only_op_.clear();
  // the cpu engine's per-op knobs where its fusion plan keeps values in registers; on a framework,
  // its per-op switches at every op (XLA: rounding and a split; torch: a graph break), then its
  // graph-wide ones and compile options
  std::vector<std::string> refused;
  candidates_ = engine::realisable_switches(
      graph, eager, fused_options_,
      [&](const engine::EngineOptions& o) { return suite::not_applicable(config, true, o); },
      refused, device(config).compiler_switches(), scope,
      framework_ ? engine::CandidateOps::EveryOp : engine::CandidateOps::FusionPlan);
  // With no candidate at all, a difference is unexplained (attribute says why); with every
  // candidate refused by the device, it cannot be attributed here.
  if (candidates_.empty() && !refused.empty())
    not_applicable_ = fmt::format("{}", fmt::join(refused, "; "));
  // A framework device compiles every switch set anew (seconds per graph): the sets it compiles
  // are capped per case, and a search that would need one more stops there.
  budget_ = config.device.rfind("xla", 0) == 0 ? kXlaCompileBudget : kFrameworkCompileBudget;
  budget_note_ =
      fmt::format("budget: {} compiled switch sets per case on {}, spent", budget_, config.device);
}

void CaseAttribution::spend(const engine::EngineOptions& options) {
  const std::string set = options.describe();
  if (!framework_ || spent_.count(set)) return;
  if (int(spent_.size()) >= budget_) throw engine::SearchBudgetSpent{};
  spent_.insert(set);
}

engine::Executor& CaseAttribution::fused_with(const std::vector<engine::Switch>& switches,
                                              bool counted) {
  const engine::EngineOptions o = engine::with_switches(fused_options_, switches);
  auto& slot = switched_[o.describe()];
  if (!slot) {
    if (counted) spend(o);
    slot = make_executor(config_, true, o);
  }
  return *slot;
}

CaseAttribution::Outcome CaseAttribution::attribute(
    const std::function<bool(engine::Executor&)>& removed, const std::string& criterion) {
  return search([&](const std::vector<engine::Switch>& s) { return removed(fused_with(s)); },
                criterion);
}

CaseAttribution::Outcome CaseAttribution::attribute_by_options(
    const std::function<bool(const engine::EngineOptions&)>& removed,
    const std::string& criterion) {
  return search(
      [&](const std::vector<engine::Switch>& s) {
        const engine::EngineOptions o = engine::with_switches(fused_options_, s);
        spend(o);
        return removed(o);
      },
      criterion);
}

CaseAttribution::Outcome CaseAttribution::search(const engine::RemovesDifference& removes,
                                                 const std::string& criterion) {
  Outcome out;
  if (!not_applicable_.empty()) {
    out.status = "n/a";
    out.json = {{"status", "n/a"}, {"reason", not_applicable_}};
  } else {
    try {
      out.attribution = engine::attribute(candidates_, removes);
    } catch (const engine::SearchBudgetSpent&) {
      out.attribution.reason = budget_note_;
    }
    reruns_ += out.attribution.reruns;
    out.json = out.attribution.to_json();
    if (out.attribution.reason == budget_note_) {
      out.status = "not attempted";
      out.json["status"] = out.status;
    } else {
      out.status = out.attribution.status == engine::Attribution::Status::Explained ? "explained"
                                                                                    : "unexplained";
      // a graph of one op: its graph-wide switch acts inside that op (its primitives, as the
      // framework fuses them), though no per-op switch reaches there
      if (out.status == "explained" && !out.attribution.localised && !only_op_.empty())
        out.json["graph_of_one_op"] = only_op_;
    }
  }
  out.json["criterion"] = criterion;
  return out;
}

}  // namespace fusebench::suite
