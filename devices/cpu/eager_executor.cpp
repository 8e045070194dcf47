#include "eager_executor.hpp"
#include "eager_ops.hpp"
#include "fusebench/engine/eigen.hpp"
#include "gemm.hpp"

#include <fmt/format.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <utility>

#include "knobs.hpp"

namespace fusebench::cpu {

using engine::Node;
using engine::OpKind;

namespace {

constexpr std::int64_t kChunk = std::int64_t(1) << 15;  // elements per task

template <class T>
using Compute = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class T>
Compute<T> load(T v) {
  if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float>) {
    return v;
  } else {
    return to_float(v);
  }
}
template <class T>
T store(Compute<T> v) {
  if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float>) {
    return v;
  } else {
    return from_float<T>(v);
  }
}

template <class T>
DType compute_dtype() {
  return std::is_same_v<T, double> ? DType::f64 : DType::f32;
}

std::int64_t chunks(std::int64_t n, std::int64_t size) { return (n + size - 1) / size; }

// Operand as a contiguous tensor of `dtype` and `shape` (exact widening, numpy broadcast).
Tensor operand(const Tensor& t, DType dtype, const Shape& shape) {
  Tensor out = t.dtype() == dtype ? t : t.to(dtype);
  if (out.shape() != shape) out = out.expand(shape);
  return out.contiguous();
}

// A run of storage values widened to the compute type and back (exact widening, one rounding on
// narrowing); f16 goes through the F16C instructions where the target has them.
template <class T>
void widen(const T* src, Compute<T>* dst, std::int64_t n) {
  if constexpr (std::is_same_v<T, Half>) {
    fbk::f16_to_f32_n(reinterpret_cast<const std::uint16_t*>(src), dst, n);
  } else {
    for (std::int64_t i = 0; i < n; ++i) dst[i] = load(src[i]);
  }
}
template <class T>
void narrow(const Compute<T>* src, T* dst, std::int64_t n) {
  if constexpr (std::is_same_v<T, Half>) {
    fbk::f32_to_f16_n(src, reinterpret_cast<std::uint16_t*>(dst), n);
  } else {
    for (std::int64_t i = 0; i < n; ++i) dst[i] = store<T>(src[i]);
  }
}
// narrow of src[i] * scale, the product rounded to the compute type first.
template <class T>
void narrow_scaled(const Compute<T>* src, Compute<T> scale, T* dst, std::int64_t n) {
  if constexpr (std::is_same_v<T, Half>) {
    fbk::f32_scaled_to_f16_n(src, scale, reinterpret_cast<std::uint16_t*>(dst), n);
  } else {
    for (std::int64_t i = 0; i < n; ++i) dst[i] = store<T>(src[i] * scale);
  }
}

// out[i] = fn(in_0[i], ...) over n contiguous elements in fixed chunks. 16-bit operands are
// widened a block at a time into buffers that stay in L1, so the loop over fn sees only the
// compute type and vectorises.
template <class T, class Fn, class... Operands>
void elementwise(ThreadPool& pool, std::int64_t n, T* out, Fn fn, const Operands*... in) {
  using C = Compute<T>;
  constexpr std::int64_t kBlock = 128;  // as the fused kernels' staging runs (measured best)
  pool.parallel_for(chunks(n, kChunk), [&](std::int64_t task) {
    const std::int64_t begin = task * kChunk, end = std::min(n, begin + kChunk);
    if constexpr (std::is_same_v<T, C>) {
      for (std::int64_t i = begin; i < end; ++i) out[i] = fn(in[i]...);
    } else {
      alignas(64) C staged[sizeof...(Operands)][kBlock];  // 64: a 512-bit access stays in one line
      alignas(64) C result[kBlock];
      for (std::int64_t block = begin; block < end; block += kBlock) {
        const std::int64_t len = std::min(kBlock, end - block);
        int slot = 0;
        (widen<T>(in + block, staged[slot++], len), ...);
        [&]<std::size_t... I>(std::index_sequence<I...>) {
          for (std::int64_t i = 0; i < len; ++i) result[i] = fn(staged[I][i]...);
        }
        (std::make_index_sequence<sizeof...(Operands)>{});
        narrow<T>(result, out + block, len);
      }
    }
  });
}

template <class T, class Fn>
Tensor map_kernel(ThreadPool& pool, const Tensor& x, Fn fn) {
  Tensor out = Tensor::uninitialized(x.dtype(), x.shape());
  elementwise<T>(pool, x.numel(), out.span<T>().data(), fn, x.span<T>().data());
  return out;
}

