// The ops task E's trainer added to the engine (log, gelu-tanh backward, causal mask, embedding
// rows by gather_rows and their backward scatter_add_rows): the fp64
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

double reference_scalar(const Graph& g, const engine::Inputs& in) {
  return engine::fp64_reference(g, in)[0].value_at(0);
}

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
    auto at = [&](double v) {
      return reference_scalar(forward,
                              {{"x", Tensor::from_values<double>({1}, std::vector<double>{v})}});
    };
    const double fd = (at(point + h) - at(point - h)) / (2 * h);
    const double analytic = reference_scalar(
        backward, {{"x", Tensor::from_values<double>({1}, std::vector<double>{point})},
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
    auto at = [&](double v) {
      return reference_scalar(g, {{"x", Tensor::from_values<double>({1}, std::vector<double>{v})}});
    };
    EXPECT_NEAR((at(point + h * point) - at(point - h * point)) / (2 * h * point), 1.0 / point,
                1e-7 / point);
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
  forward.mark_output(forward.sum(
      forward.reshape(forward.mul(forward.causal_mask(x, -7.5), r), {shape_numel(shape)}), 0));
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
  const Tensor y = engine::fp64_reference(
      [&] {
        Graph g;
        g.mark_output(g.causal_mask(g.input("x", shape, DType::f64), -7.5));
        return g;
      }(),
      {{"x", xv}})[0];
  EXPECT_EQ(y.value_at(1), -7.5);            // row 0, column 1
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
    g.mark_output(
        g.softmax(g.causal_mask(g.mul_scalar(x, 0.5), -std::numeric_limits<double>::infinity())));
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
                << dtype_name(dtype) << " output " << o << " element " << i
                << (result == &eager ? " eager" : " fused");
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
  const engine::Inputs in = {{"q", random_uniform(DType::f32, qs, -1, 1, 21)},
                             {"k", random_uniform(DType::f32, qs, -1, 1, 22)}};
  const Tensor eager = testsupport::run_eager(g, in).outputs[0];
  const Tensor fused = testsupport::run_fused(g, in).outputs[0];
  const Tensor ref = engine::fp64_reference(g, in)[0];
  for (std::int64_t i = 0; i < ref.numel(); ++i) {
    ASSERT_NEAR(fused.value_at(i), ref.value_at(i), 1e-5) << i;
    ASSERT_NEAR(eager.value_at(i), ref.value_at(i), 1e-5) << i;
  }
  EXPECT_EQ(fused.value_at(1), -1e9 == double(float(-1e9)) ? -1e9 : double(float(-1e9)));
}

// ---- gather_rows / scatter_add_rows (the token embedding and its backward)
// Ids with repeats (row 3 five times, row 0 twice) and rows no id picks, as a batch of text has.
Tensor repeated_ids(DType dtype, std::int64_t n, std::int64_t rows) {
  std::vector<std::int64_t> ids;
  for (std::int64_t i = 0; i < n; ++i) ids.push_back(i % 4 == 1 ? 3 : (i * 7 + 2) % rows);
  ids[0] = 0;
  ids[std::size_t(n - 1)] = 0;
  if (dtype == DType::i64) return Tensor::from_values<std::int64_t>({n}, ids);
  std::vector<std::int32_t> narrow(ids.begin(), ids.end());
  return Tensor::from_values<std::int32_t>({n}, narrow);
}

// d/dtable of sum(gather_rows(table, ids) * r) is scatter_add_rows(r, ids, V): the reference's
// backward op against central differences of its forward, every table element (repeated ids
// accumulate; rows no id picks get zero).
TEST(TrainingOps, ScatterAddRowsIsGatherRowsBackwardByFiniteDifferencesInFp64) {
  const std::int64_t v = 9, c = 5, n = 13;
  Graph forward;
  const NodeId table = forward.input("table", {v, c}, DType::f64);
  const NodeId ids = forward.input("ids", {n}, DType::i32);
  const NodeId r = forward.input("r", {n, c}, DType::f64);
  forward.mark_output(
      forward.sum(forward.reshape(forward.mul(forward.gather_rows(table, ids), r), {n * c}), 0));
  Graph backward;
  backward.mark_output(backward.scatter_add_rows(backward.input("r", {n, c}, DType::f64),
                                                 backward.input("ids", {n}, DType::i32), v));
  const Tensor tv = random_uniform(DType::f64, {v, c}, -1, 1, 31);
  const Tensor rv = random_uniform(DType::f64, {n, c}, -1, 1, 32);
  const Tensor iv = repeated_ids(DType::i32, n, v);
  const Tensor grad = engine::fp64_reference(backward, {{"r", rv}, {"ids", iv}})[0];
  const double h = 1e-6;
  int untouched = 0;
  for (std::int64_t i = 0; i < v * c; ++i) {
    auto at = [&](double delta) {
      Tensor moved = tv.clone();
      moved.span<double>()[std::size_t(i)] += delta;
      return reference_scalar(forward, {{"table", moved}, {"ids", iv}, {"r", rv}});
    };
    EXPECT_NEAR(grad.value_at(i), (at(h) - at(-h)) / (2 * h), 1e-8) << "table element " << i;
    untouched += grad.value_at(i) == 0.0;
  }
  EXPECT_GT(untouched, 0);  // some rows are picked by no id: their gradient is exactly zero
  // the forward picks whole rows
  Graph pick;
  pick.mark_output(pick.gather_rows(pick.input("table", {v, c}, DType::f64),
                                    pick.input("ids", {n}, DType::i32)));
  const Tensor picked = engine::fp64_reference(pick, {{"table", tv}, {"ids", iv}})[0];
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t k = 0; k < c; ++k)
      EXPECT_EQ(picked.value_at(i * c + k), tv.value_at(iv.value_at(i) * c + k));
  }
}

