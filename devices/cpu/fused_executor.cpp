#include "fused_executor.hpp"
#include "fusebench/engine/eigen.hpp"

#include <atomic>
#include <chrono>
#include <exception>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "fusebench/hash.hpp"
#include "gemm.hpp"
#include "kernel_abi.hpp"

namespace fusebench::cpu {

namespace {
// The services a kernel calls (FbKernelServices, kernel_abi.hpp).
void pool_parallel_for(void* pool, std::int64_t tasks, void (*task)(void*, std::int64_t),
                       void* context) {
  static_cast<ThreadPool*>(pool)->parallel_for(tasks, [&](std::int64_t t) { task(context, t); });
}
void pool_gemm_f32(void* pool, std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
                   const float* b, float* c) {
  gemm_f32(*static_cast<ThreadPool*>(pool), m, n, k, a, b, c);
}
void pool_gemm_f64(void* pool, std::int64_t m, std::int64_t n, std::int64_t k, const double* a,
                   const double* b, double* c) {
  (void)pool;
  using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<Matrix>(c, m, n).noalias() =
      Eigen::Map<const Matrix>(a, m, k) * Eigen::Map<const Matrix>(b, k, n);
}
void* scratch_allocate(std::int64_t bytes) { return allocate_buffer(std::size_t(bytes)); }
void scratch_release(void* memory, std::int64_t bytes) {
  release_buffer(memory, std::size_t(bytes));
}
}  // namespace

FusedExecutor::FusedExecutor(engine::EngineOptions options, std::filesystem::path cache_dir,
                             std::string compiler)
    : options_((options.validate(), options)),
      pool_(options.threads),
      cache_(std::move(cache_dir)),
      jit_(options.fma_contraction, compiler),
      jit_other_contraction_(!options.fma_contraction, std::move(compiler)) {}

FusedExecutor::PreparedGraph& FusedExecutor::prepare(const engine::Graph& graph) {
  auto& candidates = prepared_[graph.fingerprint()];
  for (auto& known : candidates) {
    if (known->graph.same_structure(graph)) {
      known->reused = true;
      return *known;
    }
  }
  auto prepared = std::make_unique<PreparedGraph>();
  prepared->graph = graph;
  std::set<std::string> split_after;
  for (const auto& [op, knobs] : options_.per_op) {
    if (knobs.split_after) split_after.insert(op);
  }
  const engine::FusionPlan plan = engine::plan_fusion(graph, split_after);
  std::vector<PreparedKernel> kernels(plan.kernels.size());
  std::vector<const JitCompiler*> compilers(plan.kernels.size());
  for (std::size_t i = 0; i < plan.kernels.size(); ++i) {
    const auto& kernel = plan.kernels[i];
    PreparedKernel& k = kernels[i];
    k.emitted = emit_cpp_kernel(graph, kernel, options_);
    // FP contraction is the compiler's flag: a member switched the other way sets it for the
    // whole kernel, and the source says so (a different source: a different cache key).
    std::string contraction_switch;
    for (engine::NodeId m : kernel.members) {
      const std::string& op = graph.node(m).name;
      if (options_.at_op(op).fma_contraction != options_.fma_contraction) contraction_switch = op;
    }
    compilers[i] = contraction_switch.empty() ? &jit_ : &jit_other_contraction_;
    if (!contraction_switch.empty()) {
      const std::string flag = options_.fma_contraction ? "off" : "fast";
      k.emitted.source.insert(
          0, fmt::format("// compiled with -ffp-contract={} (a member's fusion switch)\n", flag));
      k.emitted.lowering.push_back(
          fmt::format("{}: kernel compiled with -ffp-contract={}", contraction_switch, flag));
    }
  }
  // The sources no earlier graph loaded, built on every core at once (a cold training graph has
  // about a hundred kernels, each a compiler run of its own), then loaded in kernel order.
  std::vector<std::size_t> to_build;  // first kernel of each new source
  std::set<std::string> seen;
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    const std::string& source = kernels[i].emitted.source;
    if (!loaded_.count(source) && seen.insert(source).second) to_build.push_back(i);
  }
  std::vector<engine::CachedArtifact> built(to_build.size());
  std::vector<std::exception_ptr> failed(to_build.size());
  {
    std::atomic<std::size_t> next{0};
    auto work = [&] {
      for (std::size_t b = next++; b < to_build.size(); b = next++) {
        try {
          built[b] = compilers[to_build[b]]->build(cache_, kernels[to_build[b]].emitted.source);
        } catch (...) {
          failed[b] = std::current_exception();
        }
      }
    };
    const std::size_t workers =
        std::min<std::size_t>(to_build.size(), std::max(1u, std::thread::hardware_concurrency()));
    std::vector<std::thread> threads;
    for (std::size_t w = 1; w < workers; ++w) threads.emplace_back(work);
    work();
    for (auto& thread : threads) thread.join();
  }
  for (const auto& error : failed) {
    if (error) std::rethrow_exception(error);  // the first failing kernel in graph order
  }
  for (std::size_t b = 0; b < to_build.size(); ++b) {
    const std::size_t i = to_build[b];
    const KernelFunction function = compilers[i]->load(built[b]);
    loaded_.emplace(kernels[i].emitted.source,
                    LoadedKernel{std::move(built[b]), function,
                                 sha256_hex(std::string_view(kernels[i].emitted.source))});
  }
  std::set<std::string> first_use;  // a source's first kernel in this graph counts its compile
  for (std::size_t i = 0; i < plan.kernels.size(); ++i) {
    const auto& kernel = plan.kernels[i];
    PreparedKernel k = std::move(kernels[i]);
    auto known = loaded_.find(k.emitted.source);
    // the same source in another graph, or an earlier kernel of this one
    const bool reused = !seen.count(k.emitted.source) || !first_use.insert(k.emitted.source).second;
    k.emitted.source.clear();  // kept once, as loaded_'s key
    k.emitted.source.shrink_to_fit();
    k.loaded = &known->second;
    const engine::CachedArtifact& artifact = known->second.artifact;
    k.compile_ms = reused ? 0 : artifact.compile_ms;
    k.built_cache_hit = reused || artifact.hit;
    engine::KernelTrace& trace = k.trace;
    trace.name = kernel.name;
    trace.kind = engine::kernel_kind_name(kernel.kind);
    for (engine::NodeId m : kernel.members) {
      trace.ops.push_back(
          fmt::format("{}={}", graph.node(m).name, engine::op_name(graph.node(m).kind)));
    }
    trace.lowering = k.emitted.lowering;
    trace.lowering.push_back(options_.describe());
    trace.cache_key = artifact.key;
    trace.source_path = artifact.source.string();
    trace.artifact_path = artifact.library.string();
    trace.artifact_sha256 = artifact.sha256;
    trace.source_sha256 = known->second.source_sha256;
    if (kernel.kind == engine::KernelKind::Indexed) {
      const engine::Node& op = graph.node(kernel.anchor);
      k.indexed_op = op.id;
      k.ids_source = engine::view_sources(graph, op.inputs[1]).at(0);
      k.id_bound =
          op.kind == engine::OpKind::GatherRows ? graph.node(op.inputs[0]).shape[0] : op.shape[0];
    }
    prepared->kernels.push_back(std::move(k));
  }
  candidates.push_back(std::move(prepared));
  return *candidates.back();
}

