#include "eager_executor.hpp"

#include <fmt/format.h>

#include <array>
#include <map>
#include <utility>

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
    case DType::f16:
      return kernels::Storage::F16;
    case DType::bf16:
      return kernels::Storage::BF16;
    case DType::f32:
      return kernels::Storage::F32;
    case DType::f64:
      return kernels::Storage::F64;
    default:
      throw_input_error("cuda eager: dtype {} is not a floating dtype", dtype_name(d));
  }
}
int approx_mode(engine::ApproxMode m) {
  switch (m) {
    case engine::ApproxMode::Ieee:
      return 0;
    case engine::ApproxMode::NewtonBitTrick:
      return 1;
    case engine::ApproxMode::NewtonHardware:
      return 2;
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
  if (shape.size() > std::size_t(kernels::kMaxRank))
    throw_input_error("cuda eager: rank {} above {}", shape.size(), kernels::kMaxRank);
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
    case OpKind::Neg:
      return kernels::Unary::Neg;
    case OpKind::Exp:
      return kernels::Unary::Exp;
    case OpKind::Sqrt:
      return kernels::Unary::Sqrt;
    case OpKind::Rsqrt:
      return kernels::Unary::Rsqrt;
    case OpKind::GeluErf:
      return kernels::Unary::GeluErf;
    case OpKind::GeluTanh:
      return kernels::Unary::GeluTanh;
    case OpKind::AddScalar:
      return kernels::Unary::AddScalar;
    case OpKind::MulScalar:
      return kernels::Unary::MulScalar;
    case OpKind::Log:
      return kernels::Unary::Log;
    default:
      return kernels::Unary::Cast;
  }
}
// t rounded to out's dtype (a Cast kernel into out, allocated beforehand).
void convert_into(const DeviceTensor& t, DeviceTensor& out, const kernels::Knobs& knobs) {
  kernels::unary(kernels::Unary::Cast, storage(t.dtype()), t.data(), storage(out.dtype()),
                 out.data(), shape_numel(t.shape()), 0, nullptr, knobs);
}
DType compute_dtype(DType d) { return d == DType::f64 ? DType::f64 : DType::f32; }

// ---- the kernel launches, one per op kind
// What one op's launch reads and writes: its node, the device values of the graph so far, the
// output it fills (allocated with the node's dtype and shape), the temporaries prepare() allocated
// for it (in the order its launch takes them), and the trace that records its lowering decisions.
struct Launch {
  const engine::Graph& graph;
  const Node& n;
  const std::map<engine::NodeId, DeviceTensor>& values;
  DeviceTensor& out;
  std::vector<DeviceTensor>& temporaries;
  engine::KernelTrace& trace;
  const kernels::Knobs& knobs;
  const engine::EngineOptions& options;
  cublasHandle_t blas;
  const DeviceTensor& operand(std::size_t i) const { return values.at(n.inputs[i]); }
  std::int64_t count() const { return shape_numel(n.shape); }
};

void binary(Launch& l, kernels::Binary op) {
  const DeviceTensor &x = l.operand(0), &y = l.operand(1);
  kernels::binary(op, storage(x.dtype()), x.data(), broadcast_layout(x.shape(), l.n.shape),
                  storage(y.dtype()), y.data(), broadcast_layout(y.shape(), l.n.shape),
                  storage(l.n.dtype), l.out.data(), l.count(), l.knobs);
}
void add(Launch& l) { binary(l, kernels::Binary::Add); }
void sub(Launch& l) { binary(l, kernels::Binary::Sub); }
void mul(Launch& l) { binary(l, kernels::Binary::Mul); }
void div(Launch& l) { binary(l, kernels::Binary::Div); }
void gelu_tanh_backward(Launch& l) { binary(l, kernels::Binary::GeluTanhBackward); }

bool broadcast_scalar(const Launch& l) {
  return l.options.scalar_lowering == engine::ScalarLowering::BroadcastTensor &&
         l.n.dtype != DType::f64;
}
// x + c or x * c: the scalar as an fp32 immediate, or as a one-element tensor of the storage dtype
// read from GPU memory (the BroadcastTensor lowering).
void scalar(Launch& l) {
  const Node& n = l.n;
  const DeviceTensor& x = l.operand(0);
  const void* scalar_ptr = nullptr;
  if (broadcast_scalar(l)) {
    scalar_ptr = l.temporaries.at(0).data();
    l.trace.lowering.push_back(fmt::format("{}: broadcast tensor {} (loaded from GPU memory)",
                                           n.name, dtype_name(n.dtype)));
  } else {
    l.trace.lowering.push_back(
        fmt::format("{}: fp32 immediate {:.9g}", n.name, double(float(n.scalar))));
  }
  kernels::unary(unary_op(n.kind), storage(x.dtype()), x.data(), storage(n.dtype), l.out.data(),
                 l.count(), n.scalar, scalar_ptr, l.knobs);
}
void add_scalar(Launch& l) { scalar(l); }
void mul_scalar(Launch& l) { scalar(l); }

