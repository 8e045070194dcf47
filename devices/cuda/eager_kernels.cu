#include "device_math.cuh"
#include "eager_kernels.hpp"
#include "warp_rows.cuh"

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
// I: the index type, 32-bit unsigned where every flat index and offset fits (a 64-bit division
// or remainder is several times the instructions of a 32-bit one), else 64-bit.
template <class I>
__device__ I offset_of(const Layout& l, I flat) {
  I off = I(l.offset);
  for (int d = l.rank - 1; d >= 0; --d) {
    const I extent = I(l.shape[d]);
    const I i = flat % extent;
    flat /= extent;
    off += i * I(l.strides[d]);
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

bool wide(Storage a, Storage b = Storage::F32) { return a == Storage::F64 || b == Storage::F64; }

// ---- element-wise
// The op of each family on compute-type values (every kernel below computes through these).
template <class C>
__device__ C unary_op(Unary op, C v, C s, const KnobRsqrt& rsqrt) {
  switch (op) {
    case Unary::Neg:
      return -v;
    case Unary::Exp:
      return fbk::exp_c(v);
    case Unary::Sqrt:
      return std::sqrt(v);
    case Unary::Rsqrt:
      return rsqrt(v);
    case Unary::GeluErf:
      return fbk::gelu_erf_c(v);
    case Unary::GeluTanh:
      return fbk::gelu_tanh_c(v);
    case Unary::AddScalar:
      return v + s;
    case Unary::MulScalar:
      return v * s;
    case Unary::Log:
      return fbk::log_c(v);
    default:
      return v;  // Cast: the store rounds
  }
}
template <class C>
__device__ C binary_op(Binary op, C u, C v, const KnobDiv& div) {
  switch (op) {
    case Binary::Add:
      return u + v;
    case Binary::Sub:
      return u - v;
    case Binary::Mul:
      return u * v;
    case Binary::GeluTanhBackward:
      return fbk::gelu_tanh_backward_c(u, v);
    default:
      return div(u, v);
  }
}
template <class C>
__device__ C scalar_operand(Storage out, double scalar, const void* scalar_ptr) {
  return scalar_ptr != nullptr ? load<C>(scalar_ptr, out, 0)
                               : (std::is_same_v<C, double> ? C(scalar) : C(float(scalar)));
}

// A storage dtype as a type: its element, its compute type, and the conversions of load / store.
template <Storage S>
struct Stored {
  using T = std::conditional_t<S == Storage::F32, float,
                               std::conditional_t<S == Storage::F64, double, std::uint16_t>>;
  using C = std::conditional_t<S == Storage::F64, double, float>;
  static constexpr int kVector = int(16 / sizeof(T));  // elements of a 16-byte access
  __device__ static C widen(T v) {
    if constexpr (S == Storage::F16) return fusebench::fp16_bits_to_fp32(v);
    if constexpr (S == Storage::BF16) return fusebench::bf16_bits_to_fp32(v);
    return C(v);
  }
  __device__ static T narrow(C v) {
    if constexpr (S == Storage::F16) return fusebench::fp32_to_fp16_bits(v);
    if constexpr (S == Storage::BF16) return fusebench::fp32_to_bf16_bits(v);
    return T(v);
  }
};

// Contiguous operands and output of one dtype (the common case: every operand in the graph's
// dtype, no broadcast): 16-byte vectors per thread, no index arithmetic beyond the chunk's
// offset, then the elements past the last whole vector one by one.
template <Storage S, class I>
__global__ void unary_vector_kernel(Unary op, const typename Stored<S>::T* x,
                                    typename Stored<S>::T* y, I n, double scalar,
                                    const void* scalar_ptr, Knobs knobs) {
  using Type = Stored<S>;
  using C = typename Type::C;
  constexpr int V = Type::kVector;
  using Vector = fbw::Vec<typename Type::T, V>;
  const C s = scalar_operand<C>(S, scalar, scalar_ptr);
  const KnobRsqrt rsqrt{knobs.rsqrt_mode, knobs.rsqrt_iters};
  const I stride = I(gridDim.x) * blockDim.x, chunks = n / V;
  for (I g = I(blockIdx.x) * blockDim.x + threadIdx.x; g < chunks; g += stride) {
    const Vector in = reinterpret_cast<const Vector*>(x)[g];
    Vector out;
#pragma unroll
    for (int v = 0; v < V; ++v)
      out.v[v] = Type::narrow(unary_op<C>(op, Type::widen(in.v[v]), s, rsqrt));
    reinterpret_cast<Vector*>(y)[g] = out;
  }
  for (I i = chunks * V + I(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = Type::narrow(unary_op<C>(op, Type::widen(x[i]), s, rsqrt));
}
template <Storage S, class I>
__global__ void binary_vector_kernel(Binary op, const typename Stored<S>::T* a,
                                     const typename Stored<S>::T* b, typename Stored<S>::T* y, I n,
                                     Knobs knobs) {
  using Type = Stored<S>;
  using C = typename Type::C;
  constexpr int V = Type::kVector;
  using Vector = fbw::Vec<typename Type::T, V>;
  const KnobDiv div{knobs.div_mode, knobs.div_iters};
  const I stride = I(gridDim.x) * blockDim.x, chunks = n / V;
  for (I g = I(blockIdx.x) * blockDim.x + threadIdx.x; g < chunks; g += stride) {
    const Vector u = reinterpret_cast<const Vector*>(a)[g],
                 w = reinterpret_cast<const Vector*>(b)[g];
    Vector out;
#pragma unroll
    for (int v = 0; v < V; ++v)
      out.v[v] = Type::narrow(binary_op<C>(op, Type::widen(u.v[v]), Type::widen(w.v[v]), div));
    reinterpret_cast<Vector*>(y)[g] = out;
  }
  for (I i = chunks * V + I(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = Type::narrow(binary_op<C>(op, Type::widen(a[i]), Type::widen(b[i]), div));
}

// Any dtypes and layouts: one element per thread, operands at their layouts' offsets.
template <class C, class I>
__global__ void unary_kernel(Unary op, Storage in, const void* x, Storage out, void* y, I n,
                             double scalar, const void* scalar_ptr, Knobs knobs) {
  const C s = scalar_operand<C>(out, scalar, scalar_ptr);
  const KnobRsqrt rsqrt{knobs.rsqrt_mode, knobs.rsqrt_iters};
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += I(gridDim.x) * blockDim.x)
    store<C>(y, out, std::int64_t(i), unary_op<C>(op, load<C>(x, in, std::int64_t(i)), s, rsqrt));
}

template <class C, class I>
__global__ void binary_kernel(Binary op, Storage ad, const void* a, Layout la, Storage bd,
                              const void* b, Layout lb, Storage out, void* y, I n, Knobs knobs) {
  const KnobDiv div{knobs.div_mode, knobs.div_iters};
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += I(gridDim.x) * blockDim.x) {
    const C u = load<C>(a, ad, std::int64_t(offset_of(la, i)));
    const C v = load<C>(b, bd, std::int64_t(offset_of(lb, i)));
    store<C>(y, out, std::int64_t(i), binary_op<C>(op, u, v, div));
  }
}

template <class C, class I>
__global__ void causal_mask_kernel(Storage d, const void* x, void* y, I n, I rows, I cols, C fill) {
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += I(gridDim.x) * blockDim.x) {
    const I col = i % cols, row = (i / cols) % rows;
    store<C>(y, d, std::int64_t(i), col > row ? fill : load<C>(x, d, std::int64_t(i)));
  }
}

template <class T, class I>
__global__ void copy_kernel(const T* src, Layout ls, T* dst, Layout ld, I n) {
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += I(gridDim.x) * blockDim.x)
    dst[offset_of(ld, i)] = src[offset_of(ls, i)];
}

// Whether every flat index, and every offset a layout reaches, fits in 32 bits.
bool fits_32_bits(std::int64_t n) { return n < (std::int64_t(1) << 31); }
bool fits_32_bits(std::int64_t n, const Layout& l) {
  std::int64_t last = l.offset;
  for (int d = 0; d < l.rank; ++d) last += (l.shape[d] - 1) * l.strides[d];
  return fits_32_bits(n) && l.offset >= 0 && fits_32_bits(last + 1);
}
bool aligned_16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }
// A layout that reads element i at offset i.
bool is_contiguous(const Layout& l) {
  if (l.offset != 0) return false;
  std::int64_t stride = 1;
  for (int d = l.rank - 1; d >= 0; --d) {
    if (l.shape[d] != 1 && l.strides[d] != stride) return false;
    stride *= l.shape[d];
  }
  return true;
}
// Calls f(std::integral_constant<Storage, S>{}) for the runtime dtype d.
template <class F>
void with_storage(Storage d, F f) {
  switch (d) {
    case Storage::F16:
      return f(std::integral_constant<Storage, Storage::F16>{});
    case Storage::BF16:
      return f(std::integral_constant<Storage, Storage::BF16>{});
    case Storage::F32:
      return f(std::integral_constant<Storage, Storage::F32>{});
    default:
      return f(std::integral_constant<Storage, Storage::F64>{});
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

// ---- layernorm and softmax: one warp per row, several rows per block, the row in shared memory
// (global scratch where it does not fit), reduced by warp_rows.cuh in the CPU's tiled order.
// V elements per lane and chunk: a row of a multiple of 8 elements moves 8 at a time (16 bytes
// of f16, two and four 16-byte accesses of f32 and f64), any other row one at a time.
constexpr int kRowBatch = 4;  // chunks a lane loads before it converts the first

// Row q of x (storage T, dtype d) into `row` in the compute type, kRowBatch chunks of V elements
// per lane at a time so that several vector loads are in flight.
template <class C, int V, class T>
__device__ void gather_row(const fbw::CudaWarp& warp, const T* x, Storage d, std::int64_t first,
                           std::int64_t chunks, C* row) {
  for (std::int64_t g0 = warp.lane(); g0 < chunks; g0 += kWarp * kRowBatch) {
    fbw::Vec<T, V> batch[kRowBatch];
#pragma unroll
    for (int u = 0; u < kRowBatch; ++u) {
      const std::int64_t g = g0 + kWarp * u;
      if (g < chunks) batch[u] = *reinterpret_cast<const fbw::Vec<T, V>*>(x + first + g * V);
    }
#pragma unroll
    for (int u = 0; u < kRowBatch; ++u) {
      const std::int64_t g = g0 + kWarp * u;
      if (g >= chunks) continue;
      fbw::Vec<C, V> values;
      for (int v = 0; v < V; ++v) {
        if constexpr (std::is_same_v<T, std::uint16_t>) {
          values.v[v] = C(d == Storage::F16 ? fusebench::fp16_bits_to_fp32(batch[u].v[v])
                                            : fusebench::bf16_bits_to_fp32(batch[u].v[v]));
        } else {
          values.v[v] = C(batch[u].v[v]);
        }
      }
      *reinterpret_cast<fbw::Vec<C, V>*>(row + g * V) = values;
    }
  }
}
template <class C, int V>
__device__ void gather_stored_row(const fbw::CudaWarp& warp, const void* x, Storage d,
                                  std::int64_t first, std::int64_t chunks, C* row) {
  switch (d) {
    case Storage::F16:
    case Storage::BF16:
      gather_row<C, V>(warp, static_cast<const std::uint16_t*>(x), d, first, chunks, row);
      break;
    case Storage::F32:
      gather_row<C, V>(warp, static_cast<const float*>(x), d, first, chunks, row);
      break;
    default:
      gather_row<C, V>(warp, static_cast<const double*>(x), d, first, chunks, row);
      break;
  }
}
template <class C, int V>
__device__ void store_chunk(void* p, Storage d, std::int64_t first, const C* in) {
  constexpr bool wide = std::is_same_v<C, double>;
  switch (d) {
    case Storage::F16:
    case Storage::BF16: {
      fbw::Vec<std::uint16_t, V> out;
      for (int v = 0; v < V; ++v) {
        if (d == Storage::F16) {
          out.v[v] = wide ? fusebench::round_to_format_bits<fusebench::Half>(double(in[v]))
                          : fusebench::fp32_to_fp16_bits(float(in[v]));
        } else {
          out.v[v] = wide ? fusebench::round_to_format_bits<fusebench::BFloat16>(double(in[v]))
                          : fusebench::fp32_to_bf16_bits(float(in[v]));
        }
      }
      *reinterpret_cast<fbw::Vec<std::uint16_t, V>*>(static_cast<std::uint16_t*>(p) + first) = out;
      break;
    }
    case Storage::F32: {
      fbw::Vec<float, V> out;
      for (int v = 0; v < V; ++v) out.v[v] = float(in[v]);
      *reinterpret_cast<fbw::Vec<float, V>*>(static_cast<float*>(p) + first) = out;
      break;
    }
    default: {
      fbw::Vec<double, V> out;
      for (int v = 0; v < V; ++v) out.v[v] = double(in[v]);
      *reinterpret_cast<fbw::Vec<double, V>*>(static_cast<double*>(p) + first) = out;
      break;
    }
  }
}

constexpr int kRowWarps = 8;
constexpr std::int64_t kRowSharedBytes = 48 * 1024;
// Blocks of a row kernel whose rows live in global scratch: the scratch is a row per warp of the
// grid, so the grid stays at about what a GPU keeps resident and loops over the rows.
constexpr std::int64_t kScratchRowGrid = 256;

template <class C, int V>
__global__ void row_kernel(Row op, Storage dtype, const void* x, void* y, std::int64_t rows,
                           std::int64_t k, C eps, Knobs knobs, const C* params, C* global_rows) {
  extern __shared__ __align__(16) unsigned char shared_rows[];
  const int warps = int(blockDim.x / kWarp), warp_in_block = int(threadIdx.x / kWarp);
  const fbw::CudaWarp warp{int(threadIdx.x % kWarp)};
  C* const row = global_rows != nullptr
                     ? global_rows + (std::int64_t(blockIdx.x) * warps + warp_in_block) * k
                     : reinterpret_cast<C*>(shared_rows) + warp_in_block * k;
  const KnobRound round{knobs.storage_accumulator ? dtype : Storage::F32};
  const std::int64_t chunks = k / V;
  for (std::int64_t q = std::int64_t(blockIdx.x) * warps + warp_in_block; q < rows;
       q += std::int64_t(gridDim.x) * warps) {
    gather_stored_row<C, V>(warp, x, dtype, q * k, chunks, row);
    __syncwarp();
    fbw::RowStatistics<C> stats{};
    C inverse = 0;
    if (op == Row::LayerNorm) {
      stats = fbw::layernorm_statistics<C>(warp, row, k, knobs.tile, eps, round,
                                           KnobRsqrt{knobs.rsqrt_mode, knobs.rsqrt_iters});
    } else {
      inverse = KnobDiv{knobs.div_mode, knobs.div_iters}(
          C(1), fbw::softmax_exp<C>(warp, row, k, knobs.tile, round));
    }
    __syncwarp();
    for (std::int64_t g = warp.lane(); g < chunks; g += kWarp) {
      fbw::Vec<C, V> chunk = *reinterpret_cast<const fbw::Vec<C, V>*>(row + g * V);
      for (int v = 0; v < V; ++v) {
        const std::int64_t i = g * V + v;
        chunk.v[v] = op == Row::LayerNorm
                         ? fbw::layernorm_element(chunk.v[v], stats, params[i], params[k + i])
                         : chunk.v[v] * inverse;
      }
      store_chunk<C, V>(y, dtype, q * k + g * V, chunk.v);
    }
    __syncwarp();
  }
}
template <class C>
__global__ void row_params_kernel(Storage wd, const void* w, Storage bd, const void* b,
                                  std::int64_t k, C* params) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < k;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    params[i] = load<C>(w, wd, i);
    params[k + i] = load<C>(b, bd, i);
  }
}

// The row kernel's shape: warps (rows) per block, blocks, and whether the rows fit in shared
// memory.
struct RowLaunch {
  int warps;
  std::int64_t grid;
  bool in_shared;
};
RowLaunch row_launch(std::int64_t rows, std::int64_t k, bool wide_rows) {
  const std::int64_t row_bytes = k * (wide_rows ? 8 : 4);
  const bool in_shared = row_bytes <= kRowSharedBytes;
  const int warps = int(
      std::clamp<std::int64_t>(in_shared ? kRowSharedBytes / row_bytes : kRowWarps, 1, kRowWarps));
  return {
      warps,
      std::min<std::int64_t>(in_shared ? kMaxGrid : kScratchRowGrid, (rows + warps - 1) / warps),
      in_shared};
}

template <class C>
void launch_rows(Row op, Storage dtype, const void* x, Storage wd, const void* w, Storage bd,
                 const void* b, void* y, std::int64_t rows, std::int64_t k, C eps,
                 const Knobs& knobs, C* scratch) {
  C* const params = scratch;
  if (op == Row::LayerNorm) row_params_kernel<C><<<blocks(k), kBlock>>>(wd, w, bd, b, k, params);
  const RowLaunch shape = row_launch(rows, k, std::is_same_v<C, double>);
  C* const global_rows = shape.in_shared ? nullptr : scratch + 2 * k;
  const std::size_t shared = shape.in_shared ? std::size_t(shape.warps * k) * sizeof(C) : 0;
  const dim3 grid(unsigned(shape.grid)), block(unsigned(shape.warps * kWarp));
  if (k % 8 == 0) {
    row_kernel<C, 8>
        <<<grid, block, shared>>>(op, dtype, x, y, rows, k, eps, knobs, params, global_rows);
  } else {
    row_kernel<C, 1>
        <<<grid, block, shared>>>(op, dtype, x, y, rows, k, eps, knobs, params, global_rows);
  }
}
}  // namespace

