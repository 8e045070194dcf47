#include "codegen.hpp"

#include "nvrtc_compiler.hpp"
#include "sass.hpp"

namespace fusebench::cuda {

std::vector<CompiledKernel> compile_graph(const engine::Graph& graph,
                                          const engine::EngineOptions& options,
                                          const std::string& arch, engine::KernelCache& cache) {
  options.validate();
  std::vector<CompiledKernel> out;
  for (const auto& plan : engine::plan_fusion(graph).kernels) {
    CompiledKernel k{plan, emit_cuda_kernel(graph, plan, options), {}, arch};
    k.cubin = compile_cubin(k.kernel.code.source, arch, options.fma_contraction, cache);
    out.push_back(std::move(k));
  }
  return out;
}

nlohmann::json kernel_evidence(const CompiledKernel& k) {
  return {{"kernel", k.plan.name},
          {"lowering", k.kernel.code.lowering},
          {"cubin_sha256", k.cubin.sha256},
          {"cache_key", k.cubin.key},
          {"compile_ms", k.cubin.hit ? 0.0 : k.cubin.compile_ms},
          {"cache_hit", k.cubin.hit},
          {"sass", disassemble_cubin(k.cubin.library).to_json()}};
}

nlohmann::json sass_evidence(const engine::Graph& graph, const engine::EngineOptions& options,
                             const std::vector<std::string>& archs, engine::KernelCache cache) {
  nlohmann::json evidence = {{"nvrtc", nvrtc_identity()},
                             {"knobs", options.to_json()},
                             {"architectures", nlohmann::json::object()}};
  for (const auto& arch : archs) {
    nlohmann::json kernels = nlohmann::json::array();
    for (const auto& k : compile_graph(graph, options, arch, cache))
      kernels.push_back(kernel_evidence(k));
    evidence["architectures"][arch] = std::move(kernels);
  }
  return evidence;
}

}  // namespace fusebench::cuda
