// Task C2 (claim §1.2 (3)): does the reduction tile (elements per partial sum) change a sum?
// sum over the last axis of an f16 input; axes: output dtype (f16: sum in f16, f32: the input cast
// to f32 first) x accumulator (f32, storage) x tile (256 ... 4096) x shape ([1, 16384] as in the
// plan, and many rows so that errors form a distribution). For each configuration: the timed loop
// runs the fused sum; self-determinism over `runs` repetitions (bit_equal to the first); error
// against fp64 over all rows; and the max ULP distance to every other tile's result (the pairwise
// matrix, one row per tile). The C2/knob:threads rows change the order by the thread count instead,
// the knob a framework like Inductor exposes where it has no tile.
#include <map>

#include "fusebench/compare.hpp"
#include "fusebench/error_stats.hpp"
#include "fusebench/rng.hpp"
#include "support/cases.hpp"
#include "support/engine_support.hpp"

namespace fusebench::suite {

namespace {
const std::vector<std::int64_t> kTiles = {256, 512, 1024, 2048, 4096};

struct Case {
  DType out;
  engine::AccumulatorDtype accumulator;
  Shape shape;
  std::string key() const {
    return fmt::format("{}/{}/{}", dtype_name(out), int(accumulator), shape_string(shape));
  }
};

struct Outcome {
  engine::Graph graph;
  engine::Inputs inputs;
  Tensor reference;
  std::map<std::int64_t, Tensor> by_tile;
};

engine::EngineOptions options_for(const Case& c, std::int64_t tile) {
  engine::EngineOptions o;
  o.reduce_tile = tile;
  o.accumulator = c.accumulator;
  return o;
}

Outcome& outcome_for(const Case& c, const SuiteConfig& config) {
  static std::map<std::string, Outcome> outcomes;
  auto it = outcomes.find(c.key());
  if (it != outcomes.end()) return it->second;
  Outcome o;
  const auto x = o.graph.input("x", c.shape, DType::f16);
  const auto source = c.out == DType::f16 ? x : o.graph.cast(x, c.out);
  o.graph.mark_output(o.graph.sum(source, -1));
  o.inputs["x"] = random_uniform(DType::f16, c.shape, -1, 1, 7);
  o.reference = engine::fp64_reference(o.graph, o.inputs)[0];
  for (std::int64_t tile : kTiles) {
    o.by_tile[tile] =
        make_executor(config, true, options_for(c, tile))->run(o.graph, o.inputs).outputs[0];
  }
  return outcomes.emplace(c.key(), std::move(o)).first->second;
}

void run_case(benchmark::State& state, const Case& c, std::int64_t tile,
              const SuiteConfig& config) {
  Outcome& o = outcome_for(c, config);
  auto executor = make_executor(config, true, options_for(c, tile));
  const Tensor first = executor->run(o.graph, o.inputs).outputs[0];
  for (auto _ : state) {
    auto result = executor->run(o.graph, o.inputs);
    benchmark::DoNotOptimize(result.outputs[0].raw_data());
  }
  state.SetBytesProcessed(std::int64_t(state.iterations()) * std::int64_t(o.inputs["x"].nbytes()));
  // self-determinism: every repetition bit-equal to the first
  const int runs = config.quick() ? 100 : 1000;
  std::int64_t differing = 0;
  Progress progress(fmt::format("C2 tile {} self-determinism", tile), runs);
  for (int r = 0; r < runs; ++r) {
    differing += bit_equal(executor->run(o.graph, o.inputs).outputs[0], first).equal ? 0 : 1;
    progress.tick(r + 1);
  }
  const auto error = error_stats(first, o.reference);
  state.counters["runs"] = runs;
  state.counters["self_deterministic"] = differing == 0 ? 1 : 0;
  state.counters["ulp_max"] = error.ulp_error.max;
  state.counters["ulp_p99"] = error.ulp_error.p99;
  state.counters["ulp_p50"] = error.ulp_error.p50;
  state.counters["abs_err_max"] = error.abs.max;
  state.counters["rel_err_p99"] = error.rel.p99;
  for (std::int64_t other : kTiles) {
    const auto d = ulp_diff(first, o.by_tile.at(other));
    state.counters[fmt::format("ulp_vs_tile{}", other)] = double(d.max_distance);
    state.counters[fmt::format("frac_differ_vs_tile{}", other)] =
        1.0 - double(d.histogram.counts[0]) / double(first.numel());
  }
}

// The order a device exposes other than a tile: its thread count (Inductor splits a reduction of
// one row between its OpenMP threads, each cascading its share, and combines the partial sums).
// The same sum at 1 and at 2 threads, each repeated for self-determinism; a device that cannot
// set the count skips with its reason.
void run_threads_case(benchmark::State& state, DType out, const Shape& shape,
                      const SuiteConfig& config) {
  engine::Graph g;
  const auto x = g.input("x", shape, DType::f16);
  g.mark_output(g.sum(out == DType::f16 ? x : g.cast(x, out), -1));
  const engine::Inputs in = {{"x", random_uniform(DType::f16, shape, -1, 1, 7)}};
  engine::EngineOptions one, two;
  one.threads = 1;
  two.threads = 2;
  if (!realisable(state, config, true, one) || !realisable(state, config, true, two)) return;
  auto single = make_executor(config, true, one), pair = make_executor(config, true, two);
  const engine::RunResult one_run = single->run(g, in), two_run = pair->run(g, in);
  const Tensor by_one = one_run.outputs[0], by_two = two_run.outputs[0];
  for (auto _ : state) {
    auto result = pair->run(g, in);
    benchmark::DoNotOptimize(result.outputs[0].raw_data());
  }
  state.SetBytesProcessed(std::int64_t(state.iterations()) * std::int64_t(in.at("x").nbytes()));
  const int runs = config.quick() ? 20 : 100;
  std::int64_t differing = 0;
  for (int r = 0; r < runs; ++r) {
    differing += bit_equal(single->run(g, in).outputs[0], by_one).equal ? 0 : 1;
    differing += bit_equal(pair->run(g, in).outputs[0], by_two).equal ? 0 : 1;
  }
  const Tensor reference = engine::fp64_reference(g, in)[0];
  const auto between = ulp_diff(by_one, by_two);
  state.counters["runs"] = 2.0 * runs;
  state.counters["self_deterministic"] = differing == 0 ? 1 : 0;
  state.counters["ulp_between_orders"] = double(between.max_distance);
  state.counters["frac_differ_between_orders"] =
      1.0 - double(between.histogram.counts[0]) / double(by_one.numel());
  // whether the thread count reached the code at all (Inductor: `#pragma omp parallel
  // num_threads(2)` and per-thread accumulators); -1 where the device reports no source hash
  const auto source_of = [](const engine::RunResult& r) {
    return r.trace.empty() ? std::string() : r.trace[0].source_sha256;
  };
  state.counters["sources_differ"] =
      source_of(one_run).empty() ? -1 : (source_of(one_run) != source_of(two_run) ? 1 : 0);
  state.counters["ulp_max_threads1"] = error_stats(by_one, reference).ulp_error.max;
  state.counters["ulp_max_threads2"] = error_stats(by_two, reference).ulp_error.max;
}
}  // namespace

void register_benchmarks(const SuiteConfig& config) {
  // one long row (a reduction a thread count can split) and many rows (split over rows instead)
  for (DType out : {DType::f16, DType::f32}) {
    for (const Shape& shape : {Shape{1, 1 << 20}, Shape{256, 16384}}) {
      const std::string name = fmt::format("C2/knob:threads/out:{}/shape:{}x{}/device:{}",
                                           dtype_name(out), shape[0], shape[1], config.device);
      benchmark::RegisterBenchmark(name.c_str(), [out, shape, config](benchmark::State& s) {
        try {
          run_threads_case(s, out, shape, config);
        } catch (const std::exception& e) {
          s.SkipWithError(e.what());
        }
      })->Unit(benchmark::kMicrosecond);
    }
  }
  const std::vector<Shape> shapes = config.quick() ? std::vector<Shape>{{1, 16384}, {256, 16384}}
                                                   : std::vector<Shape>{{1, 16384}, {4096, 16384}};
  for (DType out : {DType::f16, DType::f32}) {
    for (auto acc : {engine::AccumulatorDtype::F32, engine::AccumulatorDtype::Storage}) {
      for (const Shape& shape : shapes) {
        for (std::int64_t tile : kTiles) {
          const Case c{out, acc, shape};
          const Axes axes =
              Axes()
                  .add("out", dtype_name(out))
                  .add("acc", acc == engine::AccumulatorDtype::F32 ? "f32" : "storage")
                  .add("shape", shape_text(shape))
                  .add("tile", tile)
                  .add("device", config.device);
          register_case("C2", axes, [c, tile, config](benchmark::State& s, const std::string&) {
            run_case(s, c, tile, config);
          })->Unit(benchmark::kMicrosecond);
        }
      }
    }
  }
}

}  // namespace fusebench::suite

FUSEBENCH_SUITE_MAIN("reduction_order")
