// Throughput of the precision toolkit (task S) next to a plain memory copy measured in the same
// run, so that "comparing never dominates a run" is a ratio, not a guess:
//   MemoryCopy   memcpy of as many bytes as one comparison reads (the yardstick; its
//                bytes_per_second counts traffic: every byte copied is read and written), once on
//                one thread and once on every hardware thread
//   UlpDiff      integer ULP distance per element plus its histogram (one thread)
//   ErrorStats   abs / rel / ULP error with exact P50 / P99, NaN/inf accounting, integer histogram
//                (every hardware thread: its `threads` counter names the copy to compare with), on
//                pairs of one dtype a few ULP apart (discrete errors)
//   ErrorStatsVsF64  the same on the case the plan compares: a result against its fp64 reference,
//                whose errors are continuous (almost every error value distinct)
//   BitEqual     bitwise verdict (equal inputs: the memcmp fast path; one thread)
// bytes_per_second counts traffic: the bytes of both operands (for ErrorStatsVsF64, the result's
// and the fp64 reference's), plus UlpDiff's per-element
// distance tensor, which it writes (ErrorStats and BitEqual return only summaries). Targets:
// UlpDiff >= 50 % of the one-thread copy, ErrorStats >= 25 % of the copy on as many threads. The
// verdicts rest on interleaved rounds (copy_share* counters; the rounds in the dump): each round one
// call and a memcpy of the same traffic on the same threads, so that both see the same load, and
// the share's median with its 95 % interval decides (support/interleaved.hpp).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <thread>

#include "fusebench/compare.hpp"
#include "fusebench/error_stats.hpp"
#include "fusebench/rng.hpp"
#include "support/engine_support.hpp"
#include "support/interleaved.hpp"
#include "support/suite_main.hpp"

