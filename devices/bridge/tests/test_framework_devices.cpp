// Tests of the framework devices (torch, xla) and their Python bridge. Each test skips with the
// device's own reason (e.g. "torch cannot be imported ...: install it with ...") where the
// framework is missing. The fused graphs are compiled once per test binary (one shared worker).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>

#include <csignal>
#include <cstring>
#include <fstream>
#include <thread>

#include "bridge.hpp"
#include "framework_devices.hpp"
#include "framework_test_devices.hpp"
#include "fusebench/compare.hpp"
#include "fusebench/error.hpp"
#include "fusebench/hash.hpp"
#include "fusebench/npy.hpp"
#include "fusebench/rng.hpp"

extern char** environ;

namespace fusebench::framework {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// ---- one graph per op, run eagerly on the device, checked against the hand-written op
struct OpCase {
  std::string key, op;  // key: directory name; op: the hand-written op in hand_written_ops.py
  engine::Graph graph;
  engine::Inputs inputs;
  std::vector<std::string> input_names;
  std::optional<double> scalar;
};

std::vector<OpCase> op_cases() {
  std::vector<OpCase> cases;
  std::uint64_t stream = 0;
  auto make = [&](const std::string& op, DType dtype,
                  const std::vector<std::pair<std::string, Shape>>& operands, auto&& build,
                  std::optional<double> scalar = std::nullopt, double lo = -2, double hi = 2) {
    OpCase c;
    c.op = op;
    c.key = fmt::format("{}_{}", op, dtype_name(dtype));
    c.scalar = scalar;
    std::vector<engine::NodeId> ids;
    for (const auto& [name, shape] : operands) {
      ids.push_back(c.graph.input(name, shape, dtype));
      c.inputs[name] = random_uniform(dtype, shape, lo, hi, 7, stream++);
      c.input_names.push_back(name);
    }
    c.graph.mark_output(build(c.graph, ids));
    cases.push_back(std::move(c));
  };
  const Shape s{8, 32};
  for (DType dt : {DType::f16, DType::bf16, DType::f32}) {
    using G = engine::Graph;
    using V = std::vector<engine::NodeId>;
    make("add", dt, {{"a", s}, {"b", s}}, [](G& g, V x) { return g.add(x[0], x[1]); });
    make("mul", dt, {{"a", s}, {"b", s}}, [](G& g, V x) { return g.mul(x[0], x[1]); });
    make(
        "mul_scalar", dt, {{"a", s}}, [](G& g, V x) { return g.mul_scalar(x[0], 0.7); }, 0.7);
    make("gelu", dt, {{"a", s}}, [](G& g, V x) { return g.gelu(x[0]); });
    make("softmax", dt, {{"a", s}}, [](G& g, V x) { return g.softmax(x[0]); });
    make("sum", dt, {{"a", s}}, [](G& g, V x) { return g.sum(x[0], -1); });
  }
  using G = engine::Graph;
  using V = std::vector<engine::NodeId>;
  const DType h = DType::f16;
  make("sub", h, {{"a", s}, {"b", s}}, [](G& g, V x) { return g.sub(x[0], x[1]); });
  make(
      "div", h, {{"a", s}, {"b", s}}, [](G& g, V x) { return g.div(x[0], x[1]); }, std::nullopt,
      0.5, 2);
  make(
      "add_scalar", h, {{"a", s}}, [](G& g, V x) { return g.add_scalar(x[0], 1.3); }, 1.3);
  make("neg", h, {{"a", s}}, [](G& g, V x) { return g.neg(x[0]); });
  make("exp", h, {{"a", s}}, [](G& g, V x) { return g.exp(x[0]); });
  make(
      "sqrt", h, {{"a", s}}, [](G& g, V x) { return g.sqrt(x[0]); }, std::nullopt, 0.01, 100);
  make(
      "rsqrt", h, {{"a", s}}, [](G& g, V x) { return g.rsqrt(x[0]); }, std::nullopt, 0.01, 100);
  make("gelu_tanh", h, {{"a", s}}, [](G& g, V x) { return g.gelu(x[0], true); });
  make("cast_f32", h, {{"a", s}}, [](G& g, V x) { return g.cast(x[0], DType::f32); });
  make("cast_bf16", DType::f32, {{"a", s}}, [](G& g, V x) { return g.cast(x[0], DType::bf16); });
  make("mean", h, {{"a", s}}, [](G& g, V x) { return g.mean(x[0], -1); });
  make("max", h, {{"a", s}}, [](G& g, V x) { return g.max(x[0], -1); });
  make("layernorm", h, {{"a", s}, {"w", {32}}, {"b", {32}}},
       [](G& g, V x) { return g.layernorm(x[0], x[1], x[2]); });
  make(
      "matmul", h, {{"a", s}, {"b", {32, 16}}}, [](G& g, V x) { return g.matmul(x[0], x[1]); },
      std::nullopt, -1, 1);
  make("transpose", h, {{"a", s}}, [](G& g, V x) { return g.transpose(x[0], 0, 1); });
  make("reshape", h, {{"a", s}}, [](G& g, V x) { return g.reshape(x[0], {32, 8}); });
  make("slice", h, {{"a", s}}, [](G& g, V x) { return g.slice(x[0], 1, 4, 12); });
  make("concat", h, {{"a", s}, {"b", s}}, [](G& g, V x) { return g.concat({x[0], x[1]}, 0); });
  make("expand", h, {{"a", s}}, [](G& g, V x) { return g.expand(x[0], {4, 8, 32}); });
  return cases;
}

int run_process(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void expect_eager_ops_match_hand_written(const std::string& name, const std::string& framework,
                                         engine::EngineOptions options = {}) {
  const fs::path dir =
      fs::temp_directory_path() / fmt::format("fusebench-ops-{}-{}", framework, ::getpid());
  fs::remove_all(dir);
  auto eager = device(name).eager(options);
  for (OpCase& c : op_cases()) {
    if (options.scalar_lowering == engine::ScalarLowering::BroadcastTensor) {
      if (c.op != "mul_scalar") continue;
      c.op = "mul_scalar_broadcast";
    }
    const fs::path case_dir = dir / c.key;
    fs::create_directories(case_dir);
    nlohmann::json spec = {{"op", c.op}, {"inputs", c.input_names}};
    if (c.scalar) spec["scalar"] = *c.scalar;
    std::ofstream(case_dir / "case.json") << spec.dump();
    for (const auto& [input, tensor] : c.inputs) write_npy(case_dir / (input + ".npy"), tensor);
    write_npy(case_dir / "out.npy", eager->run(c.graph, c.inputs).outputs[0]);
  }
  const std::string script =
      (fs::path(FUSEBENCH_BRIDGE_DIR) / "tests" / "hand_written_ops.py").string();
  EXPECT_EQ(
      run_process({python_executable().string(), script, "--framework", framework, dir.string()}),
      0)
      << "the device's eager ops differ from the hand-written " << framework
      << " ops (listed above)";
  fs::remove_all(dir);
}

// ---- a fused graph compiled once per binary: gelu(x * 0.7 + 1) * 0.5 on f16 [64, 64]
struct Compiled {
  engine::Graph graph;
  engine::Inputs inputs;
  engine::RunResult eager, fused, fused_again;
};

const Compiled& compiled(const std::string& name) {
  static std::map<std::string, Compiled> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  Compiled c;
  const auto x = c.graph.input("x", {64, 64}, DType::f16);
  c.graph.mark_output(
      c.graph.mul_scalar(c.graph.gelu(c.graph.add_scalar(c.graph.mul_scalar(x, 0.7), 1.0)), 0.5));
  c.inputs["x"] = random_uniform(DType::f16, {64, 64}, -3, 3, 11);
  c.eager = device(name).eager({})->run(c.graph, c.inputs);
  auto fused = device(name).fused({});
  c.fused = fused->run(c.graph, c.inputs);
  c.fused_again = fused->run(c.graph, c.inputs);
  return cache.emplace(name, std::move(c)).first->second;
}

// ---- torch
TEST(Torch, EagerOpsBitEqualToHandWrittenTorch) {
  SKIP_UNLESS_AVAILABLE("torch");
  expect_eager_ops_match_hand_written("torch", "torch");
}

TEST(Torch, BroadcastScalarLoweringIsFullLikeInTheGraph) {
  SKIP_UNLESS_AVAILABLE("torch");
  engine::EngineOptions o;
  o.scalar_lowering = engine::ScalarLowering::BroadcastTensor;
  expect_eager_ops_match_hand_written("torch", "torch", o);
}

TEST(Torch, FusedPathIsCompiledByInductor) {
  SKIP_UNLESS_AVAILABLE("torch");
  const Compiled& c = compiled("torch");
  ASSERT_EQ(c.fused.trace.size(), 1u);
  const engine::KernelTrace& k = c.fused.trace[0];
  // Inductor generated and built at least one C++ kernel, and its .so is the artifact.
  ASSERT_GE(k.evidence.at("kernels").size(), 1u) << k.evidence.dump(1);
  EXPECT_THAT(k.evidence["kernels"][0].at("name").get<std::string>(), HasSubstr("cpp_fused"));
  EXPECT_TRUE(fs::exists(k.artifact_path)) << k.artifact_path;
  EXPECT_EQ(k.artifact_sha256.size(), 64u);
  EXPECT_FALSE(k.source_sha256.empty());
  EXPECT_FALSE(device("torch").instruction_histogram(k).empty())
      << "no machine code counted in " << k.artifact_path;
  // The second run reuses the compiled graph (compiled once per process).
  EXPECT_TRUE(c.fused_again.trace[0].cache_hit);
  EXPECT_EQ(c.fused_again.trace[0].compile_ms, 0);
  // Eager is the op-by-op path: no compiled artifact.
  EXPECT_TRUE(c.eager.trace[0].artifact_path.empty());
}

// Task A's runs hashed in the worker give the toolkit's own digest of the same output, whatever
// process computed it: a bf16 output (hashed as its bits) and an output larger than one 4 MiB chunk.
TEST(Torch, RunsHashedInTheWorkerGiveTheToolkitsChunkedMd5) {
  SKIP_UNLESS_AVAILABLE("torch");
  for (DType dtype : {DType::bf16, DType::f32}) {
    engine::Graph g;
    const auto x = g.input("x", {1536, 1024}, dtype);
    g.mark_output(g.mul_scalar(g.add_scalar(x, 1.0), 0.7));
    const engine::Inputs in = {{"x", random_uniform(dtype, {1536, 1024}, -2, 2, 5)}};
    auto fused = device("torch").fused({});
    const Tensor once = fused->run(g, in).outputs.at(0);
    std::vector<int> progress;
    const engine::HashedRuns hashed =
        fused->run_hashed(g, in, 3, [&](int done) { progress.push_back(done); });
    ASSERT_EQ(hashed.output_md5.size(), 3u);
    EXPECT_EQ(progress.back(), 3);
    for (const auto& digest : hashed.output_md5)
      EXPECT_EQ(digest, tensor_chunked_md5_hex(once)) << dtype_name(dtype);
    EXPECT_TRUE(bit_equal(hashed.last_output, once).equal);
    EXPECT_THAT(hashed.hashed_where, HasSubstr("torch worker"));
  }
}

TEST(Torch, KnobsInductorCannotRealiseAreNotApplicableWithAReason) {
  engine::EngineOptions o;
  o.reduce_tile = 512;
  EXPECT_THAT(device("torch").unsupported_knobs(o, true), HasSubstr("reduce_tile"));
  o = {};
  o.rsqrt = engine::ApproxMode::NewtonBitTrick;
  EXPECT_THAT(device("torch").unsupported_knobs(o, true), HasSubstr("rsqrt"));
  o = {};
  o.fma_contraction = true;
  o.emulate_per_op_rounding = true;
  o.threads = 1;
  EXPECT_EQ(device("torch").unsupported_knobs(o, true), "");
}

TEST(Torch, DtypeTheDeviceCannotRunIsAnErrorNamingOpDtypeAndDevice) {
  SKIP_UNLESS_AVAILABLE("torch");
  engine::Graph g;
  const auto a = g.input("a", {4}, DType::u32), b = g.input("b", {4}, DType::u32);
  g.mark_output(g.concat({a, b}, 0));
  const engine::Inputs in = {{"a", Tensor(DType::u32, {4})}, {"b", Tensor(DType::u32, {4})}};
  try {
    device("torch").eager({})->run(g, in);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("device torch"));
    EXPECT_THAT(e.what(), HasSubstr("u32"));
    EXPECT_THAT(e.what(), HasSubstr("input"));
  }
}

TEST(Torch, FrameworkExceptionNamesTheNodeAndTheLastTracebackLine) {
  SKIP_UNLESS_AVAILABLE("torch");
  // fusebench promotes f16 @ bf16 to f32; torch.matmul refuses mixed dtypes.
  engine::Graph g;
  const auto a = g.input("a", {4, 8}, DType::f16), b = g.input("b", {8, 4}, DType::bf16);
  g.mark_output(g.matmul(a, b));
  const engine::Inputs in = {{"a", random_uniform(DType::f16, {4, 8}, -1, 1, 1)},
                             {"b", random_uniform(DType::bf16, {8, 4}, -1, 1, 2)}};
  try {
    device("torch").eager({})->run(g, in);
    FAIL() << "expected a FrameworkError";
  } catch (const FrameworkError& e) {
    EXPECT_THAT(e.what(), HasSubstr("device torch (eager"));
    EXPECT_THAT(e.what(), HasSubstr("matmul"));
    EXPECT_THAT(e.what(), HasSubstr("RuntimeError"));
    EXPECT_THAT(e.what(), HasSubstr("repro"));
  }
  // The worker survives the exception.
  EXPECT_NO_THROW(compiled("torch"));
}

TEST(Torch, EveryGraphLeavesItsReproInTheReproDirectory) {
  SKIP_UNLESS_AVAILABLE("torch");
  const fs::path dir = fs::temp_directory_path() / fmt::format("fusebench-repro-{}", ::getpid());
  fs::remove_all(dir);
  set_repro_dir(dir);
  engine::Graph g;
  g.mark_output(g.neg(g.input("x", {3, 5}, DType::f32)));
  device("torch").eager({})->run(g, {{"x", random_uniform(DType::f32, {3, 5}, -1, 1, 3)}});
  set_repro_dir({});
  std::vector<fs::path> written;
  if (fs::exists(dir / "torch")) {
    for (const auto& e : fs::directory_iterator(dir / "torch")) written.push_back(e.path());
  }
  ASSERT_EQ(written.size(), 1u) << dir;
  EXPECT_THAT(written[0].filename().string(), HasSubstr("graph_eager_"));
  std::ifstream in(written[0]);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("def graph_fn"));
  fs::remove_all(dir);
}

