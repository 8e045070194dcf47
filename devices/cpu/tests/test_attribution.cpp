// Attribution of eager/fused differences to a mechanism at an op: planted mechanisms are found
// (and their switch makes fused bit-equal to eager), a difference no knob explains stays
// unexplained, the search is 1-minimal, and switches parse back from their text.
#include "cpu_device.hpp"
#include "engine_test_support.hpp"
#include "fusebench/compare.hpp"
#include "fusebench/engine/attribution.hpp"
#include "fusebench/engine/planner.hpp"

namespace fusebench {
namespace {
using engine::Attribution;
using engine::EngineOptions;
using engine::Graph;
using engine::Switch;
using testsupport::run_eager;
using testsupport::run_fused;

bool same_bits(const Tensor& a, const Tensor& b) { return bit_equal(a, b).equal; }

// Knobs of one switch, for candidate lists written out by hand.
struct OpKnobsFactory {
  engine::OpKnobs rounding() const {
    engine::OpKnobs k;
    k.emulate_per_op_rounding = true;
    return k;
  }
  engine::OpKnobs split() const {
    engine::OpKnobs k;
    k.split_after = true;
    return k;
  }
  engine::OpKnobs compiler(const std::string& name, const std::string& value) const {
    engine::OpKnobs k;
    k.compiler_options[name] = value;
    return k;
  }
};

// Attributes the difference between eager (knobs `eager`) and fused (knobs `fused`) on one input,
// with bit equality to eager as the criterion.
Attribution attribute_planted(const Graph& g, const engine::Inputs& in, const EngineOptions& eager,
                              const EngineOptions& fused) {
  const Tensor want = run_eager(g, in, eager).outputs[0];
  return engine::attribute(engine::candidate_switches(g, eager, fused),
                           [&](const std::vector<Switch>& switches) {
                             const EngineOptions o = engine::with_switches(fused, switches);
                             return same_bits(run_fused(g, in, o).outputs[0], want);
                           });
}

std::vector<std::string> described(const Attribution& a) {
  std::vector<std::string> out;
  for (const Switch& s : a.switches) out.push_back(s.mechanism + " at " + s.op + ": " + s.token());
  return out;
}

// The planted difference must exist, be attributed to exactly `expected`, and the switches must
// make fused bit-equal to eager.
void expect_attributed(const Graph& g, const engine::Inputs& in, const EngineOptions& eager,
                       const EngineOptions& fused, const std::vector<std::string>& expected) {
  const Tensor want = run_eager(g, in, eager).outputs[0];
  ASSERT_FALSE(same_bits(run_fused(g, in, fused).outputs[0], want)) << "nothing was planted";
  const Attribution a = attribute_planted(g, in, eager, fused);
  ASSERT_EQ(a.status, Attribution::Status::Explained) << a.reason;
  std::vector<std::string> got = described(a), sorted_expected = expected;
  std::sort(got.begin(), got.end());
  std::sort(sorted_expected.begin(), sorted_expected.end());
  EXPECT_EQ(got, sorted_expected);
  const EngineOptions applied = engine::with_switches(fused, a.switches);
  EXPECT_TRUE(same_bits(run_fused(g, in, applied).outputs[0], want));
}

TEST(Attribution, BroadcastScalarAgainstImmediate) {
  Graph g;
  const auto x = g.input("x", {4096}, DType::f16), y = g.input("y", {4096}, DType::f16);
  const auto scaled = g.mul_scalar(x, 0.7);
  g.set_name(scaled, "scaled");
  g.mark_output(g.add(scaled, y));
  const engine::Inputs in{{"x", random_uniform(DType::f16, {4096}, -2, 2, 5, 0)},
                          {"y", random_uniform(DType::f16, {4096}, -2, 2, 5, 1)}};
  EngineOptions eager, fused;
  eager.scalar_lowering = engine::ScalarLowering::BroadcastTensor;
  fused.emulate_per_op_rounding = true;  // the lowering is the only difference planted
  expect_attributed(g, in, eager, fused, {"scalar lowering at scaled: scalar=broadcast"});
}

TEST(Attribution, OneOpBoundaryKeptInF32) {
  testsupport::ElementwiseChain chain(DType::f16, {4096}, 3);
  // eager's rounding everywhere except at gelu's boundary
  EngineOptions fused;
  for (const auto& n : chain.graph.nodes()) {
    if (n.kind != engine::OpKind::Input && n.kind != engine::OpKind::GeluErf)
      fused.per_op[n.name].emulate_per_op_rounding = true;
  }
  std::string gelu;
  for (const auto& n : chain.graph.nodes()) {
    if (n.kind == engine::OpKind::GeluErf) gelu = n.name;
  }
  expect_attributed(chain.graph, chain.inputs, {}, fused,
                    {fmt::format("per-op rounding at {}: rounding=on", gelu)});
}

TEST(Attribution, EveryUnroundedBoundaryOfAPlainFusedChain) {
  testsupport::ElementwiseChain chain(DType::bf16, {4096}, 4);
  const Attribution a = attribute_planted(chain.graph, chain.inputs, {}, {});
  ASSERT_EQ(a.status, Attribution::Status::Explained) << a.reason;
  for (const Switch& s : a.switches) EXPECT_EQ(s.mechanism, "per-op rounding");
  EXPECT_TRUE(same_bits(
      run_fused(chain.graph, chain.inputs, engine::with_switches({}, a.switches)).outputs[0],
      run_eager(chain.graph, chain.inputs).outputs[0]));
}

TEST(Attribution, FmaContraction) {
  Graph g;
  const auto a = g.input("a", {8192}, DType::f32), b = g.input("b", {8192}, DType::f32),
             c = g.input("c", {8192}, DType::f32);
  const auto product = g.mul(a, b);
  g.mark_output(g.add(product, c));
  const engine::Inputs in{{"a", random_uniform(DType::f32, {8192}, -1, 1, 6, 0)},
                          {"b", random_uniform(DType::f32, {8192}, -1, 1, 6, 1)},
                          {"c", random_uniform(DType::f32, {8192}, -1, 1, 6, 2)}};
  EngineOptions fused;
  fused.fma_contraction = true;
  if (same_bits(run_fused(g, in, fused).outputs[0], run_eager(g, in).outputs[0]))
    GTEST_SKIP() << "the JIT compiler did not contract a * b + c on this machine";
  expect_attributed(g, in, {}, fused,
                    {fmt::format("FMA contraction at {}: fma=off", g.node(product).name)});
}

TEST(Attribution, ReductionTile) {
  Graph g;
  const auto x = g.input("x", {4, 4096}, DType::f32);
  const auto total = g.sum(x, 1);
  g.mark_output(total);
  const engine::Inputs in{{"x", random_uniform(DType::f32, {4, 4096}, -1, 1, 7, 0)}};
  EngineOptions fused;
  fused.reduce_tile = 64;
  expect_attributed(g, in, {}, fused,
                    {fmt::format("reduction order at {}: tile=1024", g.node(total).name)});
}

TEST(Attribution, TwoMechanismsInOneKernelNeedBoth) {
  Graph g;
  const auto x = g.input("x", {4096}, DType::f16);
  const auto scaled = g.mul_scalar(x, 0.7);
  const auto root = g.rsqrt(scaled);
  g.mark_output(root);
  const engine::Inputs in{{"x", random_uniform(DType::f16, {4096}, 0.5, 2, 8, 0)}};
  EngineOptions eager, fused;
  eager.scalar_lowering = engine::ScalarLowering::BroadcastTensor;
  fused.rsqrt = engine::ApproxMode::NewtonBitTrick;
  fused.rsqrt_newton_iters = 0;
  fused.emulate_per_op_rounding = true;
  expect_attributed(
      g, in, eager, fused,
      {fmt::format("scalar lowering at {}: scalar=broadcast", g.node(scaled).name),
       fmt::format("rsqrt approximation at {}: rsqrt=ieee rsqrt_iters=2", g.node(root).name)});
}

// An "eager" that rounds the exact result once (what no switch of the engine reproduces).
TEST(Attribution, ADifferenceNoKnobExplainsStaysUnexplained) {
  testsupport::ElementwiseChain chain(DType::f16, {4096}, 9);
  const Tensor correctly_rounded =
      engine::fp64_reference(chain.graph, chain.inputs)[0].to(DType::f16);
  const auto candidates = engine::candidate_switches(chain.graph, {}, {});
  ASSERT_FALSE(candidates.empty());
  const Attribution a = engine::attribute(candidates, [&](const std::vector<Switch>& switches) {
    const EngineOptions o = engine::with_switches({}, switches);
    return same_bits(run_fused(chain.graph, chain.inputs, o).outputs[0], correctly_rounded);
  });
  EXPECT_EQ(a.status, Attribution::Status::Unexplained);
  EXPECT_TRUE(a.switches.empty());
  EXPECT_NE(a.reason.find("no switch removes it"), std::string::npos) << a.reason;
  EXPECT_EQ(a.to_json()["status"], "unexplained");
}

TEST(Attribution, SearchIsOneMinimal) {
  std::vector<Switch> candidates;
  for (int i = 0; i < 9; ++i)
    candidates.push_back({fmt::format("op{}", i), "", DType::f16, "m", {}});
  int calls = 0;
  const Attribution a = engine::attribute(candidates, [&](const std::vector<Switch>& s) {
    ++calls;
    const auto has = [&](const std::string& op) {
      return std::any_of(s.begin(), s.end(), [&](const Switch& w) { return w.op == op; });
    };
    return has("op2") && has("op7");
  });
  ASSERT_EQ(a.status, Attribution::Status::Explained);
  ASSERT_EQ(a.switches.size(), 2u);
  EXPECT_EQ(a.switches[0].op, "op2");
  EXPECT_EQ(a.switches[1].op, "op7");
  EXPECT_EQ(a.reruns, calls);  // each distinct set is tried once
}

// Switches that interact: op3's alone removes the difference, op5's undoes it, so all together
// fail. The difference is still explained, by op3's switch.
TEST(Attribution, ASwitchThatWorksAloneIsFoundWhenAllTogetherFail) {
  std::vector<Switch> candidates;
  for (int i = 0; i < 6; ++i)
    candidates.push_back({fmt::format("op{}", i), "", DType::f16, "m", {}});
  const Attribution a = engine::attribute(candidates, [&](const std::vector<Switch>& s) {
    const auto has = [&](const std::string& op) {
      return std::any_of(s.begin(), s.end(), [&](const Switch& w) { return w.op == op; });
    };
    return has("op3") && !has("op5");
  });
  ASSERT_EQ(a.status, Attribution::Status::Explained) << a.reason;
  ASSERT_EQ(a.switches.size(), 1u);
  EXPECT_EQ(a.switches[0].op, "op3");
  EXPECT_TRUE(a.alternatives.empty());
}

TEST(Attribution, NoCandidateIsUnexplainedWithItsReason) {
  const Attribution a = engine::attribute({}, [](const std::vector<Switch>&) { return true; });
  EXPECT_EQ(a.status, Attribution::Status::Unexplained);
  EXPECT_NE(a.reason.find("no candidate switch"), std::string::npos);
}

// A device that has graph breaks and one graph-wide option but no per-op knob (a framework).
TEST(Attribution, AFrameworkLikeDeviceGetsSplitsAndGraphWideSwitches) {
  testsupport::ElementwiseChain chain(DType::f16, {64}, 12);
  const auto unsupported = [](const EngineOptions& o) -> std::string {
    for (const auto& [op, knobs] : o.per_op) {
      if (knobs.describe() != "split") return "per-op " + knobs.describe() + " at " + op;
    }
    return "";
  };
  std::vector<std::string> refused;
  const auto candidates = engine::realisable_switches(chain.graph, {}, {}, unsupported, refused);
  std::vector<std::string> got;
  for (const Switch& s : candidates) got.push_back(s.mechanism + "@" + s.op + ":" + s.token());
  std::vector<std::string> ops;
  for (const auto& n : chain.graph.nodes()) {
    if (n.kind != engine::OpKind::Input) ops.push_back(n.name);
  }
  // splits after the three ops that feed another; per-op rounding at the whole graph
  EXPECT_EQ(got, (std::vector<std::string>{
                     "kernel split@" + ops[0] + ":split", "kernel split@" + ops[1] + ":split",
                     "kernel split@" + ops[2] + ":split", "per-op rounding@:rounding=on"}));
  // per-op rounding at each unrounded op, in one line
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].rfind(fmt::format("per-op rounding at {}, {}, {}: per-op rounding=on at {}",
                                         ops[0], ops[1], ops[2], ops[0]),
                             0),
            0u)
      << refused[0];
  const EngineOptions graph_wide = engine::with_switches({}, {candidates.back()});
  EXPECT_TRUE(graph_wide.emulate_per_op_rounding);
  EXPECT_TRUE(graph_wide.per_op.empty());
}