template <class T, class Fn>
Tensor zip_kernel(ThreadPool& pool, const Tensor& a, const Tensor& b, Fn fn) {
  Tensor out = Tensor::uninitialized(a.dtype(), a.shape());
  elementwise<T>(pool, a.numel(), out.span<T>().data(), fn, a.span<T>().data(), b.span<T>().data());
  return out;
}

// fn(a, b) over `shape` for operands of any dtype and broadcastable shapes. A one-element
// operand is read once instead of being broadcast into a full tensor, as a framework's eager mode
// keeps it a stride-0 view: the values are the same (it is rounded to the dtype either way), only
// the materialising copy is gone.
template <class T, class Fn>
Tensor binary_kernel(ThreadPool& pool, const Tensor& a, const Tensor& b, DType dtype,
                     const Shape& shape, Fn fn) {
  using C = Compute<T>;
  auto single = [dtype](const Tensor& t) {
    const Tensor value = (t.dtype() == dtype ? t : t.to(dtype)).contiguous();
    return load(value.template span<T>()[0]);
  };
  if (b.numel() == 1 && a.shape() == shape) {
    const C y = single(b);
    return map_kernel<T>(pool, operand(a, dtype, shape), [fn, y](C x) { return fn(x, y); });
  }
  if (a.numel() == 1 && b.shape() == shape) {
    const C x = single(a);
    return map_kernel<T>(pool, operand(b, dtype, shape), [fn, x](C y) { return fn(x, y); });
  }
  return zip_kernel<T>(pool, operand(a, dtype, shape), operand(b, dtype, shape), fn);
}

struct ReductionGeometry {
  std::int64_t outer = 1, extent = 1, inner = 1;
};
ReductionGeometry geometry(const Shape& shape, int axis) {
  ReductionGeometry g;
  g.extent = shape[std::size_t(axis)];
  for (int i = 0; i < axis; ++i) g.outer *= shape[std::size_t(i)];
  for (std::size_t i = std::size_t(axis) + 1; i < shape.size(); ++i) g.inner *= shape[i];
  return g;
}

std::string scalar_lowering_note(const Node& n, const engine::EngineOptions& o) {
  if (o.scalar_lowering == engine::ScalarLowering::ImmediateF32 || n.dtype == DType::f64) {
    return fmt::format("{}: fp32 immediate {:.9g}", n.name, double(float(n.scalar)));
  }
  const double stored = visit_floating(
      n.dtype, "scalar", [&](auto tag) { return to_double(round_to<decltype(tag)>(n.scalar)); });
  return fmt::format("{}: broadcast tensor {} {:.9g}", n.name, dtype_name(n.dtype), stored);
}
}  // namespace

EagerExecutor::EagerExecutor(engine::EngineOptions options)
    : options_(options), pool_((options.validate(), options.threads)) {}

