#include "support/run_timer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace fusebench::suite {

double run_ms(engine::Executor& executor, const engine::Graph& graph, const engine::Inputs& inputs,
              bool manual_time) {
  const auto start = std::chrono::steady_clock::now();
  auto result = executor.run(graph, inputs);
  const double wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  benchmark::DoNotOptimize(result.outputs[0].raw_data());
  if (!manual_time) return wall_ms;
  double own_ms = 0;
  for (const auto& k : result.trace) own_ms += k.run_ms;
  return own_ms;
}

RunTimer::RunTimer(engine::Executor& executor, const engine::Graph& graph,
                   const engine::Inputs& inputs, bool manual_time)
    : executor_(executor),
      graph_(graph),
      inputs_(inputs),
      manual_time_(manual_time),
      in_worker_(manual_time ? dynamic_cast<framework::CallTimedExecutor*>(&executor) : nullptr) {
  if (in_worker_ == nullptr) return;
  const double one_call = in_worker_->time_calls(graph, inputs, 1, 1).call_seconds;
  batch_calls_ = int(std::clamp(std::ceil(kBatchSeconds / std::max(one_call, 1e-6)),
                                double(kMinBatchCalls), double(kMaxBatchCalls)));
}

double RunTimer::seconds() {
  if (in_worker_ == nullptr) return run_ms(executor_, graph_, inputs_, manual_time_) * 1e-3;
  last_batch_ = in_worker_->time_calls(graph_, inputs_, kWarmupCalls, batch_calls_);
  ++batches_;
  batch_call_seconds_ += last_batch_.call_seconds;
  return last_batch_.call_seconds;
}

void RunTimer::record_worker_counters(benchmark::State& state) const {
  if (in_worker_ == nullptr || batches_ == 0) return;
  state.counters["worker_call_ms"] = batch_call_seconds_ * 1e3 / double(batches_);
  state.counters["worker_batch_calls"] = batch_calls_;
  state.counters["worker_warmup_calls"] = kWarmupCalls;
}

}  // namespace fusebench::suite
