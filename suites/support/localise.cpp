#include "support/localise.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "fusebench/engine/reference_ops.hpp"
#include "fusebench/error_stats.hpp"
#include "support/counterexample_rule.hpp"

namespace fusebench::suite {

using engine::Graph;
using engine::NodeId;

namespace {
// What an op's kind computes that a fused kernel may do otherwise than eager.
std::string mechanism_inside(engine::OpKind kind) {
  using engine::OpKind;
  switch (kind) {
    case OpKind::Matmul:
    case OpKind::Sum:
    case OpKind::Mean:
      return "reduction: the order and width of its sums";
    case OpKind::LayerNorm:
      return "row reduction: its mean and variance sums and the normalisation";
    case OpKind::Softmax:
      return "row reduction: its maximum, exponentials and sum";
    case OpKind::GeluErf:
    case OpKind::GeluTanh:
    case OpKind::Exp:
    case OpKind::Log:
    case OpKind::Sqrt:
    case OpKind::Rsqrt:
      return "function evaluation: the kernel's formula or polynomial";
    default:
      return "arithmetic: its rounding or contraction";
  }
}

// A value of node `id` on the fused side, for recomputing an op from fused's own operands: an
// input as given, a compute node as the fused path computed it, data movement applied exactly.
Tensor fused_side_value(const Graph& g, const engine::Inputs& in, const OpValues& v, NodeId id) {
  const auto& n = g.node(id);
  if (n.kind == engine::OpKind::Input) return in.at(n.name);
  if (v.fused.count(id)) return v.fused.at(id);
  engine::reference::Operands operands;
  for (NodeId o : n.inputs) operands.push_back(fused_side_value(g, in, v, o));
  return engine::reference::evaluate(n, operands);
}

// ---- shared errors: both paths far above the bound (the kernel, not fusion)
// The smallest normal value of a floating dtype.
double smallest_normal(DType d) {
  switch (d) {
    case DType::f16:
      return std::ldexp(1.0, -14);
    case DType::bf16:
    case DType::f32:
      return std::ldexp(1.0, -126);
    default:
      return std::numeric_limits<double>::min();
  }
}

}  // namespace

// Every compute node as an output: the probe whose stored intermediates localise errors.
Graph with_all_outputs(const Graph& g) {
  Graph probe = g;
  for (const auto& n : g.nodes()) {
    if (n.kind != engine::OpKind::Input && !engine::is_data_movement(n.kind))
      probe.mark_output(n.id);
  }
  return probe;
}

double finite_max(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) {
    if (!std::isnan(x)) m = std::max(m, x);
  }
  return m;
}

// The inputs `g` reads, of `in` (an executor refuses a name its graph does not have).
engine::Inputs inputs_of(const Graph& g, const engine::Inputs& in) {
  engine::Inputs out;
  for (NodeId id : g.inputs()) out[g.node(id).name] = in.at(g.node(id).name);
  return out;
}

OpValues op_values(const Graph& g, const engine::Inputs& in, engine::Executor& eager,
                   engine::Executor& fused, bool framework) {
  OpValues v;
  const Graph probe = with_all_outputs(g);
  engine::BoundedReference bounded = engine::fp64_reference_with_bound(probe, in);
  for (std::size_t i = 0; i < probe.outputs().size(); ++i) {
    v.ref[probe.outputs()[i]] = std::move(bounded.outputs[i]);
    v.bound[probe.outputs()[i]] = std::move(bounded.bounds[i]);
  }
  const auto eager_all = eager.run(probe, in).values;
  std::map<NodeId, Tensor> fused_all;
  if (!framework) fused_all = fused.run(probe, in).values;
  for (const auto& n : g.nodes()) {
    if (n.kind == engine::OpKind::Input || engine::is_data_movement(n.kind)) continue;
    v.ops.push_back(n.id);
    v.eager[n.id] = eager_all.at(n.id);
    if (framework) {
      const Graph prefix = g.prefix(n.id);
      v.fused[n.id] = fused.run(prefix, inputs_of(prefix, in)).outputs[0];
    } else {
      v.fused[n.id] = fused_all.at(n.id);
    }
  }
  return v;
}

std::vector<OpErrors> op_errors(const Graph& g, const OpValues& v) {
  std::vector<OpErrors> out;
  for (NodeId id : v.ops) {
    OpErrors e;
    e.op = g.node(id).name;
    e.eager_ulp_max = error_stats(v.eager.at(id), v.ref.at(id)).ulp_error.max;
    e.fused_ulp_max = error_stats(v.fused.at(id), v.ref.at(id)).ulp_error.max;
    e.eager_cond_max =
        finite_max(engine::conditioned_error(v.eager.at(id), v.ref.at(id), v.bound.at(id)));
    e.fused_cond_max =
        finite_max(engine::conditioned_error(v.fused.at(id), v.ref.at(id), v.bound.at(id)));
    out.push_back(e);
  }
  return out;
}
nlohmann::json op_errors_json(const Graph& g, const std::vector<OpErrors>& errors) {
  nlohmann::json ops = nlohmann::json::array();
  for (const OpErrors& e : errors) {
    const auto& n = *std::find_if(g.nodes().begin(), g.nodes().end(),
                                  [&](const engine::Node& x) { return x.name == e.op; });
    ops.push_back({{"op", e.op},
                   {"kind", engine::op_name(n.kind)},
                   {"eager_ulp_max", e.eager_ulp_max},
                   {"fused_ulp_max", e.fused_ulp_max},
                   {"eager_cond_max", e.eager_cond_max},
                   {"fused_cond_max", e.fused_cond_max},
                   {"fused_worse_beyond_margin",
                    kCounterexampleMargin.exceeded(e.fused_cond_max, e.eager_cond_max)}});
  }
  return ops;
}

