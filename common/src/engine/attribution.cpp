#include "fusebench/engine/attribution.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <numeric>
#include <sstream>
#include <utility>

#include "fusebench/engine/planner.hpp"
#include "fusebench/error.hpp"

namespace fusebench::engine {

namespace {
bool computes(const Node& n) {
  return n.kind != OpKind::Input && !is_data_movement(n.kind) && is_floating(n.dtype);
}
bool narrower_than_compute(DType d) { return d == DType::f16 || d == DType::bf16; }
bool reduces(OpKind k) { return is_reduction(k) || k == OpKind::LayerNorm || k == OpKind::Softmax; }

ApproxMode parse_approx(const std::string& value, const std::string& token) {
  if (value == "ieee") return ApproxMode::Ieee;
  if (value == "newton-bittrick") return ApproxMode::NewtonBitTrick;
  if (value == "newton-hw") return ApproxMode::NewtonHardware;
  throw_input_error("fusion switch {}: unknown approximation {} (ieee, newton-bittrick, newton-hw)",
                    token, value);
}
std::int64_t parse_integer(const std::string& value, const std::string& token) {
  std::int64_t out = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), out);
  if (error != std::errc() || end != value.data() + value.size())
    throw_input_error("fusion switch {}: {} is not an integer", token, value);
  return out;
}
// An integer knob's value within its domain (EngineOptions::validate's), checked when the switch
// is read, so that a list is refused before anything runs rather than failing in each case.
std::int64_t parse_integer_in(const std::string& value, const std::string& token, std::int64_t low,
                              std::int64_t high) {
  const std::int64_t out = parse_integer(value, token);
  if (out < low || out > high) {
    if (high == std::numeric_limits<std::int64_t>::max())
      throw_input_error("fusion switch {}: {} is out of range (at least {})", token, value, low);
    throw_input_error("fusion switch {}: {} is out of range ({}..{})", token, value, low, high);
  }
  return out;
}
bool parse_on_off(const std::string& value, const std::string& token) {
  if (value == "on") return true;
  if (value == "off") return false;
  throw_input_error("fusion switch {}: expected on or off, got {}", token, value);
}
}  // namespace

nlohmann::json Switch::to_json() const {
  return {{"op", op.empty() ? "(whole graph)" : op},
          {"kind", op_kind},
          {"dtype", dtype_name(dtype)},
          {"switch", token()},
          {"mechanism", mechanism}};
}

std::vector<Switch> candidate_switches(const Graph& graph, const EngineOptions& eager,
                                       const EngineOptions& fused) {
  std::set<std::string> split_after;
  for (const auto& [op, knobs] : fused.per_op) {
    if (knobs.split_after) split_after.insert(op);
  }
  const FusionPlan plan = plan_fusion(graph, split_after);
  std::set<NodeId> stored;
  for (const KernelPlan& k : plan.kernels) stored.insert(k.stores.begin(), k.stores.end());
  std::vector<Switch> out;
  for (const Node& n : graph.nodes()) {
    if (!computes(n)) continue;
    const EngineOptions here = fused.at_op(n.name);
    auto add = [&](std::string mechanism, OpKnobs knobs) {
      out.push_back({n.name, std::string(op_name(n.kind)), n.dtype, std::move(mechanism), knobs});
    };
    if (!stored.count(n.id) && narrower_than_compute(n.dtype) && !here.emulate_per_op_rounding) {
      OpKnobs k;
      k.emulate_per_op_rounding = true;
      add("per-op rounding", k);
    }
    if ((n.kind == OpKind::AddScalar || n.kind == OpKind::MulScalar) &&
        here.scalar_lowering != eager.scalar_lowering) {
      OpKnobs k;
      k.scalar_lowering = eager.scalar_lowering;
      add("scalar lowering", k);
    }
    if (reduces(n.kind) && n.kind != OpKind::Max && here.reduce_tile != eager.reduce_tile) {
      OpKnobs k;
      k.reduce_tile = eager.reduce_tile;
      add("reduction order", k);
    }
    if (reduces(n.kind) && n.kind != OpKind::Max && here.accumulator != eager.accumulator) {
      OpKnobs k;
      k.accumulator = eager.accumulator;
      add("accumulator dtype", k);
    }
    if ((n.kind == OpKind::Rsqrt || n.kind == OpKind::LayerNorm) &&
        (here.rsqrt != eager.rsqrt || (eager.rsqrt != ApproxMode::Ieee &&
                                       here.rsqrt_newton_iters != eager.rsqrt_newton_iters))) {
      OpKnobs k;
      k.rsqrt = eager.rsqrt;
      k.rsqrt_newton_iters = eager.rsqrt_newton_iters;
      add("rsqrt approximation", k);
    }
    if ((n.kind == OpKind::Div || n.kind == OpKind::Softmax) &&
        (here.div != eager.div ||
         (eager.div != ApproxMode::Ieee && here.div_newton_iters != eager.div_newton_iters))) {
      OpKnobs k;
      k.div = eager.div;
      k.div_newton_iters = eager.div_newton_iters;
      add("division approximation", k);
    }
  }
  // Eager kernels are compiled without contraction: a contracted fused kernel is a candidate as a
  // whole, named by its anchor.
  for (const KernelPlan& k : plan.kernels) {
    const Node& anchor = graph.node(k.anchor);
    bool contracted = false;
    for (NodeId m : k.members) contracted |= fused.at_op(graph.node(m).name).fma_contraction;
    if (!contracted || !computes(anchor)) continue;
    OpKnobs knobs;
    knobs.fma_contraction = false;
    out.push_back(
        {anchor.name, std::string(op_name(anchor.kind)), anchor.dtype, "FMA contraction", knobs});
  }
  return out;
}