void unary(Unary op, Storage in, const void* x, Storage out, void* y, std::int64_t n, double scalar,
           const void* scalar_ptr, const Knobs& knobs) {
  auto launch = [&](auto index) {
    using I = decltype(index);
    if (in == out && aligned_16(x) && aligned_16(y)) {
      with_storage(in, [&](auto dtype) {
        constexpr Storage S = decltype(dtype)::value;
        using T = typename Stored<S>::T;
        unary_vector_kernel<S, I>
            <<<blocks((n + Stored<S>::kVector - 1) / Stored<S>::kVector), kBlock>>>(
                op, static_cast<const T*>(x), static_cast<T*>(y), I(n), scalar, scalar_ptr, knobs);
      });
    } else if (wide(in, out)) {
      unary_kernel<double, I>
          <<<blocks(n), kBlock>>>(op, in, x, out, y, I(n), scalar, scalar_ptr, knobs);
    } else {
      unary_kernel<float, I>
          <<<blocks(n), kBlock>>>(op, in, x, out, y, I(n), scalar, scalar_ptr, knobs);
    }
  };
  if (fits_32_bits(n)) {
    launch(std::uint32_t{});
  } else {
    launch(std::int64_t{});
  }
  check_launch("unary");
}

void binary(Binary op, Storage ad, const void* a, const Layout& la, Storage bd, const void* b,
            const Layout& lb, Storage out, void* y, std::int64_t n, const Knobs& knobs) {
  auto launch = [&](auto index) {
    using I = decltype(index);
    if (ad == out && bd == out && is_contiguous(la) && is_contiguous(lb) && aligned_16(a) &&
        aligned_16(b) && aligned_16(y)) {
      with_storage(out, [&](auto dtype) {
        constexpr Storage S = decltype(dtype)::value;
        using T = typename Stored<S>::T;
        binary_vector_kernel<S, I>
            <<<blocks((n + Stored<S>::kVector - 1) / Stored<S>::kVector), kBlock>>>(
                op, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y), I(n),
                knobs);
      });
    } else if (wide(out)) {
      binary_kernel<double, I>
          <<<blocks(n), kBlock>>>(op, ad, a, la, bd, b, lb, out, y, I(n), knobs);
    } else {
      binary_kernel<float, I><<<blocks(n), kBlock>>>(op, ad, a, la, bd, b, lb, out, y, I(n), knobs);
    }
  };
  if (fits_32_bits(n, la) && fits_32_bits(n, lb)) {
    launch(std::uint32_t{});
  } else {
    launch(std::int64_t{});
  }
  check_launch("binary");
}