// Neg, Exp, Sqrt, Rsqrt, GeluErf, GeluTanh, Log and Cast: one element-wise kernel each.
void unary(Launch& l) {
  const DeviceTensor& x = l.operand(0);
  kernels::unary(unary_op(l.n.kind), storage(x.dtype()), x.data(), storage(l.n.dtype), l.out.data(),
                 l.count(), 0, nullptr, l.knobs);
}

void causal_mask(Launch& l) {
  const Node& n = l.n;
  kernels::causal_mask(storage(n.dtype), l.operand(0).data(), l.out.data(), l.count(),
                       n.shape[n.shape.size() - 2], n.shape.back(), n.scalar);
}

// Sum, Mean and Max: a split reduction, tiles of reduce_tile elements, 32 lanes.
void reduction(Launch& l) {
  const Node& n = l.n;
  const DeviceTensor& x = l.operand(0);
  std::int64_t outer = 1, inner = 1;
  const std::int64_t extent = x.shape()[std::size_t(n.axis)];
  for (int j = 0; j < n.axis; ++j) outer *= x.shape()[std::size_t(j)];
  for (std::size_t j = std::size_t(n.axis) + 1; j < x.shape().size(); ++j) inner *= x.shape()[j];
  const std::int64_t tile = std::min(l.options.reduce_tile, extent);
  const DeviceTensor& partials = l.temporaries.at(0);
  const kernels::Reduce op = n.kind == OpKind::Sum    ? kernels::Reduce::Sum
                             : n.kind == OpKind::Mean ? kernels::Reduce::Mean
                                                      : kernels::Reduce::Max;
  kernels::reduce(op, storage(x.dtype()), x.data(), storage(n.dtype), l.out.data(), outer, extent,
                  inner, l.knobs, partials.data());
  l.trace.lowering.push_back(fmt::format("{}: split reduction, tile {}, 32 lanes", n.name, tile));
}

// LayerNorm and Softmax over the last axis: one row kernel.
void row(Launch& l) {
  const Node& n = l.n;
  const DeviceTensor& x = l.operand(0);
  const std::int64_t k = n.shape.back(), rows = l.count() / k;
  const DeviceTensor& scratch = l.temporaries.at(0);
  const bool ln = n.kind == OpKind::LayerNorm;
  const DeviceTensor* w = ln ? &l.operand(1) : nullptr;
  const DeviceTensor* b = ln ? &l.operand(2) : nullptr;
  kernels::row(ln ? kernels::Row::LayerNorm : kernels::Row::Softmax, storage(x.dtype()), x.data(),
               w ? storage(w->dtype()) : kernels::Storage::F32, w ? w->data() : nullptr,
               b ? storage(b->dtype()) : kernels::Storage::F32, b ? b->data() : nullptr,
               l.out.data(), rows, k, n.eps, l.knobs, scratch.data());
}

