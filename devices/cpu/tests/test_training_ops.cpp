// The ops task E's trainer added to the engine (log, gelu-tanh backward, causal mask): the fp64
// reference against finite differences / closed forms in fp64, eager and fused against the
// reference, and eager equal to fused where the math is the same per element.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "engine_test_support.hpp"
#include "fusebench/engine/scalar_math.hpp"
#include "fusebench/testing/matchers.hpp"

namespace fusebench {
namespace {
using engine::Graph;
using engine::NodeId;
using testing::BitEqual;

double reference_scalar(const Graph& g, const engine::Inputs& in) { return engine::fp64_reference(g, in)[0].value_at(0); }

// d/dx gelu_tanh by central differences of the fp64 reference's forward, against the reference's
// gelu_tanh_backward (dy = 1) at points across the curve.
TEST(TrainingOps, GeluTanhBackwardMatchesFiniteDifferencesInFp64) {
  Graph forward;
  const NodeId x = forward.input("x", {1}, DType::f64);
  forward.mark_output(forward.gelu(x, true));
  Graph backward;
  const NodeId bx = backward.input("x", {1}, DType::f64);
  const NodeId dy = backward.input("dy", {1}, DType::f64);
  backward.mark_output(backward.gelu_tanh_backward(dy, bx));
  const double h = 1e-5;
  for (double point : {-6.0, -3.1, -1.0, -0.3, 0.0, 0.2, 0.9, 2.5, 7.0}) {
    auto at = [&](double v) { return reference_scalar(forward, {{"x", Tensor::from_values<double>({1}, std::vector<double>{v})}}); };
    const double fd = (at(point + h) - at(point - h)) / (2 * h);
    const double analytic = reference_scalar(backward, {{"x", Tensor::from_values<double>({1}, std::vector<double>{point})},
                                                        {"dy", Tensor::from_values<double>({1}, std::vector<double>{1.0})}});
    EXPECT_NEAR(analytic, fd, 1e-8 * std::max(1.0, std::abs(fd))) << "x = " << point;
  }
}

// log's reference is the C library's; its derivative (1/x) checked by finite differences.
TEST(TrainingOps, LogMatchesFiniteDifferencesInFp64) {
  Graph g;
  const NodeId x = g.input("x", {1}, DType::f64);
  g.mark_output(g.log(x));
  const double h = 1e-6;
  for (double point : {0.01, 0.5, 1.0, 3.0, 1e3}) {
    auto at = [&](double v) { return reference_scalar(g, {{"x", Tensor::from_values<double>({1}, std::vector<double>{v})}}); };
    EXPECT_NEAR((at(point + h * point) - at(point - h * point)) / (2 * h * point), 1.0 / point, 1e-7 / point);
    EXPECT_EQ(at(point), std::log(point));
  }
}

// causal_mask(x, fill) keeps j <= i; its backward is causal_mask(dy, 0): checked by finite
// differences of sum(mask(x) * r) over every element of x.
TEST(TrainingOps, CausalMaskBackwardMatchesFiniteDifferencesInFp64) {
  const Shape shape{2, 3, 5, 5};
  Graph forward;
  const NodeId x = forward.input("x", shape, DType::f64);
  const NodeId r = forward.input("r", shape, DType::f64);
  forward.mark_output(forward.sum(forward.reshape(forward.mul(forward.causal_mask(x, -7.5), r), {shape_numel(shape)}), 0));
  Graph backward;
  const NodeId dy = backward.input("r", shape, DType::f64);
  backward.mark_output(backward.causal_mask(dy, 0.0));
  Tensor xv = random_uniform(DType::f64, shape, -1, 1, 5);
  const Tensor rv = random_uniform(DType::f64, shape, -1, 1, 6);
  const Tensor grad = engine::fp64_reference(backward, {{"r", rv}})[0];
  const double h = 1e-6;
  for (std::int64_t i = 0; i < shape_numel(shape); ++i) {
    auto at = [&](double delta) {
      Tensor moved = xv.clone();
      moved.span<double>()[std::size_t(i)] += delta;
      return reference_scalar(forward, {{"x", moved}, {"r", rv}});
    };
    EXPECT_NEAR(grad.value_at(i), (at(h) - at(-h)) / (2 * h), 1e-8) << "element " << i;
  }
  // the masked entries hold the fill value
  const Tensor y = engine::fp64_reference([&] {
    Graph g;
    g.mark_output(g.causal_mask(g.input("x", shape, DType::f64), -7.5));
    return g;
  }(), {{"x", xv}})[0];
  EXPECT_EQ(y.value_at(1), -7.5);  // row 0, column 1
  EXPECT_EQ(y.value_at(5), xv.value_at(5));  // row 1, column 0
}

// Eager and fused against the reference for every new op and dtype; f32 eager == fused bit for
// bit (the same per-element math, one rounding each).
TEST(TrainingOps, EagerAndFusedAgreeWithTheReference) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    const Shape shape{2, 4, 33, 33};
    Graph g;
    const NodeId x = g.input("x", shape, dtype);
    const NodeId dy = g.input("dy", shape, dtype);
    const NodeId pos = g.input("pos", shape, dtype);
    g.mark_output(g.log(pos));
    g.mark_output(g.gelu_tanh_backward(dy, x));
    g.mark_output(g.causal_mask(x, -std::numeric_limits<double>::infinity()));
    g.mark_output(g.softmax(g.causal_mask(g.mul_scalar(x, 0.5), -std::numeric_limits<double>::infinity())));
    const engine::Inputs in = {{"x", random_uniform(dtype, shape, -4, 4, 11)},
                               {"dy", random_uniform(dtype, shape, -1, 1, 12)},
                               {"pos", random_uniform(dtype, shape, 0.01, 50, 13)}};
    const auto eager = testsupport::run_eager(g, in).outputs;
    const auto fused = testsupport::run_fused(g, in).outputs;
    const auto ref = engine::fp64_reference(g, in);
    const double tolerance = dtype == DType::f32 ? 2e-6 : dtype == DType::f16 ? 2e-3 : 1.6e-2;
    for (std::size_t o = 0; o < ref.size(); ++o) {
      for (const auto* result : {&eager, &fused}) {
        const Tensor& y = (*result)[o];
        for (std::int64_t i = 0; i < y.numel(); ++i) {
          const double want = ref[o].value_at(i), got = y.value_at(i);
          if (std::isinf(want)) {
            ASSERT_EQ(got, want) << "output " << o << " element " << i;
          } else {
            ASSERT_NEAR(got, want, tolerance * std::max(1.0, std::abs(want)) + 1e-6)
                << dtype_name(dtype) << " output " << o << " element " << i << (result == &eager ? " eager" : " fused");
          }
        }
      }
      if (dtype == DType::f32) {
        EXPECT_THAT(fused[o], BitEqual(eager[o])) << "output " << o;
      }
    }
  }
}

