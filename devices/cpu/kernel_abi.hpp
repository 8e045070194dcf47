// The ABI between the cpu device's fused executor and its JIT kernels: a kernel is
// `extern "C" void fusebench_kernel(const FbKernelArgs*)`, and the host fills these structs. The
// text below the marker line is pasted into every kernel's prelude (kernel_prelude.cpp.in), so
// host and kernel compile the one declaration. It is part of every kernel's source: an edit moves
// every kernel cache key.
#pragma once

#include <cstdint>

// ---- kernel text (pasted from the next line to the end of the file)
struct FbKernelServices {
  void (*parallel_for)(void* pool, std::int64_t tasks, void (*task)(void* context, std::int64_t index), void* context);
  void* pool;
  void (*gemm_f32)(void* pool, std::int64_t m, std::int64_t n, std::int64_t k, const float* a, const float* b, float* c);
  void (*gemm_f64)(void* pool, std::int64_t m, std::int64_t n, std::int64_t k, const double* a, const double* b, double* c);
  // Scratch memory from the engine's buffer cache (a repeated run reuses it without page faults).
  void* (*allocate)(std::int64_t bytes);
  void (*release)(void* memory, std::int64_t bytes);
};
struct FbKernelArgs {
  void* const* buffers;
  const FbKernelServices* services;
};
