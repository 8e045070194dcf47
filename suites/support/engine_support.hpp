// Helpers for the suites that run the engine: executors of the configured device, evidence files
// in the dump directory, progress lines for long loops.
#pragma once

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fusebench/engine/executor.hpp"
#include "support/suite_main.hpp"

namespace fusebench::suite {

// The configured device (created once per process). Suites use only the engine::Device interface.
const engine::Device& device(const SuiteConfig& config);

// Whether the configured device is fusebench's own engine (cpu, or cuda, which renders the same
// kernels) rather than a framework behind the bridge.
bool engine_device(const SuiteConfig& config);

// An executor of the configured device. Throws Unsupported ("n/a on <device>: <reason>") when the
// device cannot realise a knob of `options`.
std::unique_ptr<engine::Executor> make_executor(const SuiteConfig& config, bool fused,
                                                const engine::EngineOptions& options);

struct Unsupported : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// "n/a on <device>: <reason>" when the device cannot realise `options`, else empty.
std::string not_applicable(const SuiteConfig& config, bool fused,
                           const engine::EngineOptions& options);
// Skips the benchmark with the device's reason (SkipWithError, so the JSON carries error_message
// "n/a on <device>: ..." and no figures); returns false when skipped.
bool realisable(benchmark::State& state, const SuiteConfig& config, bool fused,
                const engine::EngineOptions& options);

// Whether the quick profile keeps a case that costs minutes on a framework device (its cold
// compiles, or its steps on the framework's CPU path): on one it does not, skips the benchmark
// with "n/a in the quick profile on <device>: <why>; --profile full runs it", which the report
// names as not run in this profile, and returns false.
bool kept_in_quick_profile(benchmark::State& state, const SuiteConfig& config,
                           std::string_view why);

// Writes <dump_dir>/<name>.json (atomically) when dumps were requested.
void write_evidence(const SuiteConfig& config, const std::string& name,
                    const nlohmann::json& evidence);
// A file-name-safe form of a benchmark name ("A/dtype:f16" -> "A_dtype-f16").
std::string file_safe(std::string name);

// "label: 40/100 (12 s)" on stderr at most every two seconds, and at the end.
class Progress {
 public:
  Progress(std::string label, std::int64_t total);
  void tick(std::int64_t done);

 private:
  std::string label_;
  std::int64_t total_;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace fusebench::suite
