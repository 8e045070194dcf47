#include "cuda_renderer.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace fusebench::cuda {

using namespace engine;
using namespace engine::emit;

namespace {

constexpr int kBlock = 256;                 // threads per block of the element-wise steps
constexpr std::int64_t kMaxGrid = 1 << 20;  // blocks of a grid-stride loop
constexpr int kWarp = 32;                   // = scalar_math's kReduceLanes: one lane per thread

std::int64_t blocks_for(std::int64_t threads) {
  return std::min<std::int64_t>(kMaxGrid,
                                std::max<std::int64_t>(1, (threads + kBlock - 1) / kBlock));
}

class CudaRenderer final : public CStyleEmitter {
 public:
  CudaRenderer(const engine::Graph& g, const engine::KernelPlan& k, const engine::EngineOptions& o)
      : CStyleEmitter(g, k, o) {
    kernel_.kind = k.kind;
    kernel_.compute = g.node(k.anchor).dtype == DType::f64 ? DType::f64 : DType::f32;
  }

  CudaKernel emit() {
    const std::string body = kernel_body();
    std::string header = fmt::format("// fusebench fused CUDA kernel {} ({})\n// knobs: {}\n",
                                     k_.name, kernel_kind_name(k_.kind), o_.describe());
    for (NodeId m : k_.members) {
      const Node& n = g_.node(m);
      header += fmt::format("//   {} = {} -> {}{}{}\n", n.name, op_name(n.kind),
                            dtype_name(n.dtype), shape_string(n.shape), switches_comment(m));
    }
    // Every field is 8 bytes, so the host fills the struct as an array of 64-bit words.
    std::string ctx = "struct FbCtx {\n";
    auto add_buffer = [&](const std::string& name, DType d, bool writable) {
      ctx += fmt::format("  {}{}* {};\n", writable ? "" : "const ", storage_type(d), name);
    };
    for (NodeId id : out_.loads) add_buffer(buffers_.at(id), g_.node(id).dtype, false);
    for (NodeId id : out_.stores) add_buffer(buffers_.at(id), g_.node(id).dtype, true);
    for (std::size_t i = 0; i < out_.constants.size(); ++i) {
      add_buffer(fmt::format("c{}", i), out_.constants[i].dtype(), false);
    }
    ctx += fmt::format("  {0}* s0;\n  {0}* s1;\n  {0}* s2;\n  long long batch;\n}};\n",
                       ctype(kernel_.compute));
    out_.source = header + cuda_kernel_prelude() + ctx + body;
    kernel_.code = std::move(out_);
    return std::move(kernel_);
  }

 private:
  // ---- the CUDA language (a GPU thread converts its own elements: no f16 staging)
  std::string_view emitter_name() const override { return "CUDA emitter"; }
  std::string index_type() const override { return "long long"; }
  // A declared variable assigned in an if / else chain.
  std::string concat_statement(const std::string& type, const std::string& result,
                               const std::vector<ConcatPart>& parts) const override {
    std::string code = fmt::format("{} {};\n", type, result);
    for (const ConcatPart& part : parts) {
      code += part.condition.empty() ? "  {\n" : fmt::format("  if ({}) {{\n", part.condition);
      for (const auto& l : part.lines) code += "    " + l + "\n";
      code += fmt::format("    {} = {};\n  }}{}", result, part.value,
                          part.condition.empty() ? "" : " else ");
    }
    return code;
  }
  // The CUDA kernels' sources (and so their cache keys) predate the identity map's use for
  // reshapes; a load through a reshape ravels its indices again (the same element).
  bool reshape_reads_at_flat_offset() const override { return false; }

  void launch(const std::string& entry, std::int64_t grid, int block = kBlock) {
    kernel_.launches.push_back({entry, grid, block});
  }