// cuBLAS in fp32 (fp64 for fp64 tensors), one GEMM per batch element, rounded to the dtype after.
// Operands already in the compute type are read in place; the others are converted into
// temporaries (a, b, then the result where the node's dtype is not the compute type).
struct MatmulTemporaries {
  bool a, b, c;
};
MatmulTemporaries matmul_temporaries(const Launch& l) {
  const DType compute = compute_dtype(l.n.dtype);
  return {l.operand(0).dtype() != compute, l.operand(1).dtype() != compute, l.n.dtype != compute};
}
void matmul(Launch& l) {
  const Node& n = l.n;
  const DeviceTensor &x = l.operand(0), &y = l.operand(1);
  const DType compute = compute_dtype(n.dtype);
  const std::int64_t m = x.shape()[x.shape().size() - 2], kk = x.shape().back(),
                     nn = y.shape().back();
  const std::int64_t batches = shape_numel(x.shape()) / (m * kk);
  const bool batched_b = y.shape().size() > 2;
  const MatmulTemporaries converted = matmul_temporaries(l);
  std::size_t next = 0;
  DeviceTensor* const a_copy = converted.a ? &l.temporaries.at(next++) : nullptr;
  DeviceTensor* const b_copy = converted.b ? &l.temporaries.at(next++) : nullptr;
  DeviceTensor& c = converted.c ? l.temporaries.at(next++) : l.out;
  if (a_copy != nullptr) convert_into(x, *a_copy, l.knobs);
  if (b_copy != nullptr) convert_into(y, *b_copy, l.knobs);
  const DeviceTensor& a = a_copy != nullptr ? *a_copy : x;
  const DeviceTensor& b = b_copy != nullptr ? *b_copy : y;
  for (std::int64_t i = 0; i < batches; ++i) {
    // row-major C = A B is column-major C^T = B^T A^T
    const std::size_t e = compute == DType::f64 ? 8 : 4;
    const auto* pa = static_cast<const char*>(a.data()) + std::size_t(i * m * kk) * e;
    const auto* pb =
        static_cast<const char*>(b.data()) + (batched_b ? std::size_t(i * kk * nn) * e : 0);
    auto* pc = static_cast<char*>(c.data()) + std::size_t(i * m * nn) * e;
    if (compute == DType::f64) {
      const double one = 1, zero = 0;
      check_cublas(cublasDgemm(l.blas, CUBLAS_OP_N, CUBLAS_OP_N, int(nn), int(m), int(kk), &one,
                               reinterpret_cast<const double*>(pb), int(nn),
                               reinterpret_cast<const double*>(pa), int(kk), &zero,
                               reinterpret_cast<double*>(pc), int(nn)),
                   "cublasDgemm");
    } else {
      const float one = 1, zero = 0;
      check_cublas(cublasSgemm(l.blas, CUBLAS_OP_N, CUBLAS_OP_N, int(nn), int(m), int(kk), &one,
                               reinterpret_cast<const float*>(pb), int(nn),
                               reinterpret_cast<const float*>(pa), int(kk), &zero,
                               reinterpret_cast<float*>(pc), int(nn)),
                   "cublasSgemm");
    }
  }
  if (converted.c) convert_into(c, l.out, l.knobs);
  l.trace.lowering.push_back(
      fmt::format("{}: cuBLAS GEMM, {} accumulation", n.name, dtype_name(compute)));
}

void permute(Launch& l) {
  const Node& n = l.n;
  const DeviceTensor& x = l.operand(0);
  kernels::Layout src = contiguous_layout(n.shape);
  const Shape in_strides = contiguous_strides(x.shape());
  for (std::size_t j = 0; j < n.shape.size(); ++j)
    src.strides[j] = in_strides[std::size_t(n.permutation[j])];
  kernels::copy(storage(n.dtype), x.data(), src, l.out.data(), contiguous_layout(n.shape),
                l.count());
}
void reshape(Launch& l) {
  kernels::copy(storage(l.n.dtype), l.operand(0).data(), contiguous_layout(l.n.shape), l.out.data(),
                contiguous_layout(l.n.shape), l.count());
}
void slice(Launch& l) {
  const Node& n = l.n;
  const DeviceTensor& x = l.operand(0);
  kernels::Layout src = contiguous_layout(n.shape);
  const Shape in_strides = contiguous_strides(x.shape());
  for (std::size_t j = 0; j < n.shape.size(); ++j) src.strides[j] = in_strides[j];
  src.offset = n.start * in_strides[std::size_t(n.axis)];
  kernels::copy(storage(n.dtype), x.data(), src, l.out.data(), contiguous_layout(n.shape),
                l.count());
}
void expand(Launch& l) {
  const DeviceTensor& x = l.operand(0);
  kernels::copy(storage(l.n.dtype), x.data(), broadcast_layout(x.shape(), l.n.shape), l.out.data(),
                contiguous_layout(l.n.shape), l.count());
}
void concat(Launch& l) {
  const Node& n = l.n;
  const Shape out_strides = contiguous_strides(n.shape);
  std::int64_t start = 0;
  std::size_t next = 0;
  for (engine::NodeId part_id : n.inputs) {
    const DeviceTensor* part = &l.values.at(part_id);
    if (part->dtype() != n.dtype) {
      l.trace.lowering.push_back(fmt::format("{}: operand {} promoted to {}", n.name,
                                             l.graph.node(part_id).name, dtype_name(n.dtype)));
      DeviceTensor& promoted = l.temporaries.at(next++);
      convert_into(*part, promoted, l.knobs);
      part = &promoted;
    }
    kernels::Layout dst = contiguous_layout(part->shape());
    for (std::size_t j = 0; j < n.shape.size(); ++j) dst.strides[j] = out_strides[j];
    dst.offset = start * out_strides[std::size_t(n.axis)];
    kernels::copy(storage(n.dtype), part->data(), contiguous_layout(part->shape()), l.out.data(),
                  dst, shape_numel(part->shape()));
    start += part->shape()[std::size_t(n.axis)];
  }
}

