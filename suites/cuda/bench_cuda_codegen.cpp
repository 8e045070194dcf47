// The CUDA device's compile path, measurable without a GPU: NVRTC's cold compile of a fused
// kernel to a cubin for a named architecture (a fresh kernel cache each iteration) and the kernel
// cache's hit (key hash, cubin SHA-256 check), for two kernels and two architectures. Counters:
// compile_ms / hit_ms per iteration, cubin bytes, SASS instructions (cuobjdump), and the ratio
// of a cold compile to a hit measured in the same run.
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "codegen.hpp"
#include "fusebench/engine/emit_cuda.hpp"
#include "fusebench/engine/planner.hpp"
#include "nvrtc_compiler.hpp"
#include "sass.hpp"
#include "support/engine_support.hpp"

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
    for (int i = 0; i < 4; ++i) x.push_back(g.input(fmt::format("x{}", i), {8, 2048, 4096}, DType::f16));
    g.mark_output(g.mul(g.gelu(g.add(g.mul(x[0], x[1]), x[2])), x[3]));
  } else {
    const auto x = g.input("x", {8, 2048, 4096}, DType::f16);
    g.mark_output(g.gelu(g.layernorm(x, g.input("w", {4096}, DType::f16), g.input("b", {4096}, DType::f16))));
  }
  return c;
}

std::string source_of(const KernelCase& c) {
  const auto plan = engine::plan_fusion(c.graph);
  return engine::emit_cuda_kernel(c.graph, plan.kernels.at(0), engine::EngineOptions{}).code.source;
}

fs::path fresh_dir(const std::string& tag) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("fusebench-nvrtc-bench-{}-{}", ::getpid(), tag);
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
  const double hit_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() /
                        double(std::max<std::int64_t>(1, state.iterations()));
  if (hits != std::int64_t(state.iterations())) state.SkipWithError("a lookup missed the cache");
  state.counters["hit_ms"] = hit_ms;
  state.counters["cold_compile_ms"] = cold.compile_ms;
  state.counters["cold_over_hit"] = cold.compile_ms / hit_ms;
  state.SetLabel(cuda::nvrtc_identity());
  fs::remove_all(dir);
}
}  // namespace

void register_benchmarks(const SuiteConfig&) {
  for (const char* kernel : {"chain-f16", "layernorm-gelu-f16"}) {
    for (const std::string& arch : cuda::kEvidenceArchitectures) {
      benchmark::RegisterBenchmark(fmt::format("NVRTC/cold/kernel:{}/arch:{}", kernel, arch).c_str(),
                                   [=](benchmark::State& s) { cold_compile(s, kernel, arch); })
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
      benchmark::RegisterBenchmark(fmt::format("NVRTC/hit/kernel:{}/arch:{}", kernel, arch).c_str(),
                                   [=](benchmark::State& s) { cache_hit(s, kernel, arch); })
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
  }
}

}  // namespace fusebench::suite

FUSEBENCH_SUITE_MAIN("cuda_codegen")
