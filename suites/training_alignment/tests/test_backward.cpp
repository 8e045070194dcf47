// The trainer's backward compositions against central finite differences, all in fp64 on the
// reference executor: layernorm, softmax, log-softmax / cross-entropy, and the whole model (every
// parameter tensor: embeddings, attention with its causal mask, gelu MLP, norms, tied head).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "fusebench/engine/executor.hpp"
#include "fusebench/rng.hpp"
#include "gpt2_graph.hpp"

namespace fusebench::training {
namespace {
using engine::Graph;
using engine::NodeId;

NodeId total(Graph& g, NodeId x) {
  return g.sum(g.reshape(x, {shape_numel(g.node(x).shape)}), 0, true);
}

double scalar(const Graph& g, const engine::Inputs& in) {
  return engine::fp64_reference(g, in)[0].value_at(0);
}

// Central difference of the scalar graph output with respect to element i of input `name`.
double central_difference(const Graph& g, engine::Inputs in, const std::string& name,
                          std::int64_t i, double h) {
  const Tensor original = in.at(name);
  auto at = [&](double delta) {
    Tensor moved = original.clone();
    if (moved.dtype() == DType::f32) {
      moved.span<float>()[std::size_t(i)] =
          float(double(moved.span<float>()[std::size_t(i)]) + delta);
    } else {
      moved.span<double>()[std::size_t(i)] += delta;
    }
    in[name] = moved;
    return scalar(g, in);
  };
  return (at(h) - at(-h)) / (2 * h);
}

TEST(Backward, LayerNormMatchesFiniteDifferences) {
  const Shape xs{5, 7};
  Graph f;
  const NodeId x = f.input("x", xs, DType::f64), w = f.input("w", {7}, DType::f64),
               b = f.input("b", {7}, DType::f64);
  const NodeId r = f.input("r", xs, DType::f64);
  f.mark_output(total(f, f.mul(f.layernorm(x, w, b), r)));
  Graph g;
  const NodeId gx = g.input("x", xs, DType::f64), gw = g.input("w", {7}, DType::f64);
  g.input("b", {7}, DType::f64);
  const NodeId dy = g.input("r", xs, DType::f64);
  NodeId dw = -1, db = -1;
  g.mark_output(layernorm_backward(g, gx, gw, dy, 1e-5, &dw, &db));
  g.mark_output(dw);
  g.mark_output(db);
  const engine::Inputs in = {{"x", random_normal(DType::f64, xs, 0.3, 2, 1)},
                             {"w", random_uniform(DType::f64, {7}, 0.5, 1.5, 2)},
                             {"b", random_uniform(DType::f64, {7}, -1, 1, 3)},
                             {"r", random_normal(DType::f64, xs, 0, 1, 4)}};
  const auto grads = engine::fp64_reference(g, in);
  const char* names[] = {"x", "w", "b"};
  for (int k = 0; k < 3; ++k) {
    for (std::int64_t i = 0; i < grads[std::size_t(k)].numel(); ++i) {
      EXPECT_NEAR(grads[std::size_t(k)].value_at(i), central_difference(f, in, names[k], i, 1e-6),
                  1e-7)
          << names[k] << "[" << i << "]";
    }
  }
}

TEST(Backward, SoftmaxMatchesFiniteDifferences) {
  const Shape xs{3, 9};
  Graph f;
  const NodeId x = f.input("x", xs, DType::f64), r = f.input("r", xs, DType::f64);
  f.mark_output(total(f, f.mul(f.softmax(x), r)));
  Graph g;
  const NodeId gx = g.input("x", xs, DType::f64), dy = g.input("r", xs, DType::f64);
  g.mark_output(softmax_backward(g, g.softmax(gx), dy));
  const engine::Inputs in = {{"x", random_normal(DType::f64, xs, 0, 3, 5)},
                             {"r", random_normal(DType::f64, xs, 0, 1, 6)}};
  const Tensor dx = engine::fp64_reference(g, in)[0];
  for (std::int64_t i = 0; i < dx.numel(); ++i)
    EXPECT_NEAR(dx.value_at(i), central_difference(f, in, "x", i, 1e-6), 1e-8) << i;
}

// Cross-entropy through log_softmax: d/dx of -sum(onehot * log_softmax(x)) is softmax(x) - onehot.
TEST(Backward, CrossEntropyMatchesFiniteDifferences) {
  const Shape xs{4, 11};
  Graph f;
  const NodeId x = f.input("x", xs, DType::f64), t = f.input("t", xs, DType::f64);
  f.mark_output(f.neg(total(f, f.mul(t, log_softmax(f, x)))));
  Graph g;
  const NodeId gx = g.input("x", xs, DType::f64), gt = g.input("t", xs, DType::f64);
  g.mark_output(g.sub(g.softmax(gx), gt));
  Tensor onehot(DType::f64, xs);
  for (int row = 0; row < 4; ++row)
    onehot.span<double>()[std::size_t(row * 11 + (3 * row + 2) % 11)] = 1;
  const engine::Inputs in = {{"x", random_normal(DType::f64, xs, 0, 4, 7)}, {"t", onehot}};
  const Tensor dx = engine::fp64_reference(g, in)[0];
  for (std::int64_t i = 0; i < dx.numel(); ++i)
    EXPECT_NEAR(dx.value_at(i), central_difference(f, in, "x", i, 1e-6), 1e-8) << i;
}

// The whole training graph's gradients (fp64 reference: casts are identities) against finite
// differences of its loss, at several elements of every parameter tensor. Parameters are
// multiples of 2^-16 and the step is 2^-10, so every perturbed value is exact in the f32 inputs.
TEST(Backward, WholeModelMatchesFiniteDifferences) {
  const ModelShape shape{256, 2, 2, 16, 8};
  const int batch = 2;
  const TrainGraph train = build_train_graph(shape, batch, DType::f32, true);
  const TrainGraph forward = build_train_graph(shape, batch, DType::f32, false);
  const auto layout = parameter_layout(shape);
  engine::Inputs in;
  for (std::size_t s = 0; s < layout.size(); ++s) {
    const auto& slot = layout[s];
    const Tensor init = random_normal(
        DType::f64, slot.shape, slot.init == ParameterSlot::Init::One ? 1.0 : 0.0, 0.3, 40, s);
    std::vector<float> values;
    for (std::int64_t i = 0; i < slot.numel; ++i)
      values.push_back(float(std::round(init.value_at(i) * 65536.0) / 65536.0));
    in[slot.name] = Tensor::from_values<float>(slot.shape, values);
  }
  const std::int64_t rows = std::int64_t(batch) * shape.context;
  Tensor tokens(DType::i32, {rows}), targets(DType::f32, {rows, 256});
  const CounterRng rng(9);
  for (std::int64_t r = 0; r < rows; ++r) {
    // ids from a small range, so that tokens repeat and scatter_add_rows accumulates
    tokens.span<std::int32_t>()[std::size_t(r)] = std::int32_t(rng.u32(2 * std::uint64_t(r)) % 8);
    targets.span<float>()[std::size_t(r * 256 + rng.u32(2 * std::uint64_t(r) + 1) % 256)] = 1;
  }
  in["tokens"] = tokens;
  in["targets"] = targets;
  engine::Inputs with_seed = in;
  with_seed["loss_seed"] = Tensor::from_values<float>({1}, std::vector<float>{1.0f});
  const auto outputs = engine::fp64_reference(train.graph, with_seed);
  const double h = 1.0 / 1024;
  for (std::size_t s = 0; s < layout.size(); ++s) {
    const auto& slot = layout[s];
    const Tensor& grad = outputs[s + 1];
    for (std::int64_t k = 0; k < 4; ++k) {
      const std::int64_t i = (k * 7919 + 13) % slot.numel;
      const double fd = central_difference(forward.graph, in, slot.name, i, h);
      EXPECT_NEAR(grad.value_at(i), fd, 2e-6 + 1e-3 * std::abs(fd)) << slot.name << "[" << i << "]";
    }
  }
}

}  // namespace
}  // namespace fusebench::training