// ---- xla
TEST(Xla, EagerOpsBitEqualToHandWrittenJax) {
  SKIP_UNLESS_AVAILABLE("xla");
  expect_eager_ops_match_hand_written("xla", "jax");
}

TEST(Xla, FusedPathIsCompiledByXla) {
  SKIP_UNLESS_AVAILABLE("xla");
  const Compiled& c = compiled("xla");
  const engine::KernelTrace& k = c.fused.trace[0];
  const std::string hlo = k.evidence.at("optimized_hlo").get<std::string>();
  EXPECT_THAT(hlo, HasSubstr("fusion"));
  EXPECT_THAT(hlo, ::testing::Not(HasSubstr("metadata=")));
  EXPECT_FALSE(k.artifact_sha256.empty()) << "no executable fingerprint";
  EXPECT_EQ(k.source_sha256, k.evidence.at("hlo_sha256").get<std::string>());
  EXPECT_TRUE(c.fused_again.trace[0].cache_hit);
}

// The fusion pass off: every op is a one-op ("wrapped") kernel of its own in the optimised HLO. XLA
// ignores a pass name it does not know, so the HLO is the check that the switch took effect.
TEST(Xla, FusionPassSwitchLeavesEveryOpAKernelOfItsOwn) {
  SKIP_UNLESS_AVAILABLE("xla");
  engine::Graph g;
  const auto x = g.input("x", {8, 16}, DType::f16);
  g.mark_output(g.mul(g.add_scalar(g.mul_scalar(x, 0.7), 1.0), x));
  const engine::Inputs in = {{"x", random_uniform(DType::f16, {8, 16}, -1, 1, 77, 0)}};
  engine::EngineOptions unfused;
  unfused.compiler_options["xla_disable_hlo_passes"] = "fusion";
  ASSERT_EQ(device("xla").unsupported_knobs(unfused, true), "");
  auto hlo_of = [&](const engine::EngineOptions& o) {
    const auto result = device("xla").fused(o)->run(g, in);
    return result.trace.at(0).evidence.at("optimized_hlo").get<std::string>();
  };
  const std::string plain = hlo_of({}), switched = hlo_of(unfused);
  EXPECT_THAT(plain, Not(HasSubstr("wrapped_multiply")));
  EXPECT_THAT(switched, HasSubstr("wrapped_multiply"));
  EXPECT_THAT(switched, HasSubstr("wrapped_add"));
}