std::vector<Switch> graph_wide_switches(const Graph& graph, const EngineOptions& eager,
                                        const EngineOptions& fused) {
  bool narrow = false, scalars = false, reductions = false, rsqrts = false, divisions = false;
  DType dtype = DType::f32;
  for (const Node& n : graph.nodes()) {
    if (!computes(n)) continue;
    if (narrower_than_compute(n.dtype)) {
      narrow = true;
      dtype = n.dtype;
    }
    scalars |= n.kind == OpKind::AddScalar || n.kind == OpKind::MulScalar;
    reductions |= reduces(n.kind) && n.kind != OpKind::Max;
    rsqrts |= n.kind == OpKind::Rsqrt || n.kind == OpKind::LayerNorm;
    divisions |= n.kind == OpKind::Div || n.kind == OpKind::Softmax;
  }
  std::vector<Switch> out;
  auto add = [&](std::string mechanism, OpKnobs knobs) {
    out.push_back({"", "graph", dtype, std::move(mechanism), knobs});
  };
  OpKnobs k;
  if (narrow && !fused.emulate_per_op_rounding) {
    k.emulate_per_op_rounding = true;
    add("per-op rounding", std::exchange(k, {}));
  }
  if (fused.fma_contraction) {
    k.fma_contraction = false;
    add("FMA contraction", std::exchange(k, {}));
  }
  if (scalars && fused.scalar_lowering != eager.scalar_lowering) {
    k.scalar_lowering = eager.scalar_lowering;
    add("scalar lowering", std::exchange(k, {}));
  }
  if (reductions && fused.reduce_tile != eager.reduce_tile) {
    k.reduce_tile = eager.reduce_tile;
    add("reduction order", std::exchange(k, {}));
  }
  if (reductions && fused.accumulator != eager.accumulator) {
    k.accumulator = eager.accumulator;
    add("accumulator dtype", std::exchange(k, {}));
  }
  if (rsqrts &&
      (fused.rsqrt != eager.rsqrt || fused.rsqrt_newton_iters != eager.rsqrt_newton_iters)) {
    k.rsqrt = eager.rsqrt;
    k.rsqrt_newton_iters = eager.rsqrt_newton_iters;
    add("rsqrt approximation", std::exchange(k, {}));
  }
  if (divisions && (fused.div != eager.div || fused.div_newton_iters != eager.div_newton_iters)) {
    k.div = eager.div;
    k.div_newton_iters = eager.div_newton_iters;
    add("division approximation", std::exchange(k, {}));
  }
  return out;
}