void no_kernel(Launch& l) {
  throw_input_error("cuda eager: op {} ({}) has no CUDA kernel", l.n.name,
                    engine::op_name(l.n.kind));
}

using LaunchFunction = void (*)(Launch&);
// Indexed by OpKind, in the enum's order (checked below).
constexpr std::array kLaunches = {
    std::pair{OpKind::Input, LaunchFunction{no_kernel}},
    std::pair{OpKind::Add, LaunchFunction{add}},
    std::pair{OpKind::Sub, LaunchFunction{sub}},
    std::pair{OpKind::Mul, LaunchFunction{mul}},
    std::pair{OpKind::Div, LaunchFunction{div}},
    std::pair{OpKind::AddScalar, LaunchFunction{add_scalar}},
    std::pair{OpKind::MulScalar, LaunchFunction{mul_scalar}},
    std::pair{OpKind::Neg, LaunchFunction{unary}},
    std::pair{OpKind::Exp, LaunchFunction{unary}},
    std::pair{OpKind::Sqrt, LaunchFunction{unary}},
    std::pair{OpKind::Rsqrt, LaunchFunction{unary}},
    std::pair{OpKind::GeluErf, LaunchFunction{unary}},
    std::pair{OpKind::GeluTanh, LaunchFunction{unary}},
    std::pair{OpKind::Cast, LaunchFunction{unary}},
    std::pair{OpKind::Log, LaunchFunction{unary}},
    std::pair{OpKind::GeluTanhBackward, LaunchFunction{gelu_tanh_backward}},
    std::pair{OpKind::CausalMask, LaunchFunction{causal_mask}},
    std::pair{OpKind::Sum, LaunchFunction{reduction}},
    std::pair{OpKind::Mean, LaunchFunction{reduction}},
    std::pair{OpKind::Max, LaunchFunction{reduction}},
    std::pair{OpKind::LayerNorm, LaunchFunction{row}},
    std::pair{OpKind::Softmax, LaunchFunction{row}},
    std::pair{OpKind::Matmul, LaunchFunction{matmul}},
    std::pair{OpKind::GatherRows, LaunchFunction{no_kernel}},
    std::pair{OpKind::ScatterAddRows, LaunchFunction{no_kernel}},
    std::pair{OpKind::Permute, LaunchFunction{permute}},
    std::pair{OpKind::Reshape, LaunchFunction{reshape}},
    std::pair{OpKind::Slice, LaunchFunction{slice}},
    std::pair{OpKind::Concat, LaunchFunction{concat}},
    std::pair{OpKind::Expand, LaunchFunction{expand}},
};
static_assert(
    [] {
      for (std::size_t i = 0; i < kLaunches.size(); ++i) {
        if (std::size_t(kLaunches[i].first) != i) return false;
      }
      return true;
    }(),
    "kLaunches must list every OpKind in the enum's order");

