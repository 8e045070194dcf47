// Task C3 (claim §1.2 (4)): rsqrt (and division) computed as IEEE or by Newton-Raphson from a seed
// (the 0x5f3759df bit trick, or the CPU's rsqrtss / rcpss) with 0..3 iterations: the ULP error of
// each variant against fp64. Input U(0.01, 100); for div, x / y with both from that range.
// Axes: op x dtype (f16, bf16, f32) x mode x iterations (IEEE has no iterations: one entry).
// Counters: ULP error P50 / P99 / max / mean and the share of correctly rounded results
// (integer ULP distance 0 to the rounded reference); the histogram goes to the dump directory.
#include <map>

#include "fusebench/error_stats.hpp"
#include "fusebench/rng.hpp"
#include "support/engine_support.hpp"

namespace fusebench::suite {

namespace {
void run_case(benchmark::State& state, const std::string& name, bool div, DType dtype, engine::ApproxMode mode, int iterations,
              const Shape& shape, const SuiteConfig& config) {
  engine::Graph g;
  const auto x = g.input("x", shape, dtype);
  const auto y = g.input("y", shape, dtype);
  g.mark_output(div ? g.div(x, y) : g.rsqrt(x));
  engine::Inputs in = {{"x", random_uniform(dtype, shape, 0.01, 100, 31)}, {"y", random_uniform(dtype, shape, 0.01, 100, 32)}};
  engine::EngineOptions o;
  (div ? o.div : o.rsqrt) = mode;
  (div ? o.div_newton_iters : o.rsqrt_newton_iters) = iterations;
  auto executor = make_executor(config, true, o);
  const Tensor out = executor->run(g, in).outputs[0];
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
  state.counters["frac_correctly_rounded"] = double(stats.ulp_histogram.counts[0]) / double(out.numel());
  nlohmann::json hist = stats.ulp_histogram.counts;
  write_evidence(config, name, {{"integer_ulp_histogram", hist}, {"rel_err_max", stats.rel.max}});
}
}  // namespace

void register_benchmarks(const SuiteConfig& config) {
  const Shape shape = config.quick() ? Shape{256, 1024} : Shape{1024, 1024};
  struct Mode {
    engine::ApproxMode mode;
    const char* name;
  };
  const Mode modes[] = {{engine::ApproxMode::Ieee, "ieee"},
                        {engine::ApproxMode::NewtonBitTrick, "newton-bittrick"},
                        {engine::ApproxMode::NewtonHardware, "newton-hw"}};
  for (bool div : {false, true}) {
    for (DType dtype : {DType::f16, DType::bf16, DType::f32}) {
      for (const Mode& m : modes) {
        for (int iterations = 0; iterations <= 3; ++iterations) {
          if (m.mode == engine::ApproxMode::Ieee && iterations > 0) continue;  // IEEE has no iteration count
          const std::string name = fmt::format("C3/op:{}/dtype:{}/mode:{}/iters:{}/shape:{}x{}/device:{}",
                                               div ? "div" : "rsqrt", dtype_name(dtype), m.name, iterations, shape[0],
                                               shape[1], config.device);
          benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) {
            try {  // a knob the device cannot realise skips with its reason ("n/a on <device>: ...")
              run_case(s, name, div, dtype, m.mode, iterations, shape, config);
            } catch (const std::exception& e) {
              s.SkipWithError(e.what());
            }
          })->Unit(benchmark::kMicrosecond);
        }
      }
    }
  }
}

}  // namespace fusebench::suite

FUSEBENCH_SUITE_MAIN("approximations")
