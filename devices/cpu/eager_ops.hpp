// The CPU eager kernels, one function per op kind (llm.c's layout: a test can call any of them
// alone on materialised operands). Each loads its operands, computes in fp32 (fp64 for fp64
// tensors) and stores its result in the node's dtype, as a framework's eager mode does;
// EagerExecutor::run calls them in graph order through `evaluate`.
#pragma once

#include <vector>

#include "fusebench/engine/executor.hpp"
#include "thread_pool.hpp"

namespace fusebench::cpu::eager {

// What every kernel runs with: the pool its tasks go to, the engine's knobs, and the trace that
// records its lowering decisions (nullptr: none recorded).
struct Context {
  ThreadPool& pool;
  const engine::EngineOptions& options;
  engine::KernelTrace* trace = nullptr;
};

using Operands = std::vector<Tensor>;

Tensor add(const Context& c, const engine::Node& n, const Operands& in);
Tensor sub(const Context& c, const engine::Node& n, const Operands& in);
Tensor mul(const Context& c, const engine::Node& n, const Operands& in);
Tensor div(const Context& c, const engine::Node& n, const Operands& in);
Tensor add_scalar(const Context& c, const engine::Node& n, const Operands& in);
Tensor mul_scalar(const Context& c, const engine::Node& n, const Operands& in);
Tensor neg(const Context& c, const engine::Node& n, const Operands& in);
Tensor exp(const Context& c, const engine::Node& n, const Operands& in);
Tensor sqrt(const Context& c, const engine::Node& n, const Operands& in);
Tensor rsqrt(const Context& c, const engine::Node& n, const Operands& in);
Tensor gelu_erf(const Context& c, const engine::Node& n, const Operands& in);
Tensor gelu_tanh(const Context& c, const engine::Node& n, const Operands& in);
Tensor cast(const Context& c, const engine::Node& n, const Operands& in);
Tensor log(const Context& c, const engine::Node& n, const Operands& in);
Tensor gelu_tanh_backward(const Context& c, const engine::Node& n, const Operands& in);
Tensor causal_mask(const Context& c, const engine::Node& n, const Operands& in);
Tensor sum(const Context& c, const engine::Node& n, const Operands& in);
Tensor mean(const Context& c, const engine::Node& n, const Operands& in);
Tensor max(const Context& c, const engine::Node& n, const Operands& in);
Tensor layernorm(const Context& c, const engine::Node& n, const Operands& in);
Tensor softmax(const Context& c, const engine::Node& n, const Operands& in);
Tensor matmul(const Context& c, const engine::Node& n, const Operands& in);
Tensor gather_rows(const Context& c, const engine::Node& n, const Operands& in);
Tensor scatter_add_rows(const Context& c, const engine::Node& n, const Operands& in);
Tensor permute(const Context& c, const engine::Node& n, const Operands& in);
Tensor reshape(const Context& c, const engine::Node& n, const Operands& in);
Tensor slice(const Context& c, const engine::Node& n, const Operands& in);
Tensor expand(const Context& c, const engine::Node& n, const Operands& in);
Tensor concat(const Context& c, const engine::Node& n, const Operands& in);

// The kernel of n's op kind applied to `in` (InputError for an Input node).
Tensor evaluate(const Context& c, const engine::Node& n, const Operands& in);

}  // namespace fusebench::cpu::eager