// What an op's launch needs beyond its output, allocated (and a broadcast scalar uploaded) before
// its timed region: cudaMalloc and a synchronous copy wait for the device, and would be counted
// as the op's time.
void prepare(Launch& l) {
  const Node& n = l.n;
  const DType compute = compute_dtype(n.dtype);
  switch (n.kind) {
    case OpKind::AddScalar:
    case OpKind::MulScalar:
      if (broadcast_scalar(l)) {
        l.temporaries.push_back(
            DeviceTensor::upload(visit_floating(n.dtype, "constant", [&](auto tag) {
              using T = decltype(tag);
              return Tensor::from_values<T>({1}, std::vector<T>{round_to<T>(n.scalar)});
            })));
      }
      break;
    case OpKind::Sum:
    case OpKind::Mean:
    case OpKind::Max: {
      const Shape& in = l.operand(0).shape();
      const std::int64_t extent = in[std::size_t(n.axis)];
      const std::int64_t tile = std::min(l.options.reduce_tile, extent);
      const std::int64_t positions = shape_numel(in) / extent;
      l.temporaries.emplace_back(compute, Shape{positions * ((extent + tile - 1) / tile)});
      break;
    }
    case OpKind::LayerNorm:
    case OpKind::Softmax: {
      const std::int64_t k = n.shape.back();
      l.temporaries.emplace_back(
          compute, Shape{kernels::row_scratch_elements(l.count() / k, k, compute == DType::f64)});
      break;
    }
    case OpKind::Matmul: {
      const MatmulTemporaries converted = matmul_temporaries(l);
      if (converted.a) l.temporaries.emplace_back(compute, l.operand(0).shape());
      if (converted.b) l.temporaries.emplace_back(compute, l.operand(1).shape());
      if (converted.c) l.temporaries.emplace_back(compute, n.shape);
      break;
    }
    case OpKind::Concat:
      for (engine::NodeId part_id : n.inputs) {
        const DeviceTensor& part = l.values.at(part_id);
        if (part.dtype() != n.dtype) l.temporaries.emplace_back(n.dtype, part.shape());
      }
      break;
    default:
      break;
  }
}

void launch(Launch& l) {
  const auto index = std::size_t(l.n.kind);
  if (index >= kLaunches.size()) no_kernel(l);
  kLaunches[index].second(l);
}
}  // namespace

EagerExecutor::EagerExecutor(engine::EngineOptions options)
    : options_((options.validate(), options)) {}

EagerExecutor::~EagerExecutor() {
  if (cublas_ != nullptr) cublasDestroy(static_cast<cublasHandle_t>(cublas_));
}

engine::RunResult EagerExecutor::run(const engine::Graph& graph, const engine::Inputs& inputs,
                                     const engine::RunOptions& run) {
  if (const std::string reason = unavailable_reason(); !reason.empty())
    throw_input_error("cuda eager executor: {}", reason);
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
    trace.kind = engine::op_kernel_kind(n.kind);
    trace.ops.push_back(fmt::format("{}={}", n.name, engine::op_name(n.kind)));
    DeviceTensor out(n.dtype, n.shape);
    std::vector<DeviceTensor> temporaries;
    Launch launch_of_node{graph, n, values, out, temporaries, trace, knobs, o, blas};
    prepare(launch_of_node);
    EventTimer timer;
    timer.start(nullptr);
    launch(launch_of_node);
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
  if (const std::string reason = unavailable_reason(); !reason.empty())
    throw_input_error("cuBLASLt: {}", reason);
  if (a.dtype() != DType::f32 || b.dtype() != DType::f32 || bias.dtype() != DType::f32 ||
      a.shape().size() != 2 || b.shape().size() != 2 || bias.shape().size() != 1 ||
      a.shape()[1] != b.shape()[0] || bias.shape()[0] != b.shape()[1]) {
    throw_input_error(
        "cuBLASLt matmul+bias+gelu: wants f32 a [m, k], b [k, n], bias [n]; got {}, {}, {}",
        a.describe(), b.describe(), bias.describe());
  }
  const std::int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  const DeviceTensor da = DeviceTensor::upload(a), db = DeviceTensor::upload(b),
                     dbias = DeviceTensor::upload(bias);
  DeviceTensor dc(DType::f32, {m, n});
  cublasLtHandle_t lt = nullptr;
  check_cublas(cublasLtCreate(&lt), "cublasLtCreate");
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  try {
    check_cublas(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                 "cublasLtMatmulDescCreate");
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
    check_cublas(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                sizeof(epilogue)),
                 "epilogue");
    const void* bias_ptr = dbias.data();
    check_cublas(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr,
                                                sizeof(bias_ptr)),
                 "bias pointer");
    // column-major view: C^T [n, m] = B^T [n, k] A^T [k, m]; the bias runs along C^T's rows (n)
    check_cublas(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, std::uint64_t(n), std::uint64_t(k), n),
                 "layout b");
    check_cublas(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, std::uint64_t(k), std::uint64_t(m), k),
                 "layout a");
    check_cublas(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, std::uint64_t(n), std::uint64_t(m), n),
                 "layout c");
    const float one = 1, zero = 0;
    check_cublas(cublasLtMatmul(lt, op, &one, db.data(), lb, da.data(), la, &zero, dc.data(), lc,
                                dc.data(), lc, nullptr, nullptr, 0, nullptr),
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