// A framework's compile option is offered last, as a switch of the whole graph, where the graph
// holds an op it applies to; the search names it when it alone removes the difference.
TEST(Attribution, CompilerOptionsAreGraphWideSwitchesWhereTheyApply) {
  testsupport::ElementwiseChain chain(DType::f16, {64}, 12);
  const auto per_op_refused = [](const EngineOptions& o) -> std::string {
    return o.per_op.empty() ? "" : "no per-op switch";
  };
  const std::vector<engine::CompilerSwitch> offered = {
      {"pattern_matcher", "false", "pattern rewrite", {}},
      {"cpp.use_two_step_variance_threshold",
       "0",
       "variance algorithm",
       {engine::OpKind::LayerNorm}}};
  std::vector<std::string> refused;
  const auto candidates =
      engine::realisable_switches(chain.graph, {}, {}, per_op_refused, refused, offered);
  ASSERT_FALSE(candidates.empty());
  const Switch& last = candidates.back();
  EXPECT_EQ(last.op, "") << "a compile option is graph-wide";
  EXPECT_EQ(last.token(), "compiler:pattern_matcher=false");
  EXPECT_EQ(last.mechanism, "pattern rewrite");
  for (const Switch& s : candidates) EXPECT_EQ(s.token().find("variance"), std::string::npos);
  // the difference goes with the pattern matcher off, or with per-op rounding over the graph
  const Attribution a = engine::attribute(candidates, [&](const std::vector<Switch>& set) {
    const EngineOptions o = engine::with_switches({}, set);
    return o.compiler_options.count("pattern_matcher") == 1 || o.emulate_per_op_rounding;
  });
  ASSERT_EQ(a.status, Attribution::Status::Explained);
  ASSERT_EQ(a.switches.size(), 1u);
  EXPECT_EQ(a.switches[0].token(), "rounding=on") << "ddmin keeps the first chunk that removes it";
  ASSERT_EQ(a.alternatives.size(), 1u);
  EXPECT_EQ(a.alternatives[0].token(), "compiler:pattern_matcher=false");
  EXPECT_TRUE(a.alternatives_complete);
  // a budget that runs out while the alternatives are tried keeps the minimal set
  int runs = 0;
  const Attribution capped = engine::attribute(candidates, [&](const std::vector<Switch>& set) {
    if (++runs > 2) throw engine::SearchBudgetSpent{};
    return engine::with_switches({}, set).emulate_per_op_rounding;
  });
  ASSERT_EQ(capped.status, Attribution::Status::Explained);
  EXPECT_EQ(capped.switches.size(), 1u);
  EXPECT_FALSE(capped.alternatives_complete);
  // the engine has no compile options: its devices refuse them with the option named
  EngineOptions o = engine::with_switches({}, a.alternatives);
  EXPECT_NE(cpu::make_cpu_device()->unsupported_knobs(o, true).find("pattern_matcher"),
            std::string::npos);
  EXPECT_NE(o.describe().find("compiler:pattern_matcher=false"), std::string::npos);
  EXPECT_EQ(o.to_json()["compiler_options"]["pattern_matcher"], "false");
}

