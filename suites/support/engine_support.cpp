#include "support/engine_support.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "fusebench/npy.hpp"

namespace fusebench::suite {

const engine::Device& device(const SuiteConfig& config) {
  static std::map<std::string, std::unique_ptr<engine::Device>> devices;
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  auto it = devices.find(config.device);
  if (it == devices.end()) {
    register_all_devices();
    it = devices.emplace(config.device, engine::make_device(config.device)).first;
  }
  return *it->second;
}

bool engine_device(const SuiteConfig& config) {
  return config.device == "cpu" || config.device == "cuda";
}

std::string not_applicable(const SuiteConfig& config, bool fused,
                           const engine::EngineOptions& options) {
  const std::string reason = device(config).unsupported_knobs(options, fused);
  return reason.empty() ? reason : fmt::format("n/a on {}: {}", config.device, reason);
}

bool realisable(benchmark::State& state, const SuiteConfig& config, bool fused,
                const engine::EngineOptions& options) {
  const std::string reason = not_applicable(config, fused, options);
  if (reason.empty()) return true;
  state.SkipWithError(reason.c_str());
  return false;
}

bool kept_in_quick_profile(benchmark::State& state, const SuiteConfig& config,
                           std::string_view why) {
  if (!config.quick() || engine_device(config)) return true;
  const std::string message =
      fmt::format("n/a in the quick profile on {}: {}; --profile full runs it", config.device, why);
  state.SkipWithError(message.c_str());
  return false;
}

std::unique_ptr<engine::Executor> make_executor(const SuiteConfig& config, bool fused,
                                                const engine::EngineOptions& options) {
  if (auto reason = not_applicable(config, fused, options); !reason.empty())
    throw Unsupported(reason);
  const auto& d = device(config);
  return fused ? d.fused(options) : d.eager(options);
}

std::string file_safe(std::string name) {
  std::replace(name.begin(), name.end(), '/', '_');
  std::replace(name.begin(), name.end(), ':', '-');
  return name;
}

void write_evidence(const SuiteConfig& config, const std::string& name,
                    const nlohmann::json& evidence) {
  if (config.dump_dir.empty()) return;
  std::filesystem::create_directories(config.dump_dir);
  write_file_atomically(config.dump_dir / (file_safe(name) + ".json"), evidence.dump(1));
}

Progress::Progress(std::string label, std::int64_t total)
    : label_(std::move(label)),
      total_(total),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

void Progress::tick(std::int64_t done) {
  const auto now = std::chrono::steady_clock::now();
  if (done < total_ && now - last_ < std::chrono::seconds(2)) return;
  last_ = now;
  fmt::print(stderr, "  {}: {}/{} ({:.0f} s)\n", label_, done, total_,
             std::chrono::duration<double>(now - start_).count());
}

}  // namespace fusebench::suite
