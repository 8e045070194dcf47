// Speed of the system under test, eager against fused, next to yardsticks measured in the same run:
//   MemoryCopy     memcpy bandwidth on the kernels' threads (traffic: bytes read + written per second)
//   Fp32Peak       register-resident FMA loop on every thread: the machine's fp32 peak
//   Chain          mul -> add -> gelu -> mul on four f16 operands; bytes_per_second counts the
//                  bytes each path really moves (fused: 4 loads + 1 store per element; eager:
//                  every op loads its operands and stores its result, 11 accesses per element);
//                  k<i>_bytes_per_second and k<i>_ms are kernel i's own bandwidth and time (the
//                  label names the kernels): an eager chain is judged kernel by kernel, and a
//                  fused kernel whose element rate matches the eager gelu kernel's is bound by
//                  gelu's arithmetic, not by memory
//   LayerNorm, Softmax  over the last axis of [rows, 4096] f16
//   Matmul         f16 operands through fp32 GEMM; gflops next to Fp32Peak
//   path:fused_fma the fused path with FMA contraction allowed (a knob; the default keeps it off)
//   ComputeCeiling the per-element work of the Chain, LayerNorm and Softmax kernels on L1-resident
//                  rows: the share of the copy each could reach if memory cost nothing
//   CompileCold / CacheHit   the chain on 1024 elements through a new fused executor: a cold compile
//                  into a fresh cache directory, and a run served from the warm on-disk cache
//   device:<name>  the same Chain / LayerNorm / Softmax on each framework device --compare-devices
//                  names (torch = Inductor, xla = XLA:CPU; tools/run names the run's), in the same
//                  run as the engine's: a framework's own run
//                  time (measured inside the framework) is the benchmark's time (manual time), the
//                  bridge's cost (inputs and outputs through shared memory, the request) is the
//                  bridge_overhead_ms counter, and bytes_per_second counts the same bytes as the
//                  engine's fused path, so each is a share of the same MemoryCopy
// Precision counters (ulp_max, ulp_p99 against fp64) are computed once, outside the timed loop.
// The fused path's speed-up over eager (Chain, LayerNorm, Softmax: the verdicts') is also timed
// interleaved (interleaved_* counters): the two paths alternate run by run within rounds of at
// least 40 ms, so that a burst of other load on the machine slows both and not one;
// the report decides "fused is faster" on the median per-round ratio and its distribution-free
// 95 % interval, not on two runs timed minutes apart. A path's share of the copy is timed the same
// way (copy_share* counters, the rounds in the dump as copy_share_<name>.json): each round one run
// of the path and a memcpy of the bytes it counts on the engine's threads, so that the yardstick is
// measured under the kernel's own load (a GPU run's: the GPU's device-to-device copy, by events).
#include <immintrin.h>

#include <algorithm>
#include <map>
#include <thread>

#include "fusebench/engine/scalar_math.hpp"
#include "fusebench/error_stats.hpp"
#include "fusebench/rng.hpp"
#include "support/cases.hpp"
#include "support/engine_support.hpp"
#include "support/interleaved.hpp"
#include "support/run_timer.hpp"

#ifdef FUSEBENCH_HAVE_CUDA
#include "cuda_device.hpp"
#include "cuda_runtime.hpp"
#endif

