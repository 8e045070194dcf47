// Calls of one graph timed where they run: a framework device's worker times back-to-back calls
// itself, so that a benchmark's time is the framework's steady state, not one call plus a request's
// round trip. The round trip's own cost (the request, staging inputs, reading outputs) is the
// separate host overhead figure.
#pragma once

#include <string>

#include "fusebench/engine/executor.hpp"

namespace fusebench::framework {

struct CallTiming {
  int warmup = 0;                 // untimed calls before the batch
  int calls = 0;                  // calls in the timed batch, back to back
  double call_seconds = 0;        // the batch's time over `calls`, on `clock`
  double worker_seconds = 0;      // warm-ups and batch, on the worker's host clock
  double round_trip_seconds = 0;  // the whole request as this process saw it
  std::string clock;              // how the batch was timed (host clock, CUDA events)
  // What the bridge costs the request beyond the framework's own work: the host overhead a call
  // through the bridge pays.
  double host_overhead_seconds() const { return round_trip_seconds - worker_seconds; }
};

// An executor whose calls run in another process and can be timed there.
class CallTimedExecutor {
 public:
  virtual ~CallTimedExecutor() = default;
  // `warmup` untimed calls, then `calls` calls back to back timed as one batch (InputError for a
  // count out of range; FrameworkError when the framework fails).
  virtual CallTiming time_calls(const engine::Graph& graph, const engine::Inputs& inputs,
                                int warmup, int calls) = 0;
};

}  // namespace fusebench::framework
