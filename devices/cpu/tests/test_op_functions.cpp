// The op functions called alone (the fp64 reference's and the CPU eager kernels', one per op
// kind), and the reference's running error bound (docs/conditioned-error.md) against the
// measured eager error on small graphs of every op kind.
#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <limits>

#include "eager_ops.hpp"
#include "engine_test_support.hpp"
#include "fusebench/compare.hpp"
#include "fusebench/engine/reference_ops.hpp"
#include "fusebench/error_stats.hpp"
#include "fusebench/testing/matchers.hpp"

namespace fusebench {
namespace {
using engine::Graph;
using engine::Node;
using engine::NodeId;
using engine::OpKind;
using testing::BitEqual;

Tensor values_of(Shape shape, std::vector<double> v) {
  return Tensor::from_values<double>(std::move(shape), v);
}

// ---- op functions alone
TEST(ReferenceOps, EachOpFunctionComputesItsOpAlone) {
  Graph g;
  const NodeId a = g.input("a", {2, 3}, DType::f32), b = g.input("b", {3}, DType::f32);
  const Node& sum = g.node(g.add(a, b));
  const Tensor ta = values_of({2, 3}, {1, 2, 3, 4, 5, 6}), tb = values_of({3}, {10, 20, 30});
  const Tensor added = engine::reference::add(sum, {ta, tb});
  EXPECT_EQ(added.shape(), (Shape{2, 3}));
  EXPECT_EQ(added.value_at(0), 11);
  EXPECT_EQ(added.value_at(5), 36);

  const Node& soft = g.node(g.softmax(a));
  const Tensor s = engine::reference::softmax(soft, {ta});
  EXPECT_NEAR(s.value_at(0) + s.value_at(1) + s.value_at(2), 1.0, 1e-15);
  EXPECT_DOUBLE_EQ(s.value_at(2) / s.value_at(1), std::exp(1.0));

  Graph mg;
  const NodeId x = mg.input("x", {2, 2}, DType::f16), w = mg.input("w", {2, 2}, DType::f16);
  const Node& product = mg.node(mg.matmul(x, w));
  const Tensor c = engine::reference::matmul(
      product, {values_of({2, 2}, {1, 2, 3, 4}), values_of({2, 2}, {5, 6, 7, 8})});
  EXPECT_EQ(c.value_at(0), 19);
  EXPECT_EQ(c.value_at(3), 50);
  EXPECT_EQ(c.dtype(), DType::f64);  // the reference never rounds to the node's dtype
}

// Each eager kernel, called alone, gives the bits that running its one-op graph gives.
TEST(EagerOps, EachKernelAloneGivesTheBitsOfItsGraph) {
  struct Case {
    std::string name;
    std::function<NodeId(Graph&, NodeId, NodeId)> build;
    Tensor (*kernel)(const cpu::eager::Context&, const Node&, const cpu::eager::Operands&);
  };
  const std::vector<Case> cases = {
      {"add", [](Graph& g, NodeId x, NodeId y) { return g.add(x, y); }, cpu::eager::add},
      {"div", [](Graph& g, NodeId x, NodeId y) { return g.div(x, y); }, cpu::eager::div},
      {"gelu", [](Graph& g, NodeId x, NodeId) { return g.gelu(x); }, cpu::eager::gelu_erf},
      {"softmax", [](Graph& g, NodeId x, NodeId) { return g.softmax(x); }, cpu::eager::softmax},
      {"sum", [](Graph& g, NodeId x, NodeId) { return g.sum(x, 1); }, cpu::eager::sum},
      {"matmul", [](Graph& g, NodeId x, NodeId y) { return g.matmul(x, g.transpose(y, 0, 1)); },
       cpu::eager::matmul},
  };
  for (DType dtype : {DType::f16, DType::bf16, DType::f32}) {
    for (const Case& c : cases) {
      Graph g;
      const NodeId x = g.input("x", {8, 64}, dtype), y = g.input("y", {8, 64}, dtype);
      const NodeId out = c.build(g, x, y);
      g.mark_output(out);
      const engine::Inputs in{{"x", random_uniform(dtype, {8, 64}, -2, 2, 5, 0)},
                              {"y", random_uniform(dtype, {8, 64}, 0.5, 2, 5, 1)}};
      const engine::RunResult whole = testsupport::run_eager(g, in);
      const Node& node = g.node(out);
      std::vector<Tensor> operands;
      for (NodeId id : node.inputs) operands.push_back(whole.values.at(id));
      engine::EngineOptions options;
      cpu::ThreadPool pool(1);
      const Tensor alone = c.kernel({pool, options, nullptr}, node, operands);
      EXPECT_THAT(alone, BitEqual(whole.outputs[0])) << c.name << " " << dtype_name(dtype);
    }
  }
}

// ---- the running error bound
// Every element's eager error is within a factor of its bound. The bound is a first-order worst
// case of rounding each op's result at its dtype, which is what eager does at f16 and bf16 (inside
// an op it computes in fp32, far below their u): factor 1. At f32 eager's fp32 library functions
// (exp, log, erf, tanh, and gelu_tanh_backward's composite of them) carry errors of a few fp32 ulps
// of their own that the bound does not count: measured worst 8.8 (gelu_tanh_backward), 2.8 (gelu),
// 1.4 (sqrt / rsqrt / log), at most 1 elsewhere, hence 10.
constexpr double kBoundFactor16 = 1.0;
constexpr double kBoundFactor32 = 10.0;

struct GraphCase {
  std::string name;
  std::function<Graph(DType)> build;
  double low = -2, high = 2;  // the inputs' uniform range
};

std::vector<GraphCase> op_graphs() {
  auto one_input = [](std::function<NodeId(Graph&, NodeId)> op, Shape shape = {16, 64}) {
    return [op, shape](DType d) {
      Graph g;
      g.mark_output(op(g, g.input("x", shape, d)));
      return g;
    };
  };
  auto two_inputs = [](std::function<NodeId(Graph&, NodeId, NodeId)> op) {
    return [op](DType d) {
      Graph g;
      g.mark_output(op(g, g.input("x", {16, 64}, d), g.input("y", {16, 64}, d)));
      return g;
    };
  };
  return {
      {"add", two_inputs([](Graph& g, NodeId x, NodeId y) { return g.add(x, y); })},
      {"sub", two_inputs([](Graph& g, NodeId x, NodeId y) { return g.sub(x, y); })},
      {"mul", two_inputs([](Graph& g, NodeId x, NodeId y) { return g.mul(x, y); })},
      {"div", two_inputs([](Graph& g, NodeId x, NodeId y) {
         return g.div(x, g.add_scalar(g.mul(y, y), 0.25));
       })},
      {"scalars",
       one_input([](Graph& g, NodeId x) { return g.add_scalar(g.mul_scalar(x, 0.7), -0.3); })},
      {"neg_exp", one_input([](Graph& g, NodeId x) { return g.exp(g.neg(x)); })},
      {"sqrt_rsqrt_log",
       one_input([](Graph& g, NodeId x) { return g.mul(g.sqrt(x), g.log(g.rsqrt(x))); }), 0.1, 4},
      {"gelu_erf", one_input([](Graph& g, NodeId x) { return g.gelu(g.mul(x, x)); })},
      {"gelu_tanh",
       one_input([](Graph& g, NodeId x) { return g.gelu(g.add_scalar(x, 0.5), true); })},
      {"gelu_tanh_backward", two_inputs([](Graph& g, NodeId dy, NodeId x) {
         return g.gelu_tanh_backward(g.mul(dy, x), g.add(x, dy));
       })},
      {"cast", one_input([](Graph& g, NodeId x) {
         return g.cast(g.mul(g.cast(x, DType::f32), g.cast(x, DType::f32)), g.node(x).dtype);
       })},
      {"sum_mean",
       one_input([](Graph& g, NodeId x) { return g.add(g.sum(g.mul(x, x), 1), g.mean(x, 1)); })},
      {"max", one_input([](Graph& g, NodeId x) { return g.max(g.mul(x, x), 0); })},
      {"layernorm",
       [](DType d) {
         Graph g;
         const NodeId x = g.input("x", {16, 64}, d), w = g.input("w", {64}, d),
                      b = g.input("b", {64}, d);
         g.mark_output(g.layernorm(g.add_scalar(x, 3.0), w, b));
         return g;
       }},
      {"softmax_masked",
       one_input([](Graph& g,
                    NodeId x) { return g.softmax(g.causal_mask(g.mul_scalar(x, 4.0), -INFINITY)); },
                 {2, 32, 32})},
      {"matmul_add_layernorm",
       [](DType d) {
         Graph g;
         const NodeId x = g.input("x", {16, 64}, d), w = g.input("w", {64, 32}, d),
                      b = g.input("b", {32}, d);
         const NodeId gamma = g.input("gamma", {32}, d), beta = g.input("beta", {32}, d);
         g.mark_output(g.layernorm(g.add(g.matmul(x, w), b), gamma, beta));
         return g;
       }},
      {"attention",
       [](DType d) {
         Graph g;
         const NodeId q = g.input("q", {2, 16, 32}, d), k = g.input("k", {2, 16, 32}, d),
                      v = g.input("v", {2, 16, 32}, d);
         const NodeId scores =
             g.mul_scalar(g.matmul(q, g.transpose(k, 1, 2)), 1.0 / std::sqrt(32.0));
         g.mark_output(g.matmul(g.softmax(scores), v));
         return g;
       }},
      {"data_movement",
       [](DType d) {
         Graph g;
         const NodeId x = g.input("x", {8, 4, 16}, d);
         const NodeId moved = g.reshape(g.permute(g.mul(x, x), {1, 0, 2}), {4, 128});
         const NodeId halves = g.concat({g.slice(moved, 1, 64, 128), g.slice(moved, 1, 0, 64)}, 1);
         g.mark_output(g.add(halves, g.expand(g.sum(moved, 0, true), {4, 128})));
         return g;
       }},
      {"gather_scatter",
       [](DType d) {
         Graph g;
         const NodeId table = g.input("table", {16, 32}, d), ids = g.input("ids", {24}, DType::i64);
         g.mark_output(g.scatter_add_rows(
             g.mul(g.gather_rows(table, ids), g.gather_rows(table, ids)), ids, 16));
         return g;
       }},
  };
}

engine::Inputs seeded_inputs(const Graph& g, const GraphCase& c, std::uint64_t seed) {
  engine::Inputs in;
  std::uint64_t stream = 0;
  for (NodeId id : g.inputs()) {
    const Node& n = g.node(id);
    if (n.dtype == DType::i64) {
      std::vector<std::int64_t> ids;
      for (std::int64_t i = 0; i < n.shape[0]; ++i)
        ids.push_back((i * 5 + std::int64_t(seed)) % 16);
      in[n.name] = Tensor::from_values<std::int64_t>(n.shape, ids);
      continue;
    }
    in[n.name] = random_uniform(n.dtype, n.shape, c.low, c.high, seed, stream++);
  }
  return in;
}

TEST(ErrorBound, EagerErrorIsWithinTheBoundForEveryOpKind) {
  for (const GraphCase& c : op_graphs()) {
    for (DType dtype : {DType::f16, DType::bf16, DType::f32}) {
      const double factor = dtype == DType::f32 ? kBoundFactor32 : kBoundFactor16;
      double worst = 0;
      for (std::uint64_t seed = 1; seed <= 4; ++seed) {
        const Graph g = c.build(dtype);
        const engine::Inputs in = seeded_inputs(g, c, seed);
        const auto bounded = engine::fp64_reference_with_bound(g, in);
        const Tensor eager = testsupport::run_eager(g, in).outputs[0];
        const std::vector<double> ratio =
            engine::conditioned_error(eager, bounded.outputs[0], bounded.bounds[0]);
        for (std::size_t i = 0; i < ratio.size(); ++i) {
          if (std::isnan(ratio[i])) continue;  // a masked -inf, equal on both sides
          worst = std::max(worst, ratio[i]);
          ASSERT_LE(ratio[i], factor)
              << c.name << " " << dtype_name(dtype) << " seed " << seed << " element " << i
              << ": eager " << eager.value_at(std::int64_t(i)) << ", reference "
              << bounded.outputs[0].value_at(std::int64_t(i)) << ", bound "
              << bounded.bounds[0].value_at(std::int64_t(i));
        }
      }
      RecordProperty(fmt::format("{}_{}_worst", c.name, dtype_name(dtype)),
                     fmt::format("{:.3f}", worst));
      fmt::print("  {:22s} {:5s} worst |eager - ref| / bound = {:.3f}\n", c.name, dtype_name(dtype),
                 worst);
    }
  }
}

// Exact data movement and exact inputs: the bound of a pure copy is zero.
TEST(ErrorBound, DataMovementOfInputsIsExact) {
  Graph g;
  const NodeId x = g.input("x", {4, 8}, DType::f16);
  g.mark_output(g.reshape(g.permute(x, {1, 0}), {32}));
  const auto bounded = engine::fp64_reference_with_bound(
      g, {{"x", random_uniform(DType::f16, {4, 8}, -1, 1, 3, 0)}});
  for (std::int64_t i = 0; i < 32; ++i) EXPECT_EQ(bounded.bounds[0].value_at(i), 0.0);
}

// A matmul's bound counts its K products' accumulation: (u_out + c(K) u_f32) sum |a||b| with
// c(K) = gamma_K / u_f32 below K = 9 and 3 sqrt(K) from there (docs/conditioned-error.md, "Dot
// products"), plus an underflow per product. Known answers on ones, then eager f32 at K = 4096:
// within the bound, where the one u of the result's rounding alone is exceeded.
TEST(ErrorBound, MatmulCountsTheAccumulationOfItsProducts) {
  const double u16 = std::ldexp(1.0, -11), u32 = std::ldexp(1.0, -24);
  const double eta16 = std::ldexp(1.0, -25), eta32 = std::ldexp(1.0, -150);
  struct Case {
    DType dtype;
    std::int64_t k;
    double expected;
  };
  const std::vector<Case> cases = {
      {DType::f32, 4, (u32 + 4 * u32 / (1 - 4 * u32)) * 4 + 4 * eta32},
      {DType::f32, 8, (u32 + 8 * u32 / (1 - 8 * u32)) * 8 + 8 * eta32},
      {DType::f32, 9, (u32 + 3 * 3 * u32) * 9 + 9 * eta32},  // 3 sqrt(9) u < gamma_9
      {DType::f32, 1024, (u32 + 3 * 32 * u32) * 1024 + 1024 * eta32},
      {DType::f16, 1024, (u16 + 3 * 32 * u32) * 1024 + 1024 * eta16},
  };
  for (const Case& c : cases) {
    Graph g;
    g.mark_output(g.matmul(g.input("a", {1, c.k}, c.dtype), g.input("b", {c.k, 1}, c.dtype)));
    const std::vector<double> ones(std::size_t(c.k), 1.0);
    const auto bounded =
        engine::fp64_reference_with_bound(g, {{"a", values_of({1, c.k}, ones).to(c.dtype)},
                                              {"b", values_of({c.k, 1}, ones).to(c.dtype)}});
    EXPECT_DOUBLE_EQ(bounded.bounds[0].value_at(0), c.expected)
        << dtype_name(c.dtype) << " K = " << c.k;
  }
  // one term: nothing accumulates
  EXPECT_EQ(engine::reference::accumulation_of(1, DType::f32), 0.0);
  EXPECT_DOUBLE_EQ(engine::reference::accumulation_of(16384, DType::f64),
                   3 * 128 * std::ldexp(1.0, -53));

  const std::int64_t k = 4096;
  Graph g;
  const NodeId a = g.input("a", {16, k}, DType::f32), b = g.input("b", {k, 16}, DType::f32);
  g.mark_output(g.matmul(a, b));
  const engine::Inputs in{{"a", random_uniform(DType::f32, {16, k}, 0, 1, 31, 0)},
                          {"b", random_uniform(DType::f32, {k, 16}, 0, 1, 31, 1)}};
  const auto bounded = engine::fp64_reference_with_bound(g, in);
  const Tensor eager = testsupport::run_eager(g, in).outputs[0];
  const double own = u32 + engine::reference::accumulation_of(k, DType::f32);
  double worst = 0, worst_in_one_u = 0;
  for (std::int64_t i = 0; i < eager.numel(); ++i) {
    const double error = std::abs(eager.value_at(i) - bounded.outputs[0].value_at(i));
    // the inputs are exact and positive: the bound is own * (|A||B|) + K eta, |A||B| = A B
    const double one_u = u32 * bounded.outputs[0].value_at(i) + double(k) * eta32;
    const double expected = own * bounded.outputs[0].value_at(i) + double(k) * eta32;
    EXPECT_NEAR(bounded.bounds[0].value_at(i), expected,
                1e-12 * expected);  // summed in another order
    worst = std::max(worst, error / bounded.bounds[0].value_at(i));
    worst_in_one_u = std::max(worst_in_one_u, error / one_u);
  }
  fmt::print("  eager f32 matmul K = {}: worst {:.3f} x the bound, {:.2f} x one u\n", k, worst,
             worst_in_one_u);
  EXPECT_LE(worst, 1.0);
  EXPECT_GT(worst_in_one_u, 1.0);  // the result's rounding alone does not bound it
}

// Sum, mean, scatter_add_rows, softmax's sum and layernorm's two sums count their K terms'
// accumulation as the matmul does: (u_out + c(K) u_f32) sum |x| (accumulation_of), K the terms
// added into each output element. Known answers on ones and equal terms (K = 4 to 16384, f32 and
// f16), then the engine's eager kernels on U(0, 1) at K = 4096: within the bound at f32 and f16,
// where at f32 the result's one u alone is exceeded.
TEST(ErrorBound, ReductionsCountTheAccumulationOfTheirTerms) {
  using engine::reference::accumulation_of;
  const double u16 = std::ldexp(1.0, -11), u32 = std::ldexp(1.0, -24);
  const double eta16 = std::ldexp(1.0, -25), eta32 = std::ldexp(1.0, -150);
  const auto ones = [](DType dtype, Shape shape) {
    const std::int64_t count = shape_numel(shape);
    return values_of(std::move(shape), std::vector<double>(std::size_t(count), 1.0)).to(dtype);
  };
  struct Case {
    DType dtype;
    std::int64_t k;
    double summed;  // u_out + c(K) u_f32, by hand
  };
  const std::vector<Case> cases = {
      {DType::f32, 4, u32 + 4 * u32 / (1 - 4 * u32)},
      {DType::f32, 8, u32 + 8 * u32 / (1 - 8 * u32)},
      {DType::f32, 9, u32 + 3 * 3 * u32},  // 3 sqrt(9) u < gamma_9
      {DType::f32, 4096, u32 + 3 * 64 * u32},
      {DType::f32, 16384, u32 + 3 * 128 * u32},
      {DType::f16, 4096, u16 + 3 * 64 * u32},
  };
  for (const Case& c : cases) {
    const std::string at = fmt::format("{} K = {}", dtype_name(c.dtype), c.k);
    const double eta = c.dtype == DType::f16 ? eta16 : eta32,
                 u = engine::reference::unit_roundoff(c.dtype);
    const double k = double(c.k);
    {  // sum and mean of K ones
      Graph g;
      const NodeId x = g.input("x", {1, c.k}, c.dtype);
      g.mark_output(g.sum(x, 1));
      g.mark_output(g.mean(x, 1));
      const auto bounded = engine::fp64_reference_with_bound(g, {{"x", ones(c.dtype, {1, c.k})}});
      EXPECT_DOUBLE_EQ(bounded.bounds[0].value_at(0), c.summed * k) << "sum " << at;
      EXPECT_DOUBLE_EQ(bounded.bounds[1].value_at(0), c.summed + u + eta) << "mean " << at;
    }
    {  // K rows of ones added into row 0 of 2; row 1 receives none
      Graph g;
      const NodeId src = g.input("src", {c.k, 3}, c.dtype), ids = g.input("ids", {c.k}, DType::i64);
      g.mark_output(g.scatter_add_rows(src, ids, 2));
      const auto bounded = engine::fp64_reference_with_bound(
          g, {{"src", ones(c.dtype, {c.k, 3})},
              {"ids", Tensor::from_values<std::int64_t>(
                          {c.k}, std::vector<std::int64_t>(std::size_t(c.k), 0))}});
      for (std::int64_t i = 0; i < 3; ++i) {
        EXPECT_DOUBLE_EQ(bounded.bounds[0].value_at(i), c.summed * k) << "scatter_add_rows " << at;
        EXPECT_EQ(bounded.bounds[0].value_at(3 + i), 0.0) << "scatter_add_rows " << at;
      }
    }
    {  // softmax of K equal scores: z = 1/K, own (3u + c(K) u_f32) z + 4 eta
      Graph g;
      g.mark_output(g.softmax(g.input("x", {1, c.k}, c.dtype)));
      const Tensor zeros = values_of({1, c.k}, std::vector<double>(std::size_t(c.k), 0.0));
      const auto bounded = engine::fp64_reference_with_bound(g, {{"x", zeros.to(c.dtype)}});
      EXPECT_DOUBLE_EQ(bounded.bounds[0].value_at(0),
                       (3 * u + accumulation_of(c.k, c.dtype)) / k + 4 * eta)
          << "softmax " << at;
      EXPECT_DOUBLE_EQ(accumulation_of(c.k, c.dtype), c.summed - u) << at;
    }
    {  // layernorm of a constant row: x^ = 0, y = b = 0; the mean's sum, s / sqrt(eps), remains
      Graph g;
      const NodeId x = g.input("x", {1, c.k}, c.dtype), w = g.input("w", {c.k}, c.dtype),
                   b = g.input("b", {c.k}, c.dtype);
      g.mark_output(g.layernorm(x, w, b, 1.0 / 16));
      const Tensor zeros = values_of({c.k}, std::vector<double>(std::size_t(c.k), 0.0));
      const auto bounded = engine::fp64_reference_with_bound(
          g,
          {{"x", ones(c.dtype, {1, c.k})}, {"w", ones(c.dtype, {c.k})}, {"b", zeros.to(c.dtype)}});
      EXPECT_DOUBLE_EQ(bounded.bounds[0].value_at(0), c.summed * 4 + 6 * eta) << "layernorm " << at;
    }
  }

  // The engine's eager kernels on U(0, 1): the tiled sum along either axis and scatter_add_rows
  // adding 4096 rows into each of two in id order, f32 and f16 (accumulated in f32 both).
  const std::int64_t k = 4096;
  struct Measured {
    std::string name;
    DType dtype;
    Graph graph;
    engine::Inputs inputs;
  };
  std::vector<Measured> measured;
  for (DType dtype : {DType::f32, DType::f16}) {
    {
      Graph g;
      g.mark_output(g.sum(g.input("x", {64, k}, dtype), 1));
      measured.push_back({"sum along the last axis",
                          dtype,
                          g,
                          {{"x", random_uniform(dtype, {64, k}, 0, 1, 37, 0)}}});
    }
    {
      Graph g;
      g.mark_output(g.sum(g.input("x", {k, 64}, dtype), 0));
      measured.push_back({"sum along the first axis",
                          dtype,
                          g,
                          {{"x", random_uniform(dtype, {k, 64}, 0, 1, 37, 1)}}});
    }
    {
      Graph g;
      const NodeId src = g.input("src", {2 * k, 64}, dtype),
                   ids = g.input("ids", {2 * k}, DType::i64);
      g.mark_output(g.scatter_add_rows(src, ids, 2));
      std::vector<std::int64_t> alternating(std::size_t(2 * k));
      for (std::size_t i = 0; i < alternating.size(); ++i) alternating[i] = std::int64_t(i % 2);
      measured.push_back({"scatter_add_rows",
                          dtype,
                          g,
                          {{"src", random_uniform(dtype, {2 * k, 64}, 0, 1, 37, 2)},
                           {"ids", Tensor::from_values<std::int64_t>({2 * k}, alternating)}}});
    }
  }
  for (const Measured& m : measured) {
    const auto bounded = engine::fp64_reference_with_bound(m.graph, m.inputs);
    const Tensor eager = testsupport::run_eager(m.graph, m.inputs).outputs[0];
    const double u = engine::reference::unit_roundoff(m.dtype);
    const double summed = u + accumulation_of(k, m.dtype);
    double worst = 0, worst_in_one_u = 0;
    for (std::int64_t i = 0; i < eager.numel(); ++i) {
      // exact positive inputs: the bound is summed * sum|x| = summed * the exact sum
      const double exact = bounded.outputs[0].value_at(i);
      EXPECT_NEAR(bounded.bounds[0].value_at(i), summed * exact, 1e-12 * summed * exact) << m.name;
      const double error = std::abs(eager.value_at(i) - exact);
      worst = std::max(worst, error / bounded.bounds[0].value_at(i));
      worst_in_one_u = std::max(worst_in_one_u, error / (u * exact));
    }
    fmt::print("  eager {} {} K = {}: worst {:.4f} x the bound, {:.4f} x one u\n",
               dtype_name(m.dtype), m.name, k, worst, worst_in_one_u);
    EXPECT_LE(worst, 1.0) << dtype_name(m.dtype) << " " << m.name;
    // f32: the result's rounding alone does not bound the accumulation of 4096 terms
    if (m.dtype == DType::f32) EXPECT_GT(worst_in_one_u, 1.0) << m.name;
  }

  // Equal terms (K copies of 0.1, f32) break the probabilistic form where they are added one by
  // one: scatter_add_rows's in-order sum stays within the deterministic (u + gamma_K) sum|x| only
  // (docs/conditioned-error.md, Limits); the tiled sum stays within the bound.
  for (const std::int64_t terms : {std::int64_t(4096), std::int64_t(16384)}) {
    const Tensor tenths =
        values_of({terms, 1}, std::vector<double>(std::size_t(terms), 0.1)).to(DType::f32);
    const double gamma = double(terms) * u32 / (1 - double(terms) * u32);
    Graph scatter;
    scatter.mark_output(scatter.scatter_add_rows(scatter.input("src", {terms, 1}, DType::f32),
                                                 scatter.input("ids", {terms}, DType::i64), 1));
    Graph summed;
    summed.mark_output(summed.sum(summed.input("src", {terms, 1}, DType::f32), 0));
    const engine::Inputs scatter_in{
        {"src", tenths},
        {"ids", Tensor::from_values<std::int64_t>(
                    {terms}, std::vector<std::int64_t>(std::size_t(terms), 0))}};
    const engine::Inputs sum_in{{"src", tenths}};
    for (const bool in_order : {true, false}) {
      const Graph& g = in_order ? scatter : summed;
      const engine::Inputs& in = in_order ? scatter_in : sum_in;
      const auto bounded = engine::fp64_reference_with_bound(g, in);
      const double exact = bounded.outputs[0].value_at(0);
      const double error = std::abs(testsupport::run_eager(g, in).outputs[0].value_at(0) - exact);
      const double of_bound = error / bounded.bounds[0].value_at(0),
                   of_deterministic = error / ((u32 + gamma) * exact);
      fmt::print(
          "  eager f32 {} of {} x 0.1: {:.1f} units of u sum|x|, {:.3f} x the bound, {:.4f} x "
          "(u + gamma_K) sum|x|\n",
          in_order ? "scatter_add_rows" : "tiled sum", terms, error / (u32 * exact), of_bound,
          of_deterministic);
      EXPECT_LE(of_deterministic, 1.0);
      if (!in_order) EXPECT_LE(of_bound, 1.0);
    }
  }
}

// x - x (1 + delta): the exact result is -x delta (the f64 reference computes it exactly from f16
// x and delta = 2^-k). In f16 the product is rounded to a relative u = 2^-11, so the difference
// carries an absolute error up to about u |x| on a result of size delta |x|: its ULP error grows
// like 1 / delta, without limit, while its error in units of the bound stays at most 1.
TEST(ErrorBound, CancellationKeepsTheConditionedErrorBoundedWhileTheUlpErrorGrows) {
  const std::int64_t n = 4096;
  double previous_ulp_max = 0;
  for (int k : {3, 6, 9, 12}) {
    const double delta = std::ldexp(1.0, -k);
    Graph g;
    const NodeId x = g.input("x", {n}, DType::f16);
    g.mark_output(g.sub(x, g.mul_scalar(x, 1.0 + delta)));
    const engine::Inputs in{{"x", random_uniform(DType::f16, {n}, 0.5, 2, 11, 0)}};
    const auto bounded = engine::fp64_reference_with_bound(g, in);
    const Tensor& xs = in.at("x");
    for (std::int64_t i = 0; i < n; ++i)
      ASSERT_EQ(bounded.outputs[0].value_at(i), -xs.value_at(i) * delta) << "element " << i;
    const Tensor eager = testsupport::run_eager(g, in).outputs[0];
    const double ulp_max = error_stats(eager, bounded.outputs[0]).ulp_error.max;
    std::vector<double> conditioned =
        engine::conditioned_error(eager, bounded.outputs[0], bounded.bounds[0]);
    const double conditioned_max = *std::max_element(conditioned.begin(), conditioned.end());
    fmt::print("  delta 2^-{:2d}: ULP error max {:9.1f}, conditioned error max {:.3f}\n", k,
               ulp_max, conditioned_max);
    EXPECT_LE(conditioned_max, 1.0) << "delta 2^-" << k;
    // the ULP error grows at least four-fold per three halvings of delta (eight-fold in theory)
    EXPECT_GT(ulp_max, 4 * previous_ulp_max) << "delta 2^-" << k;
    previous_ulp_max = ulp_max;
  }
  EXPECT_GT(previous_ulp_max, 500.0);  // at delta 2^-12 the result keeps no correct bit
}

// gelu's tail carries its operand's bound by the secant, not the tangent. There gelu's condition
// |x g'(x) / g(x)| is about x^2 (126 at x = -11.2), so a bf16 operand rounded after an add (a
// relative bound of 2^-8 and more) moves gelu by about e^(x^2 E / |x|) - 1, which the first-order
// term |g'(x)| E under-states. Measured on B's mul_add_gelu_mul (bf16, heavy inputs, cpu) before
// the secant: eager at 1.51 units of the first-order bound at gelu(-11.2), the worst of 12 sets
// above 1.2; with it, 0.95.
TEST(ErrorBound, GeluTailCarriesItsOperandsBoundBeyondFirstOrder) {
  const std::int64_t n = 4096;
  Graph g;
  const NodeId a = g.input("a", {n}, DType::bf16), b = g.input("b", {n}, DType::bf16);
  const NodeId sum = g.add(a, b);
  g.mark_output(g.gelu(sum));
  const engine::Inputs in{{"a", random_uniform(DType::bf16, {n}, -20, -14, 21, 0)},
                          {"b", random_uniform(DType::bf16, {n}, 3, 9, 21, 1)}};
  const auto bounded = engine::fp64_reference_with_bound(g, in);
  Graph add_only;
  add_only.mark_output(
      add_only.add(add_only.input("a", {n}, DType::bf16), add_only.input("b", {n}, DType::bf16)));
  const auto operand = engine::fp64_reference_with_bound(add_only, in);
  const Tensor eager = testsupport::run_eager(g, in).outputs[0];
  const double u = engine::reference::unit_roundoff(DType::bf16),
               eta = engine::reference::underflow_of(DType::bf16);
  double first_order_worst = 0, secant_worst = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double x = operand.outputs[0].value_at(i), ex = operand.bounds[0].value_at(i);
    const double z = bounded.outputs[0].value_at(i);
    const double derivative =
        0.5 * std::erfc(-x / std::sqrt(2.0)) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
    const double first_order = std::abs(derivative) * ex + u * std::abs(z) + eta;
    const double error = std::abs(eager.value_at(i) - z);
    first_order_worst = std::max(first_order_worst, error / first_order);
    secant_worst = std::max(secant_worst, error / bounded.bounds[0].value_at(i));
    ASSERT_GE(bounded.bounds[0].value_at(i), first_order * (1 - 1e-12)) << "element " << i;
  }
  fmt::print(
      "  gelu tail, bf16: eager's worst error {:.3f} units of the first-order bound, {:.3f} "
      "of the bound\n",
      first_order_worst, secant_worst);
  EXPECT_GT(first_order_worst, 1.0) << "the tail should defeat first order";
  EXPECT_LE(secant_worst, 1.0);
}

// The measure of conditioning: about 1 for a lone rounding (its f32 accumulation adds 2^-12 at
// f16), large where a sum cancels.
TEST(ErrorBound, ConditionIsOneForARoundingAndLargeForCancellation) {
  Graph g;
  const NodeId x = g.input("x", {2, 2}, DType::f16);
  g.mark_output(g.sum(x, 1));
  const Tensor values = values_of({2, 2}, {1.0, 0.5, 1.0, -0.99951171875}).to(DType::f16);
  const auto bounded = engine::fp64_reference_with_bound(g, {{"x", values}});
  const double well = engine::condition_of(bounded.bounds[0].value_at(0),
                                           bounded.outputs[0].value_at(0), DType::f16);
  const double ill = engine::condition_of(bounded.bounds[0].value_at(1),
                                          bounded.outputs[0].value_at(1), DType::f16);
  // the f16 result's rounding and its two terms' f32 accumulation, gamma_2 (f32) / u (f16) = 2^-12
  const double accumulated =
      1 + engine::reference::accumulation_of(2, DType::f16) / std::ldexp(1.0, -11);
  EXPECT_DOUBLE_EQ(well, accumulated);  // sum |x| = |sum x|
  EXPECT_LT(well, 1.001);
  EXPECT_DOUBLE_EQ(ill, accumulated * (1.0 + 0.99951171875) / (1.0 - 0.99951171875));
}

}  // namespace
}  // namespace fusebench
