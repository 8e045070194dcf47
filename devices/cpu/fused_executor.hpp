// Fused execution on the CPU: the fusion planner groups the graph into kernels, the emitter writes
// each as C++, the JIT compiles it through the kernel cache and runs it on the thread pool.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "cpp_renderer.hpp"
#include "fusebench/engine/executor.hpp"
#include "fusebench/engine/kernel_cache.hpp"
#include "fusebench/engine/planner.hpp"
#include "jit_compiler.hpp"
#include "thread_pool.hpp"

namespace fusebench::cpu {

class FusedExecutor final : public engine::Executor {
 public:
  explicit FusedExecutor(engine::EngineOptions options,
                         std::filesystem::path cache_dir = engine::KernelCache::default_dir(),
                         std::string compiler = JitCompiler::default_compiler());
  std::string name() const override { return "fused"; }
  engine::RunResult run(const engine::Graph& graph, const engine::Inputs& inputs,
                        const engine::RunOptions& run = {}) override;
  const engine::KernelCache& cache() const { return cache_; }

 private:
  engine::EngineOptions options_;
  ThreadPool pool_;
  engine::KernelCache cache_;
  JitCompiler jit_;
  // for the kernels whose members' switches set FP contraction the other way (OpKnobs)
  JitCompiler jit_other_contraction_;
  // Kernels this executor has built and loaded, by source: a repeated run skips the on-disk
  // lookup (key hash and artifact SHA-256 check), as a framework keeps its compiled graphs.
  struct LoadedKernel {
    engine::CachedArtifact artifact;
    KernelFunction function;
    std::string source_sha256;
  };
  std::map<std::string, LoadedKernel> loaded_;
  // What a graph's run needs besides its inputs, prepared on its first run: the fusion plan's
  // kernels, emitted, loaded, and their trace text. A repeated run of the same graph (a training
  // step) skips planning and emission, otherwise a visible share of a task-E trainer step (its
  // fused_ms_executor_overhead counter).
  struct PreparedKernel {
    engine::EmittedKernel emitted;  // loads, stores, constants (the source is kept in loaded_)
    const LoadedKernel* loaded = nullptr;  // into loaded_ (std::map: stable addresses)
    double compile_ms = 0;                 // of the first run; 0 afterwards
    bool built_cache_hit = false;          // the first run found the artifact on disk
    engine::KernelTrace trace;             // name, ops, lowering, artifact fields
    // gather_rows / scatter_add_rows: its ids are range-checked first
    engine::NodeId indexed_op = -1;
    engine::NodeId ids_source = -1;  // the materialised tensor the ids are (a reshape of)
    std::int64_t id_bound = 0;       // ids must lie in [0, id_bound)
  };
  struct PreparedGraph {
    engine::Graph graph;  // a copy, to confirm that a fingerprint match is this graph
    std::vector<PreparedKernel> kernels;
    bool reused = false;
  };
  PreparedGraph& prepare(const engine::Graph& graph);
  // by fingerprint
  std::unordered_map<std::uint64_t, std::vector<std::unique_ptr<PreparedGraph>>> prepared_;
};

}  // namespace fusebench::cpu
