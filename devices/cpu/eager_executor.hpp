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

}  // namespace fusebench::cpu
