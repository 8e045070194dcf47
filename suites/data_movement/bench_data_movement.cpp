// Task D (claim §2): pure data movement is bit-identical between eager and fused execution.
// Subgraphs: transpose, reshape, slice, concat, split, broadcast alone; the chains transpose ->
// concat, slice -> broadcast -> concat, split -> transpose -> concat; and two chains with an
// implicit type promotion (concat of the dtype with f32; concat of f16 with bf16, which promotes
// to f32). Axes: subgraph x dtype (f16, bf16, f32) x shape. The timed loop runs the fused path;
// counters: bit_equal (eager vs fused), mismatches, fused kernels; a mismatch is attributed to its
// mechanism (mismatch_explained, the evidence names the switches).
#include <functional>

#include "fusebench/compare.hpp"
#include "fusebench/rng.hpp"
#include "support/case_attribution.hpp"
#include "support/cases.hpp"
#include "support/engine_support.hpp"

namespace fusebench::suite {

namespace {
using engine::Graph;
using engine::NodeId;

// Builds the subgraph on input x of shape [a, b, c] and dtype d; may add inputs.
using Builder = std::function<NodeId(Graph&, NodeId, const Shape&, DType)>;

struct Subgraph {
  const char* name;
  Builder build;
};

std::vector<Subgraph> subgraphs() {
  return {
      {"transpose", [](Graph& g, NodeId x, const Shape&, DType) { return g.transpose(x, 1, 2); }},
      {"reshape",
       [](Graph& g, NodeId x, const Shape& s, DType) {
         return g.reshape(x, {s[0] * s[1], s[2]});
       }},
      {"slice",
       [](Graph& g, NodeId x, const Shape& s, DType) { return g.slice(x, 2, 1, s[2] - 1); }},
      {"concat",
       [](Graph& g, NodeId x, const Shape&, DType) {
         return g.concat({x, x}, 1);
       }},
      {"split",
       [](Graph& g, NodeId x, const Shape& s, DType) {
         return g.split(x, 2, {s[2] / 4, s[2] - s[2] / 4})[1];
       }},
      {"broadcast",
       [](Graph& g, NodeId x, const Shape& s, DType) {
         return g.expand(g.slice(x, 1, 0, 1), {s[0], s[1], s[2]});
       }},
      {"transpose_concat",
       [](Graph& g, NodeId x, const Shape&, DType) {
         return g.concat({g.transpose(x, 1, 2), g.transpose(x, 1, 2)}, 2);
       }},
      {"slice_broadcast_concat",
       [](Graph& g, NodeId x, const Shape& s, DType) {
         return g.concat({g.expand(g.slice(x, 1, 0, 1), {s[0], 4, s[2]}), x}, 1);
       }},
      {"split_transpose_concat",
       [](Graph& g, NodeId x, const Shape& s, DType) {
         const auto parts = g.split(x, 1, {s[1] / 2, s[1] - s[1] / 2});
         return g.concat({g.transpose(parts[0], 1, 2), g.transpose(parts[1], 1, 2)}, 2);
       }},
      {"promote_concat_f32",
       [](Graph& g, NodeId x, const Shape& s, DType) {
         const auto y = g.input("y_f32", s, DType::f32);
         return g.concat({x, y}, 2);
       }},
      {"promote_concat_f16_bf16",
       [](Graph& g, NodeId x, const Shape& s, DType d) {
         const auto y = g.input("y_other", s, d == DType::f16 ? DType::bf16 : DType::f16);
         return g.concat({g.transpose(x, 1, 2), g.transpose(y, 1, 2)}, 1);
       }},
  };
}

void run_case(benchmark::State& state, const std::string& name, const Subgraph& sub, DType dtype,
              const Shape& shape, const SuiteConfig& config) {
  Graph g;
  const NodeId x = g.input("x", shape, dtype);
  g.mark_output(sub.build(g, x, shape, dtype));
  engine::Inputs in;
  for (NodeId id : g.inputs()) {
    const auto& n = g.node(id);
    in[n.name] = random_normal(n.dtype, n.shape, 0, 10, 51, std::uint64_t(id));
  }
  const engine::EngineOptions eager_options, fused_options;
  auto fused = make_executor(config, true, fused_options);
  const auto fused_result = fused->run(g, in);
  const Tensor eager = make_executor(config, false, eager_options)->run(g, in).outputs[0];
  for (auto _ : state) {
    auto result = fused->run(g, in);
    benchmark::DoNotOptimize(result.outputs[0].raw_data());
  }
  const Tensor& out = fused_result.outputs[0];
  state.SetBytesProcessed(std::int64_t(state.iterations()) * std::int64_t(2 * out.nbytes()));
  const auto equal = bit_equal(out, eager);
  state.counters["bit_equal"] = equal.equal ? 1 : 0;
  state.counters["mismatches"] = double(equal.mismatches);
  state.counters["kernels"] = double(fused_result.trace.size());
  state.counters["promoted"] = out.dtype() != dtype ? 1 : 0;
  if (!equal.equal) {
    // Which mechanism moves the data differently: the smallest set of switches after which fused is
    // bit-equal to eager (e.g. a graph break between the ops, or a framework's scalar code).
    CaseAttribution search(config, g, eager_options, fused_options);
    const CaseAttribution::Outcome a = search.attribute(
        [&](engine::Executor& with) { return bit_equal(with.run(g, in).outputs[0], eager).equal; },
        "bit-equal to eager");
    state.counters["mismatch_explained"] = a.status == "explained" ? 1 : 0;
    write_evidence(config, name,
                   {{"subgraph", sub.name},
                    {"dtype", dtype_name(dtype)},
                    {"shape", shape_text(shape)},
                    {"mismatches", equal.mismatches},
                    {"first_mismatch_indices", equal.first_mismatch_indices},
                    {"fused_trace", fused_result.trace[0].to_json()},
                    {"attribution", a.json},
                    {"candidates", search.candidates().size()},
                    {"reruns", search.reruns()}});
  }
}
}  // namespace

void register_benchmarks(const SuiteConfig& config) {
  const std::vector<Shape> shapes =
      config.quick() ? std::vector<Shape>{{2, 16, 32}, {4, 256, 512}}
                     : std::vector<Shape>{{2, 16, 32}, {4, 256, 512}, {8, 2048, 4096}};
  for (const auto& sub : subgraphs()) {
    for (DType dtype : {DType::f16, DType::bf16, DType::f32}) {
      for (const Shape& shape : shapes) {
        const Axes axes = Axes()
                              .add("subgraph", sub.name)
                              .add("dtype", dtype_name(dtype))
                              .add("shape", shape_text(shape))
                              .add("device", config.device);
        register_case("D", axes,
                      [sub, dtype, shape, config](benchmark::State& s, const std::string& name) {
                        run_case(s, name, sub, dtype, shape, config);
                      })
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

}  // namespace fusebench::suite

FUSEBENCH_SUITE_MAIN("data_movement")