// Eager and fused against the reference in every dtype, i32 and i64 ids, ids given through a
// reshape: gathers are exact; scatter sums within the dtype's rounding; f32 eager == fused bit for
// bit (the same additions in the same order).
TEST(TrainingOps, GatherAndScatterAddRowsEagerAndFusedAgreeWithTheReference) {
  const std::int64_t v = 37, c = 40, n = 96;
  // i64 ids once (each pair compiles its own kernels: a few seconds on a cold cache)
  const std::pair<DType, DType> cases[] = {{DType::f32, DType::i32},
                                           {DType::f32, DType::i64},
                                           {DType::bf16, DType::i32},
                                           {DType::f16, DType::i32},
                                           {DType::f64, DType::i32}};
  for (const auto& [dtype, id_dtype] : cases) {
    {
      Graph g;
      const NodeId table = g.input("table", {v, c}, dtype);
      const NodeId ids2d = g.input("ids", {2, n / 2}, id_dtype);
      const NodeId src = g.input("src", {n, c}, dtype);
      const NodeId ids = g.reshape(ids2d, {n});
      g.mark_output(g.gather_rows(table, ids));
      g.mark_output(g.add(g.gather_rows(table, ids), src));  // a consumer in another kernel
      g.mark_output(g.scatter_add_rows(src, ids, v));
      const engine::Inputs in = {{"table", random_uniform(dtype, {v, c}, -2, 2, 41)},
                                 {"ids", repeated_ids(id_dtype, n, v).reshape({2, n / 2})},
                                 {"src", random_uniform(dtype, {n, c}, -1, 1, 42)}};
      const auto eager = testsupport::run_eager(g, in).outputs;
      const auto fused = testsupport::run_fused(g, in).outputs;
      const auto ref = engine::fp64_reference(g, in);
      const double tolerance = dtype == DType::f64   ? 1e-14
                               : dtype == DType::f32 ? 2e-6
                               : dtype == DType::f16 ? 2e-3
                                                     : 1.6e-2;
      for (const auto* result : {&eager, &fused}) {
        const char* who = result == &eager ? "eager" : "fused";
        for (std::int64_t i = 0; i < n * c; ++i) {
          ASSERT_EQ((*result)[0].value_at(i), ref[0].value_at(i))
              << dtype_name(dtype) << " gather " << who << " " << i;
        }
        for (std::size_t o = 1; o < 3; ++o) {
          for (std::int64_t i = 0; i < (*result)[o].numel(); ++i) {
            const double want = ref[o].value_at(i);
            ASSERT_NEAR((*result)[o].value_at(i), want, tolerance * std::max(1.0, std::abs(want)))
                << dtype_name(dtype) << "/" << dtype_name(id_dtype) << " output " << o << " " << who
                << " element " << i;
          }
        }
      }
      if (dtype == DType::f32 || dtype == DType::f64) {
        for (std::size_t o = 0; o < 3; ++o)
          EXPECT_THAT(fused[o], BitEqual(eager[o])) << dtype_name(dtype) << " output " << o;
      }
    }
  }
}

// An id outside the table: every executor refuses it, naming the op, the position and the id; a
// float ids operand or a table of the wrong rank is refused when the graph is built.
TEST(TrainingOps, GatherAndScatterAddRowsRefuseBadIds) {
  Graph g;
  const NodeId table = g.input("table", {8, 4}, DType::f32);
  const NodeId ids = g.input("ids", {3}, DType::i32);
  g.mark_output(g.gather_rows(table, ids));
  g.mark_output(g.scatter_add_rows(g.input("src", {3, 4}, DType::f32), ids, 8));
  const engine::Inputs in = {
      {"table", random_uniform(DType::f32, {8, 4}, -1, 1, 51)},
      {"ids", Tensor::from_values<std::int32_t>({3}, std::vector<std::int32_t>{1, 8, 2})},
      {"src", random_uniform(DType::f32, {3, 4}, -1, 1, 52)}};
  auto expect_refused = [](auto&& run, const char* who) {
    try {
      run();
      ADD_FAILURE() << who << ": no error for id 8 of a table of 8 rows";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("id 8 at position 1 is outside [0, 8)"), std::string::npos)
          << who << ": " << what;
    }
  };
  expect_refused([&] { engine::fp64_reference(g, in); }, "reference");
  expect_refused([&] { testsupport::run_eager(g, in); }, "eager");
  expect_refused([&] { testsupport::run_fused(g, in); }, "fused");
  Graph bad;
  const NodeId t = bad.input("table", {8, 4}, DType::f32);
  const NodeId flat = bad.input("flat", {8}, DType::f32);
  const NodeId float_ids = bad.input("float_ids", {3}, DType::f32);
  const NodeId three_ids = bad.input("ids", {3}, DType::i32);
  const NodeId four_rows = bad.input("src", {4, 4}, DType::f32);
  EXPECT_THROW(bad.gather_rows(t, float_ids), InputError);     // ids must be integers
  EXPECT_THROW(bad.gather_rows(flat, three_ids), InputError);  // the table must be [V, C]
  EXPECT_THROW(bad.scatter_add_rows(four_rows, three_ids, 8), InputError);  // one id per row of src
  // rows > 0
  EXPECT_THROW(bad.scatter_add_rows(bad.slice(four_rows, 0, 0, 3), three_ids, 0), InputError);
}

}  // namespace
}  // namespace fusebench
