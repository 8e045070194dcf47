// The fp64 reference executor: every op in fp64, math from the C library, no rounding to
// storage dtypes (casts are identities): the truth against which eager and fused are measured.
// One function per op kind (reference_ops.hpp), looked up in a table by the op's kind; beside
// each, its running error bound (docs/conditioned-error.md).

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "fusebench/engine/eigen.hpp"
#include "fusebench/engine/executor.hpp"
#include "fusebench/engine/reference_ops.hpp"
#include "fusebench/error.hpp"
#include "fusebench/float_formats.hpp"

namespace fusebench::engine::reference {

namespace {
using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Floating values in fp64; integer tensors (gather_rows' ids, and views of them) keep their dtype.
Tensor as_f64(const Tensor& t) {
  if (!is_floating(t.dtype())) return t.contiguous();
  return t.dtype() == DType::f64 ? t.contiguous() : t.to(DType::f64);
}

// Operand broadcast to `shape`, contiguous f64.
Tensor broadcast_f64(const Tensor& t, const Shape& shape) {
  return as_f64(t).expand(shape).contiguous();
}

template <class Fn>
Tensor map_unary(const Tensor& x, Fn fn) {
  Tensor out = Tensor::uninitialized(DType::f64, x.shape());
  const auto in = x.span<double>();
  auto o = out.span<double>();
  for (std::size_t i = 0; i < in.size(); ++i) o[i] = fn(in[i]);
  return out;
}

template <class Fn>
Tensor map_binary(const Node& n, const Operands& in, Fn fn) {
  const Tensor a = broadcast_f64(in[0], n.shape), b = broadcast_f64(in[1], n.shape);
  Tensor out = Tensor::uninitialized(DType::f64, n.shape);
  const auto pa = a.span<double>(), pb = b.span<double>();
  auto o = out.span<double>();
  for (std::size_t i = 0; i < o.size(); ++i) o[i] = fn(pa[i], pb[i]);
  return out;
}

struct ReductionShape {
  std::int64_t outer, extent, inner;
};
ReductionShape reduction_shape(const Shape& shape, int axis) {
  ReductionShape r{1, shape[std::size_t(axis)], 1};
  for (int i = 0; i < axis; ++i) r.outer *= shape[std::size_t(i)];
  for (std::size_t i = std::size_t(axis) + 1; i < shape.size(); ++i) r.inner *= shape[i];
  return r;
}

// Sum, Mean or Max along n.axis.
Tensor reduce(const Node& n, const Tensor& input) {
  const Tensor x = as_f64(input);
  const auto r = reduction_shape(x.shape(), n.axis);
  Tensor out = Tensor::uninitialized(DType::f64, n.shape);
  const auto px = x.span<double>();
  auto o = out.span<double>();
  for (std::int64_t a = 0; a < r.outer; ++a) {
    for (std::int64_t c = 0; c < r.inner; ++c) {
      double acc = n.kind == OpKind::Max ? -std::numeric_limits<double>::infinity() : 0.0;
      for (std::int64_t k = 0; k < r.extent; ++k) {
        const double v = px[std::size_t((a * r.extent + k) * r.inner + c)];
        acc = n.kind == OpKind::Max ? ((v > acc || std::isnan(v)) ? v : acc) : acc + v;
      }
      o[std::size_t(a * r.inner + c)] = n.kind == OpKind::Mean ? acc / double(r.extent) : acc;
    }
  }
  return out;
}

double gelu_tanh_inner(double x) { return std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x); }
double gelu_tanh_inner_derivative(double x) {
  return std::sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * x * x);
}
// d/dx gelu_tanh(x)
double gelu_tanh_derivative(double x) {
  const double t = std::tanh(gelu_tanh_inner(x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * gelu_tanh_inner_derivative(x);
}
}  // namespace

// ---- element-wise
Tensor add(const Node& n, const Operands& in) {
  return map_binary(n, in, [](double a, double b) { return a + b; });
}
Tensor sub(const Node& n, const Operands& in) {
  return map_binary(n, in, [](double a, double b) { return a - b; });
}
Tensor mul(const Node& n, const Operands& in) {
  return map_binary(n, in, [](double a, double b) { return a * b; });
}
Tensor div(const Node& n, const Operands& in) {
  return map_binary(n, in, [](double a, double b) { return a / b; });
}
Tensor add_scalar(const Node& n, const Operands& in) {
  return map_unary(as_f64(in[0]), [c = n.scalar](double x) { return x + c; });
}
Tensor mul_scalar(const Node& n, const Operands& in) {
  return map_unary(as_f64(in[0]), [c = n.scalar](double x) { return x * c; });
}
Tensor neg(const Node&, const Operands& in) {
  return map_unary(as_f64(in[0]), [](double x) { return -x; });
}
Tensor exp(const Node&, const Operands& in) {
  return map_unary(as_f64(in[0]), [](double x) { return std::exp(x); });
}
Tensor sqrt(const Node&, const Operands& in) {
  return map_unary(as_f64(in[0]), [](double x) { return std::sqrt(x); });
}
Tensor rsqrt(const Node&, const Operands& in) {
  return map_unary(as_f64(in[0]), [](double x) { return 1.0 / std::sqrt(x); });
}
Tensor gelu_erf(const Node&, const Operands& in) {
  return map_unary(as_f64(in[0]),
                   [](double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); });
}
Tensor gelu_tanh(const Node&, const Operands& in) {
  return map_unary(as_f64(in[0]), [](double x) {
    return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
  });
}
Tensor cast(const Node&, const Operands& in) { return as_f64(in[0]); }
Tensor log(const Node&, const Operands& in) {
  return map_unary(as_f64(in[0]), [](double x) { return std::log(x); });
}
Tensor gelu_tanh_backward(const Node& n, const Operands& in) {
  return map_binary(n, in, [](double dy, double x) {
    const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
    const double du = std::sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * x * x);
    const double t = std::tanh(u);
    return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du);
  });
}
Tensor causal_mask(const Node& n, const Operands& in) {
  Tensor out = as_f64(in[0]).clone();  // a fresh copy: the operand's value is shared
  const std::int64_t rows = n.shape[n.shape.size() - 2], cols = n.shape.back();
  auto o = out.span<double>();
  for (std::size_t e = 0; e < o.size(); ++e) {
    const std::int64_t col = std::int64_t(e) % cols, row = (std::int64_t(e) / cols) % rows;
    if (col > row) o[e] = n.scalar;
  }
  return out;
}