  // A grid-stride loop of `var` over [0, count) around `body`.
  static std::string grid_loop(const std::string& var, std::int64_t count,
                               const std::string& body) {
    return fmt::format(
        "  for (long long {0} = blockIdx.x * (long long)blockDim.x + threadIdx.x; {0} < {1}LL; "
        "{0} += (long long)gridDim.x * blockDim.x) {{\n{2}  }}\n",
        var, count, body);
  }
  static std::string entry(const std::string& name, const std::string& body) {
    return fmt::format("extern \"C\" __global__ void {}(const FbCtx c) {{\n{}}}\n", name, body);
  }

  // ---- kernel skeletons
  std::string pointwise() override {
    const Node& anchor = g_.node(k_.anchor);
    const std::int64_t n = shape_numel(anchor.shape);
    scopes_.emplace_back();
    const Index idx = loop_index(anchor.shape, "i", "i");
    store_members(k_.members, idx, "i");
    launch("fb_pointwise", blocks_for(n));
    return entry("fb_pointwise", grid_loop("i", n, take_lines("    ")));
  }

  // The accumulate step of a reduction lane: a sum rounded by the accumulator knob, or a maximum
  // that propagates NaN (scalar_math's row_max comparison).
  std::string accumulate(const Node& r, const std::string& acc, const std::string& v,
                         const std::string& round) const {
    if (r.kind == OpKind::Max)
      return fmt::format("{0} = ({1} > {0} || {1} != {1}) ? {1} : {0};", acc, v);
    return fmt::format("{0} = {1}({0} + {2});", acc, round, v);
  }

  std::string reduction() override {
    const Node& r = g_.node(k_.anchor);
    const Node& x = g_.node(r.inputs[0]);
    std::int64_t outer = 1, inner = 1;
    const std::int64_t extent = x.shape[std::size_t(r.axis)];
    for (int j = 0; j < r.axis; ++j) outer *= x.shape[std::size_t(j)];
    for (std::size_t j = std::size_t(r.axis) + 1; j < x.shape.size(); ++j) inner *= x.shape[j];
    const std::int64_t positions = outer * inner;
    const std::int64_t tile = std::min<std::int64_t>(o_.reduce_tile, extent);
    const std::int64_t tiles = (extent + tile - 1) / tile;
    const std::string ct = ctype(r.dtype);
    const std::string round = accumulator_rounding(o_, r.dtype);
    const std::string init =
        r.kind == OpKind::Max ? fmt::format("-({})INFINITY", ct) : fmt::format("({})0", ct);
    // partials: x at (outer position a, k, inner position b)
    scopes_.emplace_back();
    Index xi;
    for (const auto& e : unravel(Shape(x.shape.begin(), x.shape.begin() + r.axis), "a"))
      xi.push_back(e);
    xi.push_back("k");
    for (const auto& e : unravel(Shape(x.shape.begin() + r.axis + 1, x.shape.end()), "b"))
      xi.push_back(e);
    if (inner == 1) mark_identity(x.shape, xi, fmt::format("(p * {} + k)", extent));
    const std::string v = convert(value(x.id, xi), x.dtype, r.dtype);
    line(accumulate(r, "acc", v, round));
    const std::string gather = take_lines("    ");
    const std::string combine = r.kind == OpKind::Max
                                    ? "(other > acc || other != other) ? other : acc"
                                    : fmt::format("{}(acc + other)", round);
    std::string partials = fmt::format(
        "  const long long p = blockIdx.x / {0}LL, t = blockIdx.x % {0}LL;\n"
        "  const int lane = threadIdx.x;\n"
        "  const long long a = p / {1}LL, b = p % {1}LL;\n  (void)a; (void)b;\n"
        "  const long long start = t * {2}LL, end = start + {2}LL < {3}LL ? start + {2}LL : "
        "{3}LL;\n"
        "  {4} acc = {5};\n"
        "  for (long long k = start + lane; k < end; k += {6}) {{\n{7}  }}\n"
        "  for (int width = {6} / 2; width >= 1; width /= 2) {{\n"
        "    const {4} other = __shfl_down_sync(0xffffffffu, acc, width);\n"
        "    if (lane < width) acc = {8};\n  }}\n"
        "  if (lane == 0) c.s0[p * {0}LL + t] = acc;\n",
        tiles, inner, tile, extent, ct, init, kWarp, gather, combine);
    // finish: tiles in order, then the epilogue at output position p
    Index ri = unravel(r.shape, "p");
    mark_identity(r.shape, ri, "p");
    std::string reduced = "total";
    if (r.kind == OpKind::Mean) reduced = fmt::format("(total / ({})({}))", ct, extent);
    bound_[r.id] = anchor_value(r, "reduced");
    store_members(epilogue_members(), ri, "p");
    const std::string after = take_lines("    ");
    std::string finish = grid_loop(
        "p", positions,
        fmt::format("    {0} total = {1};\n    for (long long t = 0; t < {2}LL; ++t) {{\n      "
                    "const {0} other = c.s0[p * {2}LL + t];\n"
                    "      total = {3};\n    }}\n    const {0} reduced = {4};\n{5}",
                    ct, init, tiles,
                    r.kind == OpKind::Max ? "(other > total || other != other) ? other : total"
                                          : fmt::format("{}(total + other)", round),
                    reduced, after));
    out_.lowering.push_back(fmt::format(
        "{}: split reduction, {} blocks of {} threads per output, tile {}, accumulator {}", r.name,
        tiles, kWarp, tile, round == "fbk::NoRounding{}" ? ct : dtype_name(r.dtype)));
    kernel_.scratch_elements[0] = positions * tiles;
    launch("fb_partials", positions * tiles, kWarp);
    launch("fb_finish", blocks_for(positions));
    return entry("fb_partials", partials) + entry("fb_finish", finish);
  }

