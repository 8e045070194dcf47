#include "device_math.cuh"
#include "eager_kernels.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace fusebench::cuda::kernels {

namespace {
constexpr int kBlock = 256;
// = fbk::kReduceLanes: lane l of a tile takes its elements l, l + 32, ...
constexpr int kWarp = 32;
constexpr std::int64_t kMaxGrid = 1 << 20;

unsigned blocks(std::int64_t threads) {
  return unsigned(
      std::min<std::int64_t>(kMaxGrid, std::max<std::int64_t>(1, (threads + kBlock - 1) / kBlock)));
}

void check_launch(const char* what) {
  const cudaError_t result = cudaGetLastError();
  if (result != cudaSuccess)
    throw std::runtime_error(std::string("CUDA eager kernel ") + what + ": " +
                             cudaGetErrorString(result));
}

// ---- storage <-> compute type, as the CPU's eager load / store (and the emitter's load_expr / store_expr)
template <class C>
__device__ C load(const void* p, Storage d, std::int64_t i) {
  switch (d) {
    case Storage::F16:
      return C(fusebench::fp16_bits_to_fp32(static_cast<const std::uint16_t*>(p)[i]));
    case Storage::BF16:
      return C(fusebench::bf16_bits_to_fp32(static_cast<const std::uint16_t*>(p)[i]));
    case Storage::F32:
      return C(static_cast<const float*>(p)[i]);
    default:
      return C(static_cast<const double*>(p)[i]);
  }
}
template <class C>
__device__ void store(void* p, Storage d, std::int64_t i, C v) {
  constexpr bool wide = std::is_same_v<C, double>;
  switch (d) {
    case Storage::F16:
      static_cast<std::uint16_t*>(p)[i] =
          wide ? fusebench::round_to_format_bits<fusebench::Half>(double(v))
               : fusebench::fp32_to_fp16_bits(float(v));
      break;
    case Storage::BF16:
      static_cast<std::uint16_t*>(p)[i] =
          wide ? fusebench::round_to_format_bits<fusebench::BFloat16>(double(v))
               : fusebench::fp32_to_bf16_bits(float(v));
      break;
    case Storage::F32:
      static_cast<float*>(p)[i] = float(v);
      break;
    default:
      static_cast<double*>(p)[i] = double(v);
      break;
  }
}
__device__ std::int64_t offset_of(const Layout& l, std::int64_t flat) {
  std::int64_t off = l.offset;
  for (int d = l.rank - 1; d >= 0; --d) {
    const std::int64_t i = flat % l.shape[d];
    flat /= l.shape[d];
    off += i * l.strides[d];
  }
  return off;
}

// ---- the knobs as the function objects scalar_math.hpp's templates take
template <int I, class C>
__device__ C rsqrt_iters(int mode, C x) {
  if (mode == 1) return fbk::RsqrtNewtonBitTrick<I>{}(x);
  return fbk::RsqrtNewtonHardware<I>{}(x);
}
template <int I, class C>
__device__ C div_iters(int mode, C a, C b) {
  if (mode == 1) return fbk::DivNewtonBitTrick<I>{}(a, b);
  return fbk::DivNewtonHardware<I>{}(a, b);
}
struct KnobRsqrt {
  int mode, iters;
  template <class C>
  __device__ C operator()(C x) const {
    if (mode == 0) return fbk::RsqrtIeee{}(x);
    switch (iters) {
      case 0:
        return rsqrt_iters<0>(mode, x);
      case 1:
        return rsqrt_iters<1>(mode, x);
      case 2:
        return rsqrt_iters<2>(mode, x);
      default:
        return rsqrt_iters<3>(mode, x);
    }
  }
};
struct KnobDiv {
  int mode, iters;
  template <class C>
  __device__ C operator()(C a, C b) const {
    if (mode == 0) return fbk::DivIeee{}(a, b);
    switch (iters) {
      case 0:
        return div_iters<0>(mode, a, b);
      case 1:
        return div_iters<1>(mode, a, b);
      case 2:
        return div_iters<2>(mode, a, b);
      default:
        return div_iters<3>(mode, a, b);
    }
  }
};
// The accumulator knob: a running sum rounded to the output's 16-bit dtype after every add, or not.
struct KnobRound {
  Storage round_to;  // F16 or BF16 to round; anything else keeps the compute type
  template <class C>
  __device__ C operator()(C x) const {
    if constexpr (std::is_same_v<C, float>) {
      if (round_to == Storage::F16) return fbk::round_f16(x);
      if (round_to == Storage::BF16) return fbk::round_bf16(x);
    }
    return x;
  }
};
KnobRound round_for(const Knobs& k, Storage out) {
  return KnobRound{k.storage_accumulator ? out : Storage::F32};
}
struct NoStep {
  __device__ void operator()(std::int64_t) const {}
};

bool wide(Storage a, Storage b = Storage::F32) { return a == Storage::F64 || b == Storage::F64; }

// ---- element-wise
template <class C>
__global__ void unary_kernel(Unary op, Storage in, const void* x, Storage out, void* y,
                             std::int64_t n, double scalar, const void* scalar_ptr, Knobs knobs) {
  const C s = scalar_ptr != nullptr ? load<C>(scalar_ptr, out, 0)
                                    : (std::is_same_v<C, double> ? C(scalar) : C(float(scalar)));
  const KnobRsqrt rsqrt{knobs.rsqrt_mode, knobs.rsqrt_iters};
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const C v = load<C>(x, in, i);
    C r;
    switch (op) {
      case Unary::Neg:
        r = -v;
        break;
      case Unary::Exp:
        r = fbk::exp_c(v);
        break;
      case Unary::Sqrt:
        r = std::sqrt(v);
        break;
      case Unary::Rsqrt:
        r = rsqrt(v);
        break;
      case Unary::GeluErf:
        r = fbk::gelu_erf_c(v);
        break;
      case Unary::GeluTanh:
        r = fbk::gelu_tanh_c(v);
        break;
      case Unary::AddScalar:
        r = v + s;
        break;
      case Unary::MulScalar:
        r = v * s;
        break;
      case Unary::Log:
        r = fbk::log_c(v);
        break;
      default:
        r = v;
        break;  // Cast: the store rounds
    }
    store<C>(y, out, i, r);
  }
}

