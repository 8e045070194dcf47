#include "fusebench/engine/planner.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <set>

namespace fusebench::engine {

std::string_view kernel_kind_name(KernelKind kind) {
  switch (kind) {
    case KernelKind::Pointwise:
      return "pointwise";
    case KernelKind::Reduction:
      return "reduction";
    case KernelKind::Rowwise:
      return "rowwise";
    case KernelKind::Matmul:
      return "matmul";
    case KernelKind::Indexed:
      return "indexed";
  }
  return "?";
}

std::vector<NodeId> view_sources(const Graph& graph, NodeId id) {
  std::vector<NodeId> out;
  std::function<void(NodeId)> visit = [&](NodeId n) {
    const Node& node = graph.node(n);
    if (is_data_movement(node.kind)) {
      for (NodeId in : node.inputs) visit(in);
    } else if (std::find(out.begin(), out.end(), n) == out.end()) {
      out.push_back(n);
    }
  };
  visit(id);
  return out;
}

namespace {
// Inputs of node n as the non-view nodes they read, each with whether it is read directly (same
// index) or through a view.
struct Source {
  NodeId node;
  bool direct;
};
template <class SourcesFn>
std::vector<Source> sources_of(const Graph& g, const Node& n, SourcesFn&& sources) {
  std::vector<Source> out;
  for (NodeId in : n.inputs) {
    const Node& input = g.node(in);
    const bool direct = !is_data_movement(input.kind) && input.shape == n.shape;
    for (NodeId s : sources(in)) out.push_back({s, direct});
  }
  return out;
}

// Ops that always begin a kernel of their own.
bool anchors_kernel(OpKind k) {
  return k == OpKind::Matmul || is_reduction(k) || k == OpKind::LayerNorm || k == OpKind::Softmax ||
         k == OpKind::GatherRows || k == OpKind::ScatterAddRows;
}

struct Group {
  KernelKind kind;
  NodeId anchor;
  std::vector<NodeId> prologue, members;
  bool alive = true;
};

class Planner {
 public:
  Planner(const Graph& g, const std::set<std::string>& split_after)
      : g_(g), group_of_(g.nodes().size(), -1) {
    for (const std::string& name : split_after) {
      const auto found = std::find_if(g.nodes().begin(), g.nodes().end(),
                                      [&](const Node& n) { return n.name == name; });
      if (found == g.nodes().end())
        throw_input_error("fusion switch split_after: the graph has no op named {}", name);
      split_.insert(found->id);
    }
  }