// ---- reductions and row-wise composites
Tensor sum(const Node& n, const Operands& in) { return reduce(n, in[0]); }
Tensor mean(const Node& n, const Operands& in) { return reduce(n, in[0]); }
Tensor max(const Node& n, const Operands& in) { return reduce(n, in[0]); }

Tensor layernorm(const Node& n, const Operands& in) {
  const Tensor x = as_f64(in[0]), w = as_f64(in[1]), b = as_f64(in[2]);
  const std::int64_t k = x.shape().back(), rows = x.numel() / k;
  Tensor out = Tensor::uninitialized(DType::f64, n.shape);
  const auto px = x.span<double>(), pw = w.span<double>(), pb = b.span<double>();
  auto o = out.span<double>();
  for (std::int64_t r = 0; r < rows; ++r) {
    const double* row = px.data() + r * k;
    double mean = 0, var = 0;
    for (std::int64_t i = 0; i < k; ++i) mean += row[i];
    mean /= double(k);
    for (std::int64_t i = 0; i < k; ++i) var += (row[i] - mean) * (row[i] - mean);
    var /= double(k);
    const double inv = 1.0 / std::sqrt(var + n.eps);
    for (std::int64_t i = 0; i < k; ++i)
      o[std::size_t(r * k + i)] = (row[i] - mean) * inv * pw[std::size_t(i)] + pb[std::size_t(i)];
  }
  return out;
}

Tensor softmax(const Node& n, const Operands& in) {
  const Tensor x = as_f64(in[0]);
  const std::int64_t k = x.shape().back(), rows = x.numel() / k;
  Tensor out = Tensor::uninitialized(DType::f64, n.shape);
  const auto px = x.span<double>();
  auto o = out.span<double>();
  for (std::int64_t r = 0; r < rows; ++r) {
    const double* row = px.data() + r * k;
    double m = -std::numeric_limits<double>::infinity(), s = 0;
    for (std::int64_t i = 0; i < k; ++i) m = std::max(m, row[i]);
    for (std::int64_t i = 0; i < k; ++i) s += std::exp(row[i] - m);
    for (std::int64_t i = 0; i < k; ++i) o[std::size_t(r * k + i)] = std::exp(row[i] - m) / s;
  }
  return out;
}

Tensor matmul(const Node& n, const Operands& in) {
  const Tensor a = as_f64(in[0]), b = as_f64(in[1]);
  const std::int64_t m = a.shape()[a.shape().size() - 2], k = a.shape().back(),
                     nn = b.shape().back();
  const std::int64_t batches = a.numel() / (m * k);
  const bool batched_b = b.rank() > 2;
  Tensor out = Tensor::uninitialized(DType::f64, n.shape);
  for (std::int64_t i = 0; i < batches; ++i) {
    Eigen::Map<const Matrix> ma(a.span<double>().data() + i * m * k, m, k);
    Eigen::Map<const Matrix> mb(b.span<double>().data() + (batched_b ? i * k * nn : 0), k, nn);
    Eigen::Map<Matrix> mc(out.span<double>().data() + i * m * nn, m, nn);
    mc.noalias() = ma * mb;
  }
  return out;
}

// ---- rows by ids
Tensor gather_rows(const Node& n, const Operands& in) {
  const Tensor table = as_f64(in[0]);
  const std::int64_t width = table.shape()[1];
  const auto ids = checked_row_ids(n, in[1], table.shape()[0]);
  Tensor out = Tensor::uninitialized(DType::f64, n.shape);
  const auto t = table.span<double>();
  auto o = out.span<double>();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    std::copy_n(t.begin() + ids[i] * width, width, o.begin() + std::int64_t(i) * width);
  }
  return out;
}

Tensor scatter_add_rows(const Node& n, const Operands& in) {
  const Tensor src = as_f64(in[0]);
  const std::int64_t width = n.shape[1];
  const auto ids = checked_row_ids(n, in[1], n.shape[0]);
  Tensor out(DType::f64, n.shape);  // zero-filled
  const auto s = src.span<double>();
  auto o = out.span<double>();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    for (std::int64_t k = 0; k < width; ++k)
      o[std::size_t(ids[i] * width + k)] += s[i * std::size_t(width) + std::size_t(k)];
  }
  return out;
}

