#include "fused_executor.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <vector>

#include "cuda_device.hpp"
#include "cuda_renderer.hpp"
#include "cuda_runtime.hpp"
#include "device_tensor.hpp"
#include "fusebench/engine/planner.hpp"
#include "fusebench/error.hpp"
#include "fusebench/hash.hpp"
#include "nvrtc_compiler.hpp"

namespace fusebench::cuda {

FusedExecutor::FusedExecutor(engine::EngineOptions options, std::filesystem::path cache_dir)
    : options_((options.validate(), options)), cache_(std::move(cache_dir)) {}

FusedExecutor::~FusedExecutor() {
  for (auto& [source, loaded] : loaded_) {
    if (loaded.library != nullptr) cudaLibraryUnload(loaded.library);
  }
  if (cublas_ != nullptr) cublasDestroy(static_cast<cublasHandle_t>(cublas_));
}

engine::RunResult FusedExecutor::run(const engine::Graph& graph, const engine::Inputs& inputs,
                                     const engine::RunOptions& run) {
  if (const std::string reason = unavailable_reason(); !reason.empty())
    throw_input_error("cuda fused executor: {}", reason);
  engine::check_inputs(graph, inputs);
  if (arch_.empty()) arch_ = device_architecture();
  if (cublas_ == nullptr) {
    cublasHandle_t handle = nullptr;
    check_cublas(cublasCreate(&handle), "cublasCreate");
    cublas_ = handle;
  }
  const auto blas = static_cast<cublasHandle_t>(cublas_);
  const engine::FusionPlan plan = engine::plan_fusion(graph);
  engine::RunResult result;
  std::map<engine::NodeId, DeviceTensor> on_device;
  for (engine::NodeId id : graph.inputs()) {
    result.values[id] = inputs.at(graph.node(id).name);
    on_device.emplace(id, DeviceTensor::upload(result.values[id]));
  }
  cudaStream_t stream = nullptr;  // the default stream: cuBLAS and the kernels in one order
  for (const auto& kernel : plan.kernels) {
    CudaKernel emitted = emit_cuda_kernel(graph, kernel, options_);
    auto known = loaded_.find(emitted.code.source);
    const bool reused = known != loaded_.end();
    if (!reused) {
      Loaded l;
      l.cubin = compile_cubin(emitted.code.source, arch_, options_.fma_contraction, cache_);
      const std::string bytes = read_binary(l.cubin.library);
      check_cuda(
          cudaLibraryLoadData(&l.library, bytes.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
          "cudaLibraryLoadData");
      for (const auto& step : emitted.launches) {
        cudaKernel_t fn = nullptr;
        check_cuda(cudaLibraryGetKernel(&fn, l.library, step.entry.c_str()),
                   "cudaLibraryGetKernel");
        l.entries[step.entry] = fn;
      }
      known = loaded_.emplace(emitted.code.source, std::move(l)).first;
    }
    const Loaded& loaded = known->second;
    // FbCtx: buffers (loads, stores, constants), scratch s0..s2, batch
    std::vector<std::uint64_t> ctx;
    double bytes_moved = 0;
    for (engine::NodeId id : emitted.code.loads) {
      ctx.push_back(reinterpret_cast<std::uint64_t>(on_device.at(id).data()));
      bytes_moved += double(on_device.at(id).bytes());
    }
    for (engine::NodeId id : emitted.code.stores) {
      const engine::Node& n = graph.node(id);
      auto [it, inserted] = on_device.insert_or_assign(id, DeviceTensor(n.dtype, n.shape));
      ctx.push_back(reinterpret_cast<std::uint64_t>(it->second.data()));
      bytes_moved += double(it->second.bytes());
    }
    std::vector<DeviceTensor> constants;
    for (const Tensor& c : emitted.code.constants) {
      constants.push_back(DeviceTensor::upload(c));
      ctx.push_back(reinterpret_cast<std::uint64_t>(constants.back().data()));
    }
    const std::size_t element = emitted.compute == DType::f64 ? 8 : 4;
    std::vector<DeviceBuffer> scratch;
    for (std::int64_t count : emitted.scratch_elements) {
      scratch.emplace_back(std::size_t(count) * element);
      ctx.push_back(reinterpret_cast<std::uint64_t>(scratch.back().data()));
    }
    const std::size_t batch_field = ctx.size();
    ctx.push_back(0);
    auto launch = [&](const CudaLaunch& step) {
      void* args[] = {ctx.data()};
      check_cuda(
          cudaLaunchKernel(reinterpret_cast<const void*>(loaded.entries.at(step.entry)),
                           dim3(unsigned(step.grid)), dim3(unsigned(step.block)), args, 0, stream),
          step.entry.c_str());
    };
    EventTimer timer;
    timer.start(stream);
    if (emitted.kind == engine::KernelKind::Matmul) {
      // row-major C[m, n] = A[m, k] B[k, n] is column-major C^T = B^T A^T
      const int m = int(emitted.m), n = int(emitted.n), k = int(emitted.k);
      for (std::int64_t b = 0; b < emitted.batches; ++b) {
        ctx[batch_field] = std::uint64_t(b);
        launch(emitted.launches[0]);
        if (emitted.batched_b || b == 0) launch(emitted.launches[1]);
        if (emitted.compute == DType::f64) {
          const double one = 1, zero = 0;
          check_cublas(cublasDgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one,
                                   static_cast<const double*>(scratch[1].data()), n,
                                   static_cast<const double*>(scratch[0].data()), k, &zero,
                                   static_cast<double*>(scratch[2].data()), n),
                       "cublasDgemm");
        } else {
          const float one = 1, zero = 0;
          check_cublas(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one,
                                   static_cast<const float*>(scratch[1].data()), n,
                                   static_cast<const float*>(scratch[0].data()), k, &zero,
                                   static_cast<float*>(scratch[2].data()), n),
                       "cublasSgemm");
        }
        launch(emitted.launches[2]);
      }
    } else {
      for (const auto& step : emitted.launches) launch(step);
    }
    check_cuda(cudaGetLastError(), "kernel launch");
    const double run_ms = timer.stop_ms(stream);

    engine::KernelTrace trace;
    trace.name = kernel.name;
    trace.kind = engine::kernel_kind_name(kernel.kind);
    for (engine::NodeId m : kernel.members) {
      trace.ops.push_back(
          fmt::format("{}={}", graph.node(m).name, engine::op_name(graph.node(m).kind)));
    }
    trace.lowering = std::move(emitted.code.lowering);
    trace.lowering.push_back(options_.describe());
    trace.lowering.push_back(fmt::format("cuda {}", arch_));
    trace.cache_key = loaded.cubin.key;
    trace.source_path = loaded.cubin.source.string();
    trace.artifact_path = loaded.cubin.library.string();
    trace.artifact_sha256 = loaded.cubin.sha256;
    trace.source_sha256 = sha256_hex(known->first);
    trace.evidence = {
        {"arch", arch_}, {"nvrtc", nvrtc_identity()}, {"launches", emitted.launches.size()}};
    trace.compile_ms = reused ? 0 : loaded.cubin.compile_ms;
    trace.cache_hit = reused || loaded.cubin.hit;
    trace.run_ms = run_ms;
    trace.bytes_moved = bytes_moved;
    result.trace.push_back(std::move(trace));
  }
  for (auto& [id, tensor] : on_device) {
    if (!result.values.count(id)) result.values[id] = tensor.download();
  }
  for (engine::NodeId id : graph.outputs()) {
    auto it = result.values.find(id);
    if (it == result.values.end()) {
      throw_input_error(
          "cuda fused: output {} was not produced by any kernel (an output that is a graph input?)",
          graph.node(id).name);
    }
    result.outputs.push_back(it->second);
  }
  engine::dump_run(graph, result, name(), run);
  return result;
}

}  // namespace fusebench::cuda