void causal_mask(Storage dtype, const void* x, void* y, std::int64_t n, std::int64_t rows,
                 std::int64_t cols, double fill) {
  auto launch = [&](auto index) {
    using I = decltype(index);
    if (wide(dtype)) {
      causal_mask_kernel<double, I>
          <<<blocks(n), kBlock>>>(dtype, x, y, I(n), I(rows), I(cols), fill);
    } else {
      causal_mask_kernel<float, I>
          <<<blocks(n), kBlock>>>(dtype, x, y, I(n), I(rows), I(cols), float(fill));
    }
  };
  if (fits_32_bits(n)) {
    launch(std::uint32_t{});
  } else {
    launch(std::int64_t{});
  }
  check_launch("causal_mask");
}

void copy(Storage dtype, const void* src, const Layout& ls, void* dst, const Layout& ld,
          std::int64_t n) {
  auto launch = [&](auto index) {
    using I = decltype(index);
    switch (dtype) {
      case Storage::F16:
      case Storage::BF16:
        copy_kernel<std::uint16_t, I><<<blocks(n), kBlock>>>(
            static_cast<const std::uint16_t*>(src), ls, static_cast<std::uint16_t*>(dst), ld, I(n));
        break;
      case Storage::F32:
        copy_kernel<std::uint32_t, I><<<blocks(n), kBlock>>>(
            static_cast<const std::uint32_t*>(src), ls, static_cast<std::uint32_t*>(dst), ld, I(n));
        break;
      default:
        copy_kernel<std::uint64_t, I><<<blocks(n), kBlock>>>(
            static_cast<const std::uint64_t*>(src), ls, static_cast<std::uint64_t*>(dst), ld, I(n));
        break;
    }
  };
  if (fits_32_bits(n, ls) && fits_32_bits(n, ld)) {
    launch(std::uint32_t{});
  } else {
    launch(std::int64_t{});
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

std::int64_t row_scratch_elements(std::int64_t rows, std::int64_t k, bool wide_rows) {
  const RowLaunch shape = row_launch(rows, k, wide_rows);
  return 2 * k + (shape.in_shared ? 0 : shape.grid * shape.warps * k);
}

void row(Row op, Storage dtype, const void* x, Storage wd, const void* w, Storage bd, const void* b,
         void* y, std::int64_t rows, std::int64_t k, double eps, const Knobs& knobs,
         void* scratch) {
  if (wide(dtype)) {
    launch_rows<double>(op, dtype, x, wd, w, bd, b, y, rows, k, eps, knobs,
                        static_cast<double*>(scratch));
  } else {
    launch_rows<float>(op, dtype, x, wd, w, bd, b, y, rows, k, float(eps), knobs,
                       static_cast<float*>(scratch));
  }
  check_launch("row");
}

}  // namespace fusebench::cuda::kernels
