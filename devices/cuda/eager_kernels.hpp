// The eager CUDA kernels (eager_kernels.cu, compiled by nvcc): one launcher per family of engine
// ops, callable from C++. Each loads its operands in their storage dtype, computes in fp32 (fp64
// when a tensor is fp64) with the shared per-element math (device_math.cuh, generated from
// scalar_math.hpp) and stores in the output dtype, as the CPU's eager kernels do. All launch on
// the default stream and return without waiting.
#pragma once

#include <cstdint>

namespace fusebench::cuda::kernels {

enum class Storage : int { F16, BF16, F32, F64 };

inline constexpr int kMaxRank = 8;
// Where element `flat` of an iteration space (row-major over shape) lives in a buffer:
// offset + sum(index[d] * strides[d]) (a stride of 0 broadcasts).
struct Layout {
  int rank = 0;
  std::int64_t shape[kMaxRank] = {};
  std::int64_t strides[kMaxRank] = {};
  std::int64_t offset = 0;
};

// The numerics knobs the kernels honour (EngineOptions, as plain integers).
struct Knobs {
  // 0 IEEE, 1 Newton from the bit trick, 2 Newton from the hardware's approximation
  int rsqrt_mode = 0;
  int rsqrt_iters = 2;
  int div_mode = 0;
  int div_iters = 2;
  bool storage_accumulator = false;  // round every partial sum to the output's 16-bit dtype
  std::int64_t tile = 1024;
};

enum class Unary : int {
  Neg,
  Exp,
  Sqrt,
  Rsqrt,
  GeluErf,
  GeluTanh,
  Cast,
  AddScalar,
  MulScalar,
  Log
};
// GeluTanhBackward: a = dy, b = x
enum class Binary : int { Add, Sub, Mul, Div, GeluTanhBackward };
enum class Reduce : int { Sum, Mean, Max };
enum class Row : int { LayerNorm, Softmax };

// y[i] = op(x[i]) for n elements. AddScalar / MulScalar read the scalar from `scalar_ptr` (one
// element of the output's dtype: the broadcast-tensor lowering) when it is not null, else use
// `scalar` rounded to fp32 (the immediate lowering).
void unary(Unary op, Storage in, const void* x, Storage out, void* y, std::int64_t n, double scalar,
           const void* scalar_ptr, const Knobs& knobs);
// y[i] = op(a[la(i)], b[lb(i)]) over the output's n elements (computing in the output's type).
void binary(Binary op, Storage a_dtype, const void* a, const Layout& la, Storage b_dtype,
            const void* b, const Layout& lb, Storage out, void* y, std::int64_t n,
            const Knobs& knobs);
// The causal mask over the last two axes [.., rows, cols] of n elements: x where column <= row,
// else `fill` (rounded to fp32, then to the dtype, as the CPU's eager kernel does).
void causal_mask(Storage dtype, const void* x, void* y, std::int64_t n, std::int64_t rows,
                 std::int64_t cols, double fill);
// dst[ld(i)] = src[ls(i)] for n elements of one dtype (permute, slice, expand, reshape, concat).
void copy(Storage dtype, const void* src, const Layout& ls, void* dst, const Layout& ld,
          std::int64_t n);
// Over the middle axis of [outer, extent, inner]; `partials` holds outer * inner * ceil(extent /
// tile) values of the compute type. The reduction order is the CPU's tiled_sum.
void reduce(Reduce op, Storage in, const void* x, Storage out, void* y, std::int64_t outer,
            std::int64_t extent, std::int64_t inner, const Knobs& knobs, void* partials);
// Over the last axis of [rows, k], one warp per row in the CPU's reduction order; layernorm's
// weight and bias have k elements; `scratch` holds row_scratch_elements(rows, k, dtype is f64)
// values of the compute type (the weight and bias, and the rows where they do not fit in shared
// memory).
std::int64_t row_scratch_elements(std::int64_t rows, std::int64_t k, bool wide_rows);
void row(Row op, Storage dtype, const void* x, Storage w_dtype, const void* w, Storage b_dtype,
         const void* b, void* y, std::int64_t rows, std::int64_t k, double eps, const Knobs& knobs,
         void* scratch);

}  // namespace fusebench::cuda::kernels
