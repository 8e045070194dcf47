// The kernel cache (cold, warm, clear, concurrent builders, corruption), the evidence trail
// (trace, disassembly, dumps) and bad input.
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "engine_test_support.hpp"
#include "fusebench/hash.hpp"
#include "fusebench/npy.hpp"
#include "fusebench/testing/matchers.hpp"
#include "jit_compiler.hpp"

namespace fusebench {
namespace {
namespace fs = std::filesystem;
using engine::Graph;

using testsupport::fresh_dir;

template <class Fn>
void expect_error(Fn&& fn, const std::string& fragment) {
  try {
    fn();
    FAIL() << "no error; expected one mentioning '" << fragment << "'";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(KernelCache, ColdCompileWarmHitClearAndCorruption) {
  const auto dir = fresh_dir("cache");
  testsupport::ElementwiseChain chain(DType::f16, {256}, 1);
  auto cold = cpu::FusedExecutor({}, dir).run(chain.graph, chain.inputs);
  ASSERT_EQ(cold.trace.size(), 1u);
  EXPECT_FALSE(cold.trace[0].cache_hit);
  EXPECT_GT(cold.trace[0].compile_ms, 0);
  EXPECT_TRUE(fs::exists(cold.trace[0].source_path));
  EXPECT_EQ(cold.trace[0].artifact_sha256.size(), 64u);
  EXPECT_EQ(fs::path(cold.trace[0].artifact_path).parent_path().filename().string(),
            cold.trace[0].cache_key.substr(0, 2));
  auto warm = cpu::FusedExecutor({}, dir).run(chain.graph, chain.inputs);
  EXPECT_TRUE(warm.trace[0].cache_hit);
  EXPECT_EQ(warm.trace[0].compile_ms, 0);
  EXPECT_EQ(warm.trace[0].artifact_sha256, cold.trace[0].artifact_sha256);
  engine::KernelCache cache(dir);
  ASSERT_EQ(cache.list().size(), 1u);
  EXPECT_TRUE(cache.list()[0].valid);
  // Replace the artifact by a truncated copy (a new file: this process still executes the mapped
  // original, which an in-place truncation would pull from under it): the next run detects the
  // mismatch with the recorded SHA-256 and rebuilds.
  const fs::path artifact = cold.trace[0].artifact_path;
  fs::copy_file(artifact, fs::path(artifact).concat(".cut"));
  fs::resize_file(fs::path(artifact).concat(".cut"), 100);
  fs::rename(fs::path(artifact).concat(".cut"), artifact);
  EXPECT_FALSE(cache.list()[0].valid);
  auto rebuilt = cpu::FusedExecutor({}, dir).run(chain.graph, chain.inputs);
  EXPECT_FALSE(rebuilt.trace[0].cache_hit);
  // the build is reproducible
  EXPECT_EQ(rebuilt.trace[0].artifact_sha256, cold.trace[0].artifact_sha256);
  EXPECT_EQ(cache.clear(), 1u);
  EXPECT_TRUE(cache.list().empty());
  fs::remove_all(dir);
}

TEST(KernelCache, ARepeatedGraphReusesItsPreparedKernelsAndAChangedOneIsReplanned) {
  // One executor, one graph run three times (a training step): the first run builds, the others
  // reuse the plan and loaded kernels (no compile time, a cache hit) and give the same bits.
  const auto dir = fresh_dir("prepared");
  cpu::FusedExecutor fused({}, dir);
  Graph g;
  const auto x = g.input("x", {64, 32}, DType::bf16);
  const auto w = g.input("w", {32, 16}, DType::bf16);
  g.mark_output(g.gelu(g.matmul(x, w), true));
  const engine::Inputs in = {{"x", random_normal(DType::bf16, {64, 32}, 0, 1, 7, 1)},
                             {"w", random_normal(DType::bf16, {32, 16}, 0, 1, 7, 2)}};
  const auto first = fused.run(g, in);
  ASSERT_FALSE(first.trace.empty());
  EXPECT_FALSE(first.trace[0].cache_hit);
  EXPECT_GT(first.trace[0].compile_ms, 0);
  for (int repeat = 0; repeat < 2; ++repeat) {
    const auto again = fused.run(g, in);
    ASSERT_EQ(again.trace.size(), first.trace.size());
    for (std::size_t k = 0; k < again.trace.size(); ++k) {
      EXPECT_TRUE(again.trace[k].cache_hit);
      EXPECT_EQ(again.trace[k].compile_ms, 0);
      EXPECT_EQ(again.trace[k].artifact_sha256, first.trace[k].artifact_sha256);
      EXPECT_EQ(again.trace[k].ops, first.trace[k].ops);
    }
    EXPECT_EQ(tensor_md5_hex(again.outputs[0]), tensor_md5_hex(first.outputs[0]));
  }
  // An equal graph built anew is the same graph to the cache; a changed attribute is not.
  Graph same;
  const auto sx = same.input("x", {64, 32}, DType::bf16);
  const auto sw = same.input("w", {32, 16}, DType::bf16);
  same.mark_output(same.gelu(same.matmul(sx, sw), true));
  EXPECT_EQ(same.fingerprint(), g.fingerprint());
  EXPECT_TRUE(same.same_structure(g));
  EXPECT_TRUE(fused.run(same, in).trace[0].cache_hit);
  Graph changed;
  const auto cx = changed.input("x", {64, 32}, DType::bf16);
  const auto cw = changed.input("w", {32, 16}, DType::bf16);
  changed.mark_output(changed.gelu(changed.matmul(cx, cw), false));  // erf gelu: another kernel
  EXPECT_NE(changed.fingerprint(), g.fingerprint());
  EXPECT_FALSE(changed.same_structure(g));
  const auto other = fused.run(changed, in);
  EXPECT_FALSE(other.trace.back().cache_hit);
  EXPECT_GT(other.trace.back().compile_ms, 0);
  EXPECT_NE(tensor_md5_hex(other.outputs[0]), tensor_md5_hex(first.outputs[0]));
  fs::remove_all(dir);
}

TEST(KernelCache, BuildsAreReproducibleAcrossCacheDirectories) {
  // The artifact hash is evidence (task A): the same source and compiler must give the same bytes,
  // whatever the cache directory or process.
  testsupport::ElementwiseChain chain(DType::f16, {300}, 5);
  const auto one = cpu::FusedExecutor({}, fresh_dir("repro-a")).run(chain.graph, chain.inputs);
  const auto two = cpu::FusedExecutor({}, fresh_dir("repro-b")).run(chain.graph, chain.inputs);
  EXPECT_FALSE(two.trace[0].cache_hit);
  EXPECT_EQ(one.trace[0].artifact_sha256, two.trace[0].artifact_sha256);
  fs::remove_all(fresh_dir("repro-a"));
  fs::remove_all(fresh_dir("repro-b"));
}

TEST(KernelCache, TwoProcessesCompilingTheSameKernelAtOnce) {
  const auto dir = fresh_dir("cache-race");
  testsupport::ElementwiseChain chain(DType::bf16, {512}, 2);
  std::vector<pid_t> children;
  for (int i = 0; i < 2; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      try {
        const auto r = cpu::FusedExecutor({}, dir).run(chain.graph, chain.inputs);
        ::_exit(r.outputs.size() == 1 ? 0 : 3);
      } catch (...) {
        ::_exit(4);
      }
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
  engine::KernelCache cache(dir);
  ASSERT_EQ(cache.list().size(), 1u);
  EXPECT_TRUE(cache.list()[0].valid);
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    EXPECT_EQ(entry.path().string().find(".tmp"), std::string::npos)
        << "left behind: " << entry.path();
  }
  fs::remove_all(dir);
}

TEST(Evidence, TraceDisassemblyAndDumps) {
  Graph g;
  const auto x = g.input("x", {1024}, DType::f16);
  g.mark_output(g.mul_scalar(x, 0.7));
  const engine::Inputs in = {{"x", random_uniform(DType::f16, {1024}, -1, 1, 3)}};
  engine::EngineOptions broadcast;
  broadcast.scalar_lowering = engine::ScalarLowering::BroadcastTensor;
  const auto dump_dir = fresh_dir("dumps");
  const auto immediate =
      cpu::FusedExecutor({}, testsupport::test_cache_dir()).run(g, in, {.dump_dir = dump_dir});
  const auto loaded = cpu::FusedExecutor(broadcast, testsupport::test_cache_dir()).run(g, in);
  EXPECT_NE(immediate.trace[0].lowering[0].find("fp32 immediate"), std::string::npos);
  EXPECT_NE(loaded.trace[0].lowering[0].find("broadcast tensor f16"), std::string::npos);
  const auto hist_immediate = cpu::instruction_histogram(immediate.trace[0].artifact_path);
  const auto hist_loaded = cpu::instruction_histogram(loaded.trace[0].artifact_path);
  EXPECT_FALSE(hist_immediate.empty());
  EXPECT_NE(hist_immediate, hist_loaded);  // the two lowerings compile to different instructions
  // dumps: inputs and outputs as .npy plus a manifest
  EXPECT_TRUE(fs::exists(dump_dir / "fused" / "x.npy"));
  EXPECT_TRUE(fs::exists(dump_dir / "fused" / "manifest.json"));
  EXPECT_EQ(read_npy(dump_dir / "fused" / (g.node(g.outputs()[0]).name + ".npy")).dtype(),
            DType::f16);
  fs::remove_all(dump_dir);
}

// Row kernels prefetch the next row (scalar_math.hpp, RowPrefetch); GCC once compiled them
// without a single prefetch instruction, silently, so the artifact itself is checked.
TEST(Evidence, KernelsKeepTheirPrefetches) {
#if defined(__x86_64__) && defined(__PRFCHW__)
  auto count = [](const std::map<std::string, int>& histogram, const std::string& instruction) {
    return histogram.count(instruction) ? histogram.at(instruction) : 0;
  };
  Graph g;
  const auto x = g.input("x", {8, 4096}, DType::f16);
  g.mark_output(g.softmax(x));
  const engine::Inputs in = {{"x", random_uniform(DType::f16, {8, 4096}, -1, 1, 4)}};
  const auto row = cpu::FusedExecutor({}, testsupport::test_cache_dir()).run(g, in);
  const auto row_histogram = cpu::instruction_histogram(row.trace[0].artifact_path);
  EXPECT_GT(count(row_histogram, "prefetcht1"), 0) << "softmax: next input row";
  EXPECT_GT(count(row_histogram, "prefetchw"), 0) << "softmax: next output row";

  testsupport::ElementwiseChain chain(DType::f16, {4096}, 3);
  const auto pointwise =
      cpu::FusedExecutor({}, testsupport::test_cache_dir()).run(chain.graph, chain.inputs);
  ASSERT_EQ(pointwise.trace.size(), 1u);
  EXPECT_GT(count(cpu::instruction_histogram(pointwise.trace[0].artifact_path), "prefetcht1"), 0)
      << "chain: staged inputs ahead of the block";
#else
  GTEST_SKIP() << "the prefetch instructions checked are x86-64 with PREFETCHW";
#endif
}

// A pointwise kernel of four loads and three stores, one load a per-row value broadcast along the
// row (a layer-norm backward's shape), compiled scalar: GCC gave up on run-time alias checks past
// ten load/store pairs, and read the row value through i / W as a 16-bit gather. The emitter now
// states that stores alias no load (ivdep) and computes row indices once per row segment; the
// artifact must hold packed float multiplies, for rows that are a multiple of the block (128) and
// rows that divide it (64, attention's), and the values must be eager's.
TEST(Evidence, PointwiseKernelsWithRowBroadcastsAreVectorised) {
#if defined(__x86_64__) && defined(__AVX__)
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (std::int64_t width : {128, 64}) {
      Graph g;
      const Shape shape{64, width};
      const auto x = g.input("x", shape, dtype), y = g.input("y", shape, dtype),
                 z = g.input("z", shape, dtype);
      const auto scale = g.input("scale", {64, 1}, dtype);
      const auto scaled = g.mul(x, g.expand(scale, shape));
      g.mark_output(scaled);
      g.mark_output(g.mul(y, scaled));
      g.mark_output(g.mul(z, scaled));
      const engine::Inputs in = {{"x", random_uniform(dtype, shape, -1, 1, 5)},
                                 {"y", random_uniform(dtype, shape, -1, 1, 6)},
                                 {"z", random_uniform(dtype, shape, -1, 1, 7)},
                                 {"scale", random_uniform(dtype, {64, 1}, 0.5, 2, 8)}};
      const auto fused = cpu::FusedExecutor({}, testsupport::test_cache_dir()).run(g, in);
      ASSERT_EQ(fused.trace.size(), 1u);
      const auto histogram = cpu::instruction_histogram(fused.trace[0].artifact_path);
      EXPECT_GT(histogram.count("vmulps") ? histogram.at("vmulps") : 0, 0)
          << dtype_name(dtype) << " rows of " << width << ": no packed multiply in the kernel";
      // (in bf16 the later products use the first one's fp32 value where eager reloads it rounded)
      const auto eager = testsupport::run_eager(g, in).outputs;
      for (std::size_t o = 0; o < (dtype == DType::f32 ? eager.size() : 1); ++o) {
        EXPECT_THAT(fused.outputs[o], testing::BitEqual(eager[o]))
            << dtype_name(dtype) << " output " << o;
      }
    }
  }
#else
  GTEST_SKIP() << "the instructions checked are x86-64 AVX";
#endif
}

TEST(BadInput, GraphConstructionNamesOpShapesAndDtypes) {
  Graph g;
  const auto a = g.input("a", {2, 3}, DType::f16);
  const auto b = g.input("b", {4}, DType::f16);
  expect_error([&] { g.add(a, b); },
               "add(a: f16[2, 3], b: f16[4]): shapes [2, 3] and [4] do not broadcast");
  const auto i = g.input("i", {2, 3}, DType::i32);
  expect_error([&] { g.exp(i); },
               "exp: operand i: i32[2, 3] has dtype i32, which the op does not support");
  expect_error([&] { g.input("empty", {0, 3}, DType::f16); }, "empty tensor (shape [0, 3])");
  expect_error([&] { g.matmul(a, a); }, "inner extents differ");
  expect_error([&] { g.sum(a, 2); }, "axis 2 out of range for rank 2");
  expect_error([&] { g.input("a", {1}, DType::f16); }, "name 'a' is already used");
}

TEST(BadInput, RunChecksInputsAndKnobs) {
  testsupport::ElementwiseChain chain(DType::f16, {8}, 1);
  engine::Inputs wrong = chain.inputs;
  wrong["x1"] = Tensor(DType::f32, {8});
  expect_error([&] { testsupport::run_eager(chain.graph, wrong); },
               "input 'x1' must be f16[8], got f32[8]");
  wrong.erase("x1");
  expect_error([&] { testsupport::run_fused(chain.graph, wrong); },
               "input 'x1' (f16[8]) was not given");
  engine::EngineOptions tile;
  tile.reduce_tile = 0;
  expect_error([&] { cpu::EagerExecutor{tile}; }, "reduce_tile must be >= 1, got 0");
  engine::EngineOptions iterations;
  iterations.rsqrt_newton_iters = 7;
  expect_error([&] { cpu::FusedExecutor(iterations, testsupport::test_cache_dir()); },
               "rsqrt_newton_iters must be in 0..3, got 7");
}

TEST(BadInput, MissingOrFailingCompilerShowsItsError) {
  testsupport::ElementwiseChain chain(DType::f16, {8}, 1);
  const auto dir = fresh_dir("badcc");
  expect_error(
      [&] { cpu::FusedExecutor({}, dir, "/nonexistent/c++").run(chain.graph, chain.inputs); },
      "JIT compiler '/nonexistent/c++' cannot run");
  // A compiler that answers --version but fails to compile, with its own message.
  fs::create_directories(dir);
  const auto fake = dir / "failing-cc";
  {
    std::ofstream script(fake);
    script << "#!/bin/sh\nif [ \"$1\" = --version ]; then echo fake-cc 1.0; exit 0; fi\n"
              "echo 'kernel.cpp:1:1: error: synthetic failure for the test' >&2; exit 1\n";
  }
  fs::permissions(fake, fs::perms::owner_all);
  expect_error(
      [&] { cpu::FusedExecutor({}, dir / "cache", fake.string()).run(chain.graph, chain.inputs); },
      "error: synthetic failure for the test");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fusebench