  std::string rowwise() override {
    const Node& r = g_.node(k_.anchor);
    const Node& x = g_.node(r.inputs[0]);
    const std::int64_t extent = x.shape.back(), rows = shape_numel(x.shape) / extent;
    const std::string ct = ctype(r.dtype);
    const std::string round = accumulator_rounding(o_, r.dtype);
    std::string code;
    scopes_.emplace_back();
    if (r.kind == OpKind::LayerNorm) {
      for (int p = 1; p <= 2; ++p) {
        const Node& wb = g_.node(r.inputs[std::size_t(p)]);
        line(fmt::format("c.s2[{}k] = {};", p == 1 ? "" : fmt::format("{}LL + ", extent),
                         convert(value(wb.id, Index{"k"}), wb.dtype, r.dtype)));
      }
      code += entry("fb_params", grid_loop("k", extent, take_lines("    ")));
      launch("fb_params", blocks_for(extent));
    }
    Index xi = unravel(Shape(x.shape.begin(), x.shape.end() - 1), "q");
    xi.push_back("k");
    const std::string row_flat = fmt::format("(q * {} + k)", extent);
    mark_identity(x.shape, xi, row_flat);
    line(fmt::format("x[k] = {};", convert(value(x.id, xi), x.dtype, r.dtype)));
    const std::string gather = take_lines("      ");
    bound_[r.id] = anchor_value(r, "y[k]");
    store_members(epilogue_members(), xi, row_flat);
    const std::string after = take_lines("      ");
    std::string call;
    if (r.kind == OpKind::LayerNorm) {
      call = fmt::format("fbk::layernorm_row(x, c.s2, c.s2 + {}, y, K, {}, {}({}), {}, {});",
                         extent, o_.reduce_tile, ct, literal(r.eps, r.dtype), round,
                         newton("Rsqrt", o_.rsqrt, o_.rsqrt_newton_iters));
    } else {
      call = fmt::format("fbk::softmax_row(x, y, K, {}, {}, {});", o_.reduce_tile, round,
                         newton("Div", o_.div, o_.div_newton_iters));
    }
    out_.lowering.push_back(fmt::format("{}: row-wise {}, one thread per row, tile {}", r.name,
                                        op_name(r.kind), o_.reduce_tile));
    code +=
        entry("fb_rowwise",
              grid_loop("q", rows,
                        fmt::format("    constexpr long long K = {0};\n    {1}* const x = c.s0 + q "
                                    "* K;\n    {1}* const y = c.s1 + q * K;\n"
                                    "    for (long long k = 0; k < K; ++k) {{\n{2}    }}\n    {3}\n"
                                    "    for (long long k = 0; k < K; ++k) {{\n{4}    }}\n",
                                    extent, ct, gather, call, after)));
    kernel_.scratch_elements[0] = kernel_.scratch_elements[1] = rows * extent;
    kernel_.scratch_elements[2] = 2 * extent;
    launch("fb_rowwise", blocks_for(rows));
    return code;
  }