// ---- xla's per-op switches (docs/fusion-switches.md)
// mul -> add -> gelu -> mul, the chain of task B, on N(0, 3^2) inputs.
struct GeluChain {
  engine::Graph graph;
  engine::Inputs inputs;
  std::string gelu;
  explicit GeluChain(DType dtype) {
    const Shape s{16, 64};
    std::vector<engine::NodeId> x;
    for (int i = 0; i < 4; ++i) {
      x.push_back(graph.input(fmt::format("x{}", i), s, dtype));
      inputs[fmt::format("x{}", i)] = random_normal(dtype, s, 0, 3, 39, std::uint64_t(i));
    }
    const auto g = graph.gelu(graph.add(graph.mul(x[0], x[1]), x[2]));
    gelu = graph.node(g).name;
    graph.mark_output(graph.mul(g, x[3]));
  }
};

// Per-op rounding at one op: the op's value rounded by lax.reduce_precision to its format at its
// output, as eager (one jax.jit per op) stores it. XLA keeps the reduce-precision op in the
// optimised HLO. (On this chain XLA:CPU keeps no op's output wider than its type, so the rounding
// changes no value here; BSuite.XlaPerOpRoundingPlanted… plants it where XLA keeps a product
// wide into a softmax and the output changes.)
TEST(Xla, PerOpRoundingIsReducePrecisionThatXlaKeeps) {
  SKIP_UNLESS_AVAILABLE("xla");
  for (const auto& [dtype, bits] :
       {std::pair{DType::bf16, std::string("exponent_bits=8, mantissa_bits=7")},
        std::pair{DType::f16, std::string("exponent_bits=5, mantissa_bits=10")}}) {
    SCOPED_TRACE(dtype_name(dtype));
    const GeluChain c(dtype);
    engine::EngineOptions rounded;
    rounded.per_op[c.gelu].emulate_per_op_rounding = true;
    ASSERT_EQ(device("xla").unsupported_knobs(rounded, true), "");
    const auto plain = device("xla").fused({})->run(c.graph, c.inputs);
    const auto switched = device("xla").fused(rounded)->run(c.graph, c.inputs);
    const std::string hlo = switched.trace.at(0).evidence.at("optimized_hlo").get<std::string>();
    EXPECT_THAT(hlo, HasSubstr("reduce-precision("));
    EXPECT_THAT(hlo, HasSubstr(bits));
    EXPECT_THAT(plain.trace.at(0).evidence.at("optimized_hlo").get<std::string>(),
                Not(HasSubstr("reduce-precision(")));
  }
}