// A counter-example no switch removes: its candidate mechanism at the first divergent op `d`,
// with two experiments on the fused side: d recomputed in fp64 from fused's own operands (rounded
// once to d's dtype) in fused's place, and eager's value of d in fused's place; each reruns the
// fused path after d (on the graph with d as an input) and says whether the counter-example goes.
nlohmann::json candidate_mechanism(const Graph& g, const engine::Inputs& in, const OpValues& v,
                                   NodeId d, const Tensor& ref, const Tensor& bound,
                                   double eager_cond_max, engine::Executor& fused) {
  const auto& n = g.node(d);
  engine::reference::Operands operands;
  for (NodeId o : n.inputs) operands.push_back(fused_side_value(g, in, v, o));
  const Tensor recomputed = engine::reference::evaluate(n, operands).to(n.dtype);
  const double allowed = kCounterexampleMargin.allowed(eager_cond_max);
  const bool is_output = std::find(g.outputs().begin(), g.outputs().end(), d) != g.outputs().end();
  auto fused_after = [&](const Tensor& value) {
    if (is_output) return value;
    const Graph rest = g.with_value_as_input(d);
    engine::Inputs with = inputs_of(rest, [&] {
      engine::Inputs all = in;
      all[n.name] = value;
      return all;
    }());
    return fused.run(rest, with).outputs[0];
  };
  nlohmann::json experiments = nlohmann::json::array();
  auto experiment = [&](const std::string& what, const Tensor& value) {
    const double cond = finite_max(engine::conditioned_error(fused_after(value), ref, bound));
    experiments.push_back({{"what", what}, {"fused_cond_max", cond}, {"removes", cond <= allowed}});
    return cond <= allowed;
  };
  const bool fp64_removes = experiment(
      fmt::format("{} computed in fp64 from the fused path's own operands, rounded once to {}, "
                  "in the fused path's place",
                  n.name, dtype_name(n.dtype)),
      recomputed);
  const bool eager_removes =
      !is_output && experiment(fmt::format("eager's value of {} in the fused path's place", n.name),
                               v.eager.at(d));
  std::string evidence;
  if (fp64_removes) {
    evidence = fmt::format(
        "the difference arises inside {0} ({1}): the fused path's operands of {0} are no worse "
        "than eager's beyond the margin, and {0} computed in fp64 from them and rounded once "
        "removes the counter-example (set max conditioned error {2:.4g} <= {3:.4g})",
        n.name, engine::op_name(n.kind), experiments[0]["fused_cond_max"].get<double>(), allowed);
  } else if (eager_removes) {
    evidence = fmt::format(
        "confined to {0}'s output: eager's value of {0} in the fused path's place removes the "
        "counter-example, an fp64 one does not",
        n.name);
  } else {
    evidence = fmt::format(
        "not confined to {0}: with {0} recomputed in fp64{1} the fused path is still worse "
        "beyond the margin, so the ops after it add to the difference",
        n.name, is_output ? "" : " or eager's value of it");
  }
  return {{"op", n.name},
          {"kind", engine::op_name(n.kind)},
          {"mechanism", fmt::format("{} at {}", mechanism_inside(n.kind), n.name)},
          {"confirmed", fp64_removes || eager_removes},
          {"evidence", evidence},
          {"experiments", experiments}};
}

