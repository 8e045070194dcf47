// Localising a task B difference on its deciding measure, the conditioned error
// (docs/fusion-switches.md): each op's value on both paths against that op's fp64 reference and
// running error bound; the first op where fused is worse beyond the counter-example margin; for a
// counter-example no switch removes, its candidate mechanism there with the experiments that
// support it; and for a shared error (both paths far above the bound), where it arises and a check
// of the bound there.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fusebench/engine/executor.hpp"
#include "fusebench/engine/graph.hpp"

namespace fusebench::suite {

// Every compute node (not data movement) as an output as well: the probe whose values localise.
engine::Graph with_all_outputs(const engine::Graph& g);
// The inputs `g` reads, of `in` (an executor refuses a name its graph does not have).
engine::Inputs inputs_of(const engine::Graph& g, const engine::Inputs& in);
// The largest value that is not NaN (0 for none).
double finite_max(const std::vector<double>& v);

// Every compute node's value on both paths, with its fp64 reference and bound. On the engine's
// devices one run of the probe reads them; a framework compiles a graph as it decides, so its fused
// values come from prefixes of the graph, each ending at the op (each compiled once per graph),
// and its eager values from the op-by-op run of the probe.
struct OpValues {
  std::vector<engine::NodeId> ops;  // compute nodes, in graph order
  std::map<engine::NodeId, Tensor> ref, bound, eager, fused;
};
OpValues op_values(const engine::Graph& g, const engine::Inputs& in, engine::Executor& eager,
                   engine::Executor& fused, bool framework);

// Per op: both paths' ULP and conditioned error maxima against the op's own reference and bound.
struct OpErrors {
  std::string op;
  double eager_ulp_max = 0, fused_ulp_max = 0, eager_cond_max = 0, fused_cond_max = 0;
};
std::vector<OpErrors> op_errors(const engine::Graph& g, const OpValues& v);
// [{"op", "kind", "eager_ulp_max", "fused_ulp_max", "eager_cond_max", "fused_cond_max",
//   "fused_worse_beyond_margin"}, ...] in graph order
nlohmann::json op_errors_json(const engine::Graph& g, const std::vector<OpErrors>& errors);
// The first op whose fused conditioned error is worse than eager's beyond the margin; -1 for none.
engine::NodeId first_divergent(const OpValues& v, const std::vector<OpErrors>& errors);

// A counter-example no switch removes: its candidate mechanism at its first divergent op `d` (what
// d's kind computes that a kernel may do otherwise), and two experiments on the fused side, each
// rerunning the fused path after d on the graph with d as an input: d recomputed in fp64 from the
// fused path's own operands and rounded once to d's dtype, and eager's value of d. `ref`, `bound`:
// the graph output's; `eager_cond_max`: eager's set maximum, against which the margin is applied.
// {"op", "kind", "mechanism", "confirmed", "evidence", "experiments": [{"what", "fused_cond_max",
//  "removes"}, ...]}
nlohmann::json candidate_mechanism(const engine::Graph& g, const engine::Inputs& in,
                                   const OpValues& v, engine::NodeId d, const Tensor& ref,
                                   const Tensor& bound, double eager_cond_max,
                                   engine::Executor& fused);

// A shared error (both paths above kSharedErrorAbove): {"ops": op_errors_json, "arises_at": the
// first op where eager's conditioned error exceeds the threshold (null: none), "bound_check": at
// eager's worst element there, whether the value is subnormal (underflow), the function's own
// condition |x f'(x) / f(x)| and the rounding of its argument at the op's dtype (an element-wise op
// of one operand), eager's error in units of the bound and of the bound plus that rounding, and
// the finding in words}.
nlohmann::json shared_error_at(const engine::Graph& g, const engine::Inputs& in, const OpValues& v,
                               const std::vector<OpErrors>& errors);

}  // namespace fusebench::suite
