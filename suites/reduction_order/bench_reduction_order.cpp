// Task C2 (claim §1.2 (3)): does the reduction tile (elements per partial sum) change a sum?
// sum over the last axis of an f16 input; axes: output dtype (f16: sum in f16, f32: the input cast
// to f32 first) x accumulator (f32, storage) x tile (256 ... 4096) x shape ([1, 16384] as in the
// plan, and many rows so that errors form a distribution). For each configuration: the timed loop
// runs the fused sum; self-determinism over `runs` repetitions (bit_equal to the first); error
// against fp64 over all rows; and the max ULP distance to every other tile's result (the pairwise
// matrix, one row per tile).
#include <map>

#include "fusebench/compare.hpp"
#include "fusebench/error_stats.hpp"
#include "fusebench/rng.hpp"
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
    o.by_tile[tile] = make_executor(config, true, options_for(c, tile))->run(o.graph, o.inputs).outputs[0];
  }
  return outcomes.emplace(c.key(), std::move(o)).first->second;
}

void run_case(benchmark::State& state, const Case& c, std::int64_t tile, const SuiteConfig& config) {
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
}  // namespace

void register_benchmarks(const SuiteConfig& config) {
  const std::vector<Shape> shapes = config.quick() ? std::vector<Shape>{{1, 16384}, {256, 16384}}
                                                   : std::vector<Shape>{{1, 16384}, {4096, 16384}};
  for (DType out : {DType::f16, DType::f32}) {
    for (auto acc : {engine::AccumulatorDtype::F32, engine::AccumulatorDtype::Storage}) {
      for (const Shape& shape : shapes) {
        for (std::int64_t tile : kTiles) {
          const Case c{out, acc, shape};
          const std::string name = fmt::format("C2/out:{}/acc:{}/shape:{}x{}/tile:{}/device:{}", dtype_name(out),
                                               acc == engine::AccumulatorDtype::F32 ? "f32" : "storage", shape[0],
                                               shape[1], tile, config.device);
          benchmark::RegisterBenchmark(name.c_str(), [c, tile, config](benchmark::State& s) {
            try {  // a knob the device cannot realise skips with its reason ("n/a on <device>: ...")
              run_case(s, c, tile, config);
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

FUSEBENCH_SUITE_MAIN("reduction_order")
