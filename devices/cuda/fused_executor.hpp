// Fused execution on a CUDA GPU: the fusion planner groups the graph, the CUDA emitter writes each
// kernel, NVRTC compiles it for the GPU's architecture through the kernel cache, the runtime loads
// the cubin and launches its steps; a Matmul's GEMM is cuBLAS. Values are copied to the GPU once
// and every materialised node back to the host at the end (the trace's run_ms is device time of
// the kernels alone, from CUDA events).
#pragma once

#include <cuda_runtime_api.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "fusebench/engine/executor.hpp"
#include "fusebench/engine/kernel_cache.hpp"

namespace fusebench::cuda {

class FusedExecutor final : public engine::Executor {
 public:
  explicit FusedExecutor(engine::EngineOptions options,
                         std::filesystem::path cache_dir = engine::KernelCache::default_dir());
  ~FusedExecutor() override;
  std::string name() const override { return "fused"; }
  // InputError with unavailable_reason() when no GPU is usable.
  engine::RunResult run(const engine::Graph& graph, const engine::Inputs& inputs,
                        const engine::RunOptions& run = {}) override;

 private:
  struct Loaded {
    engine::CachedArtifact cubin;
    cudaLibrary_t library = nullptr;
    std::map<std::string, cudaKernel_t> entries;
  };
  engine::EngineOptions options_;
  engine::KernelCache cache_;
  std::string arch_;
  void* cublas_ = nullptr;                // cublasHandle_t, created on first use
  std::map<std::string, Loaded> loaded_;  // by source
};

}  // namespace fusebench::cuda