// ---- the kernels, one per op kind
namespace eager {

namespace {
// body(tag) with tag a value of the node's storage type (Half, BFloat16, float or double).
template <class Body>
Tensor on_storage(const Node& n, Body body) {
  return visit_floating(n.dtype, "eager",
                        [&](auto storage_tag) -> Tensor { return body(storage_tag); });
}

// fn(v) over the operand, in the compute type of the node's storage type.
template <class Fn>
Tensor unary_op(const Context& c, const Node& n, const Operands& in, Fn fn) {
  return on_storage(n, [&](auto storage_tag) {
    using C = Compute<decltype(storage_tag)>;
    return map_kernel<decltype(storage_tag)>(c.pool, in[0].contiguous(),
                                             [fn](C v) { return fn(v); });
  });
}

// x + c or x * c: the scalar as an fp32 immediate (fp64 for fp64 tensors), or as a one-element
// tensor of the storage dtype, broadcast, then an element-wise op (the BroadcastTensor lowering).
template <class Fn>
Tensor scalar_op(const Context& c, const Node& n, const Operands& in, Fn fn) {
  if (c.trace) c.trace->lowering.push_back(scalar_lowering_note(n, c.options));
  return on_storage(n, [&](auto storage_tag) {
    using T = decltype(storage_tag);
    using C = Compute<T>;
    if (c.options.scalar_lowering == engine::ScalarLowering::BroadcastTensor &&
        !std::is_same_v<T, double>) {
      const Tensor scalar = Tensor::from_values<T>({1}, std::vector<T>{round_to<T>(n.scalar)});
      return binary_kernel<T>(c.pool, in[0], scalar, n.dtype, n.shape,
                              [fn](C a, C b) { return fn(a, b); });
    }
    const Tensor x = operand(in[0], n.dtype, n.shape);
    const C s = C(n.scalar);
    return map_kernel<T>(c.pool, x, [fn, s](C v) { return fn(v, s); });
  });
}

// Sum, Mean or Max along n.axis, each output a fixed tiled sum (or a row maximum) of its
// operands widened to the compute type.
Tensor reduction(const Context& c, const Node& n, const Operands& in) {
  return on_storage(n, [&](auto storage_tag) {
    using T = decltype(storage_tag);
    using C = Compute<T>;
    const engine::EngineOptions& o = c.options;
    const Tensor x = in[0].contiguous();
    const auto g = geometry(x.shape(), n.axis);
    Tensor out = Tensor::uninitialized(n.dtype, n.shape);
    const T* px = x.span<T>().data();
    T* po = out.span<T>().data();
    const std::int64_t positions = g.outer * g.inner;
    const std::int64_t per_task = std::max<std::int64_t>(1, kChunk / g.extent);
    with_accumulator<T>(o, [&](auto round) {
      c.pool.parallel_for(chunks(positions, per_task), [&](std::int64_t task) {
        // A tensor's storage is 64-byte aligned (std::vector's 16 bytes split 512-bit accesses).
        Tensor row_storage = Tensor::uninitialized(compute_dtype<T>(), {g.extent});
        C* const row = row_storage.span<C>().data();
        const std::int64_t end = std::min(positions, (task + 1) * per_task);
        for (std::int64_t p = task * per_task; p < end; ++p) {
          const std::int64_t a = p / g.inner, i = p % g.inner;
          if (g.inner == 1) {
            widen<T>(px + a * g.extent, row, g.extent);
          } else {
            for (std::int64_t k = 0; k < g.extent; ++k)
              row[k] = load(px[(a * g.extent + k) * g.inner + i]);
          }
          C r;
          if (n.kind == OpKind::Max) {
            r = fbk::row_max(row, g.extent);
          } else {
            r = fbk::tiled_sum(row, g.extent, o.reduce_tile, round);
            if (n.kind == OpKind::Mean) r = r / C(g.extent);
          }
          po[p] = store<T>(r);
        }
      });
    });
    return out;
  });
}

// A row-wise op over the last axis: each row widened into an aligned buffer, then
// per_row(row, y, out_row, next_rows, round) computes and stores it.
template <class T, class PerRow>
Tensor rowwise(const Context& c, const Node& n, const Operands& in, PerRow per_row) {
  using C = Compute<T>;
  const Tensor x = in[0].contiguous();
  const std::int64_t k = x.shape().back(), rows = x.numel() / k;
  Tensor out = Tensor::uninitialized(n.dtype, n.shape);
  const T* px = x.span<T>().data();
  T* po = out.span<T>().data();
  const std::int64_t per_task = std::max<std::int64_t>(1, kChunk / k);
  with_accumulator<T>(c.options, [&](auto round) {
    c.pool.parallel_for(chunks(rows, per_task), [&](std::int64_t task) {
      // Tensor storage: 64-byte aligned (std::vector's 16 bytes split 512-bit accesses).
      Tensor row_storage = Tensor::uninitialized(compute_dtype<T>(), {k});
      Tensor y_storage = Tensor::uninitialized(compute_dtype<T>(), {k});
      C* const row = row_storage.span<C>().data();
      C* const y = y_storage.span<C>().data();
      const std::int64_t end = std::min(rows, (task + 1) * per_task);
      for (std::int64_t r = task * per_task; r < end; ++r) {
        widen<T>(px + r * k, row, k);
        const bool last = r + 1 == rows;
        const fbk::RowPrefetch next{
            last ? nullptr : reinterpret_cast<const char*>(px + (r + 1) * k),
            std::int64_t(sizeof(T)), last ? nullptr : reinterpret_cast<char*>(po + (r + 1) * k),
            std::int64_t(sizeof(T))};
        per_row(row, y, po + r * k, k, next, round);
      }
    });
  });
  return out;
}
}  // namespace

Tensor add(const Context& c, const Node& n, const Operands& in) {
  return on_storage(n, [&](auto storage_tag) {
    using C = Compute<decltype(storage_tag)>;
    return binary_kernel<decltype(storage_tag)>(c.pool, in[0], in[1], n.dtype, n.shape,
                                                [](C x, C y) { return x + y; });
  });
}
Tensor sub(const Context& c, const Node& n, const Operands& in) {
  return on_storage(n, [&](auto storage_tag) {
    using C = Compute<decltype(storage_tag)>;
    return binary_kernel<decltype(storage_tag)>(c.pool, in[0], in[1], n.dtype, n.shape,
                                                [](C x, C y) { return x - y; });
  });
}
Tensor mul(const Context& c, const Node& n, const Operands& in) {
  return on_storage(n, [&](auto storage_tag) {
    using C = Compute<decltype(storage_tag)>;
    return binary_kernel<decltype(storage_tag)>(c.pool, in[0], in[1], n.dtype, n.shape,
                                                [](C x, C y) { return x * y; });
  });
}
Tensor div(const Context& c, const Node& n, const Operands& in) {
  return on_storage(n, [&](auto storage_tag) {
    using C = Compute<decltype(storage_tag)>;
    return with_div(c.options, [&](auto div) {
      return binary_kernel<decltype(storage_tag)>(c.pool, in[0], in[1], n.dtype, n.shape,
                                                  [div](C x, C y) { return div(x, y); });
    });
  });
}
Tensor add_scalar(const Context& c, const Node& n, const Operands& in) {
  return scalar_op(c, n, in, [](auto a, auto b) { return a + b; });
}
Tensor mul_scalar(const Context& c, const Node& n, const Operands& in) {
  return scalar_op(c, n, in, [](auto a, auto b) { return a * b; });
}
Tensor neg(const Context& c, const Node& n, const Operands& in) {
  return unary_op(c, n, in, [](auto v) { return -v; });
}
Tensor exp(const Context& c, const Node& n, const Operands& in) {
  return unary_op(c, n, in, [](auto v) { return fbk::exp_c(v); });
}
Tensor sqrt(const Context& c, const Node& n, const Operands& in) {
  return unary_op(c, n, in, [](auto v) { return std::sqrt(v); });
}
Tensor rsqrt(const Context& c, const Node& n, const Operands& in) {
  return with_rsqrt(c.options, [&](auto rsqrt) {
    return unary_op(c, n, in, [rsqrt](auto v) { return rsqrt(v); });
  });
}
Tensor gelu_erf(const Context& c, const Node& n, const Operands& in) {
  return unary_op(c, n, in, [](auto v) { return fbk::gelu_erf_c(v); });
}
Tensor gelu_tanh(const Context& c, const Node& n, const Operands& in) {
  return unary_op(c, n, in, [](auto v) { return fbk::gelu_tanh_c(v); });
}
Tensor cast(const Context&, const Node& n, const Operands& in) { return in[0].to(n.dtype); }
Tensor log(const Context& c, const Node& n, const Operands& in) {
  return unary_op(c, n, in, [](auto v) { return fbk::log_c(v); });
}
Tensor gelu_tanh_backward(const Context& c, const Node& n, const Operands& in) {
  return on_storage(n, [&](auto storage_tag) {
    using C = Compute<decltype(storage_tag)>;
    return binary_kernel<decltype(storage_tag)>(
        c.pool, in[0], in[1], n.dtype, n.shape,
        [](C dy, C x) { return fbk::gelu_tanh_backward_c(dy, x); });
  });
}
// One task per [rows, cols] matrix: copy the row's kept prefix, fill the rest.
Tensor causal_mask(const Context& c, const Node& n, const Operands& in) {
  return on_storage(n, [&](auto storage_tag) {
    using T = decltype(storage_tag);
    const Tensor x = in[0].contiguous();
    Tensor out = Tensor::uninitialized(n.dtype, n.shape);
    const std::int64_t rows = n.shape[n.shape.size() - 2], cols = n.shape.back();
    const T fill = store<T>(Compute<T>(n.scalar));
    const T* px = x.span<T>().data();
    T* po = out.span<T>().data();
    c.pool.parallel_for(x.numel() / (rows * cols), [&](std::int64_t matrix) {
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t base = (matrix * rows + r) * cols, kept = std::min(cols, r + 1);
        std::copy_n(px + base, kept, po + base);
        std::fill(po + base + kept, po + base + cols, fill);
      }
    });
    return out;
  });
}

