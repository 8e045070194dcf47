// The fp64 reference executor's ops, one function per op kind (llm.c's layout: a test can call
// any of them alone), and its running error bound: for every element of an op's result, the
// rounding error that computing the graph op by op at the graph's dtypes cannot avoid, to first
// order (docs/conditioned-error.md gives the formulas, what u is, and the limits).
//
// Every op function takes the node (its attributes and output shape) and its operands, floating
// operands in any dtype (widened to fp64 exactly; integer ids keep their dtype), and returns the
// result in fp64 with no rounding to the node's dtype: the truth against which eager and fused are
// measured.
#pragma once

#include <cstdint>
#include <vector>

#include "fusebench/engine/executor.hpp"
#include "fusebench/engine/graph.hpp"
#include "fusebench/tensor.hpp"

namespace fusebench::engine::reference {

using Operands = std::vector<Tensor>;

Tensor add(const Node& n, const Operands& in);
Tensor sub(const Node& n, const Operands& in);
Tensor mul(const Node& n, const Operands& in);
Tensor div(const Node& n, const Operands& in);
Tensor add_scalar(const Node& n, const Operands& in);
Tensor mul_scalar(const Node& n, const Operands& in);
Tensor neg(const Node& n, const Operands& in);
Tensor exp(const Node& n, const Operands& in);
Tensor sqrt(const Node& n, const Operands& in);
Tensor rsqrt(const Node& n, const Operands& in);
Tensor gelu_erf(const Node& n, const Operands& in);
Tensor gelu_tanh(const Node& n, const Operands& in);
Tensor cast(const Node& n, const Operands& in);
Tensor log(const Node& n, const Operands& in);
Tensor gelu_tanh_backward(const Node& n, const Operands& in);
Tensor causal_mask(const Node& n, const Operands& in);
Tensor sum(const Node& n, const Operands& in);
Tensor mean(const Node& n, const Operands& in);
Tensor max(const Node& n, const Operands& in);
Tensor layernorm(const Node& n, const Operands& in);
Tensor softmax(const Node& n, const Operands& in);
Tensor matmul(const Node& n, const Operands& in);
Tensor gather_rows(const Node& n, const Operands& in);
Tensor scatter_add_rows(const Node& n, const Operands& in);
Tensor permute(const Node& n, const Operands& in);
Tensor reshape(const Node& n, const Operands& in);
Tensor slice(const Node& n, const Operands& in);
Tensor expand(const Node& n, const Operands& in);
Tensor concat(const Node& n, const Operands& in);

// The function of n's op kind applied to `in` (InputError for an Input node).
Tensor evaluate(const Node& n, const Operands& in);

// The unit roundoff of a floating dtype: half the spacing of its values just above 1, the largest
// relative error of rounding to nearest (f16 2^-11, bf16 2^-8, f32 2^-24, f64 2^-53).
double unit_roundoff(DType dtype);
// The accumulation of a sum of `terms` terms whose result has the floating dtype `dtype`, relative
// to the sum of the terms' magnitudes: c(K) u_acc = min(gamma_K, 3 sqrt(K) u_acc), u_acc the
// precision the kernels accumulate in (f32 for f16, bf16 and f32; f64 for f64); 0 for one term.
inline constexpr double kAccumulationLambda = 3.0;
double accumulation_of(std::int64_t terms, DType dtype);
// Half the smallest subnormal of a floating dtype (fp64: its smallest subnormal), the absolute
// error a rounding into the subnormal range can add however small u |z| is (f16 2^-25, bf16
// 2^-134, f32 2^-150): the rounding model is fl(z) = z (1 + d) + e, |d| <= u, |e| <= this.
double underflow_of(DType dtype);

// What an op's error bound is computed from: its operands' fp64 values, the bounds they carry
// (fp64, the operands' shapes; zeros for graph inputs and integer ids), and their graph dtypes.
struct BoundOperands {
  Operands values, bounds;
  std::vector<DType> dtypes;
};

// The running error bound of n's result `value` (fp64, n's shape): the operands' bounds carried
// through the op's first-order sensitivities, plus the op's own roundings at the unit roundoff of
// n's dtype. Exact data movement carries the bounds unchanged.
Tensor error_bound(const Node& n, const BoundOperands& in, const Tensor& value);

}  // namespace fusebench::engine::reference

namespace fusebench::engine {

// The fp64 reference of a graph's outputs with each element's running error bound beside it.
struct BoundedReference {
  std::vector<Tensor> outputs;  // f64, in graph.outputs() order (the same values as fp64_reference)
  std::vector<Tensor> bounds;   // f64, the outputs' shapes
};
BoundedReference fp64_reference_with_bound(const Graph& graph, const Inputs& inputs);

// The error of y against ref in units of the running error bound, per element (f64, flat):
// |y - ref| / max(bound, underflow_of(y's dtype)) (a rounding to y's dtype can always be off by
// that much, however small the bound; an exact result gives 0). NaN where y or ref is not finite. y: any floating dtype of ref's shape.
std::vector<double> conditioned_error(const Tensor& y, const Tensor& ref, const Tensor& bound);

// The bound in units of the output's own rounding, bound / (u |ref|) with u the unit roundoff of
// y's dtype: 1 where the result is as accurate as rounding it allows, large where the computation
// amplifies its roundings (cancellation). Infinite at ref = 0 with a nonzero bound.
double condition_of(double bound, double ref, DType y_dtype);

}  // namespace fusebench::engine
