// The fp64 reference executor: every op in fp64, math from the C library, no rounding to
// storage dtypes (casts are identities): the truth against which eager and fused are measured.

#include <cmath>
#include <limits>

#include "fusebench/engine/executor.hpp"
#include "fusebench/engine/eigen.hpp"

namespace fusebench::engine {

namespace {
using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Floating values in fp64; integer tensors (gather_rows' ids, and views of them) keep their dtype.
Tensor as_f64(const Tensor& t) {
  if (!is_floating(t.dtype())) return t.contiguous();
  return t.dtype() == DType::f64 ? t.contiguous() : t.to(DType::f64);
}

// Operand broadcast to `shape`, contiguous f64.
Tensor broadcast_f64(const Tensor& t, const Shape& shape) { return as_f64(t).expand(shape).contiguous(); }

template <class Fn>
Tensor map_unary(const Tensor& x, Fn fn) {
  Tensor out = Tensor::uninitialized(DType::f64, x.shape());
  const auto in = x.span<double>();
  auto o = out.span<double>();
  for (std::size_t i = 0; i < in.size(); ++i) o[i] = fn(in[i]);
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

Tensor evaluate(const Node& n, const std::vector<Tensor>& in) {
  auto binary = [&](auto fn) {
    const Tensor a = broadcast_f64(in[0], n.shape), b = broadcast_f64(in[1], n.shape);
    Tensor out = Tensor::uninitialized(DType::f64, n.shape);
    const auto pa = a.span<double>(), pb = b.span<double>();
    auto o = out.span<double>();
    for (std::size_t i = 0; i < o.size(); ++i) o[i] = fn(pa[i], pb[i]);
    return out;
  };
  switch (n.kind) {
    case OpKind::Add: return binary([](double a, double b) { return a + b; });
    case OpKind::Sub: return binary([](double a, double b) { return a - b; });
    case OpKind::Mul: return binary([](double a, double b) { return a * b; });
    case OpKind::Div: return binary([](double a, double b) { return a / b; });
    case OpKind::AddScalar: return map_unary(as_f64(in[0]), [c = n.scalar](double x) { return x + c; });
    case OpKind::MulScalar: return map_unary(as_f64(in[0]), [c = n.scalar](double x) { return x * c; });
    case OpKind::Neg: return map_unary(as_f64(in[0]), [](double x) { return -x; });
    case OpKind::Exp: return map_unary(as_f64(in[0]), [](double x) { return std::exp(x); });
    case OpKind::Sqrt: return map_unary(as_f64(in[0]), [](double x) { return std::sqrt(x); });
    case OpKind::Rsqrt: return map_unary(as_f64(in[0]), [](double x) { return 1.0 / std::sqrt(x); });
    case OpKind::GeluErf:
      return map_unary(as_f64(in[0]), [](double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); });
    case OpKind::GeluTanh:
      return map_unary(as_f64(in[0]), [](double x) {
        return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
      });
    case OpKind::Cast: return as_f64(in[0]);
    case OpKind::Log: return map_unary(as_f64(in[0]), [](double x) { return std::log(x); });
    case OpKind::GeluTanhBackward:
      return binary([](double dy, double x) {
        const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
        const double du = std::sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * x * x);
        const double t = std::tanh(u);
        return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du);
      });
    case OpKind::CausalMask: {
      Tensor out = as_f64(in[0]).clone();  // a fresh copy: the operand's value is shared
      const std::int64_t rows = n.shape[n.shape.size() - 2], cols = n.shape.back();
      auto o = out.span<double>();
      for (std::size_t e = 0; e < o.size(); ++e) {
        const std::int64_t col = std::int64_t(e) % cols, row = (std::int64_t(e) / cols) % rows;
        if (col > row) o[e] = n.scalar;
      }
      return out;
    }
    case OpKind::Sum:
    case OpKind::Mean:
    case OpKind::Max: {
      const Tensor x = as_f64(in[0]);
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
    case OpKind::LayerNorm: {
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
        for (std::int64_t i = 0; i < k; ++i) o[std::size_t(r * k + i)] = (row[i] - mean) * inv * pw[std::size_t(i)] + pb[std::size_t(i)];
      }
      return out;
    }
    case OpKind::Softmax: {
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
    case OpKind::Matmul: {
      const Tensor a = as_f64(in[0]), b = as_f64(in[1]);
      const std::int64_t m = a.shape()[a.shape().size() - 2], k = a.shape().back(), nn = b.shape().back();
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
    case OpKind::GatherRows: {
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
    case OpKind::ScatterAddRows: {
      const Tensor src = as_f64(in[0]);
      const std::int64_t width = n.shape[1];
      const auto ids = checked_row_ids(n, in[1], n.shape[0]);
      Tensor out(DType::f64, n.shape);  // zero-filled
      const auto s = src.span<double>();
      auto o = out.span<double>();
      for (std::size_t i = 0; i < ids.size(); ++i) {
        for (std::int64_t k = 0; k < width; ++k) o[std::size_t(ids[i] * width + k)] += s[i * std::size_t(width) + std::size_t(k)];
      }
      return out;
    }
    case OpKind::Permute: return as_f64(in[0]).permute(n.permutation).contiguous();
    case OpKind::Reshape: return as_f64(in[0]).reshape(n.shape);
    case OpKind::Slice: {
      const Tensor x = as_f64(in[0]);
      return x.slice(n.axis, n.start, n.start + n.shape[std::size_t(n.axis)]).contiguous();
    }
    case OpKind::Expand: return broadcast_f64(in[0], n.shape);
    case OpKind::Concat: {
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
    case OpKind::Input: break;
  }
  throw_input_error("reference: op {} cannot be evaluated", op_name(n.kind));
}
}  // namespace

RunResult ReferenceExecutor::run(const Graph& graph, const Inputs& inputs, const RunOptions& run) {
  check_inputs(graph, inputs);
  RunResult result;
  for (const Node& n : graph.nodes()) {
    if (n.kind == OpKind::Input) {
      result.values[n.id] = as_f64(inputs.at(n.name));
      continue;
    }
    std::vector<Tensor> operands;
    for (NodeId in : n.inputs) operands.push_back(result.values.at(in));
    result.values[n.id] = evaluate(n, operands);
  }
  for (NodeId id : graph.outputs()) result.outputs.push_back(result.values.at(id));
  dump_run(graph, result, name(), run);
  return result;
}

std::vector<Tensor> fp64_reference(const Graph& graph, const Inputs& inputs) {
  return ReferenceExecutor().run(graph, inputs).outputs;
}

}  // namespace fusebench::engine