Tensor sum(const Context& c, const Node& n, const Operands& in) { return reduction(c, n, in); }
Tensor mean(const Context& c, const Node& n, const Operands& in) { return reduction(c, n, in); }
Tensor max(const Context& c, const Node& n, const Operands& in) { return reduction(c, n, in); }

Tensor layernorm(const Context& c, const Node& n, const Operands& in) {
  return on_storage(n, [&](auto storage_tag) {
    using T = decltype(storage_tag);
    using C = Compute<T>;
    const Tensor w = in[1].to(compute_dtype<T>()), b = in[2].to(compute_dtype<T>());
    return rowwise<T>(
        c, n, in,
        [&](C* row, C* y, T* out_row, std::int64_t k, const fbk::RowPrefetch& next, auto round) {
          with_rsqrt(c.options, [&](auto rsqrt) {
            fbk::layernorm_row(row, w.span<C>().data(), b.span<C>().data(), y, k,
                               c.options.reduce_tile, C(n.eps), round, rsqrt, next);
          });
          narrow<T>(y, out_row, k);
        });
  });
}

Tensor softmax(const Context& c, const Node& n, const Operands& in) {
  return on_storage(n, [&](auto storage_tag) {
    using T = decltype(storage_tag);
    using C = Compute<T>;
    return rowwise<T>(
        c, n, in,
        [&](C* row, C* y, T* out_row, std::int64_t k, const fbk::RowPrefetch& next, auto round) {
          // softmax_row's last multiply, folded into the store.
          with_div(c.options, [&](auto div) {
            const C inverse =
                div(C(1), fbk::softmax_exp_row(row, y, k, c.options.reduce_tile, round, next));
            narrow_scaled<T>(y, inverse, out_row, k);
          });
        });
  });
}