// ---- data movement
Tensor permute(const Node& n, const Operands& in) {
  return as_f64(in[0]).permute(n.permutation).contiguous();
}
Tensor reshape(const Node& n, const Operands& in) { return as_f64(in[0]).reshape(n.shape); }
Tensor slice(const Node& n, const Operands& in) {
  return as_f64(in[0]).slice(n.axis, n.start, n.start + n.shape[std::size_t(n.axis)]).contiguous();
}
Tensor expand(const Node& n, const Operands& in) { return broadcast_f64(in[0], n.shape); }
Tensor concat(const Node& n, const Operands& in) {
  Tensor out = Tensor::uninitialized(DType::f64, n.shape);
  std::int64_t offset = 0;
  std::int64_t outer = 1, inner = 1;
  for (int i = 0; i < n.axis; ++i) outer *= n.shape[std::size_t(i)];
  for (std::size_t i = std::size_t(n.axis) + 1; i < n.shape.size(); ++i) inner *= n.shape[i];
  auto o = out.span<double>();
  for (const Tensor& part_in : in) {
    const Tensor part = as_f64(part_in);
    const std::int64_t extent = part.shape()[std::size_t(n.axis)];
    const auto p = part.span<double>();
    for (std::int64_t a = 0; a < outer; ++a) {
      std::copy_n(p.begin() + a * extent * inner, extent * inner,
                  o.begin() + (a * n.shape[std::size_t(n.axis)] + offset) * inner);
    }
    offset += extent;
  }
  return out;
}