namespace fusebench::suite {

namespace {
using engine::Graph;
using engine::NodeId;

struct Workload {
  Graph graph;
  engine::Inputs inputs;
  double bytes_eager = 0, bytes_fused = 0, flops = 0;
};

Workload chain(std::int64_t n) {
  Workload w;
  std::vector<NodeId> x;
  for (int i = 0; i < 4; ++i) {
    const auto name = fmt::format("x{}", i);
    x.push_back(w.graph.input(name, {n}, DType::f16));
    w.inputs[name] = random_uniform(DType::f16, {n}, -2, 2, 100, std::uint64_t(i));
  }
  w.graph.mark_output(w.graph.mul(w.graph.gelu(w.graph.add(w.graph.mul(x[0], x[1]), x[2])), x[3]));
  w.bytes_fused = double(n) * 2 * 5;
  w.bytes_eager = double(n) * 2 * 11;
  return w;
}

Workload rowwise(bool layernorm, std::int64_t rows, std::int64_t cols) {
  Workload w;
  const NodeId x = w.graph.input("x", {rows, cols}, DType::f16);
  w.inputs["x"] = random_normal(DType::f16, {rows, cols}, 0, 1, 101);
  if (layernorm) {
    const NodeId g = w.graph.input("gamma", {cols}, DType::f16),
                 b = w.graph.input("beta", {cols}, DType::f16);
    w.inputs["gamma"] = random_uniform(DType::f16, {cols}, 0.5, 1.5, 102);
    w.inputs["beta"] = random_uniform(DType::f16, {cols}, -0.5, 0.5, 103);
    w.graph.mark_output(w.graph.layernorm(x, g, b));
  } else {
    w.graph.mark_output(w.graph.softmax(x));
  }
  w.bytes_fused = w.bytes_eager = double(rows * cols) * 2 * 2;
  return w;
}

Workload matmul(std::int64_t m, std::int64_t k, std::int64_t n) {
  Workload w;
  const NodeId a = w.graph.input("a", {m, k}, DType::f16),
               b = w.graph.input("b", {k, n}, DType::f16);
  w.inputs["a"] = random_uniform(DType::f16, {m, k}, -1, 1, 104);
  w.inputs["b"] = random_uniform(DType::f16, {k, n}, -1, 1, 105);
  w.graph.mark_output(w.graph.matmul(a, b));
  w.bytes_fused = w.bytes_eager = double(m * k + k * n + m * n) * 2;
  w.flops = 2.0 * double(m) * double(k) * double(n);
  return w;
}

// The paths a workload runs on: eager, fused with the default knobs, and fused with FMA
// contraction allowed (the knob that most changes the arithmetic cost of gelu and exp).
enum class Path { Eager, Fused, FusedFma };
const char* path_name(Path p) {
  return p == Path::Eager ? "eager" : (p == Path::Fused ? "fused" : "fused_fma");
}

// Rounds of eager and fused runs alternating run by run (support/interleaved.hpp's paired rounds);
// the per-round ratio eager/fused, its median and the median's 95 % interval.
// Measured once per workload and device: Google Benchmark calls a benchmark more than once to size
// its loop, and the rounds do not depend on that.
void interleaved_speedup(benchmark::State& state, const Workload& w, engine::Executor& fused,
                         const SuiteConfig& config, bool manual_time) {
  static std::map<std::string, std::map<std::string, double>> measured;
  const std::string key = fmt::format("{}/{}", static_cast<const void*>(&w), config.device);
  if (auto found = measured.find(key); found != measured.end()) {
    for (const auto& [name, value] : found->second) state.counters[name] = value;
    return;
  }
  std::unique_ptr<engine::Executor> eager = make_executor(config, false, engine::EngineOptions{});
  (void)eager->run(w.graph, w.inputs);  // compiles or warms, untimed
  RunTimer eager_timer(*eager, w.graph, w.inputs, manual_time),
      fused_timer(fused, w.graph, w.inputs, manual_time);
  const PairedRounds rounds =
      paired_rounds([&] { return eager_timer.seconds(); }, [&] { return fused_timer.seconds(); });
  std::vector<double> ratios;
  int fused_wins = 0;
  for (std::size_t r = 0; r < rounds.first_seconds.size(); ++r) {
    const double eager_ms = rounds.first_seconds[r], fused_ms = rounds.second_seconds[r];
    if (fused_ms <= 0) continue;
    ratios.push_back(eager_ms / fused_ms);
    fused_wins += fused_ms < eager_ms ? 1 : 0;
  }
  const MedianInterval speedup = median_interval(ratios);
  if (speedup.n == 0) return;
  auto& c = measured[key];
  c["interleaved_rounds"] = speedup.n;
  c["interleaved_fused_wins"] = fused_wins;
  c["interleaved_pairs_per_round"] = rounds.pairs_per_round;
  c["interleaved_speedup"] = speedup.median;
  c["interleaved_speedup_lo"] = speedup.low;
  c["interleaved_speedup_hi"] = speedup.high;
  for (const auto& [name, value] : c) state.counters[name] = value;
}

// The path's share of the copy from interleaved rounds: each round one run of the path and a copy
// of the bytes the path counts (support/interleaved.hpp): on the host a memcpy on the engine's
// threads; on a GPU the GPU's own device-to-device copy (the host's memcpy is two orders of
// magnitude below it), both sides timed by events. Measured once per benchmark (Google Benchmark
// calls it more than once); the rounds go to the dump as evidence.
void interleaved_copy_share(benchmark::State& state, const std::string& name, const Workload& w,
                            engine::Executor& executor, double traffic_bytes,
                            const SuiteConfig& config, bool manual_time) {
  const bool on_gpu = config.device.find("cuda") != std::string::npos;
  static std::map<std::string, CopyShareRounds> measured;
  auto found = measured.find(name);
  if (found == measured.end()) {
    RunTimer timer(executor, w.graph, w.inputs, manual_time);
    const auto kernel_seconds = [&] { return timer.seconds(); };
    CopyShareRounds rounds;
    if (on_gpu) {
#ifdef FUSEBENCH_HAVE_CUDA
      cuda::DeviceCopy copy(std::size_t(traffic_bytes / 2));
      rounds = copy_share_rounds(
          kernel_seconds, [&] { return copy.run_seconds(); }, traffic_bytes,
          std::int64_t(copy.bytes()));
#else
      return;  // no CUDA device in this build: its benchmarks report why
#endif
    } else {
      rounds = copy_share_rounds(kernel_seconds, traffic_bytes, engine::EngineOptions{}.threads);
    }
    found = measured.emplace(name, std::move(rounds)).first;
    write_evidence(config, "copy_share_" + name, copy_share_evidence(found->second));
  }
  record_copy_share(state, found->second);
}

// `manual_time`: the benchmark's time is the kernels' own, and the rest of each run's wall time is
// reported as bridge_overhead_ms. On a framework device that is a call's time in the worker, from
// back-to-back calls after warm-ups (support/run_timer.hpp: worker_call_ms, worker_batch_calls,
// worker_warmup_calls), and bridge_overhead_ms is the request's round trip minus the worker's time
// for it: the host overhead a call through the bridge pays.
void run_workload(benchmark::State& state, const std::string& name, const Workload& w, Path path,
                  const SuiteConfig& config, bool manual_time, bool against_eager = false) {
  const bool fused = path != Path::Eager;
  engine::EngineOptions options;
  options.fma_contraction = path == Path::FusedFma;
  if (!realisable(state, config, fused, options)) return;
  std::unique_ptr<engine::Executor> executor = make_executor(config, fused, options);
  // An untimed run compiles (or finds) the kernels and measures precision; releasing its results
  // before timing hands their buffers to the timed runs, so that timing sees the steady state of
  // repeated runs (no first-touch page faults, which can outweigh the kernels themselves).
  std::vector<engine::KernelTrace> trace;
  ErrorStats stats;
  {
    const auto warm = executor->run(w.graph, w.inputs);
    stats = error_stats(warm.outputs[0], engine::fp64_reference(w.graph, w.inputs)[0]);
    trace = warm.trace;
  }
  // Per-kernel wall time over the timed runs: an eager chain is judged kernel by kernel.
  std::vector<double> kernel_ms(trace.size(), 0.0);
  double overhead_ms = 0;
  RunTimer timer(*executor, w.graph, w.inputs, manual_time);
  for (auto _ : state) {
    if (timer.in_worker()) {
      const double call_seconds = timer.seconds();
      state.SetIterationTime(call_seconds);
      // a framework's graph is one trace entry
      for (double& k : kernel_ms) k += call_seconds * 1e3;
      overhead_ms += timer.last_batch().host_overhead_seconds() * 1e3;
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    auto result = executor->run(w.graph, w.inputs);
    const double wall_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    benchmark::DoNotOptimize(result.outputs[0].raw_data());
    double own_ms = 0;
    for (std::size_t k = 0; k < kernel_ms.size() && k < result.trace.size(); ++k)
      kernel_ms[k] += result.trace[k].run_ms;
    for (const auto& k : result.trace) own_ms += k.run_ms;
    overhead_ms += wall_ms - own_ms;
    if (manual_time) state.SetIterationTime(own_ms * 1e-3);
  }
  if (manual_time) state.counters["bridge_overhead_ms"] = overhead_ms / double(state.iterations());
  timer.record_worker_counters(state);
  // Compiles of this benchmark's graph: Google Benchmark calls the function more than once, and
  // only the first call's warm-up compiled (later ones reuse the compiled graph).
  static std::map<std::string, std::pair<int, double>> compiles;
  auto& [compiled, compile_ms] = compiles[fmt::format("{}/{}/{}", static_cast<const void*>(&w),
                                                      path_name(path), config.device)];
  for (const auto& k : trace) compiled += k.compile_ms > 0 ? 1 : 0, compile_ms += k.compile_ms;
  state.counters["compiles"] = double(compiled);
  state.counters["compile_ms"] = compile_ms;
  std::string kernels;
  for (std::size_t k = 0; k < kernel_ms.size(); ++k) {
    const double seconds = kernel_ms[k] * 1e-3 / double(state.iterations());
    state.counters[fmt::format("k{}_bytes_per_second", k)] =
        seconds > 0 ? trace[k].bytes_moved / seconds : 0;
    state.counters[fmt::format("k{}_ms", k)] = seconds * 1e3;
    kernels += fmt::format("{}k{}={}", k ? " " : "", k, trace[k].name);
  }
  state.SetLabel(kernels);
  const double bytes = fused ? w.bytes_fused : w.bytes_eager;
  state.SetBytesProcessed(std::int64_t(double(state.iterations()) * bytes));
  state.counters["bytes_moved"] = bytes;
  state.counters["kernels"] = double(trace.size());
  state.counters["ulp_max"] = stats.ulp_error.max;
  state.counters["ulp_p99"] = stats.ulp_error.p99;
  if (against_eager) interleaved_speedup(state, w, *executor, config, manual_time);
  if (w.flops == 0) interleaved_copy_share(state, name, w, *executor, bytes, config, manual_time);
  if (w.flops > 0) {
    state.counters["gflops"] =
        benchmark::Counter(w.flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  }
}

// fp32 FMA throughput with independent accumulators in registers, on `threads` threads.
void fp32_peak(benchmark::State& state, int threads) {
  constexpr int kAccumulators = 12;
  constexpr std::int64_t kIterations = 1 << 22;
#if defined(__AVX512F__)
  using Vector = __m512;
  constexpr int kLanes = 16;
  auto fma = [](Vector a, Vector b, Vector c) { return _mm512_fmadd_ps(a, b, c); };
  auto splat = [](float v) { return _mm512_set1_ps(v); };
  auto lane0 = [](Vector v) { return _mm512_cvtss_f32(v); };
#else
  using Vector = __m256;
  constexpr int kLanes = 8;
  auto fma = [](Vector a, Vector b, Vector c) { return _mm256_fmadd_ps(a, b, c); };
  auto splat = [](float v) { return _mm256_set1_ps(v); };
  auto lane0 = [](Vector v) { return _mm256_cvtss_f32(v); };
#endif
  auto work = [&] {
    Vector acc[kAccumulators];
    for (int a = 0; a < kAccumulators; ++a) acc[a] = splat(float(a));
    const Vector x = splat(0.999999f), y = splat(1e-7f);
    for (std::int64_t i = 0; i < kIterations; ++i) {
      for (int a = 0; a < kAccumulators; ++a) acc[a] = fma(acc[a], x, y);
    }
    float sink = 0;
    for (int a = 0; a < kAccumulators; ++a) sink += lane0(acc[a]);
    benchmark::DoNotOptimize(sink);
  };
  for (auto _ : state) {
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
  }
  const double flops = 2.0 * kLanes * kAccumulators * double(kIterations) * threads;
  state.counters["gflops"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// The arithmetic ceiling of a fused kernel: its per-element work (f16 widening, the shared math
// of scalar_math.hpp, f16 narrowing) on one L1-resident row per thread, repeated, on `threads`
// threads. bytes_per_second counts the bytes the fused kernel moves for those elements, so its
// share of the copy is the best that kernel could reach if memory cost nothing.
enum class CeilingOp { Chain, LayerNorm, Softmax };
void compute_ceiling(benchmark::State& state, CeilingOp op, int threads) {
  constexpr std::int64_t kRow = 4096, kRepeats = 2048, kStage = 128;
  const int operands = op == CeilingOp::Chain ? 4 : (op == CeilingOp::LayerNorm ? 3 : 1);
  // Per thread: f16 operand rows (made before timing), an fp32 staging area and an f16 result
  // row, in tensors: 64-byte aligned, as the kernels' rows are.
  struct Rows {
    Tensor in, out, widened, y;
  };
  std::vector<Rows> rows(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    rows[std::size_t(t)] = {
        random_uniform(DType::f16, {operands * kRow}, -2, 2, 106, std::uint64_t(t)),
        Tensor::uninitialized(DType::f16, {kRow}),
        Tensor::uninitialized(DType::f32, {operands * kRow}),
        Tensor::uninitialized(DType::f32, {kRow})};
  }
  // The same structure as the kernels: the chain in 128-element staging runs, rows whole (a
  // layernorm's weight and bias widened once, as a task does).
  auto work = [op](Rows& r) {
    const auto* const in = reinterpret_cast<const std::uint16_t*>(r.in.raw_data());
    auto* const out = reinterpret_cast<std::uint16_t*>(r.out.raw_data());
    float* const x = r.widened.span<float>().data();
    float* const y = r.y.span<float>().data();
    // The row length as the kernels see it, at run time: with the constant, GCC 12 inlines the
    // row functions and warns falsely about their tail loops (-Waggressive-loop-optimizations).
    const std::int64_t row = r.out.numel();
    if (op == CeilingOp::LayerNorm) fbk::f16_to_f32_n(in + row, x + row, 2 * row);
    for (std::int64_t repeat = 0; repeat < kRepeats; ++repeat) {
      switch (op) {
        case CeilingOp::Chain:
          for (std::int64_t block = 0; block < kRow; block += kStage) {
            float s[4][kStage];
            for (int k = 0; k < 4; ++k) fbk::f16_to_f32_n(in + k * kRow + block, s[k], kStage);
            for (std::int64_t i = 0; i < kStage; ++i)
              y[i] = fbk::gelu_erf_f32(s[0][i] * s[1][i] + s[2][i]) * s[3][i];
            fbk::f32_to_f16_n(y, out + block, kStage);
          }
          break;
        case CeilingOp::LayerNorm:
          fbk::f16_to_f32_n(in, x, row);
          fbk::layernorm_row(x, x + row, x + 2 * row, y, row, 1024, 1e-5f, fbk::NoRounding{},
                             fbk::RsqrtIeee{});
          fbk::f32_to_f16_n(y, out, row);
          break;
        case CeilingOp::Softmax:
          fbk::f16_to_f32_n(in, x, row);
          fbk::f32_scaled_to_f16_n(
              y, fbk::DivIeee{}(1.0f, fbk::softmax_exp_row(x, y, row, 1024, fbk::NoRounding{})),
              out, row);
          break;
      }
      benchmark::DoNotOptimize(out);
    }
  };
  for (auto _ : state) {
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(work, std::ref(rows[std::size_t(t)]));
    work(rows[0]);
    for (auto& t : pool) t.join();
  }
  const double elements = double(kRow * kRepeats * threads);
  const double bytes_per_element = op == CeilingOp::Chain ? 10 : 4;
  state.SetItemsProcessed(std::int64_t(double(state.iterations()) * elements));
  state.SetBytesProcessed(std::int64_t(double(state.iterations()) * elements * bytes_per_element));
}

void compile_cold(benchmark::State& state, const SuiteConfig& config) {
  std::int64_t round = 0;
  double compile_ms = 0;
  for (auto _ : state) {
    const auto dir = std::filesystem::temp_directory_path() /
                     fmt::format("fusebench-cold-{}-{}", ::getpid(), round++);
    // A distinct shape per round: a kernel this process has not loaded before.
    const Workload fresh = chain(1024 + round);
    auto result = device(config).fused_cold({}, dir)->run(fresh.graph, fresh.inputs);
    for (const auto& k : result.trace) compile_ms += k.compile_ms;
    state.PauseTiming();
    std::filesystem::remove_all(dir);
    state.ResumeTiming();
  }
  state.counters["compile_ms"] = compile_ms / double(state.iterations());
}

// A new fused executor (nothing loaded in this process) on a warm on-disk cache: lookup, artifact
// check, load and the run of 1024 elements.
void cache_hit(benchmark::State& state, const SuiteConfig& config) {
  const Workload w = chain(1024);
  make_executor(config, true, {})->run(w.graph, w.inputs);
  for (auto _ : state) {
    auto result = make_executor(config, true, {})->run(w.graph, w.inputs);
    benchmark::DoNotOptimize(result.outputs[0].raw_data());
    for (const auto& k : result.trace) {
      if (!k.cache_hit) state.SkipWithError("expected a warm cache hit");
    }
  }
}
// The GPU's own copy bandwidth, the yardstick of a GPU device's kernels (the host's memcpy is
// two orders of magnitude below it): a device-to-device cudaMemcpyAsync timed with events, traffic
// counted as MemoryCopy counts it (every byte read once and written once). 1 GiB, far past the L2.
void register_device_memory_copy(const std::string& device, std::int64_t bytes) {
  const auto name = fmt::format("DeviceMemoryCopy/bytes:{}/device:{}", bytes, device);
  benchmark::RegisterBenchmark(
      name.c_str(),
      [bytes](benchmark::State& state) {
#ifdef FUSEBENCH_HAVE_CUDA
        if (const std::string why = cuda::unavailable_reason(); !why.empty()) {
          state.SkipWithError(fmt::format("n/a: no usable CUDA GPU: {}", why).c_str());
          return;
        }
        cuda::DeviceCopy copy(static_cast<std::size_t>(bytes));
        copy.run_seconds();  // warm-up
        for (auto _ : state) state.SetIterationTime(copy.run_seconds());
        state.SetBytesProcessed(std::int64_t(state.iterations()) * bytes * 2);
        state.counters["bytes_copied"] = double(bytes);
#else
        (void)bytes;
        state.SkipWithError(
            "n/a: built without the CUDA device (FUSEBENCH_CUDA=OFF or no toolkit)");
#endif
      })
      ->Unit(benchmark::kMillisecond)
      ->UseManualTime();
}

}  // namespace

void register_benchmarks(const SuiteConfig& config) {
  const bool quick = config.quick();
  const std::int64_t n = quick ? std::int64_t(1) << 22 : std::int64_t(1) << 24;
  const std::int64_t rows = quick ? 1024 : 4096;
  const std::int64_t mm_m = quick ? 512 : 2048, mm_k = quick ? 1024 : 4096,
                     mm_n = quick ? 1024 : 4096;
  // On the threads the engine's kernels use, so that a kernel's share of it is a fair roofline,
  // and 128 MiB in both profiles: large enough that caches do not flatter the yardstick (a 32 MiB
  // copy measured twice the bandwidth on this VM).
  register_memory_copy(std::int64_t(128) << 20, engine::EngineOptions{}.threads);
  if (config.device.find("cuda") != std::string::npos)
    register_device_memory_copy(config.device, std::int64_t(1) << 30);
  static std::map<std::string, Workload> workloads;
  workloads.emplace("chain", chain(n));
  workloads.emplace("layernorm", rowwise(true, rows, 4096));
  workloads.emplace("softmax", rowwise(false, rows, 4096));
  // Matmul's speed-up over eager is a table figure, not a verdict (a plain GEMM has nothing to
  // fuse): it gets no interleaved rounds, which on torch's f16 CPU GEMM (about 1 GFLOP/s here)
  // were a minute.
  workloads.emplace("matmul", matmul(mm_m, mm_k, mm_n));
  // The device axis: the configured device's paths, and with the engine (cpu) also the fused path
  // of each framework device named by --compare-devices (tools/run: the run's framework devices on
  // the CPU), in the same run. Named, not discovered: discovering would start every framework's
  // worker, for a listing too.
  const std::vector<std::string>& compared = config.compared_devices;
  // size: the workload's size axis, ("n", elements) or ("shape", "AxB...")
  auto add = [&](const std::string& family, const std::string& key,
                 const std::pair<std::string, std::string>& size, bool with_fma) {
    const bool manual = config.device != "cpu";
    for (Path path : {Path::Eager, Path::Fused, Path::FusedFma}) {
      if (path == Path::FusedFma && !with_fma) continue;
      Axes axes =
          Axes().add("path", path_name(path)).add("dtype", "f16").add(size.first, size.second);
      if (config.device != "cpu") axes.add("device", config.device);
      auto* b =
          register_case(family, axes,
                        [key, path, config, manual](benchmark::State& s, const std::string& name) {
                          run_workload(s, name, workloads.at(key), path, config, manual,
                                       path == Path::Fused && key != "matmul");
                        })
              ->Unit(benchmark::kMillisecond);
      manual ? b->UseManualTime() : b->UseRealTime();
    }
    if (family == "Matmul") return;
    for (const std::string& other : compared) {
      SuiteConfig other_config = config;
      other_config.device = other;
      const Axes axes = Axes()
                            .add("path", "fused")
                            .add("dtype", "f16")
                            .add(size.first, size.second)
                            .add("device", other);
      register_case(family, axes,
                    [key, other_config](benchmark::State& s, const std::string& name) {
                      run_workload(s, name, workloads.at(key), Path::Fused, other_config, true);
                    })
          ->Unit(benchmark::kMillisecond)
          ->UseManualTime();
    }
  };
  add("Chain", "chain", {"n", std::to_string(n)}, true);
  add("LayerNorm", "layernorm", {"shape", fmt::format("{}x4096", rows)}, true);
  add("Softmax", "softmax", {"shape", fmt::format("{}x4096", rows)}, true);
  add("Matmul", "matmul", {"shape", fmt::format("{}x{}x{}", mm_m, mm_k, mm_n)}, false);
  const int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  benchmark::RegisterBenchmark(fmt::format("Fp32Peak/threads:{}", threads).c_str(), fp32_peak,
                               threads)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  for (auto [name, op] :
       {std::pair{"Chain", CeilingOp::Chain}, std::pair{"LayerNorm", CeilingOp::LayerNorm},
        std::pair{"Softmax", CeilingOp::Softmax}}) {
    benchmark::RegisterBenchmark(
        fmt::format("ComputeCeiling/op:{}/threads:{}", name, threads).c_str(), compute_ceiling, op,
        threads)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  // A framework's cold compile starts a worker (the framework's import) and fills an empty cache
  // directory (Inductor compiles its ISA probes there first): 20-25 s a round here, so its quick
  // profile times one round.
  benchmark::RegisterBenchmark("CompileCold/kernel:chain", compile_cold, config)
      ->Unit(benchmark::kMillisecond)
      ->Iterations(quick && !engine_device(config) ? 1 : 3);
  benchmark::RegisterBenchmark("CacheHit/kernel:chain", cache_hit, config)
      ->Unit(benchmark::kMicrosecond);
}

}  // namespace fusebench::suite

FUSEBENCH_SUITE_MAIN("engine_throughput")