Tensor matmul(const Context& c, const Node& n, const Operands& in) {
  return on_storage(n, [&](auto storage_tag) {
    using T = decltype(storage_tag);
    using C = Compute<T>;
    const Tensor a = in[0].to(compute_dtype<T>()).contiguous(),
                 b = in[1].to(compute_dtype<T>()).contiguous();
    const std::int64_t m = a.shape()[std::size_t(a.rank() - 2)], kk = a.shape().back(),
                       nn = b.shape().back();
    const std::int64_t batches = a.numel() / (m * kk);
    Tensor product = Tensor::uninitialized(compute_dtype<T>(), n.shape);
    auto one_batch = [&](std::int64_t i) {
      const std::int64_t b_offset = b.rank() > 2 ? i * kk * nn : 0;
      if constexpr (std::is_same_v<C, float>) {
        gemm_f32(c.pool, m, nn, kk, a.span<float>().data() + i * m * kk,
                 b.span<float>().data() + b_offset, product.span<float>().data() + i * m * nn);
      } else {
        using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
        Eigen::Map<const Matrix> ma(a.span<double>().data() + i * m * kk, m, kk);
        Eigen::Map<const Matrix> mb(b.span<double>().data() + b_offset, kk, nn);
        Eigen::Map<Matrix> mc(product.span<double>().data() + i * m * nn, m, nn);
        mc.noalias() = ma * mb;
      }
    };
    if (batches > 1 && m <= kGemmRowTile) {
      // Small batched GEMMs (attention's per-head products): one task per batch element, as a
      // framework's bmm parallelises; each GEMM is then one task run on its thread (same bits).
      c.pool.parallel_for(batches, one_batch);
    } else {
      for (std::int64_t i = 0; i < batches; ++i) one_batch(i);
    }
    if (c.trace)
      c.trace->lowering.push_back(
          fmt::format("{}: Eigen GEMM, {} accumulation", n.name, dtype_name(compute_dtype<T>())));
    return product.to(n.dtype);
  });
}

// Row copies: exact in every dtype.
Tensor gather_rows(const Context& c, const Node& n, const Operands& in) {
  return on_storage(n, [&](auto storage_tag) {
    using T = decltype(storage_tag);
    const Tensor table = in[0].contiguous();
    const std::int64_t width = table.shape()[1];
    const auto ids = engine::checked_row_ids(n, in[1], table.shape()[0]);
    Tensor out = Tensor::uninitialized(n.dtype, n.shape);
    const T* t = table.span<T>().data();
    T* o = out.span<T>().data();
    c.pool.parallel_for(
        chunks(std::int64_t(ids.size()), std::max<std::int64_t>(1, kChunk / width)),
        [&](std::int64_t task) {
          const std::int64_t per = std::max<std::int64_t>(1, kChunk / width);
          for (std::int64_t i = task * per;
               i < std::min<std::int64_t>(std::int64_t(ids.size()), (task + 1) * per); ++i) {
            std::memcpy(o + i * width, t + ids[std::size_t(i)] * width,
                        std::size_t(width) * sizeof(T));
          }
        });
    return out;
  });
}