engine::RunResult FusedExecutor::run(const engine::Graph& graph, const engine::Inputs& inputs,
                                     const engine::RunOptions& run) {
  engine::check_inputs(graph, inputs);
  PreparedGraph& prepared = prepare(graph);
  engine::RunResult result;
  for (engine::NodeId id : graph.inputs()) result.values[id] = inputs.at(graph.node(id).name);
  const FbKernelServices services{pool_parallel_for, &pool_,           pool_gemm_f32,
                                  pool_gemm_f64,     scratch_allocate, scratch_release};
  result.trace.reserve(prepared.kernels.size());
  for (PreparedKernel& k : prepared.kernels) {
    const KernelFunction fn = k.loaded->function;
    // A kernel cannot report a bad id: they are checked here (InputError naming op, position, id).
    if (k.indexed_op >= 0)
      engine::checked_row_ids(graph.node(k.indexed_op), result.values.at(k.ids_source), k.id_bound);
    std::vector<Tensor> keep;  // contiguous operands live until the kernel returns
    std::vector<void*> buffers;
    double bytes_moved = 0;
    for (engine::NodeId id : k.emitted.loads) {
      keep.push_back(result.values.at(id).contiguous());
      buffers.push_back(keep.back().raw_data());
      bytes_moved += double(keep.back().nbytes());
    }
    for (engine::NodeId id : k.emitted.stores) {
      const engine::Node& n = graph.node(id);
      Tensor out = Tensor::uninitialized(n.dtype, n.shape);
      buffers.push_back(out.raw_data());
      bytes_moved += double(out.nbytes());
      result.values[id] = std::move(out);
    }
    for (Tensor& constant : k.emitted.constants) buffers.push_back(constant.raw_data());
    const FbKernelArgs args{buffers.data(), &services};
    const auto start = std::chrono::steady_clock::now();
    fn(&args);
    const double run_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

    engine::KernelTrace trace = k.trace;
    // The first run of a graph pays (or finds on disk) its kernels' compilation; later runs of the
    // same graph reuse the loaded kernels: no compile time, a cache hit.
    trace.compile_ms = prepared.reused ? 0 : k.compile_ms;
    trace.cache_hit = prepared.reused || k.built_cache_hit;
    trace.run_ms = run_ms;
    trace.bytes_moved = bytes_moved;
    result.trace.push_back(std::move(trace));
  }
  for (engine::NodeId id : graph.outputs()) {
    auto it = result.values.find(id);
    if (it == result.values.end()) {
      throw_input_error(
          "fused: output {} was not produced by any kernel (an output that is a graph input?)",
          graph.node(id).name);
    }
    result.outputs.push_back(it->second);
  }
  engine::dump_run(graph, result, name(), run);
  return result;
}

}  // namespace fusebench::cpu