namespace {
using OpFunction = Tensor (*)(const Node&, const Operands&);
using BoundFunction = Tensor (*)(const Node&, const BoundOperands&, const Tensor&);

struct OpEntry {
  OpFunction value;
  BoundFunction bound;
};

// ---- error bounds (docs/conditioned-error.md)
// |d| * e with 0 where e is 0: an exact operand contributes nothing, even where the derivative is
// infinite (rsqrt at 0, a masked -inf).
double carried(double derivative, double e) { return e == 0 ? 0.0 : std::abs(derivative) * e; }

// E = sum_k |df/dx_k| E_k + rounding(x, z) for an element-wise op, the operands broadcast to the
// output shape. `partials(x..., z)` returns df/dx (unary) or {df/dx, df/dy} (binary);
// `rounding(x..., z)` the op's own rounding error.
template <class Partials, class Rounding>
Tensor pointwise_bound(const Node& n, const BoundOperands& in, const Tensor& z, Partials partials,
                       Rounding rounding) {
  Tensor out = Tensor::uninitialized(DType::f64, n.shape);
  auto o = out.span<double>();
  const auto pz = z.span<double>();
  const Tensor x = broadcast_f64(in.values[0], n.shape), ex = broadcast_f64(in.bounds[0], n.shape);
  const auto px = x.span<double>(), pex = ex.span<double>();
  if constexpr (std::is_invocable_v<Partials, double, double>) {
    for (std::size_t i = 0; i < o.size(); ++i)
      o[i] = carried(partials(px[i], pz[i]), pex[i]) + rounding(px[i], pz[i]);
  } else {
    const Tensor y = broadcast_f64(in.values[1], n.shape),
                 ey = broadcast_f64(in.bounds[1], n.shape);
    const auto py = y.span<double>(), pey = ey.span<double>();
    for (std::size_t i = 0; i < o.size(); ++i) {
      const std::array<double, 2> d = partials(px[i], py[i], pz[i]);
      o[i] = carried(d[0], pex[i]) + carried(d[1], pey[i]) + rounding(px[i], py[i], pz[i]);
    }
  }
  return out;
}

// A unary function's carried bound: the largest change of f over [x - E, x + E] at the interval's
// ends (the secant), never below the first-order |f'(x)| E. First order alone falls short where
// the function's condition |x f'(x) / f(x)| is large against the operand's relative bound E / |x|:
// gelu's tail (condition about x^2, 126 at x = -11.2) carries a bf16 operand's bound (2^-8
// relative, more after an add) into a change of about e^(x^2 E / |x|) - 1, which first order
// under-states by half once x^2 E / |x| nears 1. An end where f is not finite (log or sqrt below
// zero) is left out.
template <class Function, class Partial, class Rounding>
Tensor unary_function_bound(const Node& n, const BoundOperands& in, const Tensor& z, Function f,
                            Partial partial, Rounding rounding) {
  Tensor out = Tensor::uninitialized(DType::f64, n.shape);
  auto o = out.span<double>();
  const auto pz = z.span<double>();
  const Tensor x = broadcast_f64(in.values[0], n.shape), ex = broadcast_f64(in.bounds[0], n.shape);
  const auto px = x.span<double>(), pex = ex.span<double>();
  for (std::size_t i = 0; i < o.size(); ++i) {
    double c = carried(partial(px[i], pz[i]), pex[i]);
    if (pex[i] > 0 && std::isfinite(pz[i])) {
      for (const double end : {px[i] - pex[i], px[i] + pex[i]}) {
        const double change = std::abs(f(end) - pz[i]);
        if (std::isfinite(change)) c = std::max(c, change);
      }
    }
    o[i] = c + rounding(px[i], pz[i]);
  }
  return out;
}

// The result's one rounding to the node's dtype: u |z|.
// The result's one rounding to the node's dtype, fl(z) = z (1 + d) + e with |d| <= u and |e| <=
// eta (gradual underflow: a subnormal result is off by up to eta, however small u |z| is).
struct ResultRounding {
  double u, eta;
  double operator()(double, double z) const { return u * std::abs(z) + eta; }
  double operator()(double, double, double z) const { return u * std::abs(z) + eta; }
};
ResultRounding result_rounding(const Node& n) {
  return {unit_roundoff(n.dtype), underflow_of(n.dtype)};
}

Tensor add_bound(const Node& n, const BoundOperands& in, const Tensor& z) {
  return pointwise_bound(
      n, in, z,
      [](double, double, double) {
        return std::array{1.0, 1.0};
      },
      result_rounding(n));
}
Tensor sub_bound(const Node& n, const BoundOperands& in, const Tensor& z) {
  return add_bound(n, in, z);
}
Tensor mul_bound(const Node& n, const BoundOperands& in, const Tensor& z) {
  return pointwise_bound(
      n, in, z,
      [](double x, double y, double) {
        return std::array{y, x};
      },
      result_rounding(n));
}
Tensor div_bound(const Node& n, const BoundOperands& in, const Tensor& z) {
  return pointwise_bound(
      n, in, z,
      [](double, double y, double q) {
        return std::array{1.0 / y, q / y};
      },
      result_rounding(n));
}
// The scalar is stored at the op's precision too (a broadcast tensor of the dtype, or an fp32
// immediate, which is no coarser): its rounding, u |c| (add) or u |x c| (mul), is counted.
Tensor add_scalar_bound(const Node& n, const BoundOperands& in, const Tensor& z) {
  const double u = unit_roundoff(n.dtype), c = std::abs(n.scalar), eta = underflow_of(n.dtype);
  return pointwise_bound(
      n, in, z, [](double, double) { return 1.0; },
      [u, c, eta](double, double r) { return u * (std::abs(r) + c) + eta; });
}
Tensor mul_scalar_bound(const Node& n, const BoundOperands& in, const Tensor& z) {
  const double u = unit_roundoff(n.dtype), eta = underflow_of(n.dtype);
  return pointwise_bound(
      n, in, z, [c = n.scalar](double, double) { return c; },
      [u, eta](double, double r) { return 2 * (u * std::abs(r) + eta); });
}
Tensor neg_bound(const Node& n, const BoundOperands& in, const Tensor& z) {
  return pointwise_bound(
      n, in, z, [](double, double) { return 1.0; }, [](double, double) { return 0.0; });
}
Tensor exp_bound(const Node& n, const BoundOperands& in, const Tensor& z) {
  return unary_function_bound(
      n, in, z, [](double x) { return std::exp(x); }, [](double, double r) { return r; },
      result_rounding(n));
}
Tensor sqrt_bound(const Node& n, const BoundOperands& in, const Tensor& z) {
  return unary_function_bound(
      n, in, z, [](double x) { return std::sqrt(x); }, [](double, double r) { return 0.5 / r; },
      result_rounding(n));
}
Tensor rsqrt_bound(const Node& n, const BoundOperands& in, const Tensor& z) {
  return unary_function_bound(
      n, in, z, [](double x) { return 1.0 / std::sqrt(x); },
      [](double x, double r) { return 0.5 * r / x; }, result_rounding(n));
}
Tensor log_bound(const Node& n, const BoundOperands& in, const Tensor& z) {
  return unary_function_bound(
      n, in, z, [](double x) { return std::log(x); }, [](double x, double) { return 1.0 / x; },
      result_rounding(n));
}
Tensor gelu_erf_bound(const Node& n, const BoundOperands& in, const Tensor& z) {
  return unary_function_bound(
      n, in, z, [](double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); },
      [](double x, double) {
        return 0.5 * std::erfc(-x / std::sqrt(2.0)) +
               x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
      },
      result_rounding(n));
}
Tensor gelu_tanh_bound(const Node& n, const BoundOperands& in, const Tensor& z) {
  return unary_function_bound(
      n, in, z,
      [](double x) {
        return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
      },
      [](double x, double) { return gelu_tanh_derivative(x); }, result_rounding(n));
}
Tensor gelu_tanh_backward_bound(const Node& n, const BoundOperands& in, const Tensor& z) {
  return pointwise_bound(
      n, in, z,
      [](double dy, double x, double) {
        // d/dx of dy * gelu'(x) = dy * gelu''(x)
        const double t = std::tanh(gelu_tanh_inner(x)), du = gelu_tanh_inner_derivative(x);
        const double ddu = std::sqrt(2.0 / M_PI) * 6.0 * 0.044715 * x;
        return std::array{gelu_tanh_derivative(x),
                          dy * (1.0 - t * t) * (du - x * t * du * du + 0.5 * x * ddu)};
      },
      result_rounding(n));
}
// Rounding to a coarser dtype adds u |z|; widening is exact.
Tensor cast_bound(const Node& n, const BoundOperands& in, const Tensor& z) {
  const bool narrows =
      is_floating(in.dtypes[0]) && unit_roundoff(n.dtype) > unit_roundoff(in.dtypes[0]);
  const double u = narrows ? unit_roundoff(n.dtype) : 0.0,
               eta = narrows ? underflow_of(n.dtype) : 0.0;
  return pointwise_bound(
      n, in, z, [](double, double) { return 1.0; },
      [u, eta](double, double r) { return u * std::abs(r) + eta; });
}
// Kept elements keep their bound; the fill is an exact constant.
Tensor causal_mask_bound(const Node& n, const BoundOperands& in, const Tensor&) {
  Node exact_fill = n;
  exact_fill.scalar = 0;
  return causal_mask(exact_fill, {in.bounds[0]});
}

