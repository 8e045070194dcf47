#include "support/engine_support.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "cpu_device.hpp"
#if defined(FUSEBENCH_HAVE_CUDA)
#include "cuda_device.hpp"
#endif
#include "fusebench/npy.hpp"

namespace fusebench::suite {

void register_devices() {
  cpu::register_cpu_device();
#if defined(FUSEBENCH_HAVE_CUDA)
  cuda::register_cuda_device();
#endif
}

std::string device_problem(const std::string& device) {
  register_devices();
  const auto names = engine::device_names();
  if (std::find(names.begin(), names.end(), device) == names.end()) {
    return fmt::format("this build has only {}", fmt::join(names, ", "));
  }
  return engine::make_device(device)->unavailable_reason();
}

std::unique_ptr<engine::Executor> make_executor(const SuiteConfig& config, bool fused, const engine::EngineOptions& options) {
  register_devices();
  const auto device = engine::make_device(config.device);
  return fused ? device->fused(options) : device->eager(options);
}

std::string file_safe(std::string name) {
  std::replace(name.begin(), name.end(), '/', '_');
  std::replace(name.begin(), name.end(), ':', '-');
  return name;
}

void write_evidence(const SuiteConfig& config, const std::string& name, const nlohmann::json& evidence) {
  if (config.dump_dir.empty()) return;
  std::filesystem::create_directories(config.dump_dir);
  write_file_atomically(config.dump_dir / (file_safe(name) + ".json"), evidence.dump(1));
}

Progress::Progress(std::string label, std::int64_t total)
    : label_(std::move(label)), total_(total), start_(std::chrono::steady_clock::now()), last_(start_) {}

void Progress::tick(std::int64_t done) {
  const auto now = std::chrono::steady_clock::now();
  if (done < total_ && now - last_ < std::chrono::seconds(2)) return;
  last_ = now;
  fmt::print(stderr, "  {}: {}/{} ({:.0f} s)\n", label_, done, total_, std::chrono::duration<double>(now - start_).count());
}

}  // namespace fusebench::suite
