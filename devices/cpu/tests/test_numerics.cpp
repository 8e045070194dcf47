// Numerics of the engine: eager against a scalar model of per-op rounding, eager and fused
// against the fp64 reference within documented bounds, data movement bit-equal, and every knob
// changing what it should.
#include <fmt/format.h>
#include <Eigen/Dense>

#include <cstring>

#include "engine_test_support.hpp"
#include "fusebench/compare.hpp"
#include "fusebench/engine/scalar_math.hpp"
#include "fusebench/error_stats.hpp"
#include "fusebench/testing/matchers.hpp"

namespace fusebench {
namespace {
using engine::Graph;
using engine::NodeId;
using testing::BitEqual;

TEST(Eager, EqualsAScalarModelOfPerOpRoundingBitForBit) {
  for (DType dtype : {DType::f16, DType::bf16}) {
    testsupport::ElementwiseChain chain(dtype, {1000}, 3);
    const Tensor out = testsupport::run_eager(chain.graph, chain.inputs).outputs[0];
    // The model: every op in fp32 from the exact operands, rounded to the dtype after each op.
    auto round = [&](float v) {
      return dtype == DType::f16 ? fbk::round_f16(v) : fbk::round_bf16(v);
    };
    auto in = [&](int k, std::int64_t i) {
      return float(chain.inputs.at(fmt::format("x{}", k)).value_at(i));
    };
    std::vector<double> expected;
    for (std::int64_t i = 0; i < 1000; ++i) {
      const float m = round(in(0, i) * in(1, i));
      const float a = round(m + in(2, i));
      const float g = round(fbk::gelu_erf_f32(a));
      expected.push_back(round(g * in(3, i)));
    }
    EXPECT_THAT(out, BitEqual(Tensor::from_values<double>({1000}, expected).to(dtype)))
        << dtype_name(dtype);
  }
}

// A one-element operand is read once instead of being materialised (binary_kernel); the values
// must be those of the broadcast: the model is the per-element op on the stored one-element value.
TEST(Eager, OneElementOperandsBroadcastWithoutChangingValues) {
  for (const Shape& one : {Shape{1}, Shape{1, 1}}) {
    for (bool left : {false, true}) {
      Graph g;
      const NodeId x = g.input("x", {4, 33}, DType::f16);
      const NodeId s = g.input("s", one, DType::bf16);  // another dtype: converted, then broadcast
      const NodeId sum = left ? g.add(s, x) : g.add(x, s);
      g.mark_output(sum);
      g.mark_output(left ? g.div(s, x) : g.div(x, s));
      const engine::Inputs in = {
          {"x", random_uniform(DType::f16, {4, 33}, 0.5, 2, 30)},
          {"s", Tensor::from_values<double>(one, std::vector<double>{0.7}).to(DType::bf16)}};
      const auto eager = testsupport::run_eager(g, in).outputs;
      const auto fused = testsupport::run_fused(g, in).outputs;
      const DType out_dtype = g.node(sum).dtype;
      const float scalar = float(in.at("s").value_at(0));
      std::vector<double> sums, quotients;
      for (std::int64_t i = 0; i < 4 * 33; ++i) {
        const float v = float(in.at("x").value_at(i));
        sums.push_back(left ? scalar + v : v + scalar);
        quotients.push_back(left ? scalar / v : v / scalar);
      }
      const Shape out_shape = g.node(sum).shape;
      EXPECT_THAT(eager[0], BitEqual(Tensor::from_values<double>(out_shape, sums).to(out_dtype)))
          << left;
      EXPECT_THAT(eager[1],
                  BitEqual(Tensor::from_values<double>(out_shape, quotients).to(out_dtype)))
          << left;
      EXPECT_THAT(fused[0], BitEqual(eager[0]));
      EXPECT_THAT(fused[1], BitEqual(eager[1]));
    }
  }
}

TEST(Fused, WithPerOpRoundingEmulatedEqualsEagerBitForBit) {
  testsupport::ElementwiseChain chain(DType::f16, {4096}, 4);
  engine::EngineOptions emulate;
  emulate.emulate_per_op_rounding = true;
  EXPECT_THAT(testsupport::run_fused(chain.graph, chain.inputs, emulate).outputs[0],
              BitEqual(testsupport::run_eager(chain.graph, chain.inputs).outputs[0]));
}

TEST(Fused, EmulatedRoundingAlsoRoundsGemmReductionAndRowwiseResults) {
  // Epilogues see the anchor's value; with emulation it must be rounded as eager stores it.
  Graph g;
  const NodeId q = g.input("q", {2, 16, 32}, DType::f16), k = g.input("k", {2, 16, 32}, DType::f16);
  const NodeId scores = g.mul_scalar(g.matmul(q, g.transpose(k, 1, 2)), 0.17677669529663687);
  g.mark_output(g.mul_scalar(g.softmax(scores), 3.0));
  g.mark_output(g.add_scalar(g.sum(q, 2), 1.0));
  const engine::Inputs in = {{"q", random_normal(DType::f16, {2, 16, 32}, 0, 3, 22)},
                             {"k", random_normal(DType::f16, {2, 16, 32}, 0, 3, 23)}};
  engine::EngineOptions emulate;
  emulate.emulate_per_op_rounding = true;
  const auto fused = testsupport::run_fused(g, in, emulate).outputs;
  const auto eager = testsupport::run_eager(g, in).outputs;
  for (std::size_t o = 0; o < fused.size(); ++o)
    EXPECT_THAT(fused[o], BitEqual(eager[o])) << "output " << o;
}

// f16 operands and results go through F16C conversions a run at a time (eager blocks, fused
// staging buffers, whole rows). Over every f16 pattern times a few factors (products with ties and
// subnormal, overflowing and NaN results), both paths must equal the per-element software model:
// widen exactly, multiply in fp32, round once to f16.
TEST(Fused, F16StagingEqualsPerElementConversionOverEveryPattern) {
  constexpr std::int64_t kPatterns = 65536;
  const std::vector<float> factors = {1.0f, 0.7001953125f,  1.0009765625f,
                                      3.0f, 0.00048828125f, -65504.0f};
  const std::int64_t n = kPatterns * std::int64_t(factors.size());
  std::vector<Half> a(std::size_t(n), Half{}), b(std::size_t(n), Half{});
  for (std::int64_t i = 0; i < n; ++i) {
    a[std::size_t(i)] = Half{std::uint16_t(i % kPatterns)};
    b[std::size_t(i)] = Half{fp32_to_fp16_bits(factors[std::size_t(i / kPatterns)])};
  }
  // Rows of 4096 keep the fused row-wise path (softmax of the product) on the same operands.
  const Shape shape = {n / 4096, 4096};
  Graph g;
  const NodeId x = g.input("a", shape, DType::f16), y = g.input("b", shape, DType::f16);
  g.mark_output(g.mul(x, y));
  const engine::Inputs in = {{"a", Tensor::from_values<Half>(shape, a)},
                             {"b", Tensor::from_values<Half>(shape, b)}};
  std::vector<Half> model(std::size_t(n), Half{});
  for (std::int64_t i = 0; i < n; ++i) {
    const float product =
        fp16_bits_to_fp32(a[std::size_t(i)].bits) * fp16_bits_to_fp32(b[std::size_t(i)].bits);
    model[std::size_t(i)] = Half{fp32_to_fp16_bits(product)};
  }
  const Tensor expected = Tensor::from_values<Half>(shape, model);
  EXPECT_THAT(testsupport::run_fused(g, in).outputs[0], BitEqual(expected)) << "fused pointwise";
  EXPECT_THAT(testsupport::run_eager(g, in).outputs[0], BitEqual(expected)) << "eager";
  // A reduction widens whole rows: max over each row must see exactly the software-widened values.
  Graph rows;
  const NodeId r = rows.input("a", shape, DType::f16);
  rows.mark_output(rows.max(r, 1));
  std::vector<double> row_max;
  for (std::int64_t q = 0; q < shape[0]; ++q) {
    float m = -INFINITY;
    bool nan = false;
    for (std::int64_t k = 0; k < 4096; ++k) {
      const float v = fp16_bits_to_fp32(a[std::size_t(q * 4096 + k)].bits);
      nan = nan || v != v;
      m = v > m ? v : m;
    }
    row_max.push_back(nan ? NAN : m);
  }
  const Tensor max_expected = Tensor::from_values<double>({shape[0]}, row_max).to(DType::f16);
  const engine::Inputs row_in = {{"a", in.at("a")}};
  // Which NaN of a row max returns depends on the lane order; any NaN is the right answer.
  const BitEqualOptions any_nan{.nan = NanPolicy::AnyNanEqual};
  EXPECT_THAT(testsupport::run_fused(rows, row_in).outputs[0], BitEqual(max_expected, any_nan))
      << "fused reduction";
  EXPECT_THAT(testsupport::run_eager(rows, row_in).outputs[0], BitEqual(max_expected, any_nan))
      << "eager reduction";
}

// f16 values read through views (matmul operands behind a transpose, column sums) are gathered
// as storage bits and widened a row at a time; matmul epilogues stage their f16 loads and stores
// a row at a time. Each output element here depends on one f16 input element (the other terms
// are exact zeros), so over every f16 pattern the result must equal the per-element software
// model: widen exactly, compute in fp32, round once to f16.
TEST(Fused, F16BitGathersAndStagedEpiloguesEqualPerElementConversion) {
  constexpr std::int64_t kPatterns = 65536, kSide = 256;
  auto widen = [](std::uint16_t bits) { return fp16_bits_to_fp32(bits); };
  auto lowered = [](const engine::RunResult& r, const std::string& note) {
    for (const auto& k : r.trace) {
      for (const auto& line : k.lowering) {
        if (line.find(note) != std::string::npos) return true;
      }
    }
    return false;
  };
  // Matmul operands: x^T @ I and I @ x^T are x^T. Non-finite patterns would turn whole rows into
  // NaN (inf * 0), and a zero's sign depends on the order of the zero terms, so those patterns are
  // replaced by subnormals of the same sign.
  std::vector<Half> finite(kPatterns, Half{}), identity(kSide * kSide, Half{});
  for (std::int64_t p = 0; p < kPatterns; ++p) {
    std::uint16_t bits = std::uint16_t(p);
    if ((bits & 0x7c00u) == 0x7c00u) bits = std::uint16_t(bits & 0x83ffu);
    if ((bits & 0x7fffu) == 0) bits = std::uint16_t(bits | 1u);
    finite[std::size_t(p)] = Half{bits};
  }
  for (std::int64_t i = 0; i < kSide; ++i)
    identity[std::size_t(i * kSide + i)] = Half{fp32_to_fp16_bits(1.0f)};
  std::vector<Half> transposed(kPatterns, Half{});
  for (std::int64_t i = 0; i < kSide; ++i) {
    for (std::int64_t j = 0; j < kSide; ++j)
      transposed[std::size_t(i * kSide + j)] = finite[std::size_t(j * kSide + i)];
  }
  {
    Graph g;
    const NodeId x = g.input("x", {kSide, kSide}, DType::f16),
                 eye = g.input("eye", {kSide, kSide}, DType::f16);
    g.mark_output(g.matmul(g.transpose(x, 0, 1), eye));
    g.mark_output(g.matmul(eye, g.transpose(x, 0, 1)));
    const engine::Inputs in = {{"x", Tensor::from_values<Half>({kSide, kSide}, finite)},
                               {"eye", Tensor::from_values<Half>({kSide, kSide}, identity)}};
    const auto fused = testsupport::run_fused(g, in);
    ASSERT_TRUE(lowered(fused, "gathered as f16 bits"))
        << "the matmul operands no longer take the bit gather";
    const Tensor expected = Tensor::from_values<Half>({kSide, kSide}, transposed);
    EXPECT_THAT(fused.outputs[0], BitEqual(expected)) << "x^T @ I (A gathered)";
    EXPECT_THAT(fused.outputs[1], BitEqual(expected)) << "I @ x^T (B gathered)";
  }
  // A column sum over 16 rows, one of which holds the pattern (the others +0): every pattern,
  // infinities and NaNs included.
  {
    constexpr std::int64_t kRows = 16;
    std::vector<Half> rows(std::size_t(kRows * kPatterns), Half{});
    std::vector<Half> model(kPatterns, Half{});
    for (std::int64_t p = 0; p < kPatterns; ++p) {
      rows[std::size_t((p % kRows) * kPatterns + p)] = Half{std::uint16_t(p)};
      model[std::size_t(p)] = Half{fp32_to_fp16_bits(0.0f + widen(std::uint16_t(p)))};
    }
    Graph g;
    const NodeId y = g.input("y", {kRows, kPatterns}, DType::f16);
    g.mark_output(g.sum(y, 0));
    const auto fused =
        testsupport::run_fused(g, {{"y", Tensor::from_values<Half>({kRows, kPatterns}, rows)}});
    ASSERT_TRUE(lowered(fused, "gathered as f16 bits"))
        << "the column sum no longer takes the bit gather";
    EXPECT_THAT(fused.outputs[0], BitEqual(Tensor::from_values<Half>({kPatterns}, model)))
        << "column sum";
  }
  // An epilogue that loads an f16 input at the product's position and stores two f16 results:
  // (0 @ 1) + x and ((0 @ 1) + x) * 3 over every pattern.
  {
    const Shape shape = {kSide, kSide};
    std::vector<Half> all(kPatterns, Half{}), sums(kPatterns, Half{}), triples(kPatterns, Half{});
    for (std::int64_t p = 0; p < kPatterns; ++p) {
      all[std::size_t(p)] = Half{std::uint16_t(p)};
      const float sum = 0.0f + widen(std::uint16_t(p));
      sums[std::size_t(p)] = Half{fp32_to_fp16_bits(sum)};
      triples[std::size_t(p)] = Half{fp32_to_fp16_bits(sum * 3.0f)};
    }
    Graph g;
    const NodeId zeros = g.input("zeros", {kSide, 16}, DType::f16),
                 ones = g.input("ones", {16, kSide}, DType::f16);
    const NodeId x = g.input("x", shape, DType::f16);
    const NodeId sum = g.add(g.matmul(zeros, ones), x);
    g.mark_output(sum);
    g.mark_output(g.mul_scalar(sum, 3.0));
    const engine::Inputs in = {
        {"zeros", Tensor::from_values<Half>({kSide, 16}, std::vector<Half>(kSide * 16, Half{}))},
        {"ones", Tensor::from_values<Half>(
                     {16, kSide}, std::vector<Half>(16 * kSide, Half{fp32_to_fp16_bits(1.0f)}))},
        {"x", Tensor::from_values<Half>(shape, all)}};
    const auto fused = testsupport::run_fused(g, in);
    ASSERT_EQ(fused.trace.size(), 1u) << "the add and the scale are the matmul's epilogue";
    ASSERT_TRUE(lowered(fused, "epilogue's f16 loads and stores staged"))
        << "the epilogue is no longer staged";
    EXPECT_THAT(fused.outputs[0], BitEqual(Tensor::from_values<Half>(shape, sums)))
        << "staged epilogue: sum";
    EXPECT_THAT(fused.outputs[1], BitEqual(Tensor::from_values<Half>(shape, triples)))
        << "staged epilogue: sum * 3";
  }
}

// Documented accuracy of one op against fp64, in ULPs of the result format (max over 2^14 inputs
// in the stated range): fp16/bf16 results are correctly rounded up to the fp32 compute error
// (bound 0.51). fp32 results carry that error: add/mul/sqrt 0.5 (IEEE); rsqrt 1.5 (1/sqrt, two
// roundings); div 2 (the test's divisor b*b+0.5 is itself two rounded ops); exp 2; gelu 64 and
// gelu_tanh 48: in the negative tail (x < -3) gelu is x * erfc(-x/sqrt 2) / 2, and the fp32
// rounding of the exponent argument x^2/2 (about 1e-6 absolute at x = -6) is amplified by exp.
// These are regression bounds of this implementation, measured, not targets.
struct OpCase {
  const char* name;
  std::function<NodeId(Graph&, NodeId, NodeId)> build;
  double low, high;  // input range
  double bound_f32;
};

TEST(Accuracy, EachOpWithinDocumentedUlpBoundOfTheReference) {
  const std::vector<OpCase> cases = {
      {"add", [](Graph& g, NodeId a, NodeId b) { return g.add(a, b); }, -4, 4, 0.5},
      {"mul", [](Graph& g, NodeId a, NodeId b) { return g.mul(a, b); }, -4, 4, 0.5},
      {"div", [](Graph& g, NodeId a, NodeId b) { return g.div(a, g.add_scalar(g.mul(b, b), 0.5)); },
       -4, 4, 2.0},
      {"sqrt", [](Graph& g, NodeId a, NodeId) { return g.sqrt(a); }, 0.01, 100, 0.5},
      {"rsqrt", [](Graph& g, NodeId a, NodeId) { return g.rsqrt(a); }, 0.01, 100, 1.5},
      {"exp", [](Graph& g, NodeId a, NodeId) { return g.exp(a); }, -10, 10, 2.0},
      {"gelu", [](Graph& g, NodeId a, NodeId) { return g.gelu(a); }, -6, 6, 64.0},
      {"gelu_tanh", [](Graph& g, NodeId a, NodeId) { return g.gelu(a, true); }, -6, 6, 48.0},
  };
  for (const auto& op : cases) {
    for (DType dtype : {DType::f16, DType::bf16, DType::f32}) {
      SCOPED_TRACE(fmt::format("{} {}", op.name, dtype_name(dtype)));
      Graph g;
      const NodeId a = g.input("a", {1 << 14}, dtype), b = g.input("b", {1 << 14}, dtype);
      g.mark_output(op.build(g, a, b));
      const engine::Inputs in = {{"a", random_uniform(dtype, {1 << 14}, op.low, op.high, 5)},
                                 {"b", random_uniform(dtype, {1 << 14}, op.low, op.high, 6)}};
      const Tensor ref = engine::fp64_reference(g, in)[0];
      const double bound = dtype == DType::f32 ? op.bound_f32 : 0.51;
      // div's operand is itself rounded in eager
      const bool single_op = std::string(op.name) != "div";
      const auto fused = error_stats(testsupport::run_fused(g, in).outputs[0], ref);
      EXPECT_LE(fused.ulp_error.max, bound) << "fused";
      EXPECT_EQ(fused.mismatches, 0);
      if (single_op) {
        const auto eager = error_stats(testsupport::run_eager(g, in).outputs[0], ref);
        EXPECT_LE(eager.ulp_error.max, bound) << "eager";
      }
    }
  }
}

TEST(Accuracy, ReductionsRowwiseAndMatmulTrackTheReference) {
  Graph g;
  const NodeId x = g.input("x", {16, 256}, DType::f16);
  const NodeId w = g.input("w", {256, 64}, DType::f16);
  const NodeId gamma = g.input("gamma", {64}, DType::f16), beta = g.input("beta", {64}, DType::f16);
  const NodeId mm = g.matmul(x, w);
  g.mark_output(g.layernorm(mm, gamma, beta));
  g.mark_output(g.softmax(mm));
  g.mark_output(g.mean(x, 1));
  g.mark_output(g.max(x, 0));
  const engine::Inputs in = {{"x", random_uniform(DType::f16, {16, 256}, -1, 1, 7)},
                             {"w", random_uniform(DType::f16, {256, 64}, -0.1, 0.1, 8)},
                             {"gamma", random_uniform(DType::f16, {64}, 0.5, 1.5, 9)},
                             {"beta", random_uniform(DType::f16, {64}, -0.5, 0.5, 10)}};
  const auto ref = engine::fp64_reference(g, in);
  const auto fused = testsupport::run_fused(g, in).outputs;
  const auto eager = testsupport::run_eager(g, in).outputs;
  for (std::size_t o = 0; o < ref.size(); ++o) {
    SCOPED_TRACE(o);
    EXPECT_THAT(fused[o], testing::ErrorStatsWithin(ref[o], {.abs_max = 2e-2, .rel_p99 = 2e-2}));
    EXPECT_THAT(eager[o], testing::ErrorStatsWithin(ref[o], {.abs_max = 2e-2, .rel_p99 = 2e-2}));
  }
  EXPECT_THAT(fused[3], BitEqual(eager[3]));  // a max is exact either way
}

TEST(DataMovement, FusedIsBitEqualToEagerForEveryOpAndChain) {
  for (DType dtype : {DType::f16, DType::bf16, DType::f32}) {
    SCOPED_TRACE(dtype_name(dtype));
    Graph g;
    const NodeId a = g.input("a", {6, 10}, dtype), b = g.input("b", {10, 6}, dtype),
                 c = g.input("c", {1, 10}, dtype);
    g.mark_output(g.transpose(a, 0, 1));
    g.mark_output(g.reshape(a, {3, 20}));
    g.mark_output(g.slice(a, 1, 2, 7));
    g.mark_output(g.concat({a, g.transpose(b, 0, 1)}, 0));
    g.mark_output(g.split(a, 1, {3, 7})[1]);
    g.mark_output(g.expand(c, {4, 10}));
    // slice -> broadcast -> concat
    g.mark_output(g.concat({g.expand(g.slice(a, 0, 0, 1), {3, 10}), a}, 0));
    const auto parts = g.split(b, 0, {4, 6});
    // split -> transpose -> concat
    g.mark_output(g.concat({g.transpose(parts[0], 0, 1), g.transpose(parts[1], 0, 1)}, 1));
    const engine::Inputs in = {{"a", random_normal(dtype, {6, 10}, 0, 3, 11)},
                               {"b", random_normal(dtype, {10, 6}, 0, 3, 12)},
                               {"c", random_normal(dtype, {1, 10}, 0, 3, 13)}};
    const auto fused = testsupport::run_fused(g, in).outputs;
    const auto eager = testsupport::run_eager(g, in).outputs;
    for (std::size_t o = 0; o < fused.size(); ++o)
      EXPECT_THAT(fused[o], BitEqual(eager[o])) << "output " << o;
  }
}

// ---- knobs
TEST(Knobs, MoreNewtonIterationsAreCloserToFp64) {
  Graph g;
  const NodeId x = g.input("x", {4096}, DType::f32);
  g.mark_output(g.rsqrt(x));
  const engine::Inputs in = {{"x", random_uniform(DType::f32, {4096}, 0.01, 100, 14)}};
  const Tensor ref = engine::fp64_reference(g, in)[0];
  std::vector<double> mean_ulp;
  for (int iterations : {0, 1, 2, 3}) {
    engine::EngineOptions o;
    o.rsqrt = engine::ApproxMode::NewtonBitTrick;
    o.rsqrt_newton_iters = iterations;
    mean_ulp.push_back(
        error_stats(testsupport::run_fused(g, in, o).outputs[0], ref).ulp_error.mean);
  }
  EXPECT_GT(mean_ulp[0], mean_ulp[1]);
  EXPECT_GT(mean_ulp[1], mean_ulp[2]);
  EXPECT_LT(mean_ulp[3], mean_ulp[1]);
}

TEST(Knobs, ReduceTileChangesAStorageAccumulatedSum) {
  Graph g;
  const NodeId x = g.input("x", {4, 16384}, DType::f16);
  g.mark_output(g.sum(x, 1));
  const engine::Inputs in = {{"x", random_uniform(DType::f16, {4, 16384}, 0, 1, 15)}};
  auto run = [&](std::int64_t tile, bool fused) {
    engine::EngineOptions o;
    o.reduce_tile = tile;
    o.accumulator = engine::AccumulatorDtype::Storage;
    return fused ? testsupport::run_fused(g, in, o).outputs[0]
                 : testsupport::run_eager(g, in, o).outputs[0];
  };
  EXPECT_FALSE(bit_equal(run(512, true), run(2048, true)).equal);
  // a lone reduction: eager and fused agree
  EXPECT_THAT(run(512, true), BitEqual(run(512, false)));
}

TEST(Knobs, BroadcastTensorLoweringOfScalarDiffersFromImmediateAndAnExactScalarAgrees) {
  for (double scalar : {0.7, 0.5}) {
    Graph g;
    const NodeId x = g.input("x", {1 << 14}, DType::f16);
    g.mark_output(g.mul_scalar(x, scalar));
    const engine::Inputs in = {{"x", random_uniform(DType::f16, {1 << 14}, -1, 1, 16)}};
    engine::EngineOptions broadcast;
    broadcast.scalar_lowering = engine::ScalarLowering::BroadcastTensor;
    const Tensor a = testsupport::run_fused(g, in).outputs[0];
    const Tensor b = testsupport::run_fused(g, in, broadcast).outputs[0];
    EXPECT_EQ(bit_equal(a, b).equal, scalar == 0.5) << scalar;
    EXPECT_THAT(testsupport::run_eager(g, in, broadcast).outputs[0], BitEqual(b));
  }
}

TEST(Knobs, FmaContractionChangesTheKernelArtifact) {
  testsupport::ElementwiseChain chain(DType::f32, {1024}, 17);
  engine::EngineOptions fma;
  fma.fma_contraction = true;
  const auto off = testsupport::run_fused(chain.graph, chain.inputs);
  const auto on = testsupport::run_fused(chain.graph, chain.inputs, fma);
  EXPECT_NE(off.trace[0].cache_key, on.trace[0].cache_key);
  EXPECT_NE(off.trace[0].artifact_sha256, on.trace[0].artifact_sha256);
}

// ---- determinism
TEST(Determinism, BitIdenticalAcrossRunsAndThreadCounts) {
  Graph g;
  const NodeId x = g.input("x", {64, 512}, DType::f16);
  const NodeId w = g.input("w", {512, 300}, DType::f16);
  const NodeId gamma = g.input("gamma", {300}, DType::f16),
               beta = g.input("beta", {300}, DType::f16);
  g.mark_output(g.gelu(g.layernorm(g.matmul(x, w), gamma, beta)));
  g.mark_output(g.sum(x, 1));
  const engine::Inputs in = {{"x", random_uniform(DType::f16, {64, 512}, -1, 1, 18)},
                             {"w", random_uniform(DType::f16, {512, 300}, -0.1, 0.1, 19)},
                             {"gamma", random_uniform(DType::f16, {300}, 0.5, 1.5, 20)},
                             {"beta", random_uniform(DType::f16, {300}, -0.5, 0.5, 21)}};
  engine::EngineOptions one, two;
  one.threads = 1;
  two.threads = 2;
  const auto fused1 = testsupport::run_fused(g, in, one).outputs;
  const auto fused2 = testsupport::run_fused(g, in, two).outputs;
  const auto fused2_again = testsupport::run_fused(g, in, two).outputs;
  const auto eager1 = testsupport::run_eager(g, in, one).outputs;
  const auto eager2 = testsupport::run_eager(g, in, two).outputs;
  for (std::size_t o = 0; o < fused1.size(); ++o) {
    EXPECT_THAT(fused2[o], BitEqual(fused1[o]));
    EXPECT_THAT(fused2_again[o], BitEqual(fused1[o]));
    EXPECT_THAT(eager2[o], BitEqual(eager1[o]));
  }
}

// A GEMM of one row tile is cut into column tiles across the pool (the weight gradients' GEMMs);
// each element must keep the sum order, and so the bits, of one Eigen call over the whole product,
// for every thread count, and a call from inside a pool task (a fused tile task) must run inline.
TEST(GemmService, ColumnTilesGiveTheBitsOfOneCall) {
  using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  cpu::ThreadPool one(1), two(2);
  const CounterRng rng(77);
  std::uint64_t draw = 0;
  for (std::int64_t m : {1, 2, 37, 128}) {
    for (std::int64_t k : {3, 32, 128, 512, 1000}) {
      for (std::int64_t n : {97, 128, 143, 384, 512, 1000}) {
        std::vector<float> a(std::size_t(m * k)), b(std::size_t(k * n)), whole(std::size_t(m * n));
        for (float& v : a) v = float(rng.uniform(draw++) * 2 - 1);
        for (float& v : b) v = float(rng.uniform(draw++) * 2 - 1);
        Eigen::Map<Matrix>(whole.data(), m, n).noalias() =
            Eigen::Map<const Matrix>(a.data(), m, k) * Eigen::Map<const Matrix>(b.data(), k, n);
        const std::string where = fmt::format("m {} k {} n {}", m, k, n);
        for (cpu::ThreadPool* pool : {&one, &two}) {
          std::vector<float> tiled(whole.size(), -1.0f);
          cpu::gemm_f32(*pool, m, n, k, a.data(), b.data(), tiled.data());
          EXPECT_EQ(std::memcmp(tiled.data(), whole.data(), whole.size() * sizeof(float)), 0)
              << where << ", " << pool->threads() << " threads";
        }
        std::vector<float> nested(whole.size(), -1.0f);
        two.parallel_for(2, [&](std::int64_t task) {
          if (task == 0) cpu::gemm_f32(two, m, n, k, a.data(), b.data(), nested.data());
        });
        EXPECT_EQ(std::memcmp(nested.data(), whole.data(), whole.size() * sizeof(float)), 0)
            << where << ", inside a task";
      }
    }
  }
}

}  // namespace
}  // namespace fusebench
