// The fusion planner's decisions, asserted as kernel counts and memberships (tinygrad's
// check_schedule), and the emitted kernels' structure.
#include "cpp_renderer.hpp"
#include "engine_test_support.hpp"
#include "fusebench/engine/planner.hpp"
#include "fusebench/testing/matchers.hpp"

#include <fmt/ranges.h>

#include <set>

namespace fusebench {
namespace {
using engine::Graph;
using engine::KernelKind;
using engine::OpKind;
using engine::plan_fusion;

std::vector<std::string> member_names(const Graph& g, const engine::KernelPlan& k) {
  std::vector<std::string> out;
  for (auto id : k.members) out.push_back(std::string(engine::op_name(g.node(id).kind)));
  return out;
}

TEST(Plan, ElementwiseChainFusesIntoOneKernel) {
  testsupport::ElementwiseChain chain(DType::f16, {16, 32});
  const auto plan = plan_fusion(chain.graph);
  ASSERT_EQ(plan.kernels.size(), 1u) << plan.describe(chain.graph);
  EXPECT_EQ(member_names(chain.graph, plan.kernels[0]),
            (std::vector<std::string>{"mul", "add", "gelu", "mul"}));
  EXPECT_EQ(plan.kernels[0].loads.size(), 4u);
  EXPECT_EQ(plan.kernels[0].stores.size(), 1u);  // intermediates never reach memory
  EXPECT_EQ(plan.passes.front(), "group_compute_ops");
}

TEST(Plan, MatmulAddLayernormGeluIsGemmWithEpilogueThenRowwiseWithEpilogue) {
  Graph g;
  const auto x = g.input("x", {2, 8, 16}, DType::f16);
  const auto w = g.input("w", {16, 32}, DType::f16);
  const auto b = g.input("b", {32}, DType::f16);
  const auto gamma = g.input("gamma", {32}, DType::f16);
  const auto beta = g.input("beta", {32}, DType::f16);
  g.mark_output(g.gelu(g.layernorm(g.add(g.matmul(x, w), b), gamma, beta)));
  const auto plan = plan_fusion(g);
  ASSERT_EQ(plan.kernels.size(), 2u) << plan.describe(g);
  EXPECT_EQ(plan.kernels[0].kind, KernelKind::Matmul);
  EXPECT_EQ(member_names(g, plan.kernels[0]), (std::vector<std::string>{"matmul", "add"}));
  EXPECT_EQ(plan.kernels[1].kind, KernelKind::Rowwise);
  EXPECT_EQ(member_names(g, plan.kernels[1]), (std::vector<std::string>{"layernorm", "gelu"}));
}

TEST(Plan, DataMovementChainsFoldIntoOneKernel) {
  Graph g;
  const auto a = g.input("a", {4, 6}, DType::bf16);
  const auto b = g.input("b", {6, 4}, DType::bf16);
  g.mark_output(g.concat({g.transpose(a, 0, 1), b}, 0));  // transpose -> concat
  const auto plan = plan_fusion(g);
  ASSERT_EQ(plan.kernels.size(), 1u) << plan.describe(g);
  Graph h;
  const auto x = h.input("x", {4, 8}, DType::f16);
  const auto parts = h.split(x, 1, {4, 4});
  // split -> transpose -> concat
  h.mark_output(h.concat({h.transpose(parts[0], 0, 1), h.transpose(parts[1], 0, 1)}, 0));
  EXPECT_EQ(plan_fusion(h).kernels.size(), 1u) << plan_fusion(h).describe(h);
}

// A concat of permuted heads read by two matmuls and a sum (attention's q/k/v gradients) is
// written once by a copy kernel that all three load; a concat read by one kernel stays folded.
TEST(Plan, AConcatReadByTwoOrMoreKernelsIsMaterialisedOnce) {
  Graph g;
  const auto q = g.input("q", {2, 4, 8, 4}, DType::bf16);
  const auto k = g.input("k", {2, 4, 8, 4}, DType::bf16);
  const auto x = g.input("x", {16, 16}, DType::bf16);
  const auto w = g.input("w", {16, 32}, DType::bf16);
  auto merge = [&](engine::NodeId h) { return g.reshape(g.permute(h, {0, 2, 1, 3}), {16, 16}); };
  const auto both = g.concat({merge(q), merge(k)}, 1);  // [16, 32]
  g.mark_output(g.matmul(g.transpose(x, 0, 1), both));  // weight gradient
  g.mark_output(g.matmul(both, g.transpose(w, 0, 1)));  // input gradient
  g.mark_output(g.sum(both, 0));                        // bias gradient
  const auto plan = plan_fusion(g);
  ASSERT_EQ(plan.kernels.size(), 4u) << plan.describe(g);
  EXPECT_EQ(plan.passes.front(), "materialise_shared_concats");
  EXPECT_EQ(plan.kernels[0].anchor, both);
  EXPECT_EQ(plan.kernels[0].stores, std::vector<engine::NodeId>{both});
  for (std::size_t i = 1; i < plan.kernels.size(); ++i) {
    const auto& loads = plan.kernels[i].loads;
    EXPECT_NE(std::find(loads.begin(), loads.end(), both), loads.end())
        << plan.kernels[i].name << " does not load the concat";
  }
  // eager and fused agree (bf16 values copied, not rounded again)
  const engine::Inputs in = {{"q", random_uniform(DType::bf16, {2, 4, 8, 4}, -1, 1, 61)},
                             {"k", random_uniform(DType::bf16, {2, 4, 8, 4}, -1, 1, 62)},
                             {"x", random_uniform(DType::bf16, {16, 16}, -1, 1, 63)},
                             {"w", random_uniform(DType::bf16, {16, 32}, -1, 1, 64)}};
  const auto eager = testsupport::run_eager(g, in).outputs;
  const auto fused = testsupport::run_fused(g, in).outputs;
  for (std::size_t o = 0; o < 2; ++o)
    EXPECT_THAT(fused[o], testing::BitEqual(eager[o])) << "matmul output " << o;
  Graph single;
  const auto a = single.input("a", {4, 6}, DType::bf16);
  single.mark_output(
      single.matmul(single.concat({a, a}, 1), single.input("b", {12, 3}, DType::bf16)));
  EXPECT_EQ(plan_fusion(single).kernels.size(), 1u) << plan_fusion(single).describe(single);
}

TEST(Plan, ElementwisePrologueFoldsIntoReductionAndSoftmax) {
  Graph g;
  const auto x = g.input("x", {8, 64}, DType::f16);
  const auto y = g.input("y", {8, 64}, DType::f16);
  g.mark_output(g.mul_scalar(g.sum(g.mul(x, y), -1), 0.5));
  const auto plan = plan_fusion(g);
  ASSERT_EQ(plan.kernels.size(), 1u) << plan.describe(g);
  EXPECT_EQ(plan.kernels[0].prologue.size(), 1u);
  EXPECT_EQ(member_names(g, plan.kernels[0]),
            (std::vector<std::string>{"mul", "sum", "mul_scalar"}));
  Graph s;
  const auto q = s.input("q", {4, 32}, DType::f16);
  s.mark_output(s.softmax(s.mul_scalar(q, 0.125)));
  EXPECT_EQ(plan_fusion(s).kernels.size(), 1u);
}

TEST(Plan, IntermediateUsedOutsideItsKernelIsStored) {
  Graph g;
  const auto x = g.input("x", {8, 16}, DType::f32);
  const auto e = g.exp(x);
  const auto s = g.sum(e, 1, true);  // e feeds the sum and the division below
  g.mark_output(g.div(e, g.expand(s, {8, 16})));
  const auto plan = plan_fusion(g);
  ASSERT_EQ(plan.kernels.size(), 3u) << plan.describe(g);  // exp | sum | div
  EXPECT_EQ(plan.kernels[0].stores, std::vector<engine::NodeId>{e});
}

// The planner's pass table: each name once, in the order the passes run, and a plan records the
// passes that applied by those names (the README lists them; users read them in plan.describe).
TEST(Plan, PassesAreRecordedByTheirTableNamesInTableOrder) {
  const std::vector<std::string>& names = engine::fusion_pass_names();
  EXPECT_EQ(names,
            (std::vector<std::string>{"materialise_shared_concats", "group_compute_ops",
                                      "fold_prologues_into_reductions",
                                      "copy_kernels_for_view_outputs", "assign_loads_and_stores"}));
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size())
      << "a pass name is repeated";
  // No shared concat: every pass but the first applies.
  testsupport::ElementwiseChain chain(DType::f16, {16, 32});
  EXPECT_EQ(plan_fusion(chain.graph).passes,
            std::vector<std::string>(names.begin() + 1, names.end()));
  // A concat read by two matmuls: all of them.
  Graph g;
  const auto a = g.input("a", {4, 6}, DType::f32);
  const auto both = g.concat({a, a}, 1);
  g.mark_output(g.matmul(both, g.input("b", {12, 3}, DType::f32)));
  g.mark_output(g.matmul(g.input("c", {2, 4}, DType::f32), both));
  EXPECT_EQ(plan_fusion(g).passes, names) << plan_fusion(g).describe(g);
}

// Op classes are a column of the op table, not ranges of the enum: exactly the five views are
// data movement, and no kind is in two classes.
TEST(Graph, OpClassesAreExplicit) {
  const std::set<OpKind> views = {OpKind::Permute, OpKind::Reshape, OpKind::Slice, OpKind::Concat,
                                  OpKind::Expand};
  const std::set<OpKind> reductions = {OpKind::Sum, OpKind::Mean, OpKind::Max};
  for (int k = 0; k <= int(OpKind::Expand); ++k) {
    const OpKind kind = OpKind(k);
    EXPECT_NE(engine::op_name(kind), "?") << "kind " << k << " has no row in the op table";
    EXPECT_EQ(engine::is_data_movement(kind), views.count(kind) == 1) << engine::op_name(kind);
    EXPECT_EQ(engine::is_reduction(kind), reductions.count(kind) == 1) << engine::op_name(kind);
    EXPECT_LE(int(engine::is_data_movement(kind)) + int(engine::is_reduction(kind)) +
                  int(engine::is_elementwise(kind)),
              1)
        << engine::op_name(kind);
  }
  EXPECT_TRUE(engine::is_elementwise(OpKind::CausalMask));
  EXPECT_TRUE(engine::is_elementwise(OpKind::Cast));
  EXPECT_FALSE(engine::is_elementwise(OpKind::Input));
  EXPECT_FALSE(engine::is_elementwise(OpKind::GatherRows));
  EXPECT_FALSE(engine::is_elementwise(OpKind::LayerNorm));
}

// The renderer calls the device's GEMM in the device's own row tiles (kGemmRowTile, one constant).
TEST(Emit, MatmulKernelsUseTheDevicesGemmRowTile) {
  auto lowering_of = [](std::int64_t batches, std::int64_t m) {
    Graph g;
    g.mark_output(
        g.matmul(g.input("a", {batches, m, 8}, DType::f32), g.input("b", {8, 4}, DType::f32)));
    const auto lowering = cpu::emit_cpp_kernel(g, plan_fusion(g).kernels.at(0), {}).lowering;
    return fmt::format("{}", fmt::join(lowering, "; "));
  };
  EXPECT_THAT(lowering_of(1, cpu::kGemmRowTile + 1),
              ::testing::HasSubstr(fmt::format("2 row tiles of {}", cpu::kGemmRowTile)));
  EXPECT_THAT(
      lowering_of(3, cpu::kGemmRowTile),
      ::testing::HasSubstr(fmt::format("3 GEMMs of {} rows, one task each", cpu::kGemmRowTile)));
  EXPECT_THAT(lowering_of(3, cpu::kGemmRowTile + 1),
              ::testing::Not(::testing::HasSubstr("one task each")));
}

TEST(Emit, SourceNamesKnobsAndLoweringDecisions) {
  Graph g;
  const auto x = g.input("x", {8}, DType::f16);
  g.mark_output(g.mul_scalar(x, 0.7));
  const auto plan = plan_fusion(g);
  engine::EngineOptions immediate;
  const auto a = cpu::emit_cpp_kernel(g, plan.kernels[0], immediate);
  EXPECT_NE(a.source.find("0x1.666666p-1f"), std::string::npos)
      << "fp32 immediate 0.7 expected in the source";
  EXPECT_TRUE(a.constants.empty());
  engine::EngineOptions broadcast;
  broadcast.scalar_lowering = engine::ScalarLowering::BroadcastTensor;
  const auto b = cpu::emit_cpp_kernel(g, plan.kernels[0], broadcast);
  ASSERT_EQ(b.constants.size(), 1u);
  EXPECT_EQ(b.constants[0].dtype(), DType::f16);
  EXPECT_EQ(b.constants[0].value_at(0), 0.7001953125);  // 0.7 rounded to fp16 (1434 * 2^-11)
  EXPECT_NE(b.lowering[0].find("broadcast tensor f16"), std::string::npos) << b.lowering[0];
}

}  // namespace
}  // namespace fusebench
