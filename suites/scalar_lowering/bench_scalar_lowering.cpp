// Task C1 (claim §1.2 (2)): does lowering tensor x scalar as an fp32 immediate ("muls") or as a
// tensor of the storage dtype broadcast to x's shape change the result?
// Axes: dtype (f16, bf16, f32) x scalar (0.7, 0.1, 1.3, 3.14159, and 0.5, exactly representable:
// a control whose lowerings must agree) x shape x executor (eager, fused) x lowering. The timed loop
// runs the benchmark's own lowering. Counters compare the two lowerings element-wise (shares at
// ULP 0 / 1 / >= 2), each against fp64, and say whether the fused kernels' instructions differ
// (objdump histograms, written with the trace to the dump directory as evidence).
// Control: the scalar as an input tensor (x * s, s a graph input of x's shape holding the scalar
// rounded to x's dtype), which no compiler can fold into a constant: the control_input_tensor_*
// counters say whether the broadcast lowering really multiplied by the dtype-rounded tensor (a
// framework like Inductor may fold `x * full_like(x, c)` back into an fp32 constant).
#include <chrono>
#include <map>

#include "fusebench/compare.hpp"
#include "fusebench/error_stats.hpp"
#include "fusebench/rng.hpp"
#include "support/cases.hpp"
#include "support/engine_support.hpp"
#include "support/run_timer.hpp"
#if defined(FUSEBENCH_HAVE_CUDA)
#include "codegen.hpp"
#include "nvrtc_compiler.hpp"
#include "sass.hpp"
#endif

