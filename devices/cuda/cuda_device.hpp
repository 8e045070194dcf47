// The CUDA device: eager kernels compiled by nvcc into the library (eager_kernels.cu), and the
// fused executor whose kernels NVRTC compiles for the GPU's architecture. It registers as "cuda";
// unavailable_reason() says why it cannot run here (no driver, no visible GPU), in the CUDA
// runtime's own words.
#pragma once

#include <memory>
#include <string>

#include "fusebench/engine/executor.hpp"

namespace fusebench::cuda {

std::unique_ptr<engine::Device> make_cuda_device();
void register_cuda_device();  // idempotent

// Empty when a CUDA GPU is usable; otherwise why not.
std::string unavailable_reason();
// "sm_90" for the first visible GPU (InputError when there is none).
std::string device_architecture();

}  // namespace fusebench::cuda