// Sum and mean: the operands' bounds summed, plus (u + c(K) u_acc) sum |x_k|: the result's
// rounding and the accumulation of its K terms (accumulation_of; every partial sum is rounded at
// the accumulator's precision, and none exceeds sum |x_k|); the mean divides both by the extent
// and rounds once more.
Tensor sum_bound(const Node& n, const BoundOperands& in, const Tensor& z) {
  const double extent = double(in.values[0].shape()[std::size_t(n.axis)]);
  const double u = unit_roundoff(n.dtype), eta = underflow_of(n.dtype);
  const double summed = u + accumulation_of(std::int64_t(extent), n.dtype);
  Node reduced = n;
  reduced.kind = OpKind::Sum;
  const Tensor carried_bounds = reduce(reduced, in.bounds[0]);
  const Tensor magnitude =
      reduce(reduced, map_unary(as_f64(in.values[0]), [](double x) { return std::abs(x); }));
  const bool is_mean = n.kind == OpKind::Mean;
  Tensor out = Tensor::uninitialized(DType::f64, n.shape);
  auto o = out.span<double>();
  const auto pe = carried_bounds.span<double>(), pm = magnitude.span<double>(),
             pz = z.span<double>();
  for (std::size_t i = 0; i < o.size(); ++i) {
    o[i] = is_mean ? (pe[i] + summed * pm[i]) / extent + u * std::abs(pz[i]) + eta
                   : pe[i] + summed * pm[i];
  }
  return out;
}
Tensor mean_bound(const Node& n, const BoundOperands& in, const Tensor& z) {
  return sum_bound(n, in, z);
}
// The maximum is exact: the bound of the element that is the maximum (first order: the argmax
// does not move).
Tensor max_bound(const Node& n, const BoundOperands& in, const Tensor&) {
  const Tensor x = as_f64(in.values[0]), e = as_f64(in.bounds[0]);
  const auto r = reduction_shape(x.shape(), n.axis);
  Tensor out = Tensor::uninitialized(DType::f64, n.shape);
  const auto px = x.span<double>(), pe = e.span<double>();
  auto o = out.span<double>();
  for (std::int64_t a = 0; a < r.outer; ++a) {
    for (std::int64_t c = 0; c < r.inner; ++c) {
      double best = -std::numeric_limits<double>::infinity(), bound = 0;
      for (std::int64_t k = 0; k < r.extent; ++k) {
        const std::size_t at = std::size_t((a * r.extent + k) * r.inner + c);
        if (px[at] > best || std::isnan(px[at])) best = px[at], bound = pe[at];
      }
      o[std::size_t(a * r.inner + c)] = bound;
    }
  }
  return out;
}

// y_i = xh_i w_i + b_i with xh_i = (x_i - mean) r, r = (var + eps)^-1/2. Carried (the triangle
// inequality over dy_i/dx_j = w_i r (delta_ij - 1/k - xh_i xh_j / k)):
//   |w_i| r (E_i + sum_j E_j / k + |xh_i| sum_j |xh_j| E_j / k) + |xh_i| Ew_i + Eb_i.
// Own roundings, the composite taken op by op at the output's u, the two sums of k terms with their
// accumulation (s = u + c(k) u_acc, accumulation_of): the mean's sum, |w_i| r s sum|x_j| / k; the
// variance's sum, |w_i xh_i| s var / (2 (var + eps)); centering, rsqrt, normalising and the weight
// product, u |w_i xh_i| each; the bias add, u |y_i|.
Tensor layernorm_bound(const Node& n, const BoundOperands& in, const Tensor& z) {
  const double u = unit_roundoff(n.dtype), eta = underflow_of(n.dtype);
  const Tensor x = as_f64(in.values[0]), w = as_f64(in.values[1]);
  const Tensor ex = as_f64(in.bounds[0]), ew = as_f64(in.bounds[1]), eb = as_f64(in.bounds[2]);
  const std::int64_t k = x.shape().back(), rows = x.numel() / k;
  const double summed = u + accumulation_of(k, n.dtype);
  Tensor out = Tensor::uninitialized(DType::f64, n.shape);
  const auto px = x.span<double>(), pw = w.span<double>(), pex = ex.span<double>(),
             pew = ew.span<double>(), peb = eb.span<double>();
  const auto pz = z.span<double>();
  auto o = out.span<double>();
  for (std::int64_t r = 0; r < rows; ++r) {
    const double* row = px.data() + r * k;
    const double* row_bound = pex.data() + r * k;
    double mean = 0, magnitude = 0;
    for (std::int64_t i = 0; i < k; ++i) mean += row[i], magnitude += std::abs(row[i]);
    mean /= double(k);
    double var = 0;
    for (std::int64_t i = 0; i < k; ++i) var += (row[i] - mean) * (row[i] - mean);
    var /= double(k);
    const double inv = 1.0 / std::sqrt(var + n.eps);
    double bound_sum = 0, weighted_bound_sum = 0;
    for (std::int64_t i = 0; i < k; ++i)
      bound_sum += row_bound[i],
          weighted_bound_sum += std::abs((row[i] - mean) * inv) * row_bound[i];
    for (std::int64_t i = 0; i < k; ++i) {
      const std::size_t at = std::size_t(r * k + i);
      const double xh = (row[i] - mean) * inv, wi = std::abs(pw[std::size_t(i)]);
      const double carried_bound = wi * inv *
                                       (row_bound[i] + bound_sum / double(k) +
                                        std::abs(xh) * weighted_bound_sum / double(k)) +
                                   std::abs(xh) * pew[std::size_t(i)] + peb[std::size_t(i)];
      const double own = wi * inv * summed * magnitude / double(k) +
                         wi * std::abs(xh) * (4.0 * u + 0.5 * summed * var / (var + n.eps)) +
                         u * std::abs(pz[at]) + 6 * eta;
      o[at] = carried_bound + own;
    }
  }
  return out;
}