template <class C>
__global__ void binary_kernel(Binary op, Storage ad, const void* a, Layout la, Storage bd,
                              const void* b, Layout lb, Storage out, void* y, std::int64_t n,
                              Knobs knobs) {
  const KnobDiv div{knobs.div_mode, knobs.div_iters};
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const C u = load<C>(a, ad, offset_of(la, i)), v = load<C>(b, bd, offset_of(lb, i));
    C r;
    switch (op) {
      case Binary::Add:
        r = u + v;
        break;
      case Binary::Sub:
        r = u - v;
        break;
      case Binary::Mul:
        r = u * v;
        break;
      case Binary::GeluTanhBackward:
        r = fbk::gelu_tanh_backward_c(u, v);
        break;
      default:
        r = div(u, v);
        break;
    }
    store<C>(y, out, i, r);
  }
}

template <class C>
__global__ void causal_mask_kernel(Storage d, const void* x, void* y, std::int64_t n,
                                   std::int64_t rows, std::int64_t cols, C fill) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t col = i % cols, row = (i / cols) % rows;
    store<C>(y, d, i, col > row ? fill : load<C>(x, d, i));
  }
}

template <class T>
__global__ void copy_kernel(const T* src, Layout ls, T* dst, Layout ld, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    dst[offset_of(ld, i)] = src[offset_of(ls, i)];
  }
}

// ---- reductions: one 32-thread block per (output position, tile), then one thread per position
template <class C>
__device__ C nan_max(C m, C v) {
  return (v > m || v != v) ? v : m;
}

