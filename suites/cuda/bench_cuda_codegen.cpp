// The CUDA device's compile path, measurable without a GPU: NVRTC's cold compile of a fused
// kernel to a cubin for a named architecture (a fresh kernel cache each iteration) and the kernel
// cache's hit (key hash, cubin SHA-256 check), for two kernels and two architectures. Counters:
// compile_ms / hit_ms per iteration, cubin bytes, SASS instructions (cuobjdump), and the ratio
// of a cold compile to a hit measured in the same run.
// Where a GPU is usable (only there: they are not registered otherwise, and say why), the kernels'
// speed: a device-to-device copy timed apart, then the chain, layernorm+gelu, layernorm and
// softmax graphs (f16) eager and fused, timed by CUDA events around the kernels alone (manual
// time), each with its traffic's share of the copy from interleaved rounds (copy_share* counters:
// the graph's kernels and a copy of the same traffic alternating, round after round).
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>

#include <cuda_runtime_api.h>

#include "codegen.hpp"
#include "cuda_device.hpp"
#include "cuda_renderer.hpp"
#include "cuda_runtime.hpp"
#include "fusebench/engine/planner.hpp"
#include "fusebench/rng.hpp"
#include "nvrtc_compiler.hpp"
#include "sass.hpp"
#include "support/engine_support.hpp"
#include "support/interleaved.hpp"

namespace fusebench::suite {

namespace {
namespace fs = std::filesystem;

struct KernelCase {
  std::string name;
  engine::Graph graph;
};

// The two kernels of the plan's chain and row families: mul -> add -> gelu -> mul (f16), and
// layernorm -> gelu (f16, a row kernel with weights).
KernelCase kernel_case(const std::string& name) {
  KernelCase c{name, {}};
  engine::Graph& g = c.graph;
  if (name == "chain-f16") {
    std::vector<engine::NodeId> x;
    for (int i = 0; i < 4; ++i)
      x.push_back(g.input(fmt::format("x{}", i), {8, 2048, 4096}, DType::f16));
    g.mark_output(g.mul(g.gelu(g.add(g.mul(x[0], x[1]), x[2])), x[3]));
  } else {
    const auto x = g.input("x", {8, 2048, 4096}, DType::f16);
    g.mark_output(
        g.gelu(g.layernorm(x, g.input("w", {4096}, DType::f16), g.input("b", {4096}, DType::f16))));
  }
  return c;
}

std::string source_of(const KernelCase& c) {
  const auto plan = engine::plan_fusion(c.graph);
  return cuda::emit_cuda_kernel(c.graph, plan.kernels.at(0), engine::EngineOptions{}).code.source;
}

fs::path fresh_dir(const std::string& tag) {
  const fs::path dir =
      fs::temp_directory_path() / fmt::format("fusebench-nvrtc-bench-{}-{}", ::getpid(), tag);
  fs::remove_all(dir);
  return dir;
}

void cold_compile(benchmark::State& state, const std::string& kernel, const std::string& arch) {
  const KernelCase c = kernel_case(kernel);
  const std::string source = source_of(c);
  double total_ms = 0;
  std::int64_t bytes = 0;
  engine::CachedArtifact last;
  for (auto _ : state) {
    state.PauseTiming();
    const fs::path dir = fresh_dir("cold");
    engine::KernelCache cache(dir);
    state.ResumeTiming();
    last = cuda::compile_cubin(source, arch, false, cache);
    state.PauseTiming();
    if (last.hit) {
      state.SkipWithError("cold compile found the kernel in a fresh cache");
      break;
    }
    total_ms += last.compile_ms;
    bytes = std::int64_t(fs::file_size(last.library));
    const auto sass = cuda::disassemble_cubin(last.library);
    state.counters["sass_instructions"] = double(sass.instructions.size());
    fs::remove_all(dir);
    state.ResumeTiming();
  }
  state.counters["compile_ms"] = total_ms / double(std::max<std::int64_t>(1, state.iterations()));
  state.counters["cubin_bytes"] = double(bytes);
  state.counters["source_bytes"] = double(source.size());
  state.SetLabel(cuda::nvrtc_identity());
}

void cache_hit(benchmark::State& state, const std::string& kernel, const std::string& arch) {
  const KernelCase c = kernel_case(kernel);
  const std::string source = source_of(c);
  const fs::path dir = fresh_dir("hit");
  engine::KernelCache cache(dir);
  const engine::CachedArtifact cold = cuda::compile_cubin(source, arch, false, cache);
  std::int64_t hits = 0;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    const engine::CachedArtifact hit = cuda::compile_cubin(source, arch, false, cache);
    hits += hit.hit ? 1 : 0;
    benchmark::DoNotOptimize(hit.sha256.data());
  }
  const double hit_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() /
      double(std::max<std::int64_t>(1, state.iterations()));
  if (hits != std::int64_t(state.iterations())) state.SkipWithError("a lookup missed the cache");
  state.counters["hit_ms"] = hit_ms;
  state.counters["cold_compile_ms"] = cold.compile_ms;
  state.counters["cold_over_hit"] = cold.compile_ms / hit_ms;
  state.SetLabel(cuda::nvrtc_identity());
  fs::remove_all(dir);
}

// ---- on a GPU
// The copy timed apart (its own benchmark, GPU/copy): the bandwidth figure of the run's GPU. Each
// kernel's share of it comes from interleaved rounds with a copy of the kernel's own traffic (below).
void gpu_copy(benchmark::State& state, std::int64_t bytes) {
  try {
    cuda::DeviceCopy copy{std::size_t(bytes)};
    copy.run_seconds();  // warm-up
    for (auto _ : state) state.SetIterationTime(copy.run_seconds());
  } catch (const cuda::CudaError& e) {
    state.SkipWithError(e.what());
    return;
  }
  state.SetBytesProcessed(std::int64_t(state.iterations()) * 2 * bytes);  // read + written
}

void gpu_graph(benchmark::State& state, const SuiteConfig& config, const std::string& name,
               const std::string& kernel, bool fused, const Shape& shape) {
  // the graphs of kernel_case at the profile's shape, with inputs
  engine::Graph g;
  engine::Inputs in;
  if (kernel == "chain-f16") {
    std::vector<engine::NodeId> x;
    for (int i = 0; i < 4; ++i) {
      x.push_back(g.input(fmt::format("x{}", i), shape, DType::f16));
      in[fmt::format("x{}", i)] = random_uniform(DType::f16, shape, -2, 2, 1, std::uint64_t(i));
    }
    g.mark_output(g.mul(g.gelu(g.add(g.mul(x[0], x[1]), x[2])), x[3]));
  } else if (kernel == "softmax-f16") {
    g.mark_output(g.softmax(g.input("x", shape, DType::f16)));
    in = {{"x", random_uniform(DType::f16, shape, -4, 4, 5)}};
  } else {
    const Shape row = {shape.back()};
    const auto y = g.layernorm(g.input("x", shape, DType::f16), g.input("w", row, DType::f16),
                               g.input("b", row, DType::f16));
    g.mark_output(kernel == "layernorm-f16" ? y : g.gelu(y));
    in = {{"x", random_uniform(DType::f16, shape, -2, 2, 2)},
          {"w", random_uniform(DType::f16, row, 0.5, 1.5, 3)},
          {"b", random_uniform(DType::f16, row, -0.5, 0.5, 4)}};
  }
  auto device = engine::make_device("cuda");
  auto executor =
      fused ? device->fused(engine::EngineOptions{}) : device->eager(engine::EngineOptions{});
  executor->run(g, in);  // compiles (fused) and warms up
  double bytes = 0;
  for (auto _ : state) {
    const engine::RunResult r = executor->run(g, in);
    double ms = 0;
    bytes = 0;
    for (const auto& k : r.trace) {
      ms += k.run_ms;
      bytes += k.bytes_moved;
    }
    state.SetIterationTime(ms / 1000);
  }
  state.SetBytesProcessed(std::int64_t(state.iterations()) * std::int64_t(bytes));
  state.counters["kernel_bytes"] = bytes;
  // The share of the copy from interleaved rounds (support/interleaved.hpp): each round the graph's
  // kernels and a device-to-device copy of the same traffic, alternating, all timed by events;
  // measured once per benchmark (Google Benchmark calls it more than once), the rounds in the dump.
  static std::map<std::string, CopyShareRounds> measured;
  auto found = measured.find(name);
  if (found == measured.end()) {
    cuda::DeviceCopy copy{std::size_t(bytes / 2)};
    const auto kernels_seconds = [&] {
      double ms = 0;
      for (const auto& k : executor->run(g, in).trace) ms += k.run_ms;
      return ms * 1e-3;
    };
    found = measured
                .emplace(name, copy_share_rounds(
                                   kernels_seconds, [&] { return copy.run_seconds(); }, bytes,
                                   std::int64_t(copy.bytes())))
                .first;
    write_evidence(config, "copy_share_" + name, copy_share_evidence(found->second));
  }
  record_copy_share(state, found->second);
}
}  // namespace