namespace fusebench::suite {

namespace {
struct Case {
  DType dtype;
  double scalar;
  Shape shape;
  bool fused;
  std::string key() const {
    return fmt::format("{}/{}/{}/{}", dtype_name(dtype), scalar, shape_string(shape), fused);
  }
};

struct Lowered {
  Tensor output;
  std::vector<std::string> notes;
  std::map<std::string, int> instructions;
  std::string source, source_sha256;
  nlohmann::json evidence;
};

struct Pair {
  engine::Graph graph;
  engine::Inputs inputs;
  Tensor reference;
  Lowered immediate, broadcast, input_tensor;
};

engine::EngineOptions lowering_options(bool broadcast) {
  engine::EngineOptions o;
  o.scalar_lowering =
      broadcast ? engine::ScalarLowering::BroadcastTensor : engine::ScalarLowering::ImmediateF32;
  return o;
}

Pair& pair_for(const Case& c, const SuiteConfig& config) {
  static std::map<std::string, Pair> pairs;
  auto it = pairs.find(c.key());
  if (it != pairs.end()) return it->second;
  Pair p;
  const auto x = p.graph.input("x", c.shape, c.dtype);
  p.graph.mark_output(p.graph.mul_scalar(x, c.scalar));
  p.inputs["x"] = random_uniform(c.dtype, c.shape, -1, 1, 42);
  p.reference = engine::fp64_reference(p.graph, p.inputs)[0];
  for (bool broadcast : {false, true}) {
    auto result =
        make_executor(config, c.fused, lowering_options(broadcast))->run(p.graph, p.inputs);
    Lowered& l = broadcast ? p.broadcast : p.immediate;
    l.output = result.outputs[0];
    l.notes = result.trace[0].lowering;
    if (c.fused) {
      l.instructions = device(config).instruction_histogram(result.trace[0]);
      l.source = result.trace[0].source_path;
      l.source_sha256 = result.trace[0].source_sha256;
      l.evidence = result.trace[0].evidence;
    }
  }
  {
    engine::Graph control;
    const auto x = control.input("x", c.shape, c.dtype);
    const auto scalar = control.input("s", c.shape, c.dtype);
    control.mark_output(control.mul(x, scalar));
    // U(c, c) is c rounded once to the dtype: the tensor a user materialises for the scalar.
    const engine::Inputs in = {{"x", p.inputs["x"]},
                               {"s", random_uniform(c.dtype, c.shape, c.scalar, c.scalar, 0)}};
    auto result = make_executor(config, c.fused, lowering_options(false))->run(control, in);
    p.input_tensor.output = result.outputs[0];
    p.input_tensor.notes = result.trace[0].lowering;
    p.input_tensor.source = result.trace[0].source_path;
  }
  return pairs.emplace(c.key(), std::move(p)).first->second;
}

void run_case(benchmark::State& state, const std::string& name, const Case& c, bool broadcast,
              const SuiteConfig& config) {
  if (!realisable(state, config, c.fused, lowering_options(false)) ||
      !realisable(state, config, c.fused, lowering_options(true))) {
    return;
  }
  Pair& p = pair_for(c, config);
  auto executor = make_executor(config, c.fused, lowering_options(broadcast));
  executor->run(p.graph, p.inputs);
  // A device other than the cpu engine is timed by its own clock (manual time). A framework
  // device's time is its calls' in the worker, back to back after warm-ups (support/run_timer.hpp:
  // worker_call_ms, worker_batch_calls, worker_warmup_calls), and bridge_overhead_ms is each
  // request's round trip beyond the worker's time; another device's is its kernels' own time, the
  // rest of the run's wall time bridge_overhead_ms.
  const bool manual = config.device != "cpu";
  RunTimer timer(*executor, p.graph, p.inputs, manual);
  double overhead_ms = 0;
  for (auto _ : state) {
    if (timer.in_worker()) {
      state.SetIterationTime(timer.seconds());
      overhead_ms += timer.last_batch().host_overhead_seconds() * 1e3;
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    auto result = executor->run(p.graph, p.inputs);
    benchmark::DoNotOptimize(result.outputs[0].raw_data());
    double own_ms = 0;
    for (const auto& k : result.trace) own_ms += k.run_ms;
    overhead_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count() -
        own_ms;
    if (manual) state.SetIterationTime(own_ms * 1e-3);
  }
  if (manual) state.counters["bridge_overhead_ms"] = overhead_ms / double(state.iterations());
  timer.record_worker_counters(state);
  state.SetBytesProcessed(std::int64_t(state.iterations()) *
                          std::int64_t(2 * p.inputs["x"].nbytes()));
  const auto between = ulp_diff(p.immediate.output, p.broadcast.output, {.histogram_bins = 2});
  const double n = double(p.immediate.output.numel());
  const Lowered& mine = broadcast ? p.broadcast : p.immediate;
  const auto error = error_stats(mine.output, p.reference);
  state.counters["frac_ulp0"] = double(between.histogram.counts[0]) / n;
  state.counters["frac_ulp1"] = double(between.histogram.counts[1]) / n;
  state.counters["frac_ulp_ge2"] = double(between.histogram.counts[2]) / n;
  state.counters["ulp_max_between"] = double(between.max_distance);
  state.counters["ulp_max"] = error.ulp_error.max;
  state.counters["ulp_p99"] = error.ulp_error.p99;
  state.counters["ulp_mean"] = error.ulp_error.mean;
  const auto control_vs_broadcast =
      ulp_diff(p.input_tensor.output, p.broadcast.output, {.histogram_bins = 2});
  const auto control_vs_immediate =
      ulp_diff(p.input_tensor.output, p.immediate.output, {.histogram_bins = 2});
  state.counters["control_input_tensor_vs_broadcast_frac_ulp0"] =
      double(control_vs_broadcast.histogram.counts[0]) / n;
  state.counters["control_input_tensor_vs_immediate_frac_ulp0"] =
      double(control_vs_immediate.histogram.counts[0]) / n;
  state.counters["lowering_notes_differ"] = p.immediate.notes != p.broadcast.notes ? 1 : 0;
  // -1: no machine code to compare (eager, or a device without disassembly)
  const bool have_instructions =
      c.fused && !p.immediate.instructions.empty() && !p.broadcast.instructions.empty();
  state.counters["instructions_differ"] =
      have_instructions ? (p.immediate.instructions != p.broadcast.instructions ? 1 : 0) : -1;
  state.counters["sources_differ"] =
      c.fused ? (p.immediate.source_sha256 != p.broadcast.source_sha256 ? 1 : 0) : -1;
  if (!broadcast) {
    write_evidence(config, name,
                   {{"case", c.key()},
                    {"immediate",
                     {{"notes", p.immediate.notes},
                      {"instructions", p.immediate.instructions},
                      {"source", p.immediate.source},
                      {"source_sha256", p.immediate.source_sha256},
                      {"evidence", p.immediate.evidence}}},
                    {"broadcast",
                     {{"notes", p.broadcast.notes},
                      {"instructions", p.broadcast.instructions},
                      {"source", p.broadcast.source},
                      {"source_sha256", p.broadcast.source_sha256},
                      {"evidence", p.broadcast.evidence}}},
                    {"input_tensor_control",
                     {{"notes", p.input_tensor.notes}, {"source", p.input_tensor.source}}},
                    {"ulp_histogram_between", between.histogram.counts}});
  }
}

#if defined(FUSEBENCH_HAVE_CUDA)
// ---- SASS evidence: the CUDA device's fused kernel for both lowerings, compiled by NVRTC for a
// named architecture and disassembled (no GPU needed). Counters per lowering: FMULs with an
// immediate or constant-bank operand, global loads, instructions; the histograms go to the dump
// directory. The timed loop is the kernel cache's hit path (key, cubin SHA-256 check).
void run_sass_case(benchmark::State& state, const std::string& name, DType dtype, double scalar,
                   const std::string& arch, const SuiteConfig& config) {
  engine::Graph g;
  g.mark_output(g.mul_scalar(g.input("x", {4096}, dtype), scalar));
  engine::KernelCache cache;
  nlohmann::json evidence = {{"case", fmt::format("{}/{}", dtype_name(dtype), scalar)},
                             {"arch", arch},
                             {"nvrtc", cuda::nvrtc_identity()}};
  std::map<std::string, int> histograms[2];
  for (bool broadcast : {false, true}) {
    const auto kernels = cuda::compile_graph(g, lowering_options(broadcast), arch, cache);
    const cuda::CompiledKernel& k = kernels.at(0);
    const cuda::SassListing sass = cuda::disassemble_cubin(k.cubin.library);
    const std::string side = broadcast ? "broadcast" : "immediate";
    state.counters[side + "_fmul_constant_operand"] = sass.constant_operand_count("FMUL");
    state.counters[side + "_ldg"] = sass.count("LDG");
    state.counters[side + "_instructions"] = double(sass.instructions.size());
    evidence[side] = {{"lowering", k.kernel.code.lowering},
                      {"cubin_sha256", k.cubin.sha256},
                      {"cache_key", k.cubin.key},
                      {"compile_ms", k.cubin.hit ? 0.0 : k.cubin.compile_ms},
                      {"source", k.cubin.source.string()},
                      {"fmul_constant_operand", sass.constant_operand_count("FMUL")},
                      {"ldg", sass.count("LDG")},
                      {"sass", sass.to_json()}};
    histograms[broadcast] = sass.histogram;
  }
  state.counters["sass_differ"] = histograms[0] != histograms[1] ? 1 : 0;
  for (auto _ : state) {
    auto hit = cuda::compile_graph(g, lowering_options(false), arch, cache);
    benchmark::DoNotOptimize(hit.data());
  }
  write_evidence(config, name, evidence);
}
#endif
}  // namespace

void register_benchmarks(const SuiteConfig& config) {
#if defined(FUSEBENCH_HAVE_CUDA)
  // The CUDA device's machine code, compiled by NVRTC whatever --device says: beside the engine
  // only (a framework's section would show it as if it were the framework's own)
  for (DType dtype : engine_device(config) ? std::vector<DType>{DType::f16, DType::bf16, DType::f32}
                                           : std::vector<DType>{}) {
    for (const std::string& arch : cuda::kEvidenceArchitectures) {
      // an NVRTC or cuobjdump failure skips the case with its message; the suite goes on
      register_case("SASS/C1",
                    Axes().add("dtype", dtype_name(dtype)).add("scalar", 0.7).add("arch", arch),
                    [=](benchmark::State& s, const std::string& name) {
                      run_sass_case(s, name, dtype, 0.7, arch, config);
                    })
          ->Unit(benchmark::kMicrosecond);
    }
  }
#endif
  // A framework device compiles every (dtype, scalar, shape, lowering) graph (Inductor: seconds
  // each): its quick profile keeps the plan's shape, 1024x1024, only.
  const bool framework_quick = config.quick() && config.device != "cpu";
  const std::vector<Shape> shapes = framework_quick ? std::vector<Shape>{{1024, 1024}}
                                    : config.quick()
                                        ? std::vector<Shape>{{256, 256}, {1024, 1024}}
                                        : std::vector<Shape>{{1024, 1024}, {4096, 4096}};
  // ... and two inexact scalars beside the exact control: on a framework the finding is what the
  // compiler does with the constant (fold or keep), which 1.3 and 3.14159 repeat (each inexact
  // scalar's share of differing elements comes from the same rounding of x * c)
  const std::vector<double> scalars = framework_quick
                                          ? std::vector<double>{0.7, 0.1, 0.5}
                                          : std::vector<double>{0.7, 0.1, 1.3, 3.14159, 0.5};
  for (DType dtype : {DType::f16, DType::bf16, DType::f32}) {
    for (double scalar : scalars) {
      for (const Shape& shape : shapes) {
        for (bool fused : {false, true}) {
          for (bool broadcast : {false, true}) {
            const Case c{dtype, scalar, shape, fused};
            const Axes axes = Axes()
                                  .add("dtype", dtype_name(dtype))
                                  .add("scalar", scalar)
                                  .add("shape", shape_text(shape))
                                  .add("exec", fused ? "fused" : "eager")
                                  .add("lowering", broadcast ? "broadcast" : "immediate")
                                  .add("device", config.device);
            auto* b =
                register_case("C1", axes,
                              [c, broadcast, config](benchmark::State& s, const std::string& name) {
                                run_case(s, name, c, broadcast, config);
                              })
                    ->Unit(benchmark::kMicrosecond);
            if (config.device != "cpu") b->UseManualTime();
          }
        }
      }
    }
  }
}

}  // namespace fusebench::suite

FUSEBENCH_SUITE_MAIN("scalar_lowering")
