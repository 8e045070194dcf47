// The CUDA emitter, NVRTC and the SASS evidence, checked without a GPU: kernels are compiled for
// named architectures and their disassembly is inspected.
#include <gtest/gtest.h>

#include <regex>

#include "codegen.hpp"
#include "cuda_device.hpp"
#include "eager_kernels.hpp"
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

// ---- row kernels: one warp per row, the row in shared memory, 16-byte vectors, shuffles
Graph layernorm_graph(DType dtype, std::int64_t rows, std::int64_t k) {
  Graph g;
  g.mark_output(g.layernorm(g.input("x", {rows, k}, dtype), g.input("w", {k}, dtype),
                            g.input("b", {k}, dtype)));
  return g;
}
Graph softmax_graph(DType dtype, std::int64_t rows, std::int64_t k) {
  Graph g;
  g.mark_output(g.softmax(g.input("x", {rows, k}, dtype)));
  return g;
}
const CudaLaunch& launch_named(const CompiledKernel& k, const std::string& entry) {
  for (const auto& l : k.kernel.launches) {
    if (l.entry == entry) return l;
  }
  throw std::runtime_error("no launch " + entry + " in " + k.plan.name);
}
bool lowering_mentions(const CompiledKernel& k, const std::string& text) {
  for (const auto& l : k.kernel.code.lowering) {
    if (l.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST_P(PerArchitecture, RowKernelsGiveAWarpToARowAndMoveItIn16ByteVectors) {
  for (DType dtype : {DType::f16, DType::bf16, DType::f32}) {
    for (const Graph& g : {layernorm_graph(dtype, 4096, 1024), softmax_graph(dtype, 4096, 1024)}) {
      const auto kernels = compile_graph(g, EngineOptions{}, GetParam(), shared_cache());
      ASSERT_EQ(kernels.size(), 1u);
      const CompiledKernel& k = kernels[0];
      const std::string what = fmt::format("{} {}", k.plan.name, dtype_name(dtype));
      // 1024 fp32 elements a row: 4 KiB, eight rows (warps) of a 256-thread block in 32 KiB
      const CudaLaunch& rows = launch_named(k, "fb_rowwise");
      EXPECT_EQ(rows.block, 8 * 32) << what;
      EXPECT_EQ(rows.grid, 4096 / 8) << what;
      EXPECT_EQ(k.kernel.scratch_elements[0], 0) << what << ": the rows are in shared memory";
      EXPECT_TRUE(lowering_mentions(k, "one warp per row")) << what;
      const SassListing sass = disassemble_cubin(k.cubin.library);
      // the tree of each tile's sum, and its total broadcast from lane 0
      EXPECT_GE(sass.count("SHFL.DOWN"), 1) << what;
      EXPECT_GE(sass.count("SHFL.IDX"), 1) << what;
      // the row read and written in 16-byte accesses, staged in shared memory
      EXPECT_GE(sass.count("LDG.E.128"), 1) << what;
      EXPECT_GE(sass.count("STG.E.128"), 1) << what;
      EXPECT_GE(sass.count("STS"), 1) << what;
      EXPECT_GE(sass.count("LDS"), 1) << what;
      // (layernorm's fb_params, in the same cubin, reads the weight and bias per element once)
      if (k.kernel.launches.size() == 1) {
        EXPECT_EQ(sass.count("LDG.E.U16") + sass.count("STG.E.U16"), 0)
            << what << ": a 16-bit element access left in the row kernel";
      }
    }
  }
}

TEST(CudaCodegen, RowKernelsHonourTheTileAndTheAccumulatorInTheirSource) {
  Graph g = softmax_graph(DType::f16, 64, 4096);
  EngineOptions small_tile, storage_acc;
  small_tile.reduce_tile = 256;
  storage_acc.accumulator = engine::AccumulatorDtype::Storage;
  const auto tile = compile_graph(g, small_tile, "sm_90", shared_cache());
  const auto acc = compile_graph(g, storage_acc, "sm_90", shared_cache());
  EXPECT_NE(tile[0].kernel.code.source.find("fbw::softmax_exp<float>(warp, x, K, 256LL, "
                                            "fbk::NoRounding{})"),
            std::string::npos);
  EXPECT_NE(acc[0].kernel.code.source.find("fbk::RoundF16{}"), std::string::npos);
  EXPECT_NE(tile[0].cubin.sha256, acc[0].cubin.sha256);
}

TEST(CudaCodegen, LongRowsLiveInGlobalScratchAndOddRowsMoveOneElementAtATime) {
  // 16384 fp32 elements (64 KiB) do not fit in 48 KiB of shared memory: one scratch row a warp
  const auto long_rows = compile_graph(layernorm_graph(DType::f32, 100, 16384), EngineOptions{},
                                       "sm_90", shared_cache());
  const CudaLaunch& rows = launch_named(long_rows[0], "fb_rowwise");
  EXPECT_EQ(long_rows[0].kernel.scratch_elements[0], rows.grid * (rows.block / 32) * 16384);
  EXPECT_TRUE(lowering_mentions(long_rows[0], "global scratch"));
  EXPECT_GE(disassemble_cubin(long_rows[0].cubin.library).count("LDG.E.128"), 1);
  // many long rows: the grid stops at 256 blocks and loops, so the scratch stays 2048 rows
  const auto many = compile_graph(softmax_graph(DType::f32, 4096, 16384), EngineOptions{}, "sm_90",
                                  shared_cache());
  EXPECT_EQ(launch_named(many[0], "fb_rowwise").grid, 256);
  EXPECT_EQ(many[0].kernel.scratch_elements[0], 256 * 8 * 16384);
  // 999 elements: no vector divides the row, so every access is one element
  const auto odd =
      compile_graph(softmax_graph(DType::f16, 100, 999), EngineOptions{}, "sm_90", shared_cache());
  EXPECT_TRUE(lowering_mentions(odd[0], "1-element vectors"));
  EXPECT_GE(disassemble_cubin(odd[0].cubin.library).count("LDG.E.U16"), 1);
  // f64 rows: two doubles a 16-byte vector
  const auto wide =
      compile_graph(softmax_graph(DType::f64, 64, 1024), EngineOptions{}, "sm_90", shared_cache());
  EXPECT_TRUE(lowering_mentions(wide[0], "2-element vectors"));
}

// The eager row kernel's scratch (sized by the executor before the op's timed region): the
// weight and bias always, the rows only where they do not fit in 48 KiB of shared memory.
TEST(CudaCodegen, EagerRowScratchHoldsRowsOnlyWhenSharedMemoryCannot) {
  EXPECT_EQ(kernels::row_scratch_elements(4096, 1024, false), 2 * 1024);    // 4 KiB rows
  EXPECT_EQ(kernels::row_scratch_elements(4096, 12288, false), 2 * 12288);  // 48 KiB: one a block
  // 96 KiB fp64 rows: 8 warps a block, a scratch row each, for at most 256 blocks
  EXPECT_EQ(kernels::row_scratch_elements(4096, 12288, true), 2 * 12288 + 256 * 8 * 12288);
  // 64 KiB fp32 rows, fewer than 256 blocks' worth: ceil(100 / 8) blocks
  EXPECT_EQ(kernels::row_scratch_elements(100, 16384, false), 2 * 16384 + 13 * 8 * 16384);
}

// ---- element-wise kernels: vectors, and 32-bit index arithmetic where the sizes allow
TEST_P(PerArchitecture, PointwiseKernelsMoveIn16ByteVectors) {
  Graph g;
  const auto x = g.input("x", {64, 1024}, DType::f16), y = g.input("y", {64, 1024}, DType::f16);
  g.mark_output(g.gelu(g.add(x, y)));
  const auto kernels = compile_graph(g, EngineOptions{}, GetParam(), shared_cache());
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_TRUE(lowering_mentions(kernels[0], "8-element vectors, 32-bit indices"));
  EXPECT_EQ(kernels[0].kernel.launches[0].grid, 64 * 1024 / 8 / 256);
  const SassListing sass = disassemble_cubin(kernels[0].cubin.library);
  EXPECT_EQ(sass.count("LDG.E.128"), 2);
  EXPECT_EQ(sass.count("STG.E.128"), 1);
}

TEST(CudaCodegen, BroadcastIndicesAre32BitWhereTheSizeAllows) {
  // the bias's index is the flat index modulo 1000: one 32-bit multiply-high sequence, where the
  // same kernel over 2^31 elements or more needs the 64-bit one
  auto biased = [](std::int64_t rows) {
    Graph g;
    g.mark_output(g.add(g.input("x", {rows, 1000}, DType::f32), g.input("b", {1000}, DType::f32)));
    return g;
  };
  const auto small = compile_graph(biased(1000), EngineOptions{}, "sm_90", shared_cache());
  const auto huge =
      compile_graph(biased(std::int64_t(3) << 20), EngineOptions{}, "sm_90", shared_cache());
  EXPECT_TRUE(lowering_mentions(small[0], "32-bit indices"));
  EXPECT_TRUE(lowering_mentions(huge[0], "64-bit indices"));
  const std::size_t narrow = disassemble_cubin(small[0].cubin.library).instructions.size();
  const std::size_t wide = disassemble_cubin(huge[0].cubin.library).instructions.size();
  EXPECT_LT(narrow, wide) << "32-bit: " << narrow << " instructions, 64-bit: " << wide;
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
