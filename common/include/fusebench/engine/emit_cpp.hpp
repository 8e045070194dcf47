// The C++ code emitter for fused kernels: one source per KernelPlan, specialised on shapes and
// knobs, table-driven (op -> formatter). Per-element math comes from scalar_math.hpp, whose text
// (with float_formats.hpp) is pasted at the top of every source, so eager and fused kernels share
// it. The CUDA emitter, when it exists, differs only in the loop skeleton and the type names.
//
// Kernel ABI (C linkage): void fusebench_kernel(const FbKernelArgs*). Buffers are passed in the
// order: loads, stores, constants.
#pragma once

#include <string>
#include <vector>

#include "fusebench/engine/graph.hpp"
#include "fusebench/engine/options.hpp"
#include "fusebench/engine/planner.hpp"

namespace fusebench::engine {

struct EmittedKernel {
  std::string source;
  std::vector<NodeId> loads, stores;  // buffers 0.. in this order, then the constants
  std::vector<Tensor> constants;      // scalars lowered as broadcast tensors
  std::vector<std::string> lowering;  // decisions worth a line in the trace
};

EmittedKernel emit_cpp_kernel(const Graph& graph, const KernelPlan& kernel, const EngineOptions& options);

// The text pasted at the top of every kernel: float_formats.hpp, scalar_math.hpp and the ABI.
const std::string& kernel_prelude();

}  // namespace fusebench::engine
