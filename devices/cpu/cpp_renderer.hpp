// The cpu device's renderer of fused kernels: C++ on the engine's C-style emitter core
// (fusebench/engine/c_style_emitter.hpp), compiled by the JIT (jit_compiler.hpp). What it adds to
// the core: the task skeletons over the device's thread pool, f16 staging (a loop's f16 loads and
// stores converted a run at a time, F16C where the target has it), and the GEMM calls into the
// device's gemm_f32 in its own row tiles (kGemmRowTile).
//
// Kernel ABI (C linkage, kernel_abi.hpp): void fusebench_kernel(const FbKernelArgs*). Buffers are
// passed in the order: loads, stores, constants.
#pragma once

#include <string>

#include "fusebench/engine/c_style_emitter.hpp"

namespace fusebench::cpu {

engine::EmittedKernel emit_cpp_kernel(const engine::Graph& graph, const engine::KernelPlan& kernel,
                                      const engine::EngineOptions& options);

// The text pasted at the top of every kernel: float_formats.hpp, scalar_math.hpp and the ABI
// (kernel_abi.hpp).
const std::string& kernel_prelude();

}  // namespace fusebench::cpu