// z_i = e_i / s, e_i = exp(x_i - m), s = sum_j e_j. Carried (dz_i/dx_j = z_i (delta_ij - z_j)):
//   z_i ((1 - z_i) E_i + sum_{j != i} z_j E_j).
// Own roundings op by op at the output's u: x_i - m, relative u |x_i - m| in e_i, which reaches
// z_i directly and through s (z_i sum_j z_j u |x_j - m|); e_i's rounding, the sum's (u s, the sum
// of its terms) and the division's, u z_i each; and the accumulation of the sum's k positive terms,
// c(k) u_acc relative to s (accumulation_of), c(k) u_acc z_i.
Tensor softmax_bound(const Node& n, const BoundOperands& in, const Tensor& z) {
  const double u = unit_roundoff(n.dtype), eta = underflow_of(n.dtype);
  const Tensor x = as_f64(in.values[0]), ex = as_f64(in.bounds[0]);
  const std::int64_t k = x.shape().back(), rows = x.numel() / k;
  const double accumulated = accumulation_of(k, n.dtype);
  Tensor out = Tensor::uninitialized(DType::f64, n.shape);
  const auto px = x.span<double>(), pex = ex.span<double>(), pz = z.span<double>();
  auto o = out.span<double>();
  for (std::int64_t r = 0; r < rows; ++r) {
    const double* row = px.data() + r * k;
    const double* zr = pz.data() + r * k;
    const double* er = pex.data() + r * k;
    double m = -std::numeric_limits<double>::infinity();
    for (std::int64_t i = 0; i < k; ++i) m = std::max(m, row[i]);
    double weighted_bound = 0, weighted_shift = 0;
    for (std::int64_t i = 0; i < k; ++i) {
      if (zr[i] == 0) continue;  // a masked (-inf) or underflowed element: no weight
      weighted_bound += zr[i] * er[i];
      weighted_shift += zr[i] * std::abs(row[i] - m);
    }
    for (std::int64_t i = 0; i < k; ++i) {
      if (zr[i] == 0) {
        o[std::size_t(r * k + i)] = 0;
        continue;
      }
      const double carried_bound = zr[i] * ((1 - zr[i]) * er[i] + (weighted_bound - zr[i] * er[i]));
      const double own =
          zr[i] * (u * (std::abs(row[i] - m) + weighted_shift + 3.0) + accumulated) + 4 * eta;
      o[std::size_t(r * k + i)] = carried_bound + own;
    }
  }
  return out;
}

// C = A B: |A| E_B + E_A |B| carried, plus (u + c(K) u_acc) |A| |B| (the result's rounding and
// the accumulation of its K products, accumulation_of).
Tensor matmul_bound(const Node& n, const BoundOperands& in, const Tensor&) {
  const std::int64_t terms = in.values[0].shape().back();
  const double u = unit_roundoff(n.dtype) + accumulation_of(terms, n.dtype);
  const Tensor a = as_f64(in.values[0]), b = as_f64(in.values[1]), ea = as_f64(in.bounds[0]),
               eb = as_f64(in.bounds[1]);
  const std::int64_t m = a.shape()[a.shape().size() - 2], k = a.shape().back(),
                     nn = b.shape().back();
  const std::int64_t batches = a.numel() / (m * k);
  const bool batched_b = b.rank() > 2;
  Tensor out = Tensor::uninitialized(DType::f64, n.shape);
  for (std::int64_t i = 0; i < batches; ++i) {
    const std::int64_t b_offset = batched_b ? i * k * nn : 0;
    Eigen::Map<const Matrix> ma(a.span<double>().data() + i * m * k, m, k),
        mea(ea.span<double>().data() + i * m * k, m, k);
    Eigen::Map<const Matrix> mb(b.span<double>().data() + b_offset, k, nn),
        meb(eb.span<double>().data() + b_offset, k, nn);
    Eigen::Map<Matrix> mc(out.span<double>().data() + i * m * nn, m, nn);
    const Matrix abs_b = mb.cwiseAbs();
    mc.noalias() = ma.cwiseAbs() * (meb + u * abs_b);
    mc.noalias() += mea * abs_b;
    mc.array() += double(k) * underflow_of(n.dtype);  // each product may underflow
  }
  return out;
}