// Per-op switches are searched before graph-wide ones: a graph-wide switch explains only where no
// per-op switch removes the difference, and then reads not localised.
TEST(Attribution, AGraphWideSwitchExplainsOnlyWhereNoPerOpSwitchDoes) {
  OpKnobsFactory knobs;
  const std::vector<Switch> candidates = {
      {"mul1", "mul", DType::f16, "per-op rounding", knobs.rounding()},
      {"add2", "add", DType::f16, "kernel split", knobs.split()},
      {"", "graph", DType::f16, "fusion pass", knobs.compiler("xla_disable_hlo_passes", "fusion")}};
  auto has = [](const std::vector<Switch>& set, const std::string& op) {
    return std::any_of(set.begin(), set.end(), [&](const Switch& s) { return s.op == op; });
  };
  // the per-op rounding and the graph-wide pass both remove it: the per-op one is the explanation
  const Attribution at_op = engine::attribute(
      candidates, [&](const std::vector<Switch>& set) { return has(set, "mul1") || has(set, ""); });
  ASSERT_EQ(at_op.status, Attribution::Status::Explained);
  EXPECT_EQ(described(at_op), (std::vector<std::string>{"per-op rounding at mul1: rounding=on"}));
  EXPECT_TRUE(at_op.localised);
  ASSERT_FALSE(at_op.tried.empty());
  EXPECT_EQ(at_op.tried[0].first.size(), 2u) << "the per-op switches together first";
  ASSERT_EQ(at_op.alternatives.size(), 1u);
  EXPECT_EQ(at_op.alternatives[0].op, "") << "the graph-wide pass, listed as an alternative";
  // only the graph-wide pass removes it: found after every per-op set failed, not localised
  const Attribution whole =
      engine::attribute(candidates, [&](const std::vector<Switch>& set) { return has(set, ""); });
  ASSERT_EQ(whole.status, Attribution::Status::Explained);
  ASSERT_EQ(whole.switches.size(), 1u);
  EXPECT_EQ(whole.switches[0].op, "");
  EXPECT_FALSE(whole.localised);
  std::vector<std::size_t> sizes;
  for (const auto& [set, removed] : whole.tried) sizes.push_back(set.size());
  EXPECT_EQ(sizes, (std::vector<std::size_t>{2, 1, 1, 3, 1})) << "per-op together, alone; then all";
  // nothing removes it: what was tried is in the evidence
  const Attribution none =
      engine::attribute(candidates, [](const std::vector<Switch>&) { return false; });
  ASSERT_EQ(none.status, Attribution::Status::Unexplained);
  const nlohmann::json j = none.to_json();
  ASSERT_EQ(j["tried"].size(), none.tried.size());
  EXPECT_EQ(j["tried"][0]["switches"], (nlohmann::json{"rounding=on at mul1", "split at add2"}));
  EXPECT_EQ(j["tried"][0]["removed"], false);
  EXPECT_FALSE(j["localised"].get<bool>());
}

