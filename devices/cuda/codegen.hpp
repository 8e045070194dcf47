// A graph's fused CUDA kernels, emitted and compiled for a named architecture, and their SASS as
// evidence: everything here runs without a GPU.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cuda_renderer.hpp"
#include "fusebench/engine/graph.hpp"
#include "fusebench/engine/kernel_cache.hpp"
#include "fusebench/engine/options.hpp"
#include "fusebench/engine/planner.hpp"

namespace fusebench::cuda {

// The architectures whose SASS the suites record (C1, C3) when no GPU names its own.
inline const std::vector<std::string> kEvidenceArchitectures = {"sm_80", "sm_90"};

struct CompiledKernel {
  engine::KernelPlan plan;
  CudaKernel kernel;
  engine::CachedArtifact cubin;  // cubin.sha256 is the kernel hash
  std::string arch;
};

// Plans, emits and compiles every kernel of the graph for `arch`.
std::vector<CompiledKernel> compile_graph(const engine::Graph& graph,
                                          const engine::EngineOptions& options,
                                          const std::string& arch, engine::KernelCache& cache);

// One compiled kernel as evidence: {"kernel", "lowering", "cubin_sha256", "cache_key", "compile_ms",
// "cache_hit", "sass": {"histogram", "instructions", "tool"}}.
nlohmann::json kernel_evidence(const CompiledKernel& kernel);

// Per architecture, per kernel: its lowering notes, cubin SHA-256, NVRTC compile time (0 on a
// cache hit), cache key and SASS histogram. Shape:
//   {"nvrtc": "NVRTC 13.0", "knobs": {...}, "architectures": {"sm_80": [{"kernel", "lowering",
//    "cubin_sha256", "cache_key", "compile_ms", "cache_hit", "sass": {"histogram", "instructions",
//    "tool"}}, ...], ...}}
nlohmann::json sass_evidence(const engine::Graph& graph, const engine::EngineOptions& options,
                             const std::vector<std::string>& archs = kEvidenceArchitectures,
                             engine::KernelCache cache = engine::KernelCache());

}  // namespace fusebench::cuda
