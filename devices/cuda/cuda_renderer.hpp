// The cuda device's renderer of fused kernels: one CUDA C++ source per KernelPlan, compiled by
// NVRTC (nvrtc_compiler.hpp), on the engine's C-style emitter core
// (fusebench/engine/c_style_emitter.hpp). With the core's op table and spellings and the same
// pasted float_formats.hpp and scalar_math.hpp text, an element-wise formula, the exp and gelu
// polynomials, the Newton steps and the reduction order are the CPU kernels' own; the loop
// skeletons are GPU ones:
//   Pointwise  fb_pointwise: one thread per chunk of V elements (grid-stride loop); the kernel
//              inputs and stored members at the loop's own position move as 16-byte vectors
//              (V = 16 bytes of the narrowest, halved until it divides the element count), the
//              index arithmetic is 32-bit where the element count is below 2^31
//   Reduction  fb_partials: one 32-thread block per (output position, tile of reduce_tile
//              elements): element j of a tile goes to lane j mod 32 and the lanes combine as a
//              pairwise tree (warp shuffles), the CPU's tiled_sum order; fb_finish: one thread
//              per output position sums its tiles in order and runs the epilogue
//   Rowwise    fb_params (layernorm's weight and bias, once), fb_rowwise: one warp per row, up to
//              8 rows a block; the row (its prologue computed) staged in shared memory in the
//              compute type with 16-byte vector loads, 4 chunks in flight a lane; warp_rows.cuh's
//              reductions in the CPU's tiled order (bit-equal to scalar_math's layernorm_row /
//              softmax_row); the epilogue written once in vectors. A row over 48 KiB lives in a
//              global scratch row per warp instead
//   Matmul     per batch: fb_gather_a, fb_gather_b (into fp32 / fp64 scratch), the GEMM by cuBLAS
//              (the executor), fb_epilogue on its result
//
// Kernel ABI: every entry is `extern "C" __global__ void fb_<step>(const FbCtx c)`, FbCtx being
// 8-byte fields in this order: one pointer per buffer (loads, stores, constants), the scratch
// pointers s0, s1, s2 (compute type) and `long long batch`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fusebench/engine/c_style_emitter.hpp"

namespace fusebench::cuda {

struct CudaLaunch {
  std::string entry;  // "fb_pointwise", ...
  std::int64_t grid = 1;
  int block = 256;
};

struct CudaKernel {
  engine::EmittedKernel code;  // source, buffers, constants (broadcast scalars), lowering notes
  engine::KernelKind kind = engine::KernelKind::Pointwise;
  DType compute = DType::f32;  // of the scratch buffers
  // in order; a Matmul runs gather_a, gather_b, GEMM, epilogue per batch
  std::vector<CudaLaunch> launches;
  std::int64_t scratch_elements[3] = {0, 0, 0};  // s0, s1, s2
  // Matmul only: [m, k] x [k, n] per batch; B is gathered once when it is not batched.
  std::int64_t m = 0, n = 0, k = 0, batches = 1;
  bool batched_b = false;
  int ctx_fields() const {
    return int(code.loads.size() + code.stores.size() + code.constants.size()) + 4;
  }
};

CudaKernel emit_cuda_kernel(const engine::Graph& graph, const engine::KernelPlan& kernel,
                            const engine::EngineOptions& options);

// The text at the top of every CUDA kernel: std shims for NVRTC, float_formats.hpp, scalar_math.hpp.
const std::string& cuda_kernel_prelude();

}  // namespace fusebench::cuda