Tensor gather_rows_bound(const Node& n, const BoundOperands& in, const Tensor&) {
  return gather_rows(n, {in.bounds[0], in.values[1]});
}
// Rows added at the ids: the bounds added, plus (u + c(K) u_acc) sum |src| at each position, K the
// rows added into it (the ids equal to its row; accumulation_of: 0 for one).
Tensor scatter_add_rows_bound(const Node& n, const BoundOperands& in, const Tensor&) {
  const double u = unit_roundoff(n.dtype);
  const std::int64_t rows = n.shape[0], width = n.shape[1];
  std::vector<std::int64_t> added(std::size_t(rows), 0);
  for (const std::int64_t id : checked_row_ids(n, in.values[1], rows)) ++added[std::size_t(id)];
  Tensor out = scatter_add_rows(n, {in.bounds[0], in.values[1]});
  const Tensor magnitude = scatter_add_rows(
      n, {map_unary(as_f64(in.values[0]), [](double x) { return std::abs(x); }), in.values[1]});
  auto o = out.span<double>();
  const auto pm = magnitude.span<double>();
  for (std::int64_t r = 0; r < rows; ++r) {
    const double summed = u + accumulation_of(added[std::size_t(r)], n.dtype);
    for (std::int64_t c = 0; c < width; ++c)
      o[std::size_t(r * width + c)] += summed * pm[std::size_t(r * width + c)];
  }
  return out;
}

// Data movement is exact: the bounds move with the values.
template <OpFunction op>
Tensor moved_bound(const Node& n, const BoundOperands& in, const Tensor&) {
  return op(n, in.bounds);
}

Tensor not_an_op(const Node& n, const Operands&) {
  throw_input_error("reference: op {} cannot be evaluated", op_name(n.kind));
}
Tensor no_bound(const Node& n, const BoundOperands&, const Tensor&) {
  throw_input_error("reference: op {} has no error bound", op_name(n.kind));
}

// Indexed by OpKind, in the enum's order (checked by entry_of).
constexpr std::array kOps = {
    std::pair{OpKind::Input, OpEntry{not_an_op, no_bound}},
    std::pair{OpKind::Add, OpEntry{add, add_bound}},
    std::pair{OpKind::Sub, OpEntry{sub, sub_bound}},
    std::pair{OpKind::Mul, OpEntry{mul, mul_bound}},
    std::pair{OpKind::Div, OpEntry{div, div_bound}},
    std::pair{OpKind::AddScalar, OpEntry{add_scalar, add_scalar_bound}},
    std::pair{OpKind::MulScalar, OpEntry{mul_scalar, mul_scalar_bound}},
    std::pair{OpKind::Neg, OpEntry{neg, neg_bound}},
    std::pair{OpKind::Exp, OpEntry{exp, exp_bound}},
    std::pair{OpKind::Sqrt, OpEntry{sqrt, sqrt_bound}},
    std::pair{OpKind::Rsqrt, OpEntry{rsqrt, rsqrt_bound}},
    std::pair{OpKind::GeluErf, OpEntry{gelu_erf, gelu_erf_bound}},
    std::pair{OpKind::GeluTanh, OpEntry{gelu_tanh, gelu_tanh_bound}},
    std::pair{OpKind::Cast, OpEntry{cast, cast_bound}},
    std::pair{OpKind::Log, OpEntry{log, log_bound}},
    std::pair{OpKind::GeluTanhBackward, OpEntry{gelu_tanh_backward, gelu_tanh_backward_bound}},
    std::pair{OpKind::CausalMask, OpEntry{causal_mask, causal_mask_bound}},
    std::pair{OpKind::Sum, OpEntry{sum, sum_bound}},
    std::pair{OpKind::Mean, OpEntry{mean, mean_bound}},
    std::pair{OpKind::Max, OpEntry{max, max_bound}},
    std::pair{OpKind::LayerNorm, OpEntry{layernorm, layernorm_bound}},
    std::pair{OpKind::Softmax, OpEntry{softmax, softmax_bound}},
    std::pair{OpKind::Matmul, OpEntry{matmul, matmul_bound}},
    std::pair{OpKind::GatherRows, OpEntry{gather_rows, gather_rows_bound}},
    std::pair{OpKind::ScatterAddRows, OpEntry{scatter_add_rows, scatter_add_rows_bound}},
    std::pair{OpKind::Permute, OpEntry{permute, moved_bound<permute>}},
    std::pair{OpKind::Reshape, OpEntry{reshape, moved_bound<reshape>}},
    std::pair{OpKind::Slice, OpEntry{slice, moved_bound<slice>}},
    std::pair{OpKind::Concat, OpEntry{concat, moved_bound<concat>}},
    std::pair{OpKind::Expand, OpEntry{expand, moved_bound<expand>}},
};
static_assert(
    [] {
      for (std::size_t i = 0; i < kOps.size(); ++i) {
        if (std::size_t(kOps[i].first) != i) return false;
      }
      return true;
    }(),
    "kOps must list every OpKind in the enum's order");

const OpEntry& entry_of(const Node& n) {
  const auto index = std::size_t(n.kind);
  if (index >= kOps.size())
    throw_input_error("reference: op {} ({}) is unknown", n.name, int(n.kind));
  return kOps[index].second;
}
}  // namespace

Tensor evaluate(const Node& n, const Operands& in) { return entry_of(n).value(n, in); }