// A split after an op: graph_fn cut into two jax.jit stages there, each compiled apart (two
// optimised HLO modules in the evidence), the rest of the graph reading the op's value as an
// array of its dtype; the repro runs the stages in turn.
TEST(Xla, SplitCutsTheJittedFunctionIntoTwoJits) {
  SKIP_UNLESS_AVAILABLE("xla");
  const GeluChain c(DType::f32);
  std::string add;
  for (const auto& n : c.graph.nodes())
    if (n.kind == engine::OpKind::Add) add = n.name;
  engine::EngineOptions split;
  split.per_op[add].split_after = true;
  ASSERT_EQ(device("xla").unsupported_knobs(split, true), "");
  const std::string module = emit_python_module(c.graph, xla_spec(), split, true);
  EXPECT_THAT(module, HasSubstr("graph_fn.stages = [_stage_0, _stage_1]"));
  EXPECT_THAT(module, HasSubstr(fmt::format("def _stage_1(x3, {}):", add)));
  const auto run = device("xla").fused(split)->run(c.graph, c.inputs);
  const nlohmann::json& evidence = run.trace.at(0).evidence;
  EXPECT_EQ(evidence.value("stages", 0), 2);
  const std::string hlo = evidence.at("optimized_hlo").get<std::string>();
  std::size_t modules = 0;
  for (std::size_t at = hlo.find("HloModule"); at != std::string::npos;
       at = hlo.find("HloModule", at + 1))
    ++modules;
  EXPECT_EQ(modules, 2u);
  const auto eager = device("xla").eager({})->run(c.graph, c.inputs);
  EXPECT_EQ(run.outputs[0].shape(), eager.outputs[0].shape());
  // the repro runs the stages
  const fs::path repro = fs::path(run.trace.at(0).source_path);
  const std::string cmd = fmt::format("{} {} 2>&1", python_executable().string(), repro.string());
  std::FILE* pipe = ::popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string printed;
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) printed += buffer;
  EXPECT_EQ(::pclose(pipe), 0) << printed;
  EXPECT_THAT(printed, HasSubstr("elements differ, op by op vs jax.jit"));
}

