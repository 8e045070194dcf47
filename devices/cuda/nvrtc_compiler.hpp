// Fused CUDA kernels compiled by NVRTC to a cubin for a named architecture ("sm_90"): no GPU is
// needed to compile, only to run. Cached like the CPU's kernels (engine::KernelCache): the key
// adds NVRTC's version (the compiler identity) and the architecture and --fmad flag (in the
// command); the cubin's SHA-256 is the kernel hash.
#pragma once

#include <string>
#include <vector>

#include "fusebench/engine/kernel_cache.hpp"

namespace fusebench::cuda {

// "NVRTC 13.0"
std::string nvrtc_identity();

// NVRTC's options for a kernel: the architecture, C++20, device functions by default (the pasted
// scalar_math.hpp has no __device__ marks), IEEE division and square root, no flushing of
// subnormals, and FMA contraction from the knob (--fmad).
std::vector<std::string> nvrtc_options(const std::string& arch, bool fma_contraction);

// The cubin for `source` (from the cache, or compiled into it). CompileError carries NVRTC's log
// and options; InputError names a malformed architecture.
engine::CachedArtifact compile_cubin(const std::string& source, const std::string& arch,
                                     bool fma_contraction, engine::KernelCache& cache);

}  // namespace fusebench::cuda
