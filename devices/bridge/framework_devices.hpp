// The framework devices: torch (PyTorch CPU: eager ops vs torch.compile / Inductor), torch:cuda
// (Inductor -> Triton) and xla (JAX op by op vs jax.jit on XLA:CPU), all through the Python bridge.
#pragma once

#include "bridge.hpp"

namespace fusebench::framework {

FrameworkSpec torch_spec(const std::string& target);  // "cpu" or "cuda" (devices/torch)
FrameworkSpec xla_spec();                              // devices/xla

// Registers "torch", "torch:cuda" and "xla" with the engine's device registry (idempotent).
void register_framework_devices();

}  // namespace fusebench::framework