// Eager is one jax.jit per op: each op's value rounded to its dtype once, at its output, as a JAX
// user's jitted op gives it, not primitive by primitive as under jax.disable_jit(). The input is
// every finite f16 in [-8, 8], where jax.jit(tanh-gelu) differs from its primitives each rounded to
// f16 at some elements (XLA keeps the op's intermediates wider inside one jit); the script checks
// that too, so the test fails if eager goes back to evaluating primitive by primitive.
TEST(Xla, EagerIsOneJaxJitPerOp) {
  SKIP_UNLESS_AVAILABLE("xla");
  std::vector<std::uint16_t> bits;
  for (std::uint16_t b = 0; b <= 0x4800; ++b) {  // 0x4800 is 8.0 in f16
    bits.push_back(b);
    bits.push_back(std::uint16_t(b | 0x8000));
  }
  Tensor x(DType::f16, {std::int64_t(bits.size())});
  std::memcpy(x.raw_data(), bits.data(), bits.size() * sizeof(std::uint16_t));
  engine::Graph g;
  g.mark_output(g.gelu(g.input("x", x.shape(), DType::f16), true));
  const std::string module = emit_python_module(g, xla_spec(), {}, false);
  EXPECT_THAT(module, HasSubstr("= jax.jit(lambda x: jax.nn.gelu(x, approximate=True))"));
  EXPECT_THAT(module, HasSubstr("graph_fn.eager = eager_graph_fn"));
  const auto eager = device("xla").eager({})->run(g, {{"x", x}});
  const fs::path dir =
      fs::temp_directory_path() / fmt::format("fusebench-xla-eager-{}", ::getpid());
  fs::create_directories(dir);
  write_npy(dir / "x.npy", x);
  write_npy(dir / "eager.npy", eager.outputs[0]);
  const std::string script =
      (fs::path(FUSEBENCH_BRIDGE_DIR) / "tests" / "xla_eager_is_jit_per_op.py").string();
  const int status = run_process({python_executable().string(), script, dir.string()});
  fs::remove_all(dir);
  if (status == 77) {
    GTEST_SKIP() << "on this processor jax.jit(gelu) and gelu primitive by primitive give the same "
                    "bits for every f16 in [-8, 8]: nothing tells one jit per op from the other";
  }
  EXPECT_EQ(status, 0) << "device xla's eager is not one jax.jit per op (printed above)";
}