// out[ids[i]] += src[i] for i in order, in the compute type, rounded once: the fused kernel adds
// in the same order (fp32: the same bits). Tasks split the columns, so every element still sees
// its additions in id order.
Tensor scatter_add_rows(const Context& c, const Node& n, const Operands& in) {
  return on_storage(n, [&](auto storage_tag) {
    using T = decltype(storage_tag);
    using C = Compute<T>;
    const Tensor src = (in[0].dtype() == n.dtype ? in[0] : in[0].to(n.dtype)).contiguous();
    const std::int64_t width = n.shape[1], rows = n.shape[0];
    const auto ids = engine::checked_row_ids(n, in[1], rows);
    std::vector<C> acc(std::size_t(rows * width), C(0));
    const T* s = src.span<T>().data();
    constexpr std::int64_t kColumns = 16;
    c.pool.parallel_for(chunks(width, kColumns), [&](std::int64_t task) {
      const std::int64_t k0 = task * kColumns, k1 = std::min(width, k0 + kColumns);
      for (std::size_t i = 0; i < ids.size(); ++i) {
        C* row = acc.data() + ids[i] * width;
        const T* from = s + std::int64_t(i) * width;
        for (std::int64_t k = k0; k < k1; ++k) row[k] += load(from[k]);
      }
    });
    Tensor out = Tensor::uninitialized(n.dtype, n.shape);
    narrow<T>(acc.data(), out.span<T>().data(), rows * width);
    if (c.trace)
      c.trace->lowering.push_back(fmt::format("{}: rows added in id order, {} accumulation", n.name,
                                              dtype_name(compute_dtype<T>())));
    return out;
  });
}

Tensor permute(const Context&, const Node& n, const Operands& in) {
  return in[0].permute(n.permutation).contiguous();
}
Tensor reshape(const Context&, const Node& n, const Operands& in) {
  return in[0].contiguous().reshape(n.shape);
}
Tensor slice(const Context&, const Node& n, const Operands& in) {
  return in[0].slice(n.axis, n.start, n.start + n.shape[std::size_t(n.axis)]).contiguous();
}
Tensor expand(const Context&, const Node& n, const Operands& in) {
  return in[0].expand(n.shape).contiguous();
}
Tensor concat(const Context& c, const Node& n, const Operands& in) {
  Tensor out = Tensor::uninitialized(n.dtype, n.shape);
  std::int64_t outer = 1, inner = 1, offset = 0;
  for (int i = 0; i < n.axis; ++i) outer *= n.shape[std::size_t(i)];
  for (std::size_t i = std::size_t(n.axis) + 1; i < n.shape.size(); ++i) inner *= n.shape[i];
  const std::size_t size = out.element_size();
  for (const Tensor& part_in : in) {
    if (c.trace && part_in.dtype() != n.dtype) {
      c.trace->lowering.push_back(fmt::format("{}: operand {} promoted to {}", n.name,
                                              part_in.describe(), dtype_name(n.dtype)));
    }
    const Tensor part = part_in.dtype() == n.dtype ? part_in.contiguous() : part_in.to(n.dtype);
    const std::int64_t extent = part.shape()[std::size_t(n.axis)];
    for (std::int64_t a = 0; a < outer; ++a) {
      std::memcpy(
          out.raw_data() + std::size_t((a * n.shape[std::size_t(n.axis)] + offset) * inner) * size,
          part.raw_data() + std::size_t(a * extent * inner) * size,
          std::size_t(extent * inner) * size);
    }
    offset += extent;
  }
  return out;
}

