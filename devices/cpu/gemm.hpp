// The cpu device's GEMM: the eager matmul's, and the one the fused kernels call through their
// services (kernel_abi.hpp), in the row tiles the renderer cuts them into (cpp_renderer.cpp).
#pragma once

#include <cstdint>

#include "thread_pool.hpp"

namespace fusebench::cpu {

// Rows of C per task of gemm_f32. The fused kernels' GEMM calls (cpp_renderer.cpp) are made in
// these tiles: a GEMM of at most this many rows is one task, run on the calling thread, so it may
// be called from a pool task.
inline constexpr std::int64_t kGemmRowTile = 128;

// Matrix product of row-major fp32 matrices, C = A B, split into fixed tiles of kGemmRowTile rows
// across the pool, or of columns when A is one row tile (the result does not depend on the thread count, nor
// on the tiling). Shared with the JIT kernels; called from inside a pool task it is one call.
void gemm_f32(ThreadPool& pool, std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
              const float* b, float* c);

}  // namespace fusebench::cpu