  std::string indexed() override {
    throw_input_error(
        "cuda emitter: kernel {} ({} of {}) has no CUDA lowering; gather_rows and "
        "scatter_add_rows run on the cpu device",
        k_.name, op_name(g_.node(k_.anchor).kind), shape_string(g_.node(k_.anchor).shape));
  }

  std::string matmul() override {
    const Node& mm = g_.node(k_.anchor);
    const Node& a = g_.node(mm.inputs[0]);
    const Node& b = g_.node(mm.inputs[1]);
    const std::int64_t m = a.shape[a.shape.size() - 2], kk = a.shape.back(), n = b.shape.back();
    kernel_.m = m;
    kernel_.k = kk;
    kernel_.n = n;
    kernel_.batches = shape_numel(a.shape) / (m * kk);
    kernel_.batched_b = b.shape.size() > 2;
    auto batch_index = [&](const Shape& shape, const std::string& row, const std::string& col) {
      Index idx = unravel(Shape(shape.begin(), shape.end() - 2), "c.batch");
      idx.push_back(row);
      idx.push_back(col);
      return idx;
    };
    std::string code;
    scopes_.emplace_back();
    line(fmt::format("const long long r = e / {0}LL, j = e % {0}LL;", kk));
    line(fmt::format("c.s0[e] = {};",
                     convert(value(a.id, batch_index(a.shape, "r", "j")), a.dtype, mm.dtype)));
    code += entry("fb_gather_a", grid_loop("e", m * kk, take_lines("    ")));
    line(fmt::format("const long long r = e / {0}LL, j = e % {0}LL;", n));
    line(fmt::format(
        "c.s1[e] = {};",
        convert(value(b.id, kernel_.batched_b ? batch_index(b.shape, "r", "j") : Index{"r", "j"}),
                b.dtype, mm.dtype)));
    code += entry("fb_gather_b", grid_loop("e", kk * n, take_lines("    ")));
    line(fmt::format("const long long r = e / {0}LL, j = e % {0}LL;", n));
    bound_[mm.id] = anchor_value(mm, "c.s2[e]");
    store_members(k_.members, batch_index(mm.shape, "r", "j"),
                  fmt::format("(c.batch * {}LL + e)", m * n));
    code += entry("fb_epilogue", grid_loop("e", m * n, take_lines("    ")));
    out_.lowering.push_back(
        fmt::format("{}: cuBLAS GEMM ({} accumulation), epilogue on the {} result", mm.name,
                    ctype(mm.dtype), ctype(mm.dtype)));
    kernel_.scratch_elements[0] = m * kk;
    kernel_.scratch_elements[1] = kk * n;
    kernel_.scratch_elements[2] = m * n;
    launch("fb_gather_a", blocks_for(m * kk));
    launch("fb_gather_b", blocks_for(kk * n));
    launch("fb_epilogue", blocks_for(m * n));
    return code;
  }

  CudaKernel kernel_;
};
}  // namespace

CudaKernel emit_cuda_kernel(const Graph& graph, const KernelPlan& kernel,
                            const EngineOptions& options) {
  return CudaRenderer(graph, kernel, options).emit();
}

}  // namespace fusebench::cuda
