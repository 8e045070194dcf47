// Task C3 (claim §1.2 (4)): rsqrt (and division) computed as IEEE or by Newton-Raphson from a seed
// (the 0x5f3759df bit trick, or the CPU's rsqrtss / rcpss) with 0..3 iterations: the ULP error of
// each variant against fp64. Input U(0.01, 100); for div, x / y with both from that range.
// Axes: op x dtype (f16, bf16, f32) x mode x iterations (IEEE has no iterations: one entry).
// Counters: ULP error P50 / P99 / max / mean and the share of correctly rounded results
// (integer ULP distance 0 to the rounded reference); the histogram goes to the dump directory.
// The IEEE rows also compare the compiled op with the device's eager op (fused_vs_eager_*): on a
// framework, where no Newton knob exists, that and the emitted code are what can be tested.
#include <map>

#include "fusebench/compare.hpp"
#include "fusebench/error_stats.hpp"
#include "fusebench/rng.hpp"
#include "support/cases.hpp"
#include "support/engine_support.hpp"
#if defined(FUSEBENCH_HAVE_CUDA)
#include "codegen.hpp"
#include "nvrtc_compiler.hpp"
#include "sass.hpp"
#endif

namespace fusebench::suite {

namespace {
void run_case(benchmark::State& state, const std::string& name, bool div, DType dtype,
              engine::ApproxMode mode, int iterations, const Shape& shape,
              const SuiteConfig& config) {
  engine::Graph g;
  const auto x = g.input("x", shape, dtype);
  const auto y = g.input("y", shape, dtype);
  g.mark_output(div ? g.div(x, y) : g.rsqrt(x));
  engine::Inputs in = {{"x", random_uniform(dtype, shape, 0.01, 100, 31)},
                       {"y", random_uniform(dtype, shape, 0.01, 100, 32)}};
  engine::EngineOptions o;
  (div ? o.div : o.rsqrt) = mode;
  (div ? o.div_newton_iters : o.rsqrt_newton_iters) = iterations;
  auto executor = make_executor(config, true, o);
  const engine::RunResult first = executor->run(g, in);
  const Tensor out = first.outputs[0];
  for (auto _ : state) {
    auto result = executor->run(g, in);
    benchmark::DoNotOptimize(result.outputs[0].raw_data());
  }
  state.SetItemsProcessed(std::int64_t(state.iterations()) * shape_numel(shape));
  const Tensor reference = engine::fp64_reference(g, in)[0];
  const auto stats = error_stats(out, reference, {.histogram_bins = 8});
  state.counters["ulp_p50"] = stats.ulp_error.p50;
  state.counters["ulp_p99"] = stats.ulp_error.p99;
  state.counters["ulp_max"] = stats.ulp_error.max;
  state.counters["ulp_mean"] = stats.ulp_error.mean;
  state.counters["frac_correctly_rounded"] =
      double(stats.ulp_histogram.counts[0]) / double(out.numel());
  nlohmann::json hist = stats.ulp_histogram.counts;
  nlohmann::json evidence = {{"integer_ulp_histogram", hist}, {"rel_err_max", stats.rel.max}};
  if (mode == engine::ApproxMode::Ieee) {
    // The compiled op against the device's own eager op (a framework's eager kernels are what its
    // users compare with) and both against the correctly rounded value: fused_vs_eager_* and
    // eager_*. The fused trace (a framework's generated code or optimized HLO) is the evidence of
    // what the compiler emitted.
    const Tensor eager = make_executor(config, false, o)->run(g, in).outputs[0];
    const auto between = ulp_diff(out, eager, {.histogram_bins = 1});
    const auto eager_stats = error_stats(eager, reference, {.histogram_bins = 8});
    state.counters["fused_vs_eager_frac_equal"] =
        double(between.histogram.counts[0]) / double(out.numel());
    state.counters["fused_vs_eager_ulp_max"] = double(between.max_distance);
    state.counters["eager_ulp_max"] = eager_stats.ulp_error.max;
    state.counters["eager_frac_correctly_rounded"] =
        double(eager_stats.ulp_histogram.counts[0]) / double(out.numel());
    evidence["fused_trace"] = nlohmann::json::array();
    for (const auto& k : first.trace) evidence["fused_trace"].push_back(k.to_json());
  }
  write_evidence(config, name, evidence);
}
}  // namespace

#if defined(FUSEBENCH_HAVE_CUDA)
// ---- SASS evidence: the CUDA device's fused f32 kernel for each variant, compiled by NVRTC for a
// named architecture and disassembled (no GPU needed): the approximate instructions (MUFU.RSQ,
// MUFU.RCP) and the floating-point arithmetic each Newton step adds. The timed loop is the kernel
// cache's hit path.
void run_sass_case(benchmark::State& state, const std::string& name, bool div,
                   engine::ApproxMode mode, int iterations, const std::string& arch,
                   const SuiteConfig& config) {
  engine::Graph g;
  const auto x = g.input("x", {4096}, DType::f32);
  const auto y = g.input("y", {4096}, DType::f32);
  g.mark_output(div ? g.div(x, y) : g.rsqrt(x));
  engine::EngineOptions o;
  (div ? o.div : o.rsqrt) = mode;
  (div ? o.div_newton_iters : o.rsqrt_newton_iters) = iterations;
  engine::KernelCache cache;
  const auto kernels = cuda::compile_graph(g, o, arch, cache);
  const cuda::CompiledKernel& k = kernels.at(0);
  const cuda::SassListing sass = cuda::disassemble_cubin(k.cubin.library);
  for (const char* opcode : {"MUFU.RSQ", "MUFU.RCP", "FFMA", "FMUL", "FADD"})
    state.counters[opcode] = sass.count(opcode);
  state.counters["instructions"] = double(sass.instructions.size());
  for (auto _ : state) {
    auto hit = cuda::compile_graph(g, o, arch, cache);
    benchmark::DoNotOptimize(hit.data());
  }
  write_evidence(config, name,
                 {{"arch", arch},
                  {"nvrtc", cuda::nvrtc_identity()},
                  {"knobs", o.to_json()},
                  {"lowering", k.kernel.code.lowering},
                  {"cubin_sha256", k.cubin.sha256},
                  {"cache_key", k.cubin.key},
                  {"compile_ms", k.cubin.hit ? 0.0 : k.cubin.compile_ms},
                  {"source", k.cubin.source.string()},
                  {"sass", sass.to_json()}});
}
#endif

void register_benchmarks(const SuiteConfig& config) {
  const Shape shape = config.quick() ? Shape{256, 1024} : Shape{1024, 1024};
  struct Mode {
    engine::ApproxMode mode;
    const char* name;
  };
  const Mode modes[] = {{engine::ApproxMode::Ieee, "ieee"},
                        {engine::ApproxMode::NewtonBitTrick, "newton-bittrick"},
                        {engine::ApproxMode::NewtonHardware, "newton-hw"}};
#if defined(FUSEBENCH_HAVE_CUDA)
  // The CUDA device's machine code, compiled by NVRTC whatever --device says: beside the engine
  // only (a framework's section would show it as if it were the framework's own)
  for (bool div : engine_device(config) ? std::vector<bool>{false, true} : std::vector<bool>{}) {
    for (const Mode& m : modes) {
      for (int iterations = 0; iterations <= 3; ++iterations) {
        if (m.mode == engine::ApproxMode::Ieee && iterations > 0) continue;
        for (const std::string& arch : cuda::kEvidenceArchitectures) {
          // an NVRTC or cuobjdump failure skips the case with its message; the suite goes on
          const Axes axes = Axes()
                                .add("op", div ? "div" : "rsqrt")
                                .add("dtype", "f32")
                                .add("mode", m.name)
                                .add("iters", iterations)
                                .add("arch", arch);
          register_case("SASS/C3", axes, [=](benchmark::State& s, const std::string& name) {
            run_sass_case(s, name, div, m.mode, iterations, arch, config);
          })->Unit(benchmark::kMicrosecond);
        }
      }
    }
  }
#endif
  for (bool div : {false, true}) {
    for (DType dtype : {DType::f16, DType::bf16, DType::f32}) {
      for (const Mode& m : modes) {
        for (int iterations = 0; iterations <= 3; ++iterations) {
          // IEEE has no iteration count
          if (m.mode == engine::ApproxMode::Ieee && iterations > 0) continue;
          const Axes axes = Axes()
                                .add("op", div ? "div" : "rsqrt")
                                .add("dtype", dtype_name(dtype))
                                .add("mode", m.name)
                                .add("iters", iterations)
                                .add("shape", shape_text(shape))
                                .add("device", config.device);
          register_case("C3", axes, [=](benchmark::State& s, const std::string& name) {
            run_case(s, name, div, dtype, m.mode, iterations, shape, config);
          })->Unit(benchmark::kMicrosecond);
        }
      }
    }
  }
}

}  // namespace fusebench::suite

FUSEBENCH_SUITE_MAIN("approximations")
