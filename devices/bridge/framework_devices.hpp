// The framework devices: torch (PyTorch CPU: eager ops vs torch.compile / Inductor), torch:cuda
// (Inductor -> Triton), xla (JAX, one jax.jit per op vs jax.jit of the graph on XLA:CPU) and
// xla:cuda (the same on XLA:CUDA, through JAX's CUDA plugin), all through the Python bridge.
#pragma once

#include "bridge.hpp"

namespace fusebench::framework {

// target "cpu" or "cuda"; compile_backend: torch.compile's backend, "" = Inductor under the
// plain name "torch" / "torch:cuda", else the device is named torch[:cuda]/BACKEND (devices/torch).
FrameworkSpec torch_spec(const std::string& target, const std::string& compile_backend = "");
// target "cpu" (device xla) or "cuda" (device xla:cuda); devices/xla
FrameworkSpec xla_spec(const std::string& target = "cpu");
// Whether torch._dynamo ships this backend (inductor, aot_eager, ...): known without importing
// torch. Any other name is checked by the worker against torch._dynamo.list_backends().
bool builtin_torch_backend(const std::string& backend);

// The device's eager_description (FrameworkSpec) for a device name; empty where none is stated or
// the name is no framework device.
std::string framework_eager_description(const std::string& device);

// Registers "torch", "torch:cuda", the families torch/BACKEND and torch:cuda/BACKEND, "xla" and
// "xla:cuda" with the engine's device registry (idempotent).
void register_framework_devices();

}  // namespace fusebench::framework