std::vector<Switch> realisable_switches(const Graph& graph, const EngineOptions& eager,
                                        const EngineOptions& fused,
                                        const UnsupportedKnobs& unsupported,
                                        std::vector<std::string>& refused,
                                        const std::vector<CompilerSwitch>& compiler,
                                        SwitchScope scope, CandidateOps ops) {
  std::vector<Switch> out;
  const bool per_op = scope == SwitchScope::PerOp;
  std::set<std::string> covered;  // mechanisms with a realisable per-op candidate
  // refused, by mechanism: the ops, and the first refusal's reason (they read alike)
  std::vector<std::pair<std::string, std::pair<std::vector<std::string>, std::string>>> refusals;
  auto offer = [&](const Switch& s) {
    const std::string why = unsupported(with_switches(fused, {s}));
    if (why.empty()) {
      out.push_back(s);
      if (!s.op.empty()) covered.insert(s.mechanism);
      return true;
    }
    auto known = std::find_if(refusals.begin(), refusals.end(),
                              [&](const auto& r) { return r.first == s.mechanism; });
    if (known == refusals.end()) known = refusals.insert(refusals.end(), {s.mechanism, {{}, why}});
    known->second.first.push_back(s.op.empty() ? "the whole graph" : s.op);
    return false;
  };
  const bool every_op = ops == CandidateOps::EveryOp;
  if (per_op && every_op) {
    // a framework's fusion is its own: per-op rounding at every 16-bit op
    for (const Node& n : graph.nodes()) {
      if (!computes(n) || !narrower_than_compute(n.dtype)) continue;
      OpKnobs k;
      k.emulate_per_op_rounding = true;
      offer({n.name, std::string(op_name(n.kind)), n.dtype, "per-op rounding", k});
    }
  } else if (per_op) {
    for (const Switch& s : candidate_switches(graph, eager, fused)) offer(s);
  }
  // A device without per-op knobs (a framework) may still split the graph after an op: in any
  // dtype, since its kernels then differ in more than rounding (a reduction's algorithm, a rewrite
  // such as matmul + add into addmm).
  const auto first_op = std::find_if(graph.nodes().begin(), graph.nodes().end(), computes);
  bool per_op_refused = false;
  if (per_op && first_op != graph.nodes().end()) {
    EngineOptions probe = fused;
    probe.per_op[first_op->name].emulate_per_op_rounding = true;
    per_op_refused = !unsupported(probe).empty();
  }
  if (per_op && (per_op_refused || every_op)) {
    const auto consumers = graph.consumers();
    const auto& outputs = graph.outputs();
    for (const Node& n : graph.nodes()) {
      if (!computes(n) || consumers[std::size_t(n.id)].empty() ||
          std::find(outputs.begin(), outputs.end(), n.id) != outputs.end())
        continue;
      OpKnobs k;
      k.split_after = true;
      offer({n.name, std::string(op_name(n.kind)), n.dtype, "kernel split", k});
    }
  }
  for (const Switch& s : graph_wide_switches(graph, eager, fused)) {
    if (!covered.count(s.mechanism) || every_op) offer(s);
  }
  for (const CompilerSwitch& c : compiler) {
    const bool applies =
        c.applies_to.empty() ||
        std::any_of(graph.nodes().begin(), graph.nodes().end(), [&](const Node& n) {
          return std::find(c.applies_to.begin(), c.applies_to.end(), n.kind) != c.applies_to.end();
        });
    if (!applies || fused.compiler_options.count(c.name)) continue;
    OpKnobs k;
    k.compiler_options[c.name] = c.value;
    const DType dtype = graph.outputs().empty() ? DType::f32 : graph.node(graph.outputs()[0]).dtype;
    offer({"", "graph", dtype, c.mechanism, k});
  }
  for (const auto& [mechanism, refusal] : refusals) {
    refused.push_back(
        fmt::format("{} at {}: {}", mechanism, fmt::join(refusal.first, ", "), refusal.second));
  }
  return out;
}

EngineOptions with_switches(const EngineOptions& fused, const std::vector<Switch>& switches) {
  EngineOptions o = fused;
  for (const Switch& s : switches) {
    if (s.op.empty()) {
      o = o.with_knobs(s.knobs);
    } else {
      o.per_op[s.op].merge(s.knobs);
    }
  }
  return o;
}

