// The tensor graph that the three executors run: inputs, scalars and ops, with shapes and dtypes
// inferred (and checked) as the graph is built.
//
// Type promotion: a binary op of two tensors of dtypes a and b computes in and returns
// promote(a, b): equal dtypes stay; f16 with bf16 gives f32; otherwise the wider of the two
// (f16, bf16 < f32 < f64). A Python-style scalar (add_scalar, mul_scalar) never promotes: x * 0.7
// keeps x's dtype. Only floating dtypes are accepted by compute ops; data movement takes any.
// Binary ops broadcast with numpy's rules (align trailing axes; extent 1 stretches).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fusebench/tensor.hpp"

namespace fusebench::engine {

enum class OpKind : std::uint8_t {
  Input,
  // element-wise
  Add,
  Sub,
  Mul,
  Div,
  AddScalar,
  MulScalar,
  Neg,
  Exp,
  Sqrt,
  Rsqrt,
  GeluErf,
  GeluTanh,
  Cast,
  // element-wise, for training (task E): natural log; gelu-tanh's backward dy * gelu'(x); the
  // causal mask (x where column <= row over the last two axes, else the fill value)
  Log,
  GeluTanhBackward,
  CausalMask,
  // reductions and row-wise composites
  Sum,
  Mean,
  Max,
  LayerNorm,
  Softmax,
  Matmul,
  // rows of a table picked by integer ids (an embedding), and its backward: rows added into a
  // zero table at the ids, in id order (task E)
  GatherRows,
  ScatterAddRows,
  // data movement
  Permute,
  Reshape,
  Slice,
  Concat,
  Expand,
};

std::string_view op_name(OpKind kind);
bool is_elementwise(OpKind kind);
bool is_data_movement(OpKind kind);
bool is_reduction(OpKind kind);  // Sum, Mean, Max
// The kind of kernel one op runs as on its own, named as the planner names fused kernels:
// pointwise, reduction, rowwise, matmul, indexed, or copy (data movement).
std::string_view op_kernel_kind(OpKind kind);

using NodeId = int;

struct Node {
  NodeId id = -1;
  OpKind kind = OpKind::Input;
  std::vector<NodeId> inputs;
  Shape shape;
  DType dtype = DType::f32;
  std::string name;  // unique; generated as "<op><id>" unless given
  // attributes (only those of the op are meaningful)
  double scalar = 0;             // AddScalar / MulScalar; CausalMask's fill value
  int axis = -1;                 // Sum / Mean / Max / Slice / Concat (normalised, >= 0)
  bool keepdim = false;          // reductions
  double eps = 1e-5;             // LayerNorm
  std::vector<int> permutation;  // Permute
  std::int64_t start = 0;        // Slice
};

class Graph {
 public:
  NodeId input(std::string name, Shape shape, DType dtype);

  NodeId add(NodeId a, NodeId b);
  NodeId sub(NodeId a, NodeId b);
  NodeId mul(NodeId a, NodeId b);
  NodeId div(NodeId a, NodeId b);
  NodeId add_scalar(NodeId x, double value);
  NodeId mul_scalar(NodeId x, double value);
  NodeId neg(NodeId x);
  NodeId exp(NodeId x);
  NodeId sqrt(NodeId x);
  NodeId rsqrt(NodeId x);
  NodeId gelu(NodeId x, bool tanh_approximation = false);
  NodeId cast(NodeId x, DType dtype);
  NodeId log(NodeId x);
  // dy * d/dx gelu_tanh(x): the backward of gelu(x, true), one kernel as frameworks have it.
  NodeId gelu_tanh_backward(NodeId dy, NodeId x);
  // x[..., i, j] for j <= i, else `fill` (-inf before a softmax; 0 for the mask's backward).
  // Needs rank >= 2; the last two axes are (query row, key column).
  NodeId causal_mask(NodeId x, double fill);

  NodeId sum(NodeId x, int axis, bool keepdim = false);
  NodeId mean(NodeId x, int axis, bool keepdim = false);
  NodeId max(NodeId x, int axis, bool keepdim = false);
  // Over the last axis; weight and bias have the last axis' extent.
  NodeId layernorm(NodeId x, NodeId weight, NodeId bias, double eps = 1e-5);
  NodeId softmax(NodeId x);  // over the last axis
  // [..., M, K] x [K, N] or [..., K, N] (batch dims equal, or the right operand unbatched).
  NodeId matmul(NodeId a, NodeId b);
  // out[i, :] = table[ids[i], :]: table [V, C] floating, ids [N] of i32 or i64 -> [N, C] in the
  // table's dtype (an embedding lookup). An id outside [0, V) is an InputError at run time.
  NodeId gather_rows(NodeId table, NodeId ids);
  // The backward of gather_rows: out = zeros [rows, C]; out[ids[i], :] += src[i, :] for i = 0, 1,
  // ..., N - 1 in that order (deterministic), accumulated in fp32 (fp64 for f64) and rounded once
  // to src's dtype. src [N, C] floating, ids [N] of i32 or i64.
  NodeId scatter_add_rows(NodeId src, NodeId ids, std::int64_t rows);

  NodeId permute(NodeId x, std::vector<int> order);
  NodeId transpose(NodeId x, int axis_a, int axis_b);
  NodeId reshape(NodeId x, Shape shape);
  NodeId slice(NodeId x, int axis, std::int64_t start, std::int64_t stop);
  NodeId concat(const std::vector<NodeId>& xs, int axis);
  std::vector<NodeId> split(NodeId x, int axis, const std::vector<std::int64_t>& sizes);
  NodeId expand(NodeId x, Shape shape);  // broadcast to shape (numpy rules)

  void mark_output(NodeId id);
  void set_name(NodeId id, std::string name);

  // The graph up to node `last` (nodes 0..last, which precede it in the order they were built),
  // with `last` as its only output: what a framework computes for that op's value (attribution
  // localises a difference by running prefixes where it cannot read intermediate values).
  Graph prefix(NodeId last) const;
  // A copy in which node `id` is a graph input of its name, shape and dtype (its operands, if
  // nothing else reads them, are left unread): the rest of the graph run on a value given for it.
  Graph with_value_as_input(NodeId id) const;

  const Node& node(NodeId id) const;
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<NodeId>& outputs() const { return outputs_; }
  std::vector<NodeId> inputs() const;
  // consumers[n] = nodes that use n (each once)
  std::vector<std::vector<NodeId>> consumers() const;
  std::string describe() const;  // one line per node
  // A 64-bit hash of everything that defines the graph (every node's op, operands, shape, dtype,
  // name and attributes, bit for bit, and the outputs): equal graphs give equal fingerprints.
  // Executors key their per-graph caches by it (and confirm a hit with same_structure); it walks
  // the nodes once, microseconds for a training step's thousand nodes.
  std::uint64_t fingerprint() const;
  // True when both graphs have the same nodes (op, operands, shape, dtype, name, attributes bit for
  // bit) and outputs: what an executor plans and emits from is then identical.
  bool same_structure(const Graph& other) const;

 private:
  NodeId push(Node node);
  NodeId binary(OpKind kind, NodeId a, NodeId b);
  NodeId unary(OpKind kind, NodeId x);
  NodeId view(OpKind kind, NodeId x, Shape shape);  // single-input data movement
  NodeId reduction(OpKind kind, NodeId x, int axis, bool keepdim);
  std::string operand_text(NodeId id) const;  // "name: f16[8, 16]" for messages
  std::vector<Node> nodes_;
  std::vector<NodeId> outputs_;
};

DType promote(DType a, DType b);
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view what);

}  // namespace fusebench::engine