// A framework (CandidateOps::EveryOp) that realises per-op rounding and a split (xla): rounding at
// every 16-bit op, the output included; a split after each op that feeds another; then the
// graph-wide form of per-op rounding, although per-op rounding is realised.
TEST(Attribution, AFrameworkWithPerOpRoundingGetsItAtEveryOpThenSplitsThenGraphWide) {
  testsupport::ElementwiseChain chain(DType::bf16, {64}, 12);
  const auto rounding_and_split = [](const EngineOptions& o) -> std::string {
    for (const auto& [op, knobs] : o.per_op) {
      engine::OpKnobs rest = knobs;
      rest.split_after = false;
      rest.emulate_per_op_rounding.reset();
      if (!rest.empty()) return "only rounding and a split at " + op;
    }
    return "";
  };
  std::vector<std::string> refused;
  const auto candidates =
      engine::realisable_switches(chain.graph, {}, {}, rounding_and_split, refused, {},
                                  engine::SwitchScope::PerOp, engine::CandidateOps::EveryOp);
  std::vector<std::string> ops, got;
  for (const auto& n : chain.graph.nodes()) {
    if (n.kind != engine::OpKind::Input) ops.push_back(n.name);
  }
  for (const Switch& s : candidates) got.push_back(s.token() + "@" + s.op);
  ASSERT_EQ(ops.size(), 4u);
  EXPECT_EQ(got, (std::vector<std::string>{"rounding=on@" + ops[0], "rounding=on@" + ops[1],
                                           "rounding=on@" + ops[2], "rounding=on@" + ops[3],
                                           "split@" + ops[0], "split@" + ops[1], "split@" + ops[2],
                                           "rounding=on@"}));
  EXPECT_TRUE(refused.empty());
}

