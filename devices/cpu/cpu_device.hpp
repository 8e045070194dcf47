// The CPU device plug-in: eager kernels and the C++ JIT, registered as "cpu".
#pragma once

#include <memory>

#include "fusebench/engine/executor.hpp"

namespace fusebench::cpu {

std::unique_ptr<engine::Device> make_cpu_device();
// Registers "cpu" with the engine's device registry (idempotent).
void register_cpu_device();

}  // namespace fusebench::cpu
