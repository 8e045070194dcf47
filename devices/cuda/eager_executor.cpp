#include "eager_executor.hpp"

#include <fmt/format.h>

#include <map>

#include "cuda_device.hpp"
#include "cuda_runtime.hpp"
#include "device_tensor.hpp"
#include "eager_kernels.hpp"
#include "fusebench/error.hpp"

namespace fusebench::cuda {

using engine::Node;
using engine::OpKind;

namespace {
kernels::Storage storage(DType d) {
  switch (d) {
    case DType::f16: return kernels::Storage::F16;
    case DType::bf16: return kernels::Storage::BF16;
    case DType::f32: return kernels::Storage::F32;
    case DType::f64: return kernels::Storage::F64;
    default: throw_input_error("cuda eager: dtype {} is not a floating dtype", dtype_name(d));
  }
}
int approx_mode(engine::ApproxMode m) {
  switch (m) {
    case engine::ApproxMode::Ieee: return 0;
    case engine::ApproxMode::NewtonBitTrick: return 1;
    case engine::ApproxMode::NewtonHardware: return 2;
  }
  return 0;
}
kernels::Knobs knobs_of(const engine::EngineOptions& o) {
  kernels::Knobs k;
  k.rsqrt_mode = approx_mode(o.rsqrt);
  k.rsqrt_iters = o.rsqrt_newton_iters;
  k.div_mode = approx_mode(o.div);
  k.div_iters = o.div_newton_iters;
  k.storage_accumulator = o.accumulator == engine::AccumulatorDtype::Storage;
  k.tile = o.reduce_tile;
  return k;
}
// A contiguous tensor of `shape` read in row-major order.
kernels::Layout contiguous_layout(const Shape& shape) {
  if (shape.size() > std::size_t(kernels::kMaxRank)) throw_input_error("cuda eager: rank {} above {}", shape.size(), kernels::kMaxRank);
  kernels::Layout l;
  l.rank = int(shape.size());
  const Shape strides = contiguous_strides(shape);
  for (std::size_t d = 0; d < shape.size(); ++d) {
    l.shape[d] = shape[d];
    l.strides[d] = strides[d];
  }
  return l;
}
// A contiguous input of shape `in` read over the output shape `out` with numpy broadcasting.
kernels::Layout broadcast_layout(const Shape& in, const Shape& out) {
  kernels::Layout l = contiguous_layout(out);
  const Shape strides = contiguous_strides(in);
  const std::size_t lead = out.size() - in.size();
  for (std::size_t d = 0; d < out.size(); ++d) {
    l.strides[d] = d < lead || in[d - lead] == 1 ? 0 : strides[d - lead];
  }
  return l;
}
kernels::Unary unary_op(OpKind k) {
  switch (k) {
    case OpKind::Neg: return kernels::Unary::Neg;
    case OpKind::Exp: return kernels::Unary::Exp;
    case OpKind::Sqrt: return kernels::Unary::Sqrt;
    case OpKind::Rsqrt: return kernels::Unary::Rsqrt;
    case OpKind::GeluErf: return kernels::Unary::GeluErf;
    case OpKind::GeluTanh: return kernels::Unary::GeluTanh;
    case OpKind::AddScalar: return kernels::Unary::AddScalar;
    case OpKind::MulScalar: return kernels::Unary::MulScalar;
    case OpKind::Log: return kernels::Unary::Log;
    default: return kernels::Unary::Cast;
  }
}
DeviceTensor converted(const DeviceTensor& t, DType to, const kernels::Knobs& knobs) {
  DeviceTensor out(to, t.shape());
  kernels::unary(kernels::Unary::Cast, storage(t.dtype()), t.data(), storage(to), out.data(), shape_numel(t.shape()), 0, nullptr, knobs);
  return out;
}
}  // namespace

EagerExecutor::EagerExecutor(engine::EngineOptions options) : options_((options.validate(), options)) {}

EagerExecutor::~EagerExecutor() {
  if (cublas_ != nullptr) cublasDestroy(static_cast<cublasHandle_t>(cublas_));
}

engine::RunResult EagerExecutor::run(const engine::Graph& graph, const engine::Inputs& inputs, const engine::RunOptions& run) {
  if (const std::string reason = unavailable_reason(); !reason.empty()) throw_input_error("cuda eager executor: {}", reason);
  engine::check_inputs(graph, inputs);
  if (cublas_ == nullptr) {
    cublasHandle_t handle = nullptr;
    check_cublas(cublasCreate(&handle), "cublasCreate");
    cublas_ = handle;
  }
  const auto blas = static_cast<cublasHandle_t>(cublas_);
  const kernels::Knobs knobs = knobs_of(options_);
  const engine::EngineOptions& o = options_;
  engine::RunResult result;
  std::map<engine::NodeId, DeviceTensor> values;
  for (const Node& n : graph.nodes()) {
    if (n.kind == OpKind::Input) {
      result.values[n.id] = inputs.at(n.name);
      values.emplace(n.id, DeviceTensor::upload(result.values[n.id]));
      continue;
    }
    engine::KernelTrace trace;
    trace.name = fmt::format("eager_{}", engine::op_name(n.kind));
    trace.ops.push_back(fmt::format("{}={}", n.name, engine::op_name(n.kind)));
    DeviceTensor out(n.dtype, n.shape);
    const std::int64_t count = shape_numel(n.shape);
    const DeviceTensor& x = values.at(n.inputs[0]);
    EventTimer timer;
    timer.start(nullptr);
    std::vector<DeviceTensor> temporaries;
    switch (n.kind) {
      case OpKind::Add:
      case OpKind::Sub:
      case OpKind::Mul:
      case OpKind::Div:
      case OpKind::GeluTanhBackward: {
        const DeviceTensor& y = values.at(n.inputs[1]);
        const kernels::Binary op = n.kind == OpKind::Add   ? kernels::Binary::Add
                                   : n.kind == OpKind::Sub ? kernels::Binary::Sub
                                   : n.kind == OpKind::Mul ? kernels::Binary::Mul
                                   : n.kind == OpKind::Div ? kernels::Binary::Div
                                                           : kernels::Binary::GeluTanhBackward;
        kernels::binary(op, storage(x.dtype()), x.data(), broadcast_layout(x.shape(), n.shape), storage(y.dtype()), y.data(),
                        broadcast_layout(y.shape(), n.shape), storage(n.dtype), out.data(), count, knobs);
        break;
      }
      case OpKind::AddScalar:
      case OpKind::MulScalar: {
        const void* scalar_ptr = nullptr;
        if (o.scalar_lowering == engine::ScalarLowering::BroadcastTensor && n.dtype != DType::f64) {
          temporaries.push_back(DeviceTensor::upload(visit_floating(n.dtype, "constant", [&](auto tag) {
            using T = decltype(tag);
            return Tensor::from_values<T>({1}, std::vector<T>{round_to<T>(n.scalar)});
          })));
          scalar_ptr = temporaries.back().data();
          trace.lowering.push_back(fmt::format("{}: broadcast tensor {} (loaded from GPU memory)", n.name, dtype_name(n.dtype)));
        } else {
          trace.lowering.push_back(fmt::format("{}: fp32 immediate {:.9g}", n.name, double(float(n.scalar))));
        }
        kernels::unary(unary_op(n.kind), storage(x.dtype()), x.data(), storage(n.dtype), out.data(), count, n.scalar, scalar_ptr, knobs);
        break;
      }
      case OpKind::Neg:
      case OpKind::Exp:
      case OpKind::Sqrt:
      case OpKind::Rsqrt:
      case OpKind::GeluErf:
      case OpKind::GeluTanh:
      case OpKind::Log:
      case OpKind::Cast:
        kernels::unary(unary_op(n.kind), storage(x.dtype()), x.data(), storage(n.dtype), out.data(), count, 0, nullptr, knobs);
        break;
      case OpKind::CausalMask:
        kernels::causal_mask(storage(n.dtype), x.data(), out.data(), count, n.shape[n.shape.size() - 2], n.shape.back(), n.scalar);
        break;
      case OpKind::Sum:
      case OpKind::Mean:
      case OpKind::Max: {
        std::int64_t outer = 1, inner = 1;
        const std::int64_t extent = x.shape()[std::size_t(n.axis)];
        for (int j = 0; j < n.axis; ++j) outer *= x.shape()[std::size_t(j)];
        for (std::size_t j = std::size_t(n.axis) + 1; j < x.shape().size(); ++j) inner *= x.shape()[j];
        const std::int64_t tile = std::min(o.reduce_tile, extent);
        DeviceBuffer partials(std::size_t(outer * inner * ((extent + tile - 1) / tile)) * (n.dtype == DType::f64 ? 8 : 4));
        const kernels::Reduce op = n.kind == OpKind::Sum ? kernels::Reduce::Sum : n.kind == OpKind::Mean ? kernels::Reduce::Mean : kernels::Reduce::Max;
        kernels::reduce(op, storage(x.dtype()), x.data(), storage(n.dtype), out.data(), outer, extent, inner, knobs, partials.data());
        trace.lowering.push_back(fmt::format("{}: split reduction, tile {}, 32 lanes", n.name, tile));
        break;
      }
      case OpKind::LayerNorm:
      case OpKind::Softmax: {
        const std::int64_t k = n.shape.back(), rows = count / k;
        DeviceBuffer scratch(std::size_t(2 * rows * k + 2 * k) * (n.dtype == DType::f64 ? 8 : 4));
        const bool ln = n.kind == OpKind::LayerNorm;
        const DeviceTensor* w = ln ? &values.at(n.inputs[1]) : nullptr;
        const DeviceTensor* b = ln ? &values.at(n.inputs[2]) : nullptr;
        kernels::row(ln ? kernels::Row::LayerNorm : kernels::Row::Softmax, storage(x.dtype()), x.data(),
                     w ? storage(w->dtype()) : kernels::Storage::F32, w ? w->data() : nullptr, b ? storage(b->dtype()) : kernels::Storage::F32,
                     b ? b->data() : nullptr, out.data(), rows, k, n.eps, knobs, scratch.data());
        break;
      }
      case OpKind::Matmul: {
        const DeviceTensor& y = values.at(n.inputs[1]);
        const DType compute = n.dtype == DType::f64 ? DType::f64 : DType::f32;
        const std::int64_t m = x.shape()[x.shape().size() - 2], kk = x.shape().back(), nn = y.shape().back();
        const std::int64_t batches = shape_numel(x.shape()) / (m * kk);
        const bool batched_b = y.shape().size() > 2;
        const DeviceTensor a = converted(x, compute, knobs), b = converted(y, compute, knobs);
        DeviceTensor c(compute, n.shape);
        for (std::int64_t i = 0; i < batches; ++i) {
          // row-major C = A B is column-major C^T = B^T A^T
          const std::size_t e = compute == DType::f64 ? 8 : 4;
          const auto* pa = static_cast<const char*>(a.data()) + std::size_t(i * m * kk) * e;
          const auto* pb = static_cast<const char*>(b.data()) + (batched_b ? std::size_t(i * kk * nn) * e : 0);
          auto* pc = static_cast<char*>(c.data()) + std::size_t(i * m * nn) * e;
          if (compute == DType::f64) {
            const double one = 1, zero = 0;
            check_cublas(cublasDgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, int(nn), int(m), int(kk), &one, reinterpret_cast<const double*>(pb),
                                     int(nn), reinterpret_cast<const double*>(pa), int(kk), &zero, reinterpret_cast<double*>(pc), int(nn)),
                         "cublasDgemm");
          } else {
            const float one = 1, zero = 0;
            check_cublas(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, int(nn), int(m), int(kk), &one, reinterpret_cast<const float*>(pb),
                                     int(nn), reinterpret_cast<const float*>(pa), int(kk), &zero, reinterpret_cast<float*>(pc), int(nn)),
                         "cublasSgemm");
          }
        }
        out = compute == n.dtype ? std::move(c) : converted(c, n.dtype, knobs);
        trace.lowering.push_back(fmt::format("{}: cuBLAS GEMM, {} accumulation", n.name, dtype_name(compute)));
        break;
      }
      case OpKind::Permute: {
        kernels::Layout src = contiguous_layout(n.shape);
        const Shape in_strides = contiguous_strides(x.shape());
        for (std::size_t j = 0; j < n.shape.size(); ++j) src.strides[j] = in_strides[std::size_t(n.permutation[j])];
        kernels::copy(storage(n.dtype), x.data(), src, out.data(), contiguous_layout(n.shape), count);
        break;
      }
      case OpKind::Reshape:
        kernels::copy(storage(n.dtype), x.data(), contiguous_layout(n.shape), out.data(), contiguous_layout(n.shape), count);
        break;
      case OpKind::Slice: {
        kernels::Layout src = contiguous_layout(n.shape);
        const Shape in_strides = contiguous_strides(x.shape());
        for (std::size_t j = 0; j < n.shape.size(); ++j) src.strides[j] = in_strides[j];
        src.offset = n.start * in_strides[std::size_t(n.axis)];
        kernels::copy(storage(n.dtype), x.data(), src, out.data(), contiguous_layout(n.shape), count);
        break;
      }
      case OpKind::Expand:
        kernels::copy(storage(n.dtype), x.data(), broadcast_layout(x.shape(), n.shape), out.data(), contiguous_layout(n.shape), count);
        break;
      case OpKind::Concat: {
        const Shape out_strides = contiguous_strides(n.shape);
        std::int64_t start = 0;
        for (engine::NodeId part_id : n.inputs) {
          const DeviceTensor* part = &values.at(part_id);
          if (part->dtype() != n.dtype) {
            trace.lowering.push_back(fmt::format("{}: operand {} promoted to {}", n.name, graph.node(part_id).name, dtype_name(n.dtype)));
            temporaries.push_back(converted(*part, n.dtype, knobs));
            part = &temporaries.back();
          }
          kernels::Layout dst = contiguous_layout(part->shape());
          for (std::size_t j = 0; j < n.shape.size(); ++j) dst.strides[j] = out_strides[j];
          dst.offset = start * out_strides[std::size_t(n.axis)];
          kernels::copy(storage(n.dtype), part->data(), contiguous_layout(part->shape()), out.data(), dst, shape_numel(part->shape()));
          start += part->shape()[std::size_t(n.axis)];
        }
        break;
      }
      case OpKind::Input: break;
      default: throw_input_error("cuda eager: op {} ({}) has no CUDA kernel", n.name, engine::op_name(n.kind));
    }
    check_cuda(cudaGetLastError(), "eager kernel launch");
    trace.run_ms = timer.stop_ms(nullptr);
    for (engine::NodeId id : n.inputs) trace.bytes_moved += double(values.at(id).bytes());
    trace.bytes_moved += double(out.bytes());
    values.insert_or_assign(n.id, std::move(out));
    result.trace.push_back(std::move(trace));
  }
  for (auto& [id, tensor] : values) {
    if (!result.values.count(id)) result.values[id] = tensor.download();
  }
  for (engine::NodeId id : graph.outputs()) result.outputs.push_back(result.values.at(id));
  engine::dump_run(graph, result, name(), run);
  return result;
}