  // A pass: whether it applied (a plan records the passes that did).
  using Pass = bool (Planner::*)(FusionPlan&);
  struct NamedPass {
    std::string name;
    Pass run;
  };
  // The passes, in order; each name is its function's (stringised: written once).
  static const std::vector<NamedPass>& passes() {
#define FUSEBENCH_PASS(function) \
  NamedPass { #function, &Planner::function }
    static const std::vector<NamedPass> table = {
        FUSEBENCH_PASS(materialise_shared_concats),
        FUSEBENCH_PASS(group_compute_ops),
        FUSEBENCH_PASS(fold_prologues_into_reductions),
        FUSEBENCH_PASS(copy_kernels_for_view_outputs),
        FUSEBENCH_PASS(assign_loads_and_stores),
    };
#undef FUSEBENCH_PASS
    return table;
  }

  FusionPlan run() {
    FusionPlan plan;
    for (const NamedPass& pass : passes()) {
      if ((this->*pass.run)(plan)) plan.passes.push_back(pass.name);
    }
    return plan;
  }

 private:
  int new_group(KernelKind kind, NodeId anchor) {
    groups_.push_back({kind, anchor, {}, {anchor}, true});
    group_of_[std::size_t(anchor)] = int(groups_.size()) - 1;
    return int(groups_.size()) - 1;
  }

  bool in_prologue(const Group& group, NodeId id) const {
    return std::find(group.prologue.begin(), group.prologue.end(), id) != group.prologue.end();
  }

  // The non-view nodes `id` reads through views, stopping at materialised concats (those are
  // stored by their own kernel and read as they are).
  std::vector<NodeId> sources(NodeId id) const {
    std::vector<NodeId> out;
    std::function<void(NodeId)> visit = [&](NodeId n) {
      const Node& node = g_.node(n);
      if (is_data_movement(node.kind) && !materialised_.count(n)) {
        for (NodeId in : node.inputs) visit(in);
      } else if (std::find(out.begin(), out.end(), n) == out.end()) {
        out.push_back(n);
      }
    };
    visit(id);
    return out;
  }

  // ---- pass 0: a floating concat that two or more kernels read (attention's merged q, k, v
  // gradients: the weight-gradient and input-gradient matmuls and the bias-gradient sum) is
  // written once by a copy kernel; otherwise every reader redoes its per-element index arithmetic
  // (part choice, head permutation) in its own operand gather.
  bool materialise_shared_concats(FusionPlan&) {
    const auto consumers = g_.consumers();
    for (const Node& n : g_.nodes()) {
      if (n.kind != OpKind::Concat || !is_floating(n.dtype)) continue;
      int anchors = 0;
      for (NodeId c : all_consumers_through_views(consumers, n.id))
        anchors += anchors_kernel(g_.node(c).kind) ? 1 : 0;
      if (anchors >= 2) materialised_.insert(n.id);
    }
    return !materialised_.empty();
  }

  // ---- pass 1: greedy grouping in topological (id) order
  bool group_compute_ops(FusionPlan&) {
    for (const Node& n : g_.nodes()) {
      if (materialised_.count(n.id)) {
        new_group(KernelKind::Pointwise, n.id);  // a copy kernel
        continue;
      }
      if (n.kind == OpKind::Input || is_data_movement(n.kind)) continue;
      if (n.kind == OpKind::Matmul) {
        new_group(KernelKind::Matmul, n.id);
        continue;
      }
      if (n.kind == OpKind::GatherRows || n.kind == OpKind::ScatterAddRows) {
        new_group(KernelKind::Indexed, n.id);
        continue;
      }
      if (is_reduction(n.kind)) {
        new_group(KernelKind::Reduction, n.id);
        continue;
      }
      if (n.kind == OpKind::LayerNorm || n.kind == OpKind::Softmax) {
        new_group(KernelKind::Rowwise, n.id);
        continue;
      }
      // element-wise: join the latest group it reads from, when that group can take it
      const auto sources = sources_of(g_, n, [this](NodeId id) { return this->sources(id); });
      int latest = -1;
      for (const auto& s : sources) latest = std::max(latest, group_of_[std::size_t(s.node)]);
      bool reads_split = false;
      for (const auto& s : sources)
        reads_split |= split_.count(s.node) && group_of_[std::size_t(s.node)] == latest;
      if (latest >= 0 && !reads_split &&
          can_join(groups_[std::size_t(latest)], n, sources, latest)) {
        groups_[std::size_t(latest)].members.push_back(n.id);
        group_of_[std::size_t(n.id)] = latest;
      } else {
        new_group(KernelKind::Pointwise, n.id);
      }
    }
    return true;
  }

  bool can_join(const Group& group, const Node& n, const std::vector<Source>& sources,
                int index) const {
    if (n.shape != g_.node(group.anchor).shape || group.kind == KernelKind::Indexed) return false;
    if (group.kind == KernelKind::Pointwise) return true;  // members are recomputed at any index
    // Epilogues see the anchor's value at the current index only.
    for (const auto& s : sources) {
      if (group_of_[std::size_t(s.node)] == index && !s.direct && !in_prologue(group, s.node))
        return false;
    }
    return true;
  }

  // ---- pass 2: a point-wise group that feeds only a reduction / rowwise op becomes its prologue
  bool fold_prologues_into_reductions(FusionPlan&) {
    const auto consumers = g_.consumers();
    const auto& outputs = g_.outputs();
    for (std::size_t r = 0; r < groups_.size(); ++r) {
      Group& target = groups_[r];
      if (target.kind != KernelKind::Reduction && target.kind != KernelKind::Rowwise) continue;
      const auto sources = this->sources(g_.node(target.anchor).inputs[0]);
      if (sources.size() != 1 || group_of_[std::size_t(sources[0])] < 0) continue;
      const int p = group_of_[std::size_t(sources[0])];
      Group& producer = groups_[std::size_t(p)];
      if (producer.kind != KernelKind::Pointwise || !producer.alive) continue;
      bool private_to_target = std::none_of(producer.members.begin(), producer.members.end(),
                                            [&](NodeId m) { return split_.count(m) > 0; });
      for (NodeId m : producer.members) {
        if (std::find(outputs.begin(), outputs.end(), m) != outputs.end())
          private_to_target = false;
        for (NodeId c : all_consumers_through_views(consumers, m)) {
          if (c != target.anchor && group_of_[std::size_t(c)] != p) private_to_target = false;
        }
      }
      if (!private_to_target) continue;
      target.prologue = producer.members;
      target.members.insert(target.members.begin(), producer.members.begin(),
                            producer.members.end());
      for (NodeId m : producer.members) group_of_[std::size_t(m)] = int(r);
      producer.alive = false;
    }
    return true;
  }

  std::vector<NodeId> all_consumers_through_views(const std::vector<std::vector<NodeId>>& consumers,
                                                  NodeId id) const {
    std::vector<NodeId> out;
    std::function<void(NodeId)> visit = [&](NodeId n) {
      for (NodeId c : consumers[std::size_t(n)]) {
        if (is_data_movement(g_.node(c).kind)) {
          visit(c);
        } else {
          out.push_back(c);
        }
      }
    };
    visit(id);
    return out;
  }

  // ---- pass 3: a graph output that is a view needs a kernel that writes it
  bool copy_kernels_for_view_outputs(FusionPlan&) {
    for (NodeId out : g_.outputs()) {
      if (is_data_movement(g_.node(out).kind) && group_of_[std::size_t(out)] < 0)
        new_group(KernelKind::Pointwise, out);
    }
    return true;
  }

  // ---- pass 4: what each kernel reads and writes
  bool assign_loads_and_stores(FusionPlan& plan) {
    const auto& outputs = g_.outputs();
    std::vector<std::set<NodeId>> loads(groups_.size());
    std::set<NodeId> needed;  // read by some kernel other than its own
    for (std::size_t i = 0; i < groups_.size(); ++i) {
      if (!groups_[i].alive) continue;
      for (NodeId m : groups_[i].members) {
        const Node& n = g_.node(m);
        std::vector<NodeId> reads;
        if (is_data_movement(n.kind) && !materialised_.count(m)) {
          reads = sources(m);
        } else {
          for (NodeId in : n.inputs) {
            for (NodeId s : sources(in)) reads.push_back(s);
          }
        }
        for (NodeId s : reads) {
          if (group_of_[std::size_t(s)] != int(i)) {
            loads[i].insert(s);
            needed.insert(s);
          }
        }
      }
    }
    int index = 0;
    for (std::size_t i = 0; i < groups_.size(); ++i) {
      const Group& group = groups_[i];
      if (!group.alive) continue;
      KernelPlan k;
      k.kind = group.kind;
      k.anchor = group.anchor;
      k.prologue = group.prologue;
      k.members = group.members;
      k.loads.assign(loads[i].begin(), loads[i].end());
      for (NodeId m : group.members) {
        const bool output = std::find(outputs.begin(), outputs.end(), m) != outputs.end();
        if (output || needed.count(m)) k.stores.push_back(m);
      }
      k.name = fmt::format("k{}_{}_{}", index++, kernel_kind_name(k.kind), g_.node(k.anchor).name);
      plan.kernels.push_back(std::move(k));
    }
    return true;
  }

  const Graph& g_;
  std::vector<int> group_of_;
  std::vector<Group> groups_;
  std::set<NodeId> materialised_;  // concats written by a copy kernel of their own
  std::set<NodeId> split_;         // ops whose consumers read them from memory
};
}  // namespace

FusionPlan plan_fusion(const Graph& graph, const std::set<std::string>& split_after) {
  return Planner(graph, split_after).run();
}

const std::vector<std::string>& fusion_pass_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& pass : Planner::passes()) out.push_back(pass.name);
    return out;
  }();
  return names;
}

std::string FusionPlan::describe(const Graph& graph) const {
  std::string out = fmt::format("passes: {}\n", fmt::join(passes, " -> "));
  auto names = [&](const std::vector<NodeId>& ids) {
    std::vector<std::string> v;
    for (NodeId id : ids) v.push_back(graph.node(id).name);
    return fmt::format("{}", fmt::join(v, ", "));
  };
  for (const auto& k : kernels) {
    out += fmt::format("{}: members [{}] loads [{}] stores [{}]\n", k.name, names(k.members),
                       names(k.loads), names(k.stores));
  }
  return out;
}

}  // namespace fusebench::engine