TEST(Bridge, CompilerSwitchesAreTheFrameworksOptionsOnItsFusedPathOnly) {
  register_framework_devices();
  std::set<std::string> inductor;
  for (const auto& c : engine::make_device("torch")->compiler_switches()) inductor.insert(c.name);
  EXPECT_TRUE(inductor.count("pattern_matcher"));
  EXPECT_TRUE(inductor.count("cpp.use_two_step_variance_threshold"));
  EXPECT_TRUE(inductor.count("cpp.simdlen"));
  EXPECT_FALSE(inductor.count("split_reductions")) << "no effect on Inductor's CPU reductions";
  EXPECT_TRUE(engine::make_device("torch/aot_eager")->compiler_switches().empty());
  engine::EngineOptions o;
  o.compiler_options["pattern_matcher"] = "false";
  engine::Graph g;
  g.mark_output(g.mul_scalar(g.input("x", {4}, DType::f16), 0.5));
  const std::string module = emit_python_module(g, torch_spec("cpu"), o, true);
  EXPECT_THAT(module, HasSubstr(R"(\"pattern_matcher\":false)"));  // a JSON bool, not "false"
  EXPECT_EQ(engine::make_device("torch")->unsupported_knobs(o, true), "");
  EXPECT_THAT(engine::make_device("torch")->unsupported_knobs(o, false),
              HasSubstr("compiles nothing on its eager path"));
  EXPECT_THAT(engine::make_device("torch/aot_eager")->unsupported_knobs(o, true),
              HasSubstr("offers no compile option"));
  EXPECT_THAT(engine::make_device("xla")->unsupported_knobs(o, true),
              HasSubstr("offers only xla_disable_hlo_passes"));
  engine::EngineOptions per_op;
  per_op.per_op["mul_scalar1"].compiler_options["pattern_matcher"] = "false";
  EXPECT_THROW(per_op.validate(), InputError);
}

TEST(Xla, ThreadCountOtherThanEveryCoreIsNotApplicable) {
  engine::EngineOptions o;
  o.threads = 1 + int(std::thread::hardware_concurrency());
  EXPECT_THAT(device("xla").unsupported_knobs(o, true), HasSubstr("threads"));
}

// xla:cuda without a GPU: its knob mapping, its repro and settings naming XLA:CUDA, its fusion
// switch, and a reason where it cannot run (the gpu tests run it where it can).
TEST(Xla, CudaDeviceNamesXlaCudaInItsKnobsAndRepro) {
  register_framework_devices();
  const auto cuda = engine::make_device("xla:cuda");
  engine::EngineOptions o;
  EXPECT_EQ(cuda->unsupported_knobs(o, true), "");
  EXPECT_EQ(cuda->unsupported_knobs(o, false), "");
  o.threads = 1;
  EXPECT_EQ(cuda->unsupported_knobs(o, true),
            "threads: a GPU kernel's parallelism is not a thread count");
  o = {};
  o.fma_contraction = true;
  EXPECT_THAT(cuda->unsupported_knobs(o, true), HasSubstr("fma_contraction: XLA:CUDA"));
  o = {};
  o.reduce_tile = 512;
  EXPECT_THAT(cuda->unsupported_knobs(o, true), HasSubstr("reduce_tile: XLA:CUDA"));
  o = {};
  o.emulate_per_op_rounding = true;  // the negative control of task A on XLA
  EXPECT_EQ(cuda->unsupported_knobs(o, true), "");

  engine::Graph g;
  g.mark_output(g.gelu(g.input("x", {4, 8}, DType::f16)));
  const std::string module = emit_python_module(g, xla_spec("cuda"), o, true);
  EXPECT_THAT(module, HasSubstr("# fusebench graph on device xla:cuda (fused)"));
  EXPECT_THAT(module,
              HasSubstr(R"(jax.config.update("jax_default_device", jax.devices("cuda")[0]))"));
  EXPECT_THAT(module, HasSubstr("op by op vs jax.jit on XLA:CUDA\")\n"));
  EXPECT_THAT(module, HasSubstr(R"(\"device\":\"cuda\")"));
  EXPECT_THAT(module, HasSubstr(R"(\"xla_allow_excess_precision\":false)"));
  const std::string cpu_module = emit_python_module(g, xla_spec("cpu"), o, true);
  EXPECT_THAT(cpu_module, Not(HasSubstr("cuda")));
  EXPECT_THAT(cpu_module, HasSubstr("op by op vs jax.jit\")\n"));

  ASSERT_EQ(cuda->compiler_switches().size(), 1u);
  EXPECT_EQ(cuda->compiler_switches()[0].name, "xla_disable_hlo_passes");
  EXPECT_THAT(cuda->compiler_switches()[0].value, HasSubstr("priority-fusion"));

  SKIP_UNLESS_AVAILABLE("xla");  // jax imports: then only a GPU is missing
  const std::string why = cuda->unavailable_reason();
  if (why.empty()) GTEST_SKIP() << "xla:cuda can run here: the gpu tests (ctest -L gpu) cover it";
  EXPECT_THAT(why, HasSubstr("cannot run device xla:cuda here"));
  // Without a GPU device file the device says so before starting a worker; the worker itself,
  // started anyway, names what JAX raised.
  const std::string worker_why = Worker(xla_spec("cuda"), {}).unavailable_reason();
  EXPECT_THAT(worker_why, HasSubstr("cannot run device xla:cuda here"));
  EXPECT_THAT(worker_why, HasSubstr("'cuda' platform (jax.devices('cuda') raised"));
}

