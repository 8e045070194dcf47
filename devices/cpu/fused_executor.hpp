// Fused execution on the CPU: the fusion planner groups the graph into kernels, the emitter writes
// each as C++, the JIT compiles it through the kernel cache and runs it on the thread pool.
#pragma once

#include <map>
#include <string>

#include "fusebench/engine/executor.hpp"
#include "fusebench/engine/kernel_cache.hpp"
#include "fusebench/engine/planner.hpp"
#include "jit_compiler.hpp"
#include "thread_pool.hpp"

namespace fusebench::cpu {

class FusedExecutor final : public engine::Executor {
 public:
  explicit FusedExecutor(engine::EngineOptions options, std::filesystem::path cache_dir = engine::KernelCache::default_dir(),
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
  // Kernels this executor has built and loaded, by source: a repeated run skips the on-disk
  // lookup (key hash and artifact SHA-256 check), as a framework keeps its compiled graphs.
  struct LoadedKernel {
    engine::CachedArtifact artifact;
    KernelFunction function;
    std::string source_sha256;
  };
  std::map<std::string, LoadedKernel> loaded_;
};

}  // namespace fusebench::cpu
