// The fusion planner: groups a graph's ops into kernels by a short, named, ordered list of
// passes. Data-movement ops never become kernels of their own when something consumes them: they
// are folded into the index arithmetic of their consumers (a graph output that is a view gets a
// copy kernel).
//
// Kernel kinds:
//   Pointwise  element-wise ops over one iteration space (the anchor's shape)
//   Reduction  sum / mean / max with an element-wise prologue and epilogue
//   Rowwise    layernorm / softmax with prologue and epilogue
//   Matmul     fp32 GEMM (extern) with an element-wise epilogue on its fp32 result
//   Indexed    gather_rows / scatter_add_rows alone: rows picked or added by integer ids (their
//              consumers read the stored result)
// Inside a kernel values stay in the compute type (fp32, or fp64 for fp64 tensors); only the
// stored nodes are rounded to their dtype.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "fusebench/engine/graph.hpp"

namespace fusebench::engine {

enum class KernelKind { Pointwise, Reduction, Rowwise, Matmul, Indexed };
std::string_view kernel_kind_name(KernelKind kind);

struct KernelPlan {
  std::string name;
  KernelKind kind = KernelKind::Pointwise;
  NodeId anchor = -1;            // defines the iteration space
  std::vector<NodeId> prologue;  // element-wise nodes computed before the anchor (per element)
  std::vector<NodeId> members;   // every node the kernel computes, prologue and anchor included
  // materialised nodes it reads (graph inputs, other kernels' stores)
  std::vector<NodeId> loads;
  std::vector<NodeId> stores;  // members it writes to memory
};

struct FusionPlan {
  std::vector<KernelPlan> kernels;  // in execution order
  std::vector<std::string> passes;  // names of the passes applied, in order (fusion_pass_names)
  std::string describe(const Graph& graph) const;
};

// split_after: names of ops whose value is stored and read back by its consumers, each consumer
// in a kernel other than the op's (a fusion switch: "do not fuse into the consumer"). An unknown
// name is an InputError.
FusionPlan plan_fusion(const Graph& graph, const std::set<std::string>& split_after = {});

// The planner's passes, in the order they run. A plan records each pass that applied to its
// graph (materialise_shared_concats only where a concat was materialised; the others always).
const std::vector<std::string>& fusion_pass_names();

// The non-view nodes that `id` reads through any chain of data-movement ops (inputs included).
std::vector<NodeId> view_sources(const Graph& graph, NodeId id);

}  // namespace fusebench::engine
