// Eager execution on the CPU: one precompiled kernel per op; every op loads its operands, computes
// in fp32 (fp64 for fp64 tensors) and stores its output in its dtype, as a framework's eager mode
// does. Kernels are vectorised and split work into fixed-size tasks over the thread pool.
#pragma once

#include "fusebench/engine/executor.hpp"
#include "thread_pool.hpp"

namespace fusebench::cpu {

class EagerExecutor final : public engine::Executor {
 public:
  explicit EagerExecutor(engine::EngineOptions options);
  std::string name() const override { return "eager"; }
  engine::RunResult run(const engine::Graph& graph, const engine::Inputs& inputs,
                        const engine::RunOptions& run = {}) override;
  // One op on materialised operands (used by the fused executor's tests and by run()).
  Tensor evaluate(const engine::Node& node, const std::vector<Tensor>& operands,
                  engine::KernelTrace* trace);

 private:
  engine::EngineOptions options_;
  ThreadPool pool_;
};

// Rows of C per task of gemm_f32. The fused kernels' GEMM calls (cpp_renderer.cpp) are made in
// these tiles: a GEMM of at most this many rows is one task, run on the calling thread, so it may
// be called from a pool task.
inline constexpr std::int64_t kGemmRowTile = 128;

// Matrix product of row-major fp32 matrices, C = A B, split into fixed tiles of kGemmRowTile rows
// across the pool, or of columns when A is one row tile (the result does not depend on the thread count, nor
// on the tiling). Shared with the JIT kernels; called from inside a pool task it is one call.
void gemm_f32(ThreadPool& pool, std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
              const float* b, float* c);

}  // namespace fusebench::cpu