nlohmann::json Attribution::to_json() const {
  nlohmann::json switches_json = nlohmann::json::array();
  for (const Switch& s : switches) switches_json.push_back(s.to_json());
  nlohmann::json alternatives_json = nlohmann::json::array();
  for (const Switch& s : alternatives) alternatives_json.push_back(s.to_json());
  nlohmann::json out = {{"status", status == Status::Explained ? "explained" : "unexplained"},
                        {"reason", reason},
                        {"switches", switches_json},
                        {"localised", localised},
                        {"also_removed_by", alternatives_json},
                        {"also_removed_by_complete", alternatives_complete},
                        {"reruns", reruns}};
  if (status == Status::Unexplained) {
    // what was tried: each set as "TOKEN at OP" texts, and whether it removed the difference
    nlohmann::json sets = nlohmann::json::array();
    for (const auto& [set, removed] : tried) {
      nlohmann::json names = nlohmann::json::array();
      for (const Switch& s : set)
        names.push_back(
            fmt::format("{} at {}", s.token(), s.op.empty() ? "the whole graph" : s.op));
      sets.push_back({{"switches", names}, {"removed", removed}});
    }
    out["tried"] = sets;
  }
  return out;
}

Attribution attribute(const std::vector<Switch>& candidates, const RemovesDifference& removes) {
  Attribution a;
  std::map<std::vector<std::size_t>, bool> tried;
  auto test = [&](std::vector<std::size_t> subset) {
    std::sort(subset.begin(), subset.end());
    const auto known = tried.find(subset);
    if (known != tried.end()) return known->second;
    std::vector<Switch> switches;
    for (std::size_t i : subset) switches.push_back(candidates[i]);
    ++a.reruns;
    const bool removed = removes(switches);
    a.tried.emplace_back(std::move(switches), removed);
    return tried[subset] = removed;
  };
  if (candidates.empty()) {
    a.reason =
        "no candidate switch: no op of this graph has a switch that sets it to eager's behaviour";
    return a;
  }
  // A set that removes the difference within `pool`: all of it together, else each alone
  // (switches can interact: one that helps alone may be undone by another). Empty: none does.
  auto working_set = [&](const std::vector<std::size_t>& pool) -> std::vector<std::size_t> {
    if (pool.empty()) return {};
    if (test(pool)) return pool;
    for (std::size_t i : pool) {  // memoised: one candidate is tried once
      if (test({i})) return {i};
    }
    return {};
  };
  std::vector<std::size_t> all(candidates.size()), at_ops;
  std::iota(all.begin(), all.end(), std::size_t(0));
  for (std::size_t i : all) {
    if (!candidates[i].op.empty()) at_ops.push_back(i);
  }
  // per-op switches first: a graph-wide one explains only where none of them does
  std::vector<std::size_t> current =
      at_ops.size() < all.size() ? working_set(at_ops) : std::vector<std::size_t>{};
  if (current.empty()) current = working_set(all);
  if (current.empty()) {
    std::vector<std::string> names;
    for (const Switch& s : candidates)
      names.push_back(fmt::format("{} at {}", s.token(), s.op.empty() ? "the whole graph" : s.op));
    a.reason = fmt::format(
        "no switch removes it: neither all {} candidates ({}) applied together nor any one alone",
        candidates.size(), fmt::join(names, ", "));
    return a;
  }
  // ddmin: try each of n chunks, then each complement; refine the granularity when neither works.
  std::size_t granularity = 2;
  while (current.size() >= 2) {
    const std::size_t chunk = (current.size() + granularity - 1) / granularity;
    std::vector<std::vector<std::size_t>> chunks;
    for (std::size_t start = 0; start < current.size(); start += chunk) {
      chunks.emplace_back(
          current.begin() + std::ptrdiff_t(start),
          current.begin() + std::ptrdiff_t(std::min(current.size(), start + chunk)));
    }
    bool reduced = false;
    for (const auto& c : chunks) {
      if (test(c)) {
        current = c;
        granularity = 2;
        reduced = true;
        break;
      }
    }
    if (!reduced && chunks.size() > 2) {
      for (std::size_t skip = 0; skip < chunks.size() && !reduced; ++skip) {
        std::vector<std::size_t> complement;
        for (std::size_t j = 0; j < chunks.size(); ++j) {
          if (j != skip) complement.insert(complement.end(), chunks[j].begin(), chunks[j].end());
        }
        if (test(complement)) {
          current = complement;
          granularity = std::max<std::size_t>(granularity - 1, 2);
          reduced = true;
        }
      }
    }
    if (reduced) continue;
    if (granularity >= current.size()) break;
    granularity = std::min(current.size(), granularity * 2);
  }
  a.status = Attribution::Status::Explained;
  for (std::size_t i : current) a.switches.push_back(candidates[i]);
  a.localised = std::all_of(a.switches.begin(), a.switches.end(),
                            [](const Switch& s) { return !s.op.empty(); });
  // The search returns one minimal set; another mechanism may remove the difference on its own
  // (a graph break after a matmul, or Inductor's pattern rewrites off). Each is tested singly.
  try {
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      if (std::find(current.begin(), current.end(), i) == current.end() && test({i}))
        a.alternatives.push_back(candidates[i]);
    }
  } catch (const SearchBudgetSpent&) {
    a.alternatives_complete = false;  // the minimal set stands; the singles not tried are unknown
  }
  return a;
}