// ---- the bridge
// A run's worker server: the first serverable Worker starts it, the next one is a session with
// the same process, each session's counts go to its client's FUSEBENCH_WORKER_STATS before quit
// is answered, and the server stops on SIGTERM, taking its pid file with it.
TEST(Xla, WorkerServerServesOneSessionAfterAnother) {
  SKIP_UNLESS_AVAILABLE("xla");
  char dir_template[] = "/tmp/fusebench-servers-XXXXXX";
  const fs::path dir = ::mkdtemp(dir_template);
  const fs::path stats = dir / "stats.jsonl";
  ::setenv("FUSEBENCH_WORKER_DIR", dir.c_str(), 1);
  ::setenv("FUSEBENCH_WORKER_OWNER", std::to_string(::getpid()).c_str(), 1);
  ::setenv("FUSEBENCH_WORKER_STATS", stats.c_str(), 1);
  auto pid_files = [&] {
    std::vector<fs::path> found;
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (entry.path().extension() == ".pid") found.push_back(entry.path());
    }
    return found;
  };
  auto lines = [&] {
    std::ifstream in(stats);
    int n = 0;
    for (std::string line; std::getline(in, line);) n += line.empty() ? 0 : 1;
    return n;
  };
  std::string server_pid;
  {
    Worker first(xla_spec(), {}, true);
    ASSERT_EQ(first.unavailable_reason(), "");
    EXPECT_EQ(first.request({{"cmd", "stats"}}).value("compiles", -1), 0);
    ASSERT_EQ(pid_files().size(), 1u);
    std::ifstream(pid_files()[0]) >> server_pid;
  }
  EXPECT_EQ(lines(), 1) << "the first session's counts";
  {
    Worker second(xla_spec(), {}, true);
    EXPECT_EQ(second.framework_version(), Worker(xla_spec(), {}).framework_version());
    ASSERT_EQ(pid_files().size(), 1u) << "a second server was started";
    std::string pid;
    std::ifstream(pid_files()[0]) >> pid;
    EXPECT_EQ(pid, server_pid);
  }
  EXPECT_EQ(lines(), 3) << "one line per session (and one for the private worker)";
  ::kill(std::stoi(server_pid), SIGTERM);
  for (int i = 0; i < 100 && !pid_files().empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(pid_files().empty()) << "the server did not stop on SIGTERM";
  for (const char* name :
       {"FUSEBENCH_WORKER_DIR", "FUSEBENCH_WORKER_OWNER", "FUSEBENCH_WORKER_STATS"})
    ::unsetenv(name);
  fs::remove_all(dir);
}

TEST(Bridge, BadFusebenchPythonIsAClearError) {
  const char* saved = std::getenv("FUSEBENCH_PYTHON");
  const std::string restore = saved ? saved : "";
  ::setenv("FUSEBENCH_PYTHON", "/nonexistent/python3", 1);
  try {
    device("torch").fused_cold(
        {}, fs::temp_directory_path() / fmt::format("fusebench-cold-bad-{}", ::getpid()));
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("FUSEBENCH_PYTHON=/nonexistent/python3"));
  }
  // An executable that is not a Python with the worker: it exits at once.
  ::setenv("FUSEBENCH_PYTHON", "/bin/true", 1);
  try {
    device("xla").fused_cold(
        {}, fs::temp_directory_path() / fmt::format("fusebench-cold-true-{}", ::getpid()));
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("FUSEBENCH_PYTHON=/bin/true"));
    EXPECT_THAT(e.what(), HasSubstr("did not start"));
  }
  if (saved)
    ::setenv("FUSEBENCH_PYTHON", restore.c_str(), 1);
  else
    ::unsetenv("FUSEBENCH_PYTHON");
}

