// Execution on a CUDA GPU, against the CPU device and the fp64 reference. Every test skips, with
// the CUDA device's own reason, where no GPU is usable (this machine and CI have none: these
// tests have not run yet).
#include <gtest/gtest.h>

#include "cpu_device.hpp"
#include "cuda_device.hpp"
#include "eager_executor.hpp"
#include "fusebench/engine/executor.hpp"
#include "fusebench/rng.hpp"
#include "fusebench/testing/matchers.hpp"

namespace fusebench::cuda {
namespace {

using engine::EngineOptions;
using engine::Graph;
using fusebench::testing::BitEqual;
using fusebench::testing::ErrorStatsWithin;

#define SKIP_WITHOUT_GPU()                                                  \
  do {                                                                      \
    if (const std::string reason = unavailable_reason(); !reason.empty()) { \
      GTEST_SKIP() << "no usable CUDA GPU: " << reason;                     \
    }                                                                       \
  } while (0)

struct Case {
  Graph graph;
  engine::Inputs inputs;
};

Case chain(DType dtype) {
  Case c;
  std::vector<engine::NodeId> x;
  for (int i = 0; i < 4; ++i) {
    x.push_back(c.graph.input(fmt::format("x{}", i), {64, 1024}, dtype));
    c.inputs[fmt::format("x{}", i)] = random_uniform(dtype, {64, 1024}, -2, 2, 7, std::uint64_t(i));
  }
  c.graph.mark_output(c.graph.mul(c.graph.gelu(c.graph.add(c.graph.mul(x[0], x[1]), x[2])), x[3]));
  return c;
}

engine::RunResult on(const std::string& device, bool fused, const Case& c, EngineOptions o = {}) {
  cpu::register_cpu_device();
  register_cuda_device();
  auto d = engine::make_device(device);
  return (fused ? d->fused(o) : d->eager(o))->run(c.graph, c.inputs);
}

TEST(CudaGpu, FusedChainMatchesTheCpuFusedKernelBitForBit) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::f16, DType::bf16, DType::f32}) {
    const Case c = chain(dtype);
    EXPECT_THAT(on("cuda", true, c).outputs[0], BitEqual(on("cpu", true, c).outputs[0]))
        << dtype_name(dtype);
    EXPECT_THAT(on("cuda", false, c).outputs[0], BitEqual(on("cpu", false, c).outputs[0]))
        << dtype_name(dtype);
  }
}

TEST(CudaGpu, ReductionsFollowTheCpuOrder) {
  SKIP_WITHOUT_GPU();
  for (auto acc : {engine::AccumulatorDtype::F32, engine::AccumulatorDtype::Storage}) {
    Case c;
    c.graph.mark_output(c.graph.sum(c.graph.input("x", {16, 5000}, DType::f16), 1));
    c.inputs["x"] = random_uniform(DType::f16, {16, 5000}, -1, 1, 3);
    EngineOptions o;
    o.accumulator = acc;
    o.reduce_tile = 256;
    EXPECT_THAT(on("cuda", true, c, o).outputs[0], BitEqual(on("cpu", true, c, o).outputs[0]));
    EXPECT_THAT(on("cuda", false, c, o).outputs[0], BitEqual(on("cpu", false, c, o).outputs[0]));
  }
}

TEST(CudaGpu, RowwiseAndMatmulRun) {
  SKIP_WITHOUT_GPU();
  Case c;
  const auto x = c.graph.input("x", {8, 128}, DType::f32);
  const auto w = c.graph.input("w", {128}, DType::f32), b = c.graph.input("b", {128}, DType::f32);
  const auto m = c.graph.input("m", {128, 64}, DType::f32);
  c.graph.mark_output(c.graph.softmax(c.graph.matmul(c.graph.layernorm(x, w, b), m)));
  c.inputs["x"] = random_uniform(DType::f32, {8, 128}, -1, 1, 5);
  c.inputs["w"] = random_uniform(DType::f32, {128}, 0.5, 1.5, 6);
  c.inputs["b"] = random_uniform(DType::f32, {128}, -0.5, 0.5, 7);
  c.inputs["m"] = random_uniform(DType::f32, {128, 64}, -0.2, 0.2, 8);
  // cuBLAS sums in its own order: the fp32 results track fp64 to a relative 1e-5, not bit for bit
  const Tensor ref = engine::fp64_reference(c.graph, c.inputs)[0];
  EXPECT_THAT(on("cuda", true, c).outputs[0], ErrorStatsWithin(ref, {.rel_max = 1e-5}));
  EXPECT_THAT(on("cuda", false, c).outputs[0], ErrorStatsWithin(ref, {.rel_max = 1e-5}));
  // the layernorm row and the softmax row are the CPU's code: the fused layernorm kernel alone is bit-equal
  Case ln;
  ln.graph.mark_output(ln.graph.layernorm(ln.graph.input("x", {8, 128}, DType::f32),
                                          ln.graph.input("w", {128}, DType::f32),
                                          ln.graph.input("b", {128}, DType::f32)));
  ln.inputs = {{"x", c.inputs["x"]}, {"w", c.inputs["w"]}, {"b", c.inputs["b"]}};
  EXPECT_THAT(on("cuda", true, ln).outputs[0], BitEqual(on("cpu", true, ln).outputs[0]));
}

TEST(CudaGpu, CublasLtBiasGeluEpilogueMatchesTheTanhGelu) {
  SKIP_WITHOUT_GPU();
  const Tensor a = random_uniform(DType::f32, {64, 96}, -1, 1, 11),
               b = random_uniform(DType::f32, {96, 32}, -1, 1, 12);
  const Tensor bias = random_uniform(DType::f32, {32}, -1, 1, 13);
  Case c;
  c.graph.mark_output(
      c.graph.gelu(c.graph.add(c.graph.matmul(c.graph.input("a", {64, 96}, DType::f32),
                                              c.graph.input("b", {96, 32}, DType::f32)),
                               c.graph.input("bias", {32}, DType::f32)),
                   true));
  c.inputs = {{"a", a}, {"b", b}, {"bias", bias}};
  // the vendor's GELU epilogue is its own tanh approximation: close to fp64, not equal to ours
  const Tensor ref = engine::fp64_reference(c.graph, c.inputs)[0];
  EXPECT_THAT(cublaslt_matmul_bias_gelu(a, b, bias), ErrorStatsWithin(ref, {.abs_max = 1e-3}));
}

}  // namespace
}  // namespace fusebench::cuda
