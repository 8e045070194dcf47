#include "cuda_device.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>

#include "cuda_runtime.hpp"
#include "eager_executor.hpp"
#include "fusebench/engine/kernel_cache.hpp"
#include "fusebench/error.hpp"
#include "fused_executor.hpp"
#include "sass.hpp"

namespace fusebench::cuda {

std::string unavailable_reason() {
  int count = 0;
  const cudaError_t result = cudaGetDeviceCount(&count);
  if (result == cudaSuccess && count > 0) return {};
  std::string reason = result == cudaSuccess
                           ? std::string("no CUDA GPU is visible (cudaGetDeviceCount: 0 devices)")
                           : fmt::format("cudaGetDeviceCount: {} ({})", cudaGetErrorString(result),
                                         cudaGetErrorName(result));
  // The runtime reports a missing driver as an insufficient one; say which it is.
  if (void* driver = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD); driver == nullptr) {
    if (void* loaded = ::dlopen("libcuda.so.1", RTLD_LAZY); loaded == nullptr) {
      reason = "no NVIDIA driver (libcuda.so.1 cannot be loaded); " + reason;
    } else {
      ::dlclose(loaded);
    }
  } else {
    ::dlclose(driver);
  }
  return reason;
}

std::string device_architecture() {
  if (const std::string reason = unavailable_reason(); !reason.empty())
    throw_input_error("CUDA device: {}", reason);
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  cudaDeviceProp props{};
  check_cuda(cudaGetDeviceProperties(&props, device), "cudaGetDeviceProperties");
  return fmt::format("sm_{}{}", props.major, props.minor);
}

namespace {
class CudaDevice final : public engine::Device {
 public:
  std::string name() const override { return "cuda"; }
  std::string unavailable_reason() const override { return cuda::unavailable_reason(); }
  std::unique_ptr<engine::Executor> eager(const engine::EngineOptions& options) const override {
    return std::make_unique<EagerExecutor>(options);
  }
  std::unique_ptr<engine::Executor> fused(const engine::EngineOptions& options) const override {
    return std::make_unique<FusedExecutor>(options);
  }
  // The CUDA kernels realise every knob of the engine (threads has no effect on a GPU's results).
  // The planner's split and a kernel's contraction flag are not wired into the NVRTC path.
  std::string unsupported_knobs(const engine::EngineOptions& options, bool) const override {
    if (auto why = engine::compiler_options_refused(options, name()); !why.empty()) return why;
    for (const auto& [op, knobs] : options.per_op) {
      if (knobs.split_after || knobs.fma_contraction) {
        return fmt::format("per-op switch of {} ({}): split and FMA switches run on cpu only", op,
                           knobs.describe());
      }
    }
    return {};
  }
  std::unique_ptr<engine::Executor> fused_cold(
      const engine::EngineOptions& options, const std::filesystem::path& cache_dir) const override {
    engine::KernelCache(cache_dir).clear();
    return std::make_unique<FusedExecutor>(options, cache_dir);
  }
  // SASS opcodes of a fused kernel's cubin; eager ops (nvcc, inside the library) have no artifact.
  std::map<std::string, int> instruction_histogram(
      const engine::KernelTrace& kernel) const override {
    if (kernel.artifact_path.empty()) return {};
    return disassemble_cubin(kernel.artifact_path).histogram;
  }
};
}  // namespace

std::unique_ptr<engine::Device> make_cuda_device() { return std::make_unique<CudaDevice>(); }

void register_cuda_device() {
  static std::once_flag once;
  std::call_once(once, [] { engine::register_device("cuda", [] { return make_cuda_device(); }); });
}

}  // namespace fusebench::cuda