TEST(FusionSwitch, SplitAfterAnOpStoresItAndEqualsRoundingThere) {
  testsupport::ElementwiseChain chain(DType::f16, {4096}, 10);
  std::string add;
  for (const auto& n : chain.graph.nodes()) {
    if (n.kind == engine::OpKind::Add) add = n.name;
  }
  EXPECT_EQ(engine::plan_fusion(chain.graph).kernels.size(), 1u);
  EXPECT_EQ(engine::plan_fusion(chain.graph, {add}).kernels.size(), 2u);
  EngineOptions split, rounded;
  split.per_op[add].split_after = true;
  rounded.per_op[add].emulate_per_op_rounding = true;
  const auto result = run_fused(chain.graph, chain.inputs, split);
  EXPECT_EQ(result.trace.size(), 2u);
  EXPECT_TRUE(
      same_bits(result.outputs[0], run_fused(chain.graph, chain.inputs, rounded).outputs[0]));
  try {
    engine::plan_fusion(chain.graph, {"no_such_op"});
    FAIL() << "an unknown op was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_op"), std::string::npos);
  }
}

TEST(FusionSwitch, OnlyTheSwitchedKernelsSourceChanges) {
  Graph g;
  const auto x = g.input("x", {2, 1024}, DType::f16);
  const auto first = g.sum(g.mul_scalar(x, 3.0), 1);
  const auto second = g.sum(g.exp(x), 1);
  g.mark_output(first);
  g.mark_output(second);
  const engine::Inputs in{{"x", random_uniform(DType::f16, {2, 1024}, -1, 1, 11, 0)}};
  const auto plain = run_fused(g, in);
  EngineOptions switched;
  switched.per_op[g.node(second).name].reduce_tile = 128;
  const auto with = run_fused(g, in, switched);
  ASSERT_EQ(plain.trace.size(), 2u);
  ASSERT_EQ(with.trace.size(), 2u);
  EXPECT_EQ(plain.trace[0].source_sha256, with.trace[0].source_sha256);
  EXPECT_NE(plain.trace[1].source_sha256, with.trace[1].source_sha256);
}