OpKnobs parse_switch(const std::string& text) {
  OpKnobs k;
  std::istringstream words(text);
  std::string token;
  int count = 0;
  while (words >> token) {
    ++count;
    const auto eq = token.find('=');
    const std::string key = token.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : token.substr(eq + 1);
    if (key == "split" && eq == std::string::npos) {
      k.split_after = true;
    } else if (key == "rounding") {
      k.emulate_per_op_rounding = parse_on_off(value, token);
    } else if (key == "fma") {
      k.fma_contraction = parse_on_off(value, token);
    } else if (key == "scalar") {
      if (value != "immediate" && value != "broadcast")
        throw_input_error("fusion switch {}: expected scalar=immediate or scalar=broadcast", token);
      k.scalar_lowering =
          value == "immediate" ? ScalarLowering::ImmediateF32 : ScalarLowering::BroadcastTensor;
    } else if (key == "tile") {
      k.reduce_tile = parse_integer_in(value, token, 1, std::numeric_limits<std::int64_t>::max());
    } else if (key == "acc") {
      if (value != "f32" && value != "storage")
        throw_input_error("fusion switch {}: expected acc=f32 or acc=storage", token);
      k.accumulator = value == "f32" ? AccumulatorDtype::F32 : AccumulatorDtype::Storage;
    } else if (key == "rsqrt") {
      k.rsqrt = parse_approx(value, token);
    } else if (key == "div") {
      k.div = parse_approx(value, token);
    } else if (key.rfind("compiler:", 0) == 0 && key.size() > 9 && !value.empty()) {
      k.compiler_options[key.substr(9)] = value;
    } else if (key == "rsqrt_iters") {
      k.rsqrt_newton_iters = int(parse_integer_in(value, token, 0, 3));
    } else if (key == "div_iters") {
      k.div_newton_iters = int(parse_integer_in(value, token, 0, 3));
    } else {
      throw_input_error(
          "unknown fusion switch {} (rounding=on|off, split, fma=on|off, "
          "scalar=immediate|broadcast, "
          "tile=N, acc=f32|storage, rsqrt=..., rsqrt_iters=N, div=..., div_iters=N, "
          "compiler:NAME=VALUE)",
          token);
    }
  }
  if (count == 0) throw_input_error("empty fusion switch");
  return k;
}

std::string mechanism_of(const OpKnobs& k) {
  std::vector<std::string> m;
  if (k.emulate_per_op_rounding) m.push_back("per-op rounding");
  if (k.split_after) m.push_back("kernel split");
  if (k.scalar_lowering) m.push_back("scalar lowering");
  if (k.fma_contraction) m.push_back("FMA contraction");
  if (k.accumulator) m.push_back("accumulator dtype");
  if (k.reduce_tile) m.push_back("reduction order");
  if (k.rsqrt || k.rsqrt_newton_iters) m.push_back("rsqrt approximation");
  if (k.div || k.div_newton_iters) m.push_back("division approximation");
  for (const auto& option : k.compiler_options) m.push_back("compiler option " + option.first);
  return fmt::format("{}", fmt::join(m, " + "));
}

}  // namespace fusebench::engine
