#include "cpu_device.hpp"

#include "eager_executor.hpp"
#include "fused_executor.hpp"
#include "jit_compiler.hpp"

namespace fusebench::cpu {

namespace {
class CpuDevice final : public engine::Device {
 public:
  std::string name() const override { return "cpu"; }
  std::string unavailable_reason() const override { return {}; }
  std::unique_ptr<engine::Executor> eager(const engine::EngineOptions& options) const override {
    return std::make_unique<EagerExecutor>(options);
  }
  std::unique_ptr<engine::Executor> fused(const engine::EngineOptions& options) const override {
    return std::make_unique<FusedExecutor>(options);
  }
  // The engine realises every knob it defines.
  // Every engine knob; a framework's compile options have no meaning here.
  std::string unsupported_knobs(const engine::EngineOptions& options, bool) const override {
    return engine::compiler_options_refused(options, name());
  }
  std::unique_ptr<engine::Executor> fused_cold(
      const engine::EngineOptions& options, const std::filesystem::path& cache_dir) const override {
    engine::KernelCache(cache_dir).clear();
    return std::make_unique<FusedExecutor>(options, cache_dir);
  }
  std::map<std::string, int> instruction_histogram(
      const engine::KernelTrace& kernel) const override {
    // an eager op: precompiled, no artifact of its own
    if (kernel.artifact_path.empty()) return {};
    return cpu::instruction_histogram(kernel.artifact_path);
  }
};
}  // namespace

std::unique_ptr<engine::Device> make_cpu_device() { return std::make_unique<CpuDevice>(); }

void register_cpu_device() {
  engine::register_device("cpu", [] { return make_cpu_device(); });
}

}  // namespace fusebench::cpu
