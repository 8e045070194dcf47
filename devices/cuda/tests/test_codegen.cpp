// The CUDA emitter, NVRTC and the SASS evidence, checked without a GPU: kernels are compiled for
// named architectures and their disassembly is inspected.
#include <gtest/gtest.h>

#include <regex>

#include "codegen.hpp"
#include "cuda_device.hpp"
#include "fusebench/engine/executor.hpp"
#include "fusebench/error.hpp"
#include "fusebench/hash.hpp"
#include "nvrtc_compiler.hpp"
#include "sass.hpp"

namespace fusebench::cuda {
namespace {

using engine::EngineOptions;
using engine::Graph;

engine::KernelCache& shared_cache() {
  static engine::KernelCache cache(FUSEBENCH_CUDA_TEST_CACHE);
  return cache;
}

// The SASS of the graph's only kernel for `arch`.
SassListing sass_of(const Graph& g, const EngineOptions& o, const std::string& arch) {
  const auto kernels = compile_graph(g, o, arch, shared_cache());
  EXPECT_EQ(kernels.size(), 1u);
  return disassemble_cubin(kernels.at(0).cubin.library);
}

Graph scaled(DType dtype, double scalar) {
  Graph g;
  g.mark_output(g.mul_scalar(g.input("x", {1024}, dtype), scalar));
  return g;
}

// FMUL with a float immediate or a constant-bank operand (not only registers).
int fmul_with_constant(const SassListing& s) { return s.constant_operand_count("FMUL"); }

class PerArchitecture : public ::testing::TestWithParam<std::string> {};
INSTANTIATE_TEST_SUITE_P(Sass, PerArchitecture, ::testing::Values("sm_80", "sm_90"));

// ---- C1: the scalar lowering is visible in the SASS
TEST_P(PerArchitecture, ImmediateScalarIsAnOperandAndBroadcastScalarIsLoaded) {
  EngineOptions immediate, broadcast;
  broadcast.scalar_lowering = engine::ScalarLowering::BroadcastTensor;
  const Graph g = scaled(DType::f16, 0.7);
  const SassListing imm = sass_of(g, immediate, GetParam());
  const SassListing bc = sass_of(g, broadcast, GetParam());
  EXPECT_GE(fmul_with_constant(imm), 1) << "immediate lowering: no FMUL with an immediate operand";
  EXPECT_EQ(fmul_with_constant(bc), 0) << "broadcast lowering: an FMUL with a constant operand";
  EXPECT_GE(bc.count("FMUL"), 1);
  // the broadcast tensor is one more global load than x alone
  EXPECT_GT(bc.count("LDG"), imm.count("LDG"));
  EXPECT_GE(imm.count("LDG"), 1);
}

// ---- C3: the rsqrt knob in the SASS
Graph rsqrt_graph() {
  Graph g;
  g.mark_output(g.rsqrt(g.input("x", {1024}, DType::f32)));
  return g;
}

TEST_P(PerArchitecture, EachNewtonStepAddsArithmeticAfterTheHardwareSeed) {
  int previous_ffma = -1;
  std::map<std::string, int> previous;
  for (int iters = 0; iters <= 3; ++iters) {
    EngineOptions o;
    o.rsqrt = engine::ApproxMode::NewtonHardware;
    o.rsqrt_newton_iters = iters;
    o.fma_contraction = true;
    const SassListing s = sass_of(rsqrt_graph(), o, GetParam());
    EXPECT_GE(s.count("MUFU.RSQ"), 1) << iters << " iterations";
    EXPECT_GT(s.count("FFMA"), previous_ffma) << iters << " iterations";
    EXPECT_NE(s.histogram, previous);
    previous_ffma = s.count("FFMA");
    previous = s.histogram;
  }
}

TEST_P(PerArchitecture, BitTrickSeedUsesNoApproximateInstructionAndIeeeNone) {
  EngineOptions bit_trick, ieee;
  bit_trick.rsqrt = engine::ApproxMode::NewtonBitTrick;
  const SassListing trick = sass_of(rsqrt_graph(), bit_trick, GetParam());
  EXPECT_EQ(trick.count("MUFU.RSQ"), 0);
  EXPECT_GE(trick.count("FMUL"), 4);  // two Newton steps of three multiplies each, less what folds
  // IEEE 1/sqrt(x): a correctly rounded sqrt and division (MUFU seeds inside their slow paths are
  // allowed), never the bare approximation
  const SassListing exact = sass_of(rsqrt_graph(), ieee, GetParam());
  EXPECT_NE(exact.histogram, trick.histogram);
}

// ---- FMA contraction is NVRTC's --fmad
TEST_P(PerArchitecture, FmaContractionKnobIsNvrtcFmad) {
  Graph g;
  const auto x = g.input("x", {1024}, DType::f32), y = g.input("y", {1024}, DType::f32),
             z = g.input("z", {1024}, DType::f32);
  g.mark_output(g.add(g.mul(x, y), z));
  EngineOptions off, on;
  on.fma_contraction = true;
  const SassListing separate = sass_of(g, off, GetParam());
  const SassListing fused = sass_of(g, on, GetParam());
  EXPECT_EQ(separate.count("FFMA"), 0);
  EXPECT_GE(separate.count("FMUL"), 1);
  EXPECT_GE(separate.count("FADD"), 1);
  EXPECT_GE(fused.count("FFMA"), 1);
  EXPECT_EQ(fused.count("FADD"), 0);
}

// ---- reductions: the warp-shuffle tree, and the accumulator knob changes the code
TEST(CudaCodegen, SplitReductionShufflesAndHonoursTheAccumulator) {
  Graph g;
  g.mark_output(g.sum(g.input("x", {64, 4096}, DType::f16), 1));
  EngineOptions f32_acc, storage_acc;
  storage_acc.accumulator = engine::AccumulatorDtype::Storage;
  const SassListing a = sass_of(g, f32_acc, "sm_90");
  const SassListing b = sass_of(g, storage_acc, "sm_90");
  EXPECT_GE(a.count("SHFL.DOWN"), 1);
  EXPECT_NE(a.histogram, b.histogram);
  const auto kernels = compile_graph(g, f32_acc, "sm_90", shared_cache());
  ASSERT_EQ(kernels[0].kernel.launches.size(), 2u);
  EXPECT_EQ(kernels[0].kernel.launches[0].entry, "fb_partials");
  EXPECT_EQ(kernels[0].kernel.launches[0].grid, 64 * 4);  // positions x tiles of 1024
  EngineOptions small_tile;
  small_tile.reduce_tile = 256;
  EXPECT_EQ(compile_graph(g, small_tile, "sm_90", shared_cache())[0].kernel.launches[0].grid,
            64 * 16);
}

// ---- every kernel kind compiles
TEST(CudaCodegen, EveryKernelKindCompiles) {
  Graph g;
  const auto x = g.input("x", {4, 8, 64}, DType::f16);
  const auto w = g.input("w", {64}, DType::f32), b = g.input("b", {64}, DType::f32);
  const auto m = g.input("m", {64, 32}, DType::bf16);
  const auto ln = g.gelu(g.layernorm(x, w, b));
  const auto sm = g.softmax(g.mul_scalar(ln, 0.125));
  const auto mm = g.add_scalar(g.matmul(sm, m), 1.0);
  const auto views = g.concat({g.transpose(g.slice(mm, 2, 0, 16), 0, 1),
                               g.reshape(g.expand(g.max(mm, 2, true), {4, 8, 16}), {8, 4, 16})},
                              2);
  g.mark_output(views);
  g.mark_output(g.mean(g.cast(x, DType::f64), 0));
  const auto kernels = compile_graph(g, EngineOptions{}, "sm_90", shared_cache());
  std::set<engine::KernelKind> kinds;
  for (const auto& k : kernels) {
    kinds.insert(k.kernel.kind);
    EXPECT_EQ(k.cubin.sha256, sha256_file_hex(k.cubin.library)) << k.plan.name;
    EXPECT_GE(disassemble_cubin(k.cubin.library).instructions.size(), 10u) << k.plan.name;
  }
  EXPECT_EQ(kinds.size(), 4u);
}

// ---- the training ops (task E) compile through the same op table
TEST(CudaCodegen, TrainingOpsCompile) {
  Graph g;
  const auto x = g.input("x", {2, 16, 16}, DType::f32), dy = g.input("dy", {2, 16, 16}, DType::f32);
  g.mark_output(g.softmax(
      g.causal_mask(g.log(g.gelu_tanh_backward(dy, x)), -std::numeric_limits<double>::infinity())));
  for (const auto& k : compile_graph(g, EngineOptions{}, "sm_90", shared_cache())) {
    EXPECT_GE(disassemble_cubin(k.cubin.library).instructions.size(), 10u) << k.plan.name;
  }
}

// ---- the cache: key with NVRTC's version and the architecture, cubin hash, hits
TEST(CudaCodegen, CubinsAreCachedPerArchitectureAndNvrtcVersion) {
  const auto dir = std::filesystem::temp_directory_path() /
                   fmt::format("fusebench-cuda-cache-test-{}", ::getpid());
  std::filesystem::remove_all(dir);
  engine::KernelCache cache(dir);
  const Graph g = scaled(DType::bf16, 0.1);
  const auto cold = compile_graph(g, EngineOptions{}, "sm_90", cache).at(0).cubin;
  const auto hit = compile_graph(g, EngineOptions{}, "sm_90", cache).at(0).cubin;
  const auto other = compile_graph(g, EngineOptions{}, "sm_80", cache).at(0).cubin;
  EXPECT_FALSE(cold.hit);
  EXPECT_GT(cold.compile_ms, 0);
  EXPECT_TRUE(hit.hit);
  EXPECT_EQ(hit.key, cold.key);
  EXPECT_EQ(hit.sha256, cold.sha256);
  EXPECT_EQ(cold.library.extension(), ".cubin");
  EXPECT_EQ(cold.source.extension(), ".cu");
  EXPECT_NE(other.key, cold.key);
  EXPECT_NE(other.sha256, cold.sha256);
  const std::string source =
      emit_cuda_kernel(g, engine::plan_fusion(g).kernels.at(0), EngineOptions{}).code.source;
  EXPECT_EQ(cold.key,
            engine::KernelCache::key_for(
                source, "nvrtc " + fmt::format("{}", fmt::join(nvrtc_options("sm_90", false), " ")),
                nvrtc_identity()));
  EXPECT_EQ(cache.list().size(), 2u);
  std::filesystem::remove_all(dir);
}

TEST(CudaCodegen, MalformedArchitectureIsAnInputError) {
  EXPECT_THROW(compile_graph(scaled(DType::f32, 2.0), EngineOptions{}, "hopper", shared_cache()),
               InputError);
  try {
    nvrtc_options("90", false);
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'90'"), std::string::npos);
  }
}

TEST(CudaCodegen, EvidenceJsonHasEveryArchitectureAndHistogram) {
  const nlohmann::json e = sass_evidence(scaled(DType::f16, 0.7), EngineOptions{},
                                         kEvidenceArchitectures, shared_cache());
  EXPECT_EQ(e["nvrtc"], nvrtc_identity());
  for (const auto& arch : kEvidenceArchitectures) {
    ASSERT_TRUE(e["architectures"].contains(arch));
    const auto& k = e["architectures"][arch].at(0);
    EXPECT_EQ(k["cubin_sha256"].get<std::string>().size(), 64u);
    EXPECT_GE(k["sass"]["histogram"]["FMUL"].get<int>(), 1);
  }
}

TEST(CudaCodegen, DeviceRegistersAsCudaAndSaysWhyItCannotRun) {
  register_cuda_device();
  const auto device = engine::make_device("cuda");
  EXPECT_EQ(device->name(), "cuda");
  const std::string reason = device->unavailable_reason();
  std::cout << "cuda unavailable_reason: " << (reason.empty() ? "(none: a GPU is usable)" : reason)
            << "\n";
  if (!reason.empty()) {
    Graph g = scaled(DType::f32, 2.0);
    engine::Inputs in{{"x", Tensor(DType::f32, {1024})}};
    try {
      device->fused(EngineOptions{})->run(g, in);
      ADD_FAILURE() << "ran without a GPU";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace fusebench::cuda
