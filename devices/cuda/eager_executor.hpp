// Eager execution on a CUDA GPU: one nvcc-compiled kernel per op (eager_kernels.cu), matmul by
// cuBLAS, every op's output materialised in GPU memory in its dtype, as a framework's eager mode
// does; every value is copied back to the host at the end. run_ms of each op is device time from
// CUDA events.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fusebench/engine/executor.hpp"

namespace fusebench::cuda {

class EagerExecutor final : public engine::Executor {
 public:
  explicit EagerExecutor(engine::EngineOptions options);
  ~EagerExecutor() override;
  std::string name() const override { return "eager"; }
  // InputError with unavailable_reason() when no GPU is usable.
  engine::RunResult run(const engine::Graph& graph, const engine::Inputs& inputs,
                        const engine::RunOptions& run = {}) override;

 private:
  engine::EngineOptions options_;
  void* cublas_ = nullptr;  // cublasHandle_t, created on first use
};

// Vendor fusion: y = gelu_tanh(a b + bias) in one cuBLASLt call (CUBLASLT_EPILOGUE_GELU_BIAS), fp32
// row-major a [m, k], b [k, n], bias [n]. InputError without a GPU or on mismatched shapes.
Tensor cublaslt_matmul_bias_gelu(const Tensor& a, const Tensor& b, const Tensor& bias);

}  // namespace fusebench::cuda