namespace {
using Kernel = Tensor (*)(const Context&, const Node&, const Operands&);
Tensor not_an_op(const Context&, const Node& n, const Operands&) {
  throw_input_error("eager: op {} ({}) cannot be evaluated", n.name, engine::op_name(n.kind));
}
// Indexed by OpKind, in the enum's order (checked below).
constexpr std::array kKernels = {
    std::pair{OpKind::Input, Kernel{not_an_op}},
    std::pair{OpKind::Add, Kernel{add}},
    std::pair{OpKind::Sub, Kernel{sub}},
    std::pair{OpKind::Mul, Kernel{mul}},
    std::pair{OpKind::Div, Kernel{div}},
    std::pair{OpKind::AddScalar, Kernel{add_scalar}},
    std::pair{OpKind::MulScalar, Kernel{mul_scalar}},
    std::pair{OpKind::Neg, Kernel{neg}},
    std::pair{OpKind::Exp, Kernel{exp}},
    std::pair{OpKind::Sqrt, Kernel{sqrt}},
    std::pair{OpKind::Rsqrt, Kernel{rsqrt}},
    std::pair{OpKind::GeluErf, Kernel{gelu_erf}},
    std::pair{OpKind::GeluTanh, Kernel{gelu_tanh}},
    std::pair{OpKind::Cast, Kernel{cast}},
    std::pair{OpKind::Log, Kernel{log}},
    std::pair{OpKind::GeluTanhBackward, Kernel{gelu_tanh_backward}},
    std::pair{OpKind::CausalMask, Kernel{causal_mask}},
    std::pair{OpKind::Sum, Kernel{sum}},
    std::pair{OpKind::Mean, Kernel{mean}},
    std::pair{OpKind::Max, Kernel{max}},
    std::pair{OpKind::LayerNorm, Kernel{layernorm}},
    std::pair{OpKind::Softmax, Kernel{softmax}},
    std::pair{OpKind::Matmul, Kernel{matmul}},
    std::pair{OpKind::GatherRows, Kernel{gather_rows}},
    std::pair{OpKind::ScatterAddRows, Kernel{scatter_add_rows}},
    std::pair{OpKind::Permute, Kernel{permute}},
    std::pair{OpKind::Reshape, Kernel{reshape}},
    std::pair{OpKind::Slice, Kernel{slice}},
    std::pair{OpKind::Concat, Kernel{concat}},
    std::pair{OpKind::Expand, Kernel{expand}},
};
static_assert(
    [] {
      for (std::size_t i = 0; i < kKernels.size(); ++i) {
        if (std::size_t(kKernels[i].first) != i) return false;
      }
      return true;
    }(),
    "kKernels must list every OpKind in the enum's order");
}  // namespace

Tensor evaluate(const Context& c, const Node& n, const Operands& in) {
  const auto index = std::size_t(n.kind);
  if (index >= kKernels.size())
    throw_input_error("eager: op {} ({}) is unknown", n.name, int(n.kind));
  return kKernels[index].second(c, n, in);
}

}  // namespace eager

Tensor EagerExecutor::evaluate(const Node& n, const std::vector<Tensor>& in,
                               engine::KernelTrace* trace) {
  return eager::evaluate({pool_, options_, trace}, n, in);
}

engine::RunResult EagerExecutor::run(const engine::Graph& graph, const engine::Inputs& inputs,
                                     const engine::RunOptions& run) {
  engine::check_inputs(graph, inputs);
  engine::RunResult result;
  for (const Node& n : graph.nodes()) {
    if (n.kind == OpKind::Input) {
      result.values[n.id] = inputs.at(n.name);
      continue;
    }
    std::vector<Tensor> operands;
    for (engine::NodeId id : n.inputs) operands.push_back(result.values.at(id));
    engine::KernelTrace trace;
    trace.name = fmt::format("eager_{}", engine::op_name(n.kind));
    trace.kind = engine::op_kernel_kind(n.kind);
    trace.ops.push_back(fmt::format("{}={}", n.name, engine::op_name(n.kind)));
    const auto start = std::chrono::steady_clock::now();
    Tensor value = evaluate(n, operands, &trace);
    trace.run_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    // What the op's kernel reads and writes; views that stay views move nothing.
    if (!engine::is_data_movement(n.kind) || value.raw_data() != operands[0].raw_data()) {
      for (const Tensor& t : operands) trace.bytes_moved += double(t.nbytes());
      trace.bytes_moved += double(value.nbytes());
    }
    result.values[n.id] = std::move(value);
    result.trace.push_back(std::move(trace));
  }
  for (engine::NodeId id : graph.outputs()) result.outputs.push_back(result.values.at(id));
  engine::dump_run(graph, result, name(), run);
  return result;
}

}  // namespace fusebench::cpu
