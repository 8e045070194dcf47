// Attribution of an eager/fused difference to its mechanism at an op (docs/fusion-switches.md).
//
// A switch sets one mechanism at one op of the fused path to eager's behaviour: per-op rounding at
// an op boundary, the scalar lowering, FMA contraction (for the kernel computing the op),
// the accumulator dtype, the reduction tile, the rsqrt or division approximation. The search
// reruns the fused path with sets of switches and keeps the smallest set that removes the
// difference, as delta debugging does (Zeller's ddmin: the result is 1-minimal, dropping any one
// switch brings the difference back). Where every candidate together does not remove it, the
// difference is unexplained: no knob the engine has accounts for it.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fusebench/engine/executor.hpp"
#include "fusebench/engine/graph.hpp"
#include "fusebench/engine/options.hpp"

namespace fusebench::engine {

struct Switch {
  std::string op;       // node name; empty: the whole graph (a graph-wide knob)
  std::string op_kind;  // op_name of the node
  DType dtype = DType::f32;
  std::string mechanism;  // "per-op rounding", "scalar lowering", ...
  OpKnobs knobs;          // what it sets at the op
  std::string token() const { return knobs.describe(); }  // "rounding=on", "tile=1024", ...
  nlohmann::json to_json() const;
};

// The switches that would set the fused path (graph-wide knobs `fused`) to eager's behaviour
// (`eager`), one mechanism at one op each, in graph order. Per-op rounding is a candidate at every
// op whose value the fusion plan keeps in registers; the other mechanisms only where the two
// sides' knobs differ.
std::vector<Switch> candidate_switches(const Graph& graph, const EngineOptions& eager,
                                       const EngineOptions& fused);

// The same mechanisms as graph-wide knobs, for a device that has no per-op switches but compile
// options for the whole graph (Inductor's emulate_precision_casts, XLA's excess precision): per-op
// rounding where the graph has a 16-bit op, and each knob where the two sides differ.
std::vector<Switch> graph_wide_switches(const Graph& graph, const EngineOptions& eager,
                                        const EngineOptions& fused);

// The candidates a device realises, asked through `unsupported` (a device's unsupported_knobs for
// its fused executor: empty when it realises the options). Per-op switches first; where the device
// has no per-op rounding, a kernel split after each op that feeds another (a framework's graph
// break); then the graph-wide switches of the mechanisms no per-op candidate covers. `refused`
// gets every candidate the device cannot realise, with its reason. Last, the framework compile
// options the device offers (`compiler`, Device::compiler_switches), each a graph-wide switch
// where the graph holds an op it applies to.
// SwitchScope::WholeGraph keeps only the graph-wide switches and the compile options: for a
// graph whose every rerun is costly (a training run), where one candidate per op is too many.
// CandidateOps::FusionPlan (the engine's devices): per-op rounding where fusebench's own fusion
// plan keeps a value in registers. CandidateOps::EveryOp (a framework, whose compiler fuses as it
// decides): per-op rounding at every 16-bit op, the graph's outputs included (a framework's op is
// several primitives, whose intermediates it may keep wider than eager stores them), a kernel split
// after every op that feeds another where the device realises one, and the graph-wide form of
// every mechanism, offered after the per-op switches.
using UnsupportedKnobs = std::function<std::string(const EngineOptions&)>;
enum class SwitchScope { PerOp, WholeGraph };
enum class CandidateOps { FusionPlan, EveryOp };
std::vector<Switch> realisable_switches(const Graph& graph, const EngineOptions& eager,
                                        const EngineOptions& fused,
                                        const UnsupportedKnobs& unsupported,
                                        std::vector<std::string>& refused,
                                        const std::vector<CompilerSwitch>& compiler = {},
                                        SwitchScope scope = SwitchScope::PerOp,
                                        CandidateOps ops = CandidateOps::FusionPlan);

// `fused` with the switches applied (merged into its per_op; a graph-wide switch sets the
// graph-wide knobs).
EngineOptions with_switches(const EngineOptions& fused, const std::vector<Switch>& switches);

struct Attribution {
  enum class Status { Explained, Unexplained } status = Status::Unexplained;
  std::vector<Switch> switches;  // 1-minimal set that removes the difference (Explained)
  // Explained by switches at ops only. A set holding a graph-wide switch (a compile option, a
  // mechanism set over the whole graph) is found only where no set of per-op switches removed the
  // difference: it explains without localising ("not localised").
  bool localised = false;
  // every distinct set run, in order, and whether it removed the difference (the evidence of an
  // unexplained difference: what was tried)
  std::vector<std::pair<std::vector<Switch>, bool>> tried;
  // each other candidate that removes it on its own (Explained; tested one by one)
  std::vector<Switch> alternatives;
  bool alternatives_complete = true;  // false: the budget ran out while they were tried
  std::string reason;                 // why unexplained
  int reruns = 0;                     // distinct switch sets tried
  nlohmann::json to_json() const;
};

// removes(switch set) reruns the fused path with the set applied and says whether the difference
// is gone. Where the candidates hold both per-op and graph-wide switches, the per-op ones are
// searched first (all together, then each alone), and the graph-wide ones join only if they fail:
// a whole-graph switch is an explanation only where no per-op switch removes the difference. It is called once per distinct set (memoised here). It may throw SearchBudgetSpent when
// it may run no more sets: during the search that propagates; while the alternatives are tried it
// ends them (alternatives_complete = false).
struct SearchBudgetSpent {};
using RemovesDifference = std::function<bool(const std::vector<Switch>&)>;
Attribution attribute(const std::vector<Switch>& candidates, const RemovesDifference& removes);

// Switch text as in a switch file ("rounding=on", "split", "tile=1024", several space-separated)
// to knobs; InputError naming the token otherwise.
OpKnobs parse_switch(const std::string& text);
// The mechanism a switch's knobs set ("per-op rounding", ...; several joined with " + ").
std::string mechanism_of(const OpKnobs& knobs);

}  // namespace fusebench::engine
