// A GPT-2-style decoder-only transformer written out as engine graphs, in the spirit of llm.c's
// CPU reference (train_gpt2.c): token and position embeddings, pre-norm blocks with causal
// multi-head attention and a tanh-GELU MLP, a final layernorm, the output projection tied to the
// token embedding, cross-entropy. The backward pass is spelled out by hand as graph nodes: the
// backward of layernorm, softmax and matmul are compositions of existing ops (matmuls with
// transposes, reductions, element-wise ops); gelu-tanh's backward, the causal mask and log are
// engine primitives.
//
// Embedding lookup is a matmul of one-hot token rows with the table, and its backward (the
// scatter-add) the transposed matmul: exact in the forward direction (one product with 1, the
// rest zeros), an fp32-accumulated sum in the backward one. With byte-level tokens (V = 256) it
// costs as much as the tied output projection.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fusebench/engine/graph.hpp"

namespace fusebench::training {

struct ModelShape {
  int vocab = 256;  // byte-level tokens
  int layers = 2;
  int heads = 4;
  int width = 64;    // n_embd
  int context = 64;  // sequence length T (the position table has exactly T rows)
};

// One parameter tensor: its place in the flat fp32 master vector.
struct ParameterSlot {
  std::string name;
  Shape shape;
  std::int64_t offset = 0, numel = 0;
  bool decay = false;  // AdamW weight decay (matrices and embeddings, not biases or norms)
  enum class Init { Normal, Zero, One } init = Init::Normal;
  double stddev = 0.02;
};

std::vector<ParameterSlot> parameter_layout(const ModelShape& shape);
std::int64_t parameter_count(const std::vector<ParameterSlot>& layout);

// ---- backward compositions (also tested on their own against finite differences)
// y = layernorm(x, w, b) over the last axis of a 2-D x; given dy, returns dx and sets dw, db.
engine::NodeId layernorm_backward(engine::Graph& g, engine::NodeId x, engine::NodeId w,
                                  engine::NodeId dy, double eps, engine::NodeId* dw,
                                  engine::NodeId* db);
// y = softmax(x) over the last axis; given y and dy, returns dx = y * (dy - sum(dy * y)).
engine::NodeId softmax_backward(engine::Graph& g, engine::NodeId y, engine::NodeId dy);
// Row-wise log-softmax over the last axis: x - max - log(sum(exp(x - max))).
engine::NodeId log_softmax(engine::Graph& g, engine::NodeId x);

// The graphs of one training step.
struct TrainGraph {
  engine::Graph graph;
  engine::NodeId loss = -1;               // f32 [1], mean cross-entropy (unscaled)
  std::vector<engine::NodeId> gradients;  // f32, one per parameter slot (times the seed's scale)
};
// Inputs: every parameter by its slot name (f32), "tokens" (i32 byte ids, [batch * context]: the
// embedding is gather_rows, its backward scatter_add_rows), "targets" (f32 one-hot rows,
// [batch * context, vocab]) and, with gradients, "loss_seed" (f32 [1]: dL/dloss, the loss scale).
// Activations are `activations` (f32, bf16 or f16); the loss and its gradient are fp32, as under
// autocast.
TrainGraph build_train_graph(const ModelShape& shape, int batch, DType activations,
                             bool with_gradients);

// AdamW over the flat vectors: inputs "param", "grad", "m", "v", "decay_mask" ([P] f32) and the
// per-step scalars "lr", "grad_scale" (clip coefficient / loss scale), "inv_bias1", "inv_bias2"
// ([1] f32); outputs param', m', v' in that order.
engine::Graph build_adamw_graph(std::int64_t parameters, double beta1, double beta2, double eps,
                                double weight_decay);

// Sum of squares of the flat gradient: input "grad" [P] f32, output [1] f32.
engine::Graph build_sum_of_squares_graph(std::int64_t parameters);

}  // namespace fusebench::training