namespace fusebench::suite {

namespace {
constexpr std::int64_t kElements = std::int64_t(1) << 25;

// The operation's share of the copy from interleaved rounds: each round one call and a memcpy of the
// same traffic on the same threads (support/interleaved.hpp), measured once per benchmark (Google
// Benchmark calls a benchmark more than once to size its loop); the rounds go to the dump.
template <typename Call>
void interleaved_copy_share(benchmark::State& state, const SuiteConfig& config,
                            const std::string& name, double traffic_bytes, int threads, Call call) {
  static std::map<std::string, CopyShareRounds> measured;
  auto found = measured.find(name);
  if (found == measured.end()) {
    const auto seconds = [&] {
      const auto start = std::chrono::steady_clock::now();
      call();
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    found = measured.emplace(name, copy_share_rounds(seconds, traffic_bytes, threads)).first;
    write_evidence(config, "copy_share_" + name, copy_share_evidence(found->second));
  }
  record_copy_share(state, found->second);
}

struct Operands {
  Tensor a, b;
};

// a = x rounded to dtype; b = x (1 + 2^-9 u) rounded: mostly 0 to a few ULP apart in 16-bit
// formats, so the histogram sees a realistic spread.
const Operands& operands(DType dtype) {
  static std::map<DType, Operands> cache;
  auto it = cache.find(dtype);
  if (it != cache.end()) return it->second;
  const Tensor x = random_uniform(DType::f32, {kElements}, -1, 1, 2024, 0);
  const Tensor u = random_uniform(DType::f32, {kElements}, -1, 1, 2024, 1);
  Tensor perturbed = Tensor::uninitialized(DType::f32, {kElements});
  const auto px = x.span<float>(), pu = u.span<float>();
  auto pp = perturbed.span<float>();
  for (std::size_t i = 0; i < pp.size(); ++i) pp[i] = px[i] * (1.0f + 0.001953125f * pu[i]);
  return cache.emplace(dtype, Operands{x.to(dtype), perturbed.to(dtype)}).first->second;
}

// ref = x in fp64, y = x (1 + 2 eps u) rounded to dtype, eps its machine epsilon (2^-9 for f16,
// as above): the result of a computation against its fp64 reference, a few ULP off, with
// continuous errors (the rounding to dtype and the perturbation both vary from element to element).
const Operands& fp64_reference_operands(DType dtype) {
  static std::map<DType, Operands> cache;
  auto it = cache.find(dtype);
  if (it != cache.end()) return it->second;
  const Tensor x = random_uniform(DType::f64, {kElements}, -1, 1, 2025, 0);
  const Tensor u = random_uniform(DType::f64, {kElements}, -1, 1, 2025, 1);
  const double two_eps = visit_floating(dtype, "fp64_reference_operands", [](auto tag) {
    return std::ldexp(2.0, -FormatTraits<decltype(tag)>::mantissa_bits);
  });
  Tensor perturbed = Tensor::uninitialized(DType::f64, {kElements});
  const auto px = x.span<double>(), pu = u.span<double>();
  auto pp = perturbed.span<double>();
  for (std::size_t i = 0; i < pp.size(); ++i) pp[i] = px[i] * (1.0 + two_eps * pu[i]);
  return cache.emplace(dtype, Operands{perturbed.to(dtype), x}).first->second;
}

void ulp_diff_benchmark(benchmark::State& state, const SuiteConfig& config, const std::string& name,
                        DType dtype) {
  const Operands& in = operands(dtype);
  // One untimed call first: its fresh output buffer takes the page faults (with transparent huge
  // pages, possibly a compaction); each timed call releases the previous result before it runs,
  // so that it reuses that buffer, as a loop over many comparisons does.
  UlpDiffResult result = ulp_diff(in.a, in.b);
  for (auto _ : state) {
    result = {};
    result = ulp_diff(in.a, in.b);
    benchmark::DoNotOptimize(result.distance.raw_data());
  }
  // Traffic: both operands read, the per-element distance tensor written.
  const auto traffic = std::int64_t(2 * in.a.nbytes() + result.distance.nbytes());
  state.SetBytesProcessed(std::int64_t(state.iterations()) * traffic);
  state.SetItemsProcessed(std::int64_t(state.iterations()) * in.a.numel());
  const double n = double(in.a.numel());
  state.counters["threads"] = 1;
  state.counters["ulp_max"] = double(result.max_distance);
  state.counters["frac_ulp0"] = double(result.histogram.counts[0]) / n;
  state.counters["frac_ulp1"] = double(result.histogram.counts[1]) / n;
  interleaved_copy_share(state, config, name, double(traffic), 1, [&] {
    result = {};
    result = ulp_diff(in.a, in.b);
    benchmark::DoNotOptimize(result.distance.raw_data());
  });
}

int all_threads() { return int(std::max(1u, std::thread::hardware_concurrency())); }

void error_stats_benchmark(benchmark::State& state, const SuiteConfig& config,
                           const std::string& name, const Operands& in) {
  ErrorStats stats = error_stats(in.a, in.b);  // untimed first call, as for UlpDiff
  for (auto _ : state) {
    stats = error_stats(in.a, in.b);
    // The address, not the double: GCC 12 miscompiles DoNotOptimize's "+m,r" operand on a double
    // lvalue (GCC bug 92597, google/benchmark#903); it had replaced ulp_p99 with a pointer's bits
    // (6.95e-310) in every ErrorStats row.
    benchmark::DoNotOptimize(&stats);
  }
  const auto traffic = std::int64_t(in.a.nbytes() + in.b.nbytes());
  state.SetBytesProcessed(std::int64_t(state.iterations()) * traffic);
  state.SetItemsProcessed(std::int64_t(state.iterations()) * in.a.numel());
  state.counters["threads"] = all_threads();
  state.counters["ulp_max"] = stats.ulp_error.max;
  state.counters["ulp_p99"] = stats.ulp_error.p99;
  state.counters["ulp_p50"] = stats.ulp_error.p50;
  state.counters["rel_err_p99"] = stats.rel.p99;
  state.counters["abs_err_max"] = stats.abs.max;
  // Passes over the operands: 1 when the sampled windows held every percentile's ranks.
  state.counters["passes"] = stats.passes;
  interleaved_copy_share(state, config, name, double(traffic), all_threads(), [&] {
    stats = error_stats(in.a, in.b);
    benchmark::DoNotOptimize(&stats);
  });
}

void bit_equal_benchmark(benchmark::State& state, const SuiteConfig& config,
                         const std::string& name, DType dtype) {
  const Operands& in = operands(dtype);
  const Tensor copy = in.a.clone();
  BitEqualResult result;
  for (auto _ : state) {
    result = bit_equal(in.a, copy);
    benchmark::DoNotOptimize(&result);  // the address: see ErrorStats
  }
  const auto traffic = std::int64_t(2 * in.a.nbytes());
  state.SetBytesProcessed(std::int64_t(state.iterations()) * traffic);
  state.counters["threads"] = 1;
  state.counters["bit_equal"] = result.equal ? 1 : 0;
  interleaved_copy_share(state, config, name, double(traffic), 1, [&] {
    result = bit_equal(in.a, copy);
    benchmark::DoNotOptimize(&result);
  });
}
}  // namespace

void register_benchmarks(const SuiteConfig& config) {
  // Names stay the same across profiles so that runs compare; tools/run sets the min time.
  // Wall-clock time: Google Benchmark's default divides by the main thread's CPU time, which
  // overstates a comparison that runs on several threads (or waits on a loaded machine).
  auto tune = [](benchmark::internal::Benchmark* b) {
    b->Unit(benchmark::kMillisecond)->UseRealTime();
  };
  // UlpDiff and BitEqual run on one thread, ErrorStats on every hardware thread: a yardstick each.
  register_memory_copy(kElements * 4, 1);
  if (all_threads() > 1) register_memory_copy(kElements * 4, all_threads());
  for (DType dtype : {DType::f16, DType::bf16, DType::f32}) {
    const auto suffix = fmt::format("dtype:{}/n:{}", dtype_name(dtype), kElements);
    const std::string ulp = "UlpDiff/" + suffix, stats = "ErrorStats/" + suffix,
                      vs_f64 = "ErrorStatsVsF64/" + suffix, bits = "BitEqual/" + suffix;
    tune(benchmark::RegisterBenchmark(ulp.c_str(), ulp_diff_benchmark, config, ulp, dtype));
    tune(benchmark::RegisterBenchmark(
        stats.c_str(), [config, stats, dtype](benchmark::State& state) {
          error_stats_benchmark(state, config, stats, operands(dtype));
        }));
    tune(benchmark::RegisterBenchmark(
        vs_f64.c_str(), [config, vs_f64, dtype](benchmark::State& state) {
          error_stats_benchmark(state, config, vs_f64, fp64_reference_operands(dtype));
        }));
    tune(benchmark::RegisterBenchmark(bits.c_str(), bit_equal_benchmark, config, bits, dtype));
  }
}

}  // namespace fusebench::suite

FUSEBENCH_SUITE_MAIN("precision_toolkit")
