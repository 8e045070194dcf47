// A run of one graph as a benchmark times it, on any device. A framework executor's calls are
// timed in its worker (framework::CallTimedExecutor, devices/bridge/call_timing.hpp): kWarmupCalls
// untimed, then a batch of back-to-back calls lasting about kBatchSeconds, and a run's time is the
// batch's per call; what the request costs beyond that is the host overhead
// (CallTiming::host_overhead_seconds), the bridge_overhead_ms counter. Other executors: one run,
// its kernels' own time (manual time) or the wall clock.
#pragma once

#include <benchmark/benchmark.h>

#include "call_timing.hpp"
#include "fusebench/engine/executor.hpp"

namespace fusebench::suite {

// One run's time in milliseconds: the kernels' own (manual time) or the wall clock.
double run_ms(engine::Executor& executor, const engine::Graph& graph, const engine::Inputs& inputs,
              bool manual_time);

class RunTimer {
 public:
  static constexpr int kWarmupCalls = 2, kMinBatchCalls = 3, kMaxBatchCalls = 1000;
  static constexpr double kBatchSeconds = 0.02;

  // `graph` and `inputs` must outlive the timer. With `manual_time` and an executor whose calls run
  // in a worker, one timed call sizes the batch.
  RunTimer(engine::Executor& executor, const engine::Graph& graph, const engine::Inputs& inputs,
           bool manual_time);
  bool in_worker() const { return in_worker_ != nullptr; }
  int batch_calls() const { return batch_calls_; }
  // One run's seconds (in the worker: one call's, from a batch; its figures in last_batch()).
  double seconds();
  const framework::CallTiming& last_batch() const { return last_batch_; }
  // A benchmark timed by this timer's batches: worker_call_ms (the mean per-call time of the
  // batches seconds() timed), worker_batch_calls and worker_warmup_calls. Nothing when the runs are
  // not timed in a worker.
  void record_worker_counters(benchmark::State& state) const;

 private:
  engine::Executor& executor_;
  const engine::Graph& graph_;
  const engine::Inputs& inputs_;
  bool manual_time_;
  framework::CallTimedExecutor* in_worker_;
  int batch_calls_ = 1;
  framework::CallTiming last_batch_;
  int batches_ = 0;
  double batch_call_seconds_ = 0;  // the sum of the batches' per-call seconds
};

}  // namespace fusebench::suite