// Where eager's error first exceeds the shared-error threshold, and a check of the bound there at
// eager's worst element: whether the value is subnormal (underflow), the function's own condition
// |x f'(x) / f(x)| (measured on the fp64 reference, for an element-wise op of one operand), and
// eager's error against the bound and against the bound plus the rounding of the function's
// argument at the op's dtype (u |z| times the condition: what an evaluation that forms its
// argument at that precision cannot avoid).
nlohmann::json shared_error_at(const Graph& g, const engine::Inputs& in, const OpValues& v,
                               const std::vector<OpErrors>& errors) {
  nlohmann::json out = {{"ops", op_errors_json(g, errors)}};
  const auto at = std::find_if(errors.begin(), errors.end(), [](const OpErrors& e) {
    return e.eager_cond_max > kSharedErrorAbove;
  });
  if (at == errors.end()) {
    out["arises_at"] = nullptr;
    return out;
  }
  const NodeId id = v.ops[std::size_t(at - errors.begin())];
  const auto& n = g.node(id);
  out["arises_at"] = n.name;
  const std::vector<double> cond =
      engine::conditioned_error(v.eager.at(id), v.ref.at(id), v.bound.at(id));
  std::size_t worst = 0;
  for (std::size_t i = 0; i < cond.size(); ++i) {
    if (!std::isnan(cond[i]) && (std::isnan(cond[worst]) || cond[i] > cond[worst])) worst = i;
  }
  const auto element = std::int64_t(worst);
  const double z = v.ref.at(id).value_at(element), bound = v.bound.at(id).value_at(element);
  const double eager_value = v.eager.at(id).value_at(element);
  const double u = engine::reference::unit_roundoff(n.dtype);
  nlohmann::json check = {{"op", n.name},
                          {"kind", engine::op_name(n.kind)},
                          {"element", element},
                          {"reference_value", z},
                          {"eager_value", eager_value},
                          {"fused_value", v.fused.at(id).value_at(element)},
                          {"bound", bound},
                          {"eager_cond_error", cond[worst]},
                          {"subnormal", z != 0 && std::abs(z) < smallest_normal(n.dtype)},
                          {"underflow_eta", engine::reference::underflow_of(n.dtype)}};
  const bool subnormal = z != 0 && std::abs(z) < smallest_normal(n.dtype);
  const double error = std::abs(eager_value - z);
  const bool unary_elementwise = engine::is_elementwise(n.kind) && n.inputs.size() == 1 &&
                                 g.node(n.inputs[0]).shape == n.shape;
  double argument_rounding = 0, condition = 0;
  if (unary_elementwise && z != 0) {
    const NodeId operand = n.inputs[0];
    const Tensor& x_all = g.node(operand).kind == engine::OpKind::Input
                              ? in.at(g.node(operand).name)
                          : v.ref.count(operand) ? v.ref.at(operand)
                                                 : Tensor();
    if (x_all.defined()) {
      const double x = x_all.value_at(element), h = std::ldexp(1.0, -30);
      engine::Node probe = n;
      probe.shape = {3};
      Tensor xs = Tensor::uninitialized(DType::f64, {3});
      auto px = xs.span<double>();
      px[0] = x * (1 - h);
      px[1] = x;
      px[2] = x * (1 + h);
      const Tensor fs = engine::reference::evaluate(probe, {xs});
      const auto pf = fs.span<double>();
      condition = std::abs(pf[2] - pf[0]) / (2 * h * std::abs(pf[1]));
      argument_rounding = u * condition * std::abs(z);
      check.update({{"operand", g.node(operand).name},
                    {"operand_value", x},
                    {"function_condition", condition},
                    {"argument_rounding", argument_rounding},
                    {"eager_error_over_bound_and_argument_rounding",
                     error / std::max(bound + argument_rounding, 1e-300)}});
    }
  }
  check["eager_error_over_bound"] = error / std::max(bound, 1e-300);
  const double tiniest = std::ldexp(engine::reference::underflow_of(n.dtype), 1);
  if (subnormal) {
    check["finding"] = fmt::format(
        "underflow: the value at {0} is subnormal in {1} ({2:.3g}), and eager's is {3} ({4:.3g} "
        "of the smallest subnormal off): {5}. The bound allows half the smallest subnormal per "
        "rounding (gradual underflow), which a kernel that evaluates the op as one correctly "
        "rounded value provides: the kernel's loss, not the bound's",
        n.name, dtype_name(n.dtype), z,
        eager_value == 0 ? "zero" : fmt::format("{:.3g}", eager_value), error / tiniest,
        eager_value == 0
            ? "flushed to zero, or an intermediate of its evaluation underflowed"
            : "an intermediate of its evaluation lost precision in the subnormal range");
  } else if (argument_rounding > 0) {
    check["finding"] =
        error > bound + argument_rounding
            ? fmt::format(
                  "the kernel: eager's error at {} is {:.3g} units of the bound and "
                  "{:.3g} of the bound plus its argument's rounding at {} (the "
                  "function's condition there: {:.3g}), so neither the bound nor the "
                  "function's condition accounts for it",
                  n.name, error / bound, error / (bound + argument_rounding), dtype_name(n.dtype),
                  condition)
            : fmt::format(
                  "the function's condition: eager's error at {} is {:.3g} units of the "
                  "bound, within the bound plus the rounding of its argument at {} "
                  "(condition {:.3g}: {:.3g} units), which an evaluation from primitives "
                  "at the op's dtype incurs",
                  n.name, error / bound, dtype_name(n.dtype), condition,
                  error / (bound + argument_rounding));
  } else {
    check["finding"] = fmt::format("the kernel: eager's error at {} is {:.3g} units of the bound",
                                   n.name, error / bound);
  }
  out["bound_check"] = check;
  return out;
}

engine::NodeId first_divergent(const OpValues& v, const std::vector<OpErrors>& errors) {
  for (std::size_t k = 0; k < errors.size(); ++k) {
    if (kCounterexampleMargin.exceeded(errors[k].fused_cond_max, errors[k].eager_cond_max))
      return v.ops[k];
  }
  return -1;
}

}  // namespace fusebench::suite