// The mask inside a matmul epilogue (where the trainer has it): the fused kernel's row/column
// come from the GEMM's indices.
TEST(TrainingOps, CausalMaskInAMatmulEpilogue) {
  const Shape qs{2, 3, 17, 8};
  Graph g;
  const NodeId q = g.input("q", qs, DType::f32);
  const NodeId k = g.input("k", qs, DType::f32);
  g.mark_output(g.causal_mask(g.mul_scalar(g.matmul(q, g.transpose(k, 2, 3)), 0.25), -1e9));
  const engine::Inputs in = {{"q", random_uniform(DType::f32, qs, -1, 1, 21)}, {"k", random_uniform(DType::f32, qs, -1, 1, 22)}};
  const Tensor eager = testsupport::run_eager(g, in).outputs[0];
  const Tensor fused = testsupport::run_fused(g, in).outputs[0];
  const Tensor ref = engine::fp64_reference(g, in)[0];
  for (std::int64_t i = 0; i < ref.numel(); ++i) {
    ASSERT_NEAR(fused.value_at(i), ref.value_at(i), 1e-5) << i;
    ASSERT_NEAR(eager.value_at(i), ref.value_at(i), 1e-5) << i;
  }
  EXPECT_EQ(fused.value_at(1), -1e9 == double(float(-1e9)) ? -1e9 : double(float(-1e9)));
}

}  // namespace
}  // namespace fusebench