template <class C>
__global__ void partials_kernel(Reduce op, Storage in, const void* x, std::int64_t extent,
                                std::int64_t inner, std::int64_t tile, std::int64_t tiles,
                                KnobRound round, C* partials) {
  const std::int64_t p = blockIdx.x / tiles, t = blockIdx.x % tiles;
  const int lane = threadIdx.x;
  const std::int64_t a = p / inner, b = p % inner;
  const std::int64_t start = t * tile, end = start + tile < extent ? start + tile : extent;
  C acc = op == Reduce::Max ? C(-INFINITY) : C(0);
  for (std::int64_t k = start + lane; k < end; k += kWarp) {
    const C v = load<C>(x, in, (a * extent + k) * inner + b);
    acc = op == Reduce::Max ? nan_max(acc, v) : round(acc + v);
  }
  for (int width = kWarp / 2; width >= 1; width /= 2) {
    const C other = __shfl_down_sync(0xffffffffu, acc, width);
    if (lane < width) acc = op == Reduce::Max ? nan_max(acc, other) : round(acc + other);
  }
  if (lane == 0) partials[p * tiles + t] = acc;
}

template <class C>
__global__ void finish_kernel(Reduce op, const C* partials, std::int64_t positions,
                              std::int64_t tiles, std::int64_t extent, KnobRound round, Storage out,
                              void* y) {
  for (std::int64_t p = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; p < positions;
       p += std::int64_t(gridDim.x) * blockDim.x) {
    C total = op == Reduce::Max ? C(-INFINITY) : C(0);
    for (std::int64_t t = 0; t < tiles; ++t) {
      total = op == Reduce::Max ? nan_max(total, partials[p * tiles + t])
                                : round(total + partials[p * tiles + t]);
    }
    if (op == Reduce::Mean) total = total / C(extent);
    store<C>(y, out, p, total);
  }
}

// ---- layernorm and softmax: one thread per row, scalar_math's row functions on scratch rows
template <class C>
__global__ void row_kernel(Row op, Storage dtype, const void* x, Storage wd, const void* w,
                           Storage bd, const void* b, void* y, std::int64_t rows, std::int64_t k,
                           C eps, Knobs knobs, C* scratch) {
  C* const weight = scratch + 2 * rows * k;
  C* const bias = weight + k;
  const KnobRound round{knobs.storage_accumulator ? dtype : Storage::F32};
  for (std::int64_t q = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; q < rows;
       q += std::int64_t(gridDim.x) * blockDim.x) {
    C* const in = scratch + q * k;
    C* const out = scratch + (rows + q) * k;
    for (std::int64_t i = 0; i < k; ++i) in[i] = load<C>(x, dtype, q * k + i);
    if (op == Row::LayerNorm) {
      fbk::layernorm_row(in, weight, bias, out, k, knobs.tile, eps, round,
                         KnobRsqrt{knobs.rsqrt_mode, knobs.rsqrt_iters}, NoStep{});
    } else {
      const C inverse = KnobDiv{knobs.div_mode, knobs.div_iters}(
          C(1), fbk::softmax_exp_row(in, out, k, knobs.tile, round, NoStep{}));
      for (std::int64_t i = 0; i < k; ++i) out[i] = out[i] * inverse;
    }
    for (std::int64_t i = 0; i < k; ++i) store<C>(y, dtype, q * k + i, out[i]);
  }
}
template <class C>
__global__ void row_params_kernel(Storage wd, const void* w, Storage bd, const void* b,
                                  std::int64_t rows, std::int64_t k, C* scratch) {
  C* const weight = scratch + 2 * rows * k;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < k;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    weight[i] = load<C>(w, wd, i);
    weight[k + i] = load<C>(b, bd, i);
  }
}
}  // namespace

void unary(Unary op, Storage in, const void* x, Storage out, void* y, std::int64_t n, double scalar,
           const void* scalar_ptr, const Knobs& knobs) {
  if (wide(in, out)) {
    unary_kernel<double><<<blocks(n), kBlock>>>(op, in, x, out, y, n, scalar, scalar_ptr, knobs);
  } else {
    unary_kernel<float><<<blocks(n), kBlock>>>(op, in, x, out, y, n, scalar, scalar_ptr, knobs);
  }
  check_launch("unary");
}