TEST(Bridge, GraphModuleIsARunnableReproNamingEveryNode) {
  engine::Graph g;
  const auto x = g.input("x", {2, 3}, DType::f16);
  g.mark_output(g.softmax(g.mul_scalar(x, 0.7)));
  const std::string module = emit_python_module(g, torch_spec("cpu"), {}, true);
  EXPECT_THAT(module, HasSubstr("def graph_fn(x):"));
  EXPECT_THAT(module, HasSubstr("x * 0.7"));
  EXPECT_THAT(module, HasSubstr("torch.softmax("));
  EXPECT_THAT(module, HasSubstr("# node softmax"));
  EXPECT_THAT(module, HasSubstr("torch.compile(graph_fn, backend=backend, fullgraph=not "
                                "SETTINGS.get(\"graph_breaks\"), dynamic=False)"));
  EXPECT_THAT(module, Not(HasSubstr("graph_break()")));
  EXPECT_THAT(module, HasSubstr("\\\"backend\\\":\\\"inductor\\\""));  // the backend in SETTINGS
  EXPECT_THAT(emit_python_module(g, torch_spec("cpu", "aot_eager"), {}, true),
              HasSubstr("\\\"backend\\\":\\\"aot_eager\\\""));
  EXPECT_THAT(module, HasSubstr("if __name__ == \"__main__\":"));
  engine::EngineOptions broadcast;
  broadcast.scalar_lowering = engine::ScalarLowering::BroadcastTensor;
  EXPECT_THAT(emit_python_module(g, torch_spec("cpu"), broadcast, true),
              HasSubstr("x * torch.full_like(x, 0.7)"));
  EXPECT_THAT(emit_python_module(g, xla_spec(), {}, true), HasSubstr("jax.nn.softmax("));
}

// The fusion switch `split` on torch: a graph break after the op, and fullgraph off; on xla, graph_fn
// cut into stages there. Per-op rounding: xla only (lax.reduce_precision). The other per-op
// switches, and any on an eager path, are n/a with the op and switch named.
TEST(Bridge, SplitSwitchIsAGraphBreakOnTorchAndStagesOnXla) {
  engine::Graph g;
  const auto x = g.input("x", {2, 3}, DType::f16);
  const auto scaled = g.mul_scalar(x, 0.7);
  g.mark_output(g.softmax(scaled));
  const std::string op = g.node(scaled).name;
  engine::EngineOptions split;
  split.per_op[op].split_after = true;
  const std::string module = emit_python_module(g, torch_spec("cpu"), split, true);
  EXPECT_THAT(module, HasSubstr(fmt::format(
                          "    torch._dynamo.graph_break()  # fusion switch: split after {}", op)));
  EXPECT_THAT(module, HasSubstr(fmt::format("\\\"graph_breaks\\\":[\\\"{}\\\"]", op)));
  EXPECT_THAT(emit_python_module(g, torch_spec("cpu"), split, false),
              Not(HasSubstr("graph_break()")));
  register_framework_devices();
  EXPECT_EQ(engine::make_device("torch")->unsupported_knobs(split, true), "");
  EXPECT_THAT(engine::make_device("torch")->unsupported_knobs(split, false),
              HasSubstr("no per-op switch"));
  EXPECT_EQ(engine::make_device("xla")->unsupported_knobs(split, true), "");
  EXPECT_THAT(engine::make_device("xla")->unsupported_knobs(split, false),
              HasSubstr("xla realises no per-op switch"));
  engine::EngineOptions rounding;
  rounding.per_op[op].emulate_per_op_rounding = true;
  EXPECT_THAT(engine::make_device("torch")->unsupported_knobs(rounding, true),
              HasSubstr(fmt::format("rounding=on at {}: torch realises only a split", op)));
  EXPECT_EQ(engine::make_device("xla")->unsupported_knobs(rounding, true), "");
  engine::EngineOptions contraction;
  contraction.per_op[op].fma_contraction = false;
  EXPECT_THAT(engine::make_device("xla")->unsupported_knobs(contraction, true),
              HasSubstr("xla realises only per-op rounding and a split per op"));
  // xla: a split cuts graph_fn into stages, rounding wraps the op's expression
  const std::string xla_module = emit_python_module(g, xla_spec(), split, true);
  EXPECT_THAT(xla_module, HasSubstr("graph_fn.stages = [_stage_0, _stage_1]"));
  EXPECT_THAT(xla_module, Not(HasSubstr("graph_break")));
  EXPECT_THAT(emit_python_module(g, xla_spec(), rounding, true),
              HasSubstr(fmt::format("_round_to_format(x * 0.7)  # node {}", op)));
  EXPECT_THAT(emit_python_module(g, xla_spec(), rounding, false),
              Not(HasSubstr("_rounded(lambda")));
}

}  // namespace
}  // namespace fusebench::framework