Tensor cublaslt_matmul_bias_gelu(const Tensor& a, const Tensor& b, const Tensor& bias) {
  if (const std::string reason = unavailable_reason(); !reason.empty()) throw_input_error("cuBLASLt: {}", reason);
  if (a.dtype() != DType::f32 || b.dtype() != DType::f32 || bias.dtype() != DType::f32 || a.shape().size() != 2 ||
      b.shape().size() != 2 || bias.shape().size() != 1 || a.shape()[1] != b.shape()[0] || bias.shape()[0] != b.shape()[1]) {
    throw_input_error("cuBLASLt matmul+bias+gelu: wants f32 a [m, k], b [k, n], bias [n]; got {}, {}, {}", a.describe(), b.describe(),
                      bias.describe());
  }
  const std::int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  const DeviceTensor da = DeviceTensor::upload(a), db = DeviceTensor::upload(b), dbias = DeviceTensor::upload(bias);
  DeviceTensor dc(DType::f32, {m, n});
  cublasLtHandle_t lt = nullptr;
  check_cublas(cublasLtCreate(&lt), "cublasLtCreate");
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  try {
    check_cublas(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
    check_cublas(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)), "epilogue");
    const void* bias_ptr = dbias.data();
    check_cublas(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)), "bias pointer");
    // column-major view: C^T [n, m] = B^T [n, k] A^T [k, m]; the bias runs along C^T's rows (n)
    check_cublas(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, std::uint64_t(n), std::uint64_t(k), n), "layout b");
    check_cublas(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, std::uint64_t(k), std::uint64_t(m), k), "layout a");
    check_cublas(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, std::uint64_t(n), std::uint64_t(m), n), "layout c");
    const float one = 1, zero = 0;
    check_cublas(cublasLtMatmul(lt, op, &one, db.data(), lb, da.data(), la, &zero, dc.data(), lc, dc.data(), lc, nullptr, nullptr, 0,
                                nullptr),
                 "cublasLtMatmul");
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  } catch (...) {
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(op);
    cublasLtDestroy(lt);
    throw;
  }
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(lt);
  return dc.download();
}

}  // namespace fusebench::cuda
