#include "cpu_device.hpp"

#include "eager_executor.hpp"
#include "fused_executor.hpp"

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
};
}  // namespace

std::unique_ptr<engine::Device> make_cpu_device() { return std::make_unique<CpuDevice>(); }

void register_cpu_device() { engine::register_device("cpu", [] { return make_cpu_device(); }); }

}  // namespace fusebench::cpu