// Both from the format's fields: u = 2^-(p) with p the significand's bits, eta = half the
// smallest subnormal (f64's half is not a double: its smallest subnormal then).
double unit_roundoff(DType dtype) {
  return visit_floating(dtype, "unit_roundoff", [](auto t) {
    return std::ldexp(1.0, -(FormatTraits<decltype(t)>::mantissa_bits + 1));
  });
}

// c(K) u_acc = min(gamma_K, lambda sqrt(K) u_acc), lambda = 3: gamma_K = K u / (1 - K u) bounds a
// sum of K terms in any order (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed.,
// sec. 3.1) and is the smaller up to K = 9; beyond, lambda sqrt(K) u_acc is Higham & Mary's
// probabilistic bound (SIAM J. Sci. Comput. 41(5), 2019, Theorem 3.1), which holds in any order with
// probability at least 1 - 2 exp(-lambda^2 / 2) if the rounding errors are independent and of mean
// zero (docs/conditioned-error.md, "Dot products" and Limits). u_acc: f32 for f16, bf16 and f32
// results (the kernels accumulate in f32), f64 for f64.
double accumulation_of(std::int64_t terms, DType dtype) {
  const double u_acc = unit_roundoff(dtype == DType::f64 ? DType::f64 : DType::f32);
  if (terms <= 1) return 0.0;
  const double k = double(terms);
  const double deterministic =
      k * u_acc < 1 ? k * u_acc / (1 - k * u_acc) : std::numeric_limits<double>::infinity();
  return std::min(deterministic, kAccumulationLambda * std::sqrt(k) * u_acc);
}

double underflow_of(DType dtype) {
  return visit_floating(dtype, "underflow_of", [](auto t) {
    using Traits = FormatTraits<decltype(t)>;
    const double half_subnormal =
        std::ldexp(1.0, Traits::min_normal_exponent - Traits::mantissa_bits - 1);
    return half_subnormal > 0 ? half_subnormal : std::numeric_limits<double>::denorm_min();
  });
}

Tensor error_bound(const Node& n, const BoundOperands& in, const Tensor& value) {
  return entry_of(n).bound(n, in, value);
}

}  // namespace fusebench::engine::reference

namespace fusebench::engine {

RunResult ReferenceExecutor::run(const Graph& graph, const Inputs& inputs, const RunOptions& run) {
  check_inputs(graph, inputs);
  RunResult result;
  for (const Node& n : graph.nodes()) {
    if (n.kind == OpKind::Input) {
      result.values[n.id] = reference::as_f64(inputs.at(n.name));
      continue;
    }
    std::vector<Tensor> operands;
    for (NodeId in : n.inputs) operands.push_back(result.values.at(in));
    result.values[n.id] = reference::evaluate(n, operands);
  }
  for (NodeId id : graph.outputs()) result.outputs.push_back(result.values.at(id));
  dump_run(graph, result, name(), run);
  return result;
}

std::vector<Tensor> fp64_reference(const Graph& graph, const Inputs& inputs) {
  return ReferenceExecutor().run(graph, inputs).outputs;
}

BoundedReference fp64_reference_with_bound(const Graph& graph, const Inputs& inputs) {
  check_inputs(graph, inputs);
  std::map<NodeId, Tensor> values, bounds;
  for (const Node& n : graph.nodes()) {
    if (n.kind == OpKind::Input) {
      values[n.id] = reference::as_f64(inputs.at(n.name));
      bounds[n.id] = Tensor(DType::f64, n.shape);  // graph inputs are exact: zero-filled
      continue;
    }
    reference::BoundOperands operands;
    for (NodeId in : n.inputs) {
      operands.values.push_back(values.at(in));
      operands.bounds.push_back(bounds.at(in));
      operands.dtypes.push_back(graph.node(in).dtype);
    }
    values[n.id] = reference::evaluate(n, operands.values);
    bounds[n.id] = reference::error_bound(n, operands, values[n.id]);
  }
  BoundedReference result;
  for (NodeId id : graph.outputs()) {
    result.outputs.push_back(values.at(id));
    result.bounds.push_back(bounds.at(id));
  }
  return result;
}

std::vector<double> conditioned_error(const Tensor& y, const Tensor& ref, const Tensor& bound) {
  if (y.shape() != ref.shape() || bound.shape() != ref.shape()) {
    throw_input_error("conditioned_error: result {}, reference {} and bound {} differ in shape",
                      y.describe(), ref.describe(), bound.describe());
  }
  const double eta = reference::underflow_of(y.dtype());
  const Tensor yd = y.to(DType::f64).contiguous(), rd = ref.to(DType::f64).contiguous(),
               bd = bound.to(DType::f64).contiguous();
  const auto py = yd.span<double>(), pr = rd.span<double>(), pb = bd.span<double>();
  std::vector<double> out(py.size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(py[i]) || !std::isfinite(pr[i])) {
      out[i] = std::numeric_limits<double>::quiet_NaN();
      continue;
    }
    const double error = std::abs(py[i] - pr[i]);
    out[i] = error == 0 ? 0.0 : error / std::max(pb[i], eta);
  }
  return out;
}

double condition_of(double bound, double ref, DType y_dtype) {
  const double own = reference::unit_roundoff(y_dtype) * std::abs(ref);
  return own == 0 ? (bound == 0 ? 1.0 : std::numeric_limits<double>::infinity()) : bound / own;
}

}  // namespace fusebench::engine