void binary(Binary op, Storage ad, const void* a, const Layout& la, Storage bd, const void* b,
            const Layout& lb, Storage out, void* y, std::int64_t n, const Knobs& knobs) {
  if (wide(out)) {
    binary_kernel<double><<<blocks(n), kBlock>>>(op, ad, a, la, bd, b, lb, out, y, n, knobs);
  } else {
    binary_kernel<float><<<blocks(n), kBlock>>>(op, ad, a, la, bd, b, lb, out, y, n, knobs);
  }
  check_launch("binary");
}

void causal_mask(Storage dtype, const void* x, void* y, std::int64_t n, std::int64_t rows,
                 std::int64_t cols, double fill) {
  if (wide(dtype)) {
    causal_mask_kernel<double><<<blocks(n), kBlock>>>(dtype, x, y, n, rows, cols, fill);
  } else {
    causal_mask_kernel<float><<<blocks(n), kBlock>>>(dtype, x, y, n, rows, cols, float(fill));
  }
  check_launch("causal_mask");
}

void copy(Storage dtype, const void* src, const Layout& ls, void* dst, const Layout& ld,
          std::int64_t n) {
  switch (dtype) {
    case Storage::F16:
    case Storage::BF16:
      copy_kernel<<<blocks(n), kBlock>>>(static_cast<const std::uint16_t*>(src), ls,
                                         static_cast<std::uint16_t*>(dst), ld, n);
      break;
    case Storage::F32:
      copy_kernel<<<blocks(n), kBlock>>>(static_cast<const std::uint32_t*>(src), ls,
                                         static_cast<std::uint32_t*>(dst), ld, n);
      break;
    default:
      copy_kernel<<<blocks(n), kBlock>>>(static_cast<const std::uint64_t*>(src), ls,
                                         static_cast<std::uint64_t*>(dst), ld, n);
      break;
  }
  check_launch("copy");
}

void reduce(Reduce op, Storage in, const void* x, Storage out, void* y, std::int64_t outer,
            std::int64_t extent, std::int64_t inner, const Knobs& knobs, void* partials) {
  const std::int64_t tile = std::min(knobs.tile, extent), tiles = (extent + tile - 1) / tile,
                     positions = outer * inner;
  const KnobRound round = round_for(knobs, out);
  if (wide(in, out)) {
    partials_kernel<double><<<unsigned(positions * tiles), kWarp>>>(
        op, in, x, extent, inner, tile, tiles, round, static_cast<double*>(partials));
    finish_kernel<double><<<blocks(positions), kBlock>>>(op, static_cast<const double*>(partials),
                                                         positions, tiles, extent, round, out, y);
  } else {
    partials_kernel<float><<<unsigned(positions * tiles), kWarp>>>(
        op, in, x, extent, inner, tile, tiles, round, static_cast<float*>(partials));
    finish_kernel<float><<<blocks(positions), kBlock>>>(op, static_cast<const float*>(partials),
                                                        positions, tiles, extent, round, out, y);
  }
  check_launch("reduce");
}

void row(Row op, Storage dtype, const void* x, Storage wd, const void* w, Storage bd, const void* b,
         void* y, std::int64_t rows, std::int64_t k, double eps, const Knobs& knobs,
         void* scratch) {
  if (wide(dtype)) {
    if (op == Row::LayerNorm)
      row_params_kernel<double>
          <<<blocks(k), kBlock>>>(wd, w, bd, b, rows, k, static_cast<double*>(scratch));
    row_kernel<double><<<blocks(rows), kBlock>>>(op, dtype, x, wd, w, bd, b, y, rows, k, eps, knobs,
                                                 static_cast<double*>(scratch));
  } else {
    if (op == Row::LayerNorm)
      row_params_kernel<float>
          <<<blocks(k), kBlock>>>(wd, w, bd, b, rows, k, static_cast<float*>(scratch));
    row_kernel<float><<<blocks(rows), kBlock>>>(op, dtype, x, wd, w, bd, b, y, rows, k, float(eps),
                                                knobs, static_cast<float*>(scratch));
  }
  check_launch("row");
}

}  // namespace fusebench::cuda::kernels