TEST(FusionSwitch, TextRoundTripsAndBadTokensAreNamed) {
  for (const std::string text :
       {"rounding=on", "split", "fma=off", "scalar=broadcast", "tile=256", "acc=storage",
        "rsqrt=newton-hw rsqrt_iters=1", "div=ieee", "tile=64 rounding=on split",
        "compiler:pattern_matcher=false", "compiler:xla_disable_hlo_passes=fusion"}) {
    EXPECT_EQ(engine::parse_switch(text).describe(), text);
  }
  EXPECT_EQ(engine::mechanism_of(engine::parse_switch("rounding=on split")),
            "per-op rounding + kernel split");
  EXPECT_EQ(engine::mechanism_of(engine::parse_switch("compiler:max_fusion_size=1")),
            "compiler option max_fusion_size");
  for (const std::string bad : {"rounding=maybe", "fuse=never", "tile=x", "", "scalar=vector",
                                "compiler:", "compiler:x="}) {
    try {
      engine::parse_switch(bad);
      FAIL() << "accepted " << bad;
    } catch (const InputError& e) {
      if (!bad.empty()) {
        EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
      }
    }
  }
  EngineOptions o;
  o.per_op["x"].reduce_tile = 0;
  try {
    o.validate();
    FAIL() << "tile 0 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("per-op knobs of x"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fusebench