void register_benchmarks(const SuiteConfig& config) {
  for (const char* kernel : {"chain-f16", "layernorm-gelu-f16"}) {
    for (const std::string& arch : cuda::kEvidenceArchitectures) {
      benchmark::RegisterBenchmark(
          fmt::format("NVRTC/cold/kernel:{}/arch:{}", kernel, arch).c_str(),
          [=](benchmark::State& s) { cold_compile(s, kernel, arch); })
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
      benchmark::RegisterBenchmark(fmt::format("NVRTC/hit/kernel:{}/arch:{}", kernel, arch).c_str(),
                                   [=](benchmark::State& s) { cache_hit(s, kernel, arch); })
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
  }
  cuda::register_cuda_device();
  if (const std::string reason = cuda::unavailable_reason(); !reason.empty()) {
    fmt::print(stderr, "bench_cuda_codegen: GPU speed benchmarks not registered: {}\n", reason);
    benchmark::AddCustomContext("fusebench_gpu", "none: " + reason);
    return;
  }
  benchmark::AddCustomContext("fusebench_gpu", cuda::device_architecture());
  const Shape shape = config.quick() ? Shape{8, 512, 4096} : Shape{8, 2048, 4096};
  const std::int64_t copy_bytes = shape_numel(shape) * 2;
  benchmark::RegisterBenchmark(fmt::format("GPU/copy/bytes:{}", copy_bytes).c_str(),
                               [=](benchmark::State& s) { gpu_copy(s, copy_bytes); })
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
  for (const char* kernel : {"chain-f16", "layernorm-gelu-f16", "layernorm-f16", "softmax-f16"}) {
    for (bool fused : {false, true}) {
      const std::string name = fmt::format("GPU/{}/exec:{}/shape:{}", kernel,
                                           fused ? "fused" : "eager", shape_string(shape));
      benchmark::RegisterBenchmark(
          name.c_str(),
          [=](benchmark::State& s) { gpu_graph(s, config, name, kernel, fused, shape); })
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

}  // namespace fusebench::suite

FUSEBENCH_SUITE_MAIN("cuda_codegen")
