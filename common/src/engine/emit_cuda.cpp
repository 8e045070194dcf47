#include "fusebench/engine/emit_cuda.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>

#include "emit_shared.hpp"

namespace fusebench::engine {

namespace {
using namespace emit;

constexpr int kBlock = 256;                   // threads per block of the element-wise steps
constexpr std::int64_t kMaxGrid = 1 << 20;    // blocks of a grid-stride loop
constexpr int kWarp = 32;                     // = scalar_math's kReduceLanes: one lane per thread

std::int64_t blocks_for(std::int64_t threads) { return std::min<std::int64_t>(kMaxGrid, std::max<std::int64_t>(1, (threads + kBlock - 1) / kBlock)); }

class CudaEmitter {
 public:
  CudaEmitter(const Graph& g, const KernelPlan& k, const EngineOptions& o) : g_(g), k_(k), o_(o) {
    members_.insert(k.members.begin(), k.members.end());
    for (NodeId id : k.loads) {
      buffers_[id] = fmt::format("b{}", buffer_count_++);
      out_.code.loads.push_back(id);
    }
    for (NodeId id : k.stores) {
      buffers_[id] = fmt::format("b{}", buffer_count_++);
      out_.code.stores.push_back(id);
    }
    out_.kind = k.kind;
    out_.compute = g.node(k.anchor).dtype == DType::f64 ? DType::f64 : DType::f32;
  }

  CudaKernel emit() {
    std::string body;
    switch (k_.kind) {
      case KernelKind::Pointwise: body = pointwise(); break;
      case KernelKind::Reduction: body = reduction(); break;
      case KernelKind::Rowwise: body = rowwise(); break;
      case KernelKind::Matmul: body = matmul(); break;
      case KernelKind::Indexed:
        throw_input_error("cuda emitter: kernel {} ({} of {}) has no CUDA lowering; gather_rows and scatter_add_rows run "
                          "on the cpu device", k_.name, op_name(g_.node(k_.anchor).kind), shape_string(g_.node(k_.anchor).shape));
    }
    std::string header = fmt::format("// fusebench fused CUDA kernel {} ({})\n// knobs: {}\n", k_.name,
                                     kernel_kind_name(k_.kind), o_.describe());
    for (NodeId m : k_.members) {
      const Node& n = g_.node(m);
      header += fmt::format("//   {} = {} -> {}{}\n", n.name, op_name(n.kind), dtype_name(n.dtype), shape_string(n.shape));
    }
    // Every field is 8 bytes, so the host fills the struct as an array of 64-bit words.
    std::string ctx = "struct FbCtx {\n";
    auto add_buffer = [&](const std::string& name, DType d, bool writable) {
      ctx += fmt::format("  {}{}* {};\n", writable ? "" : "const ", storage_type(d), name);
    };
    for (NodeId id : out_.code.loads) add_buffer(buffers_.at(id), g_.node(id).dtype, false);
    for (NodeId id : out_.code.stores) add_buffer(buffers_.at(id), g_.node(id).dtype, true);
    for (std::size_t i = 0; i < out_.code.constants.size(); ++i) {
      add_buffer(fmt::format("c{}", i), out_.code.constants[i].dtype(), false);
    }
    ctx += fmt::format("  {0}* s0;\n  {0}* s1;\n  {0}* s2;\n  long long batch;\n}};\n", ctype(out_.compute));
    out_.code.source = header + cuda_kernel_prelude() + ctx + body;
    return std::move(out_);
  }

 private:
  // ---- values (as in the C++ emitter, without its f16 staging: a GPU thread converts its own element)
  struct Scope {
    std::vector<std::string> lines;
    std::map<std::string, std::string> memo;
  };
  std::string fresh() { return fmt::format("v{}", counter_++); }
  void line(std::string text) { scopes_.back().lines.push_back(std::move(text)); }
  std::string memo_key(NodeId id, const Index& idx) const { return fmt::format("{}|{}", id, fmt::join(idx, ",")); }
  const std::string* find_memo(const std::string& key) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto found = it->memo.find(key);
      if (found != it->memo.end()) return &found->second;
    }
    return nullptr;
  }
  std::string convert(const std::string& v, DType from, DType to) const {
    if (ctype(from) == ctype(to)) return v;
    return fmt::format("({}){}", ctype(to), v);
  }
  std::string offset_for(NodeId id, const Index& idx) const {
    auto it = identity_.find(fmt::format("{}|{}", shape_string(g_.node(id).shape), fmt::join(idx, ",")));
    return it != identity_.end() ? it->second : flat_offset(g_.node(id).shape, idx);
  }
  Index broadcast_index(const Node& input, const Shape& out_shape, const Index& idx) const {
    Index in;
    const std::size_t lead = out_shape.size() - input.shape.size();
    for (std::size_t j = 0; j < input.shape.size(); ++j) {
      in.push_back(input.shape[j] == 1 && out_shape[lead + j] != 1 ? "0" : idx[lead + j]);
    }
    return in;
  }

  std::string value(NodeId id, const Index& idx) {
    const std::string key = memo_key(id, idx);
    if (const std::string* hit = find_memo(key)) return *hit;
    const Node& n = g_.node(id);
    std::string result;
    if (auto bound = bound_.find(id); bound != bound_.end()) {
      result = bound->second;
    } else if (buffers_.count(id) && !members_.count(id)) {
      result = fresh();
      line(fmt::format("const {} {} = {};", ctype(n.dtype), result, load_expr(n.dtype, "c." + buffers_.at(id), offset_for(id, idx))));
    } else if (is_data_movement(n.kind)) {
      result = view_value(n, idx);
    } else {
      result = compute_value(n, idx);
    }
    scopes_.back().memo[key] = result;
    return result;
  }

  std::string view_value(const Node& n, const Index& idx) {
    const Node& input = g_.node(n.inputs[0]);
    switch (n.kind) {
      case OpKind::Permute: {
        Index in(idx.size());
        for (std::size_t j = 0; j < idx.size(); ++j) in[std::size_t(n.permutation[j])] = idx[j];
        return value(input.id, in);
      }
      case OpKind::Slice: {
        Index in = idx;
        in[std::size_t(n.axis)] = fmt::format("({} + {})", idx[std::size_t(n.axis)], n.start);
        return value(input.id, in);
      }
      case OpKind::Expand: return value(input.id, broadcast_index(input, n.shape, idx));
      case OpKind::Reshape: {
        const std::string flat = fresh();
        line(fmt::format("const long long {} = {};", flat, flat_offset(n.shape, idx)));
        return value(input.id, unravel(input.shape, flat));
      }
      case OpKind::Concat: {
        // Only the selected operand may be read: a branch per operand, each with its own scope.
        const std::string result = fresh();
        std::string code = fmt::format("{} {};\n", ctype(n.dtype), result);
        std::int64_t start = 0;
        for (std::size_t p = 0; p < n.inputs.size(); ++p) {
          const Node& part = g_.node(n.inputs[p]);
          const std::int64_t extent = part.shape[std::size_t(n.axis)];
          Index in = idx;
          in[std::size_t(n.axis)] = start == 0 ? idx[std::size_t(n.axis)] : fmt::format("({} - {})", idx[std::size_t(n.axis)], start);
          scopes_.emplace_back();
          std::string v = value(part.id, in);
          if (part.dtype != n.dtype) {
            v = round_to_dtype(n.dtype, part.dtype, v);
            out_.code.lowering.push_back(fmt::format("{}: operand {} promoted {} -> {}", n.name, part.name,
                                                     dtype_name(part.dtype), dtype_name(n.dtype)));
          }
          auto lines = std::move(scopes_.back().lines);
          scopes_.pop_back();
          const bool last = p + 1 == n.inputs.size();
          code += last ? "  {\n" : fmt::format("  if ({} < {}) {{\n", idx[std::size_t(n.axis)], start + extent);
          for (const auto& l : lines) code += "    " + l + "\n";
          code += fmt::format("    {} = {};\n  }}{}", result, v, last ? "" : " else ");
          start += extent;
        }
        line(code);
        return result;
      }
      default: break;
    }
    throw_input_error("CUDA emitter: {} is not a view", n.name);
  }

  std::string operand(const Node& n, std::size_t i, const Index& idx) {
    const Node& input = g_.node(n.inputs[i]);
    return convert(value(input.id, broadcast_index(input, n.shape, idx)), input.dtype, n.dtype);
  }

  std::string compute_value(const Node& n, const Index& idx) {
    std::string expr = elementwise_formula(
        g_, n, [&](std::size_t i) { return operand(n, i, idx); }, [&](std::size_t i) { return value(n.inputs[i], idx); }, idx,
        o_, out_.code);
    if (o_.emulate_per_op_rounding) expr = round_to_dtype(n.dtype, n.dtype, expr);
    const std::string v = fresh();
    line(fmt::format("const {} {} = {};", ctype(n.dtype), v, expr));
    return v;
  }

  std::vector<NodeId> epilogue_members() const {
    std::vector<NodeId> out;
    for (NodeId m : k_.members) {
      if (std::find(k_.prologue.begin(), k_.prologue.end(), m) == k_.prologue.end()) out.push_back(m);
    }
    return out;
  }
  std::string anchor_value(const Node& anchor, const std::string& expr) const {
    return o_.emulate_per_op_rounding ? round_to_dtype(anchor.dtype, anchor.dtype, expr) : expr;
  }
  void store_members(const std::vector<NodeId>& candidates, const Index& idx, const std::string& flat) {
    for (NodeId m : k_.stores) {
      if (std::find(candidates.begin(), candidates.end(), m) == candidates.end()) continue;
      const Node& n = g_.node(m);
      line(fmt::format("c.{}[{}] = {};", buffers_.at(m), flat, store_expr(n.dtype, n.dtype, value(m, idx))));
    }
  }
  std::string take_lines(const std::string& indent) {
    std::string out;
    for (const auto& l : scopes_.back().lines) out += indent + l + "\n";
    scopes_.back().lines.clear();
    scopes_.back().memo.clear();
    return out;
  }
  Index loop_index(const Shape& shape, const std::string& flat, const std::string& prefix) {
    Index idx;
    const Index expr = unravel(shape, flat);
    for (std::size_t j = 0; j < shape.size(); ++j) {
      if (expr[j] == "0") {
        idx.push_back("0");
        continue;
      }
      const std::string var = fmt::format("{}{}", prefix, j);
      line(fmt::format("const long long {} = {};", var, expr[j]));
      idx.push_back(var);
    }
    identity_[fmt::format("{}|{}", shape_string(shape), fmt::join(idx, ","))] = flat;
    return idx;
  }
  void launch(const std::string& entry, std::int64_t grid, int block = kBlock) { out_.launches.push_back({entry, grid, block}); }

  // A grid-stride loop of `var` over [0, count) around `body`.
  static std::string grid_loop(const std::string& var, std::int64_t count, const std::string& body) {
    return fmt::format(
        "  for (long long {0} = blockIdx.x * (long long)blockDim.x + threadIdx.x; {0} < {1}LL; "
        "{0} += (long long)gridDim.x * blockDim.x) {{\n{2}  }}\n",
        var, count, body);
  }
  static std::string entry(const std::string& name, const std::string& body) {
    return fmt::format("extern \"C\" __global__ void {}(const FbCtx c) {{\n{}}}\n", name, body);
  }

  // ---- kernel skeletons
  std::string pointwise() {
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
  std::string accumulate(const Node& r, const std::string& acc, const std::string& v, const std::string& round) const {
    if (r.kind == OpKind::Max) return fmt::format("{0} = ({1} > {0} || {1} != {1}) ? {1} : {0};", acc, v);
    return fmt::format("{0} = {1}({0} + {2});", acc, round, v);
  }

  std::string reduction() {
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
    const std::string init = r.kind == OpKind::Max ? fmt::format("-({})INFINITY", ct) : fmt::format("({})0", ct);
    // partials: x at (outer position a, k, inner position b)
    scopes_.emplace_back();
    Index xi;
    for (const auto& e : unravel(Shape(x.shape.begin(), x.shape.begin() + r.axis), "a")) xi.push_back(e);
    xi.push_back("k");
    for (const auto& e : unravel(Shape(x.shape.begin() + r.axis + 1, x.shape.end()), "b")) xi.push_back(e);
    if (inner == 1) identity_[fmt::format("{}|{}", shape_string(x.shape), fmt::join(xi, ","))] = fmt::format("(p * {} + k)", extent);
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
        "  const long long start = t * {2}LL, end = start + {2}LL < {3}LL ? start + {2}LL : {3}LL;\n"
        "  {4} acc = {5};\n"
        "  for (long long k = start + lane; k < end; k += {6}) {{\n{7}  }}\n"
        "  for (int width = {6} / 2; width >= 1; width /= 2) {{\n"
        "    const {4} other = __shfl_down_sync(0xffffffffu, acc, width);\n"
        "    if (lane < width) acc = {8};\n  }}\n"
        "  if (lane == 0) c.s0[p * {0}LL + t] = acc;\n",
        tiles, inner, tile, extent, ct, init, kWarp, gather, combine);
    // finish: tiles in order, then the epilogue at output position p
    Index ri = unravel(r.shape, "p");
    identity_[fmt::format("{}|{}", shape_string(r.shape), fmt::join(ri, ","))] = "p";
    std::string reduced = "total";
    if (r.kind == OpKind::Mean) reduced = fmt::format("(total / ({})({}))", ct, extent);
    bound_[r.id] = anchor_value(r, "reduced");
    store_members(epilogue_members(), ri, "p");
    const std::string after = take_lines("    ");
    std::string finish = grid_loop(
        "p", positions,
        fmt::format("    {0} total = {1};\n    for (long long t = 0; t < {2}LL; ++t) {{\n      const {0} other = c.s0[p * {2}LL + t];\n"
                    "      total = {3};\n    }}\n    const {0} reduced = {4};\n{5}",
                    ct, init, tiles,
                    r.kind == OpKind::Max ? "(other > total || other != other) ? other : total" : fmt::format("{}(total + other)", round),
                    reduced, after));
    out_.code.lowering.push_back(fmt::format("{}: split reduction, {} blocks of {} threads per output, tile {}, accumulator {}",
                                             r.name, tiles, kWarp, tile,
                                             round == "fbk::NoRounding{}" ? ct : dtype_name(r.dtype)));
    out_.scratch_elements[0] = positions * tiles;
    launch("fb_partials", positions * tiles, kWarp);
    launch("fb_finish", blocks_for(positions));
    return entry("fb_partials", partials) + entry("fb_finish", finish);
  }

  std::string rowwise() {
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
        line(fmt::format("c.s2[{}k] = {};", p == 1 ? "" : fmt::format("{}LL + ", extent), convert(value(wb.id, Index{"k"}), wb.dtype, r.dtype)));
      }
      code += entry("fb_params", grid_loop("k", extent, take_lines("    ")));
      launch("fb_params", blocks_for(extent));
    }
    Index xi = unravel(Shape(x.shape.begin(), x.shape.end() - 1), "q");
    xi.push_back("k");
    const std::string row_flat = fmt::format("(q * {} + k)", extent);
    identity_[fmt::format("{}|{}", shape_string(x.shape), fmt::join(xi, ","))] = row_flat;
    line(fmt::format("x[k] = {};", convert(value(x.id, xi), x.dtype, r.dtype)));
    const std::string gather = take_lines("      ");
    bound_[r.id] = anchor_value(r, "y[k]");
    store_members(epilogue_members(), xi, row_flat);
    const std::string after = take_lines("      ");
    std::string call;
    if (r.kind == OpKind::LayerNorm) {
      call = fmt::format("fbk::layernorm_row(x, c.s2, c.s2 + {}, y, K, {}, {}({}), {}, {});", extent, o_.reduce_tile, ct,
                         literal(r.eps, r.dtype), round, newton("Rsqrt", o_.rsqrt, o_.rsqrt_newton_iters));
    } else {
      call = fmt::format("fbk::softmax_row(x, y, K, {}, {}, {});", o_.reduce_tile, round, newton("Div", o_.div, o_.div_newton_iters));
    }
    out_.code.lowering.push_back(fmt::format("{}: row-wise {}, one thread per row, tile {}", r.name, op_name(r.kind), o_.reduce_tile));
    code += entry("fb_rowwise", grid_loop("q", rows, fmt::format(
        "    constexpr long long K = {0};\n    {1}* const x = c.s0 + q * K;\n    {1}* const y = c.s1 + q * K;\n"
        "    for (long long k = 0; k < K; ++k) {{\n{2}    }}\n    {3}\n"
        "    for (long long k = 0; k < K; ++k) {{\n{4}    }}\n",
        extent, ct, gather, call, after)));
    out_.scratch_elements[0] = out_.scratch_elements[1] = rows * extent;
    out_.scratch_elements[2] = 2 * extent;
    launch("fb_rowwise", blocks_for(rows));
    return code;
  }

  std::string matmul() {
    const Node& mm = g_.node(k_.anchor);
    const Node& a = g_.node(mm.inputs[0]);
    const Node& b = g_.node(mm.inputs[1]);
    const std::int64_t m = a.shape[a.shape.size() - 2], kk = a.shape.back(), n = b.shape.back();
    out_.m = m;
    out_.k = kk;
    out_.n = n;
    out_.batches = shape_numel(a.shape) / (m * kk);
    out_.batched_b = b.shape.size() > 2;
    auto batch_index = [&](const Shape& shape, const std::string& row, const std::string& col) {
      Index idx = unravel(Shape(shape.begin(), shape.end() - 2), "c.batch");
      idx.push_back(row);
      idx.push_back(col);
      return idx;
    };
    std::string code;
    scopes_.emplace_back();
    line(fmt::format("const long long r = e / {0}LL, j = e % {0}LL;", kk));
    line(fmt::format("c.s0[e] = {};", convert(value(a.id, batch_index(a.shape, "r", "j")), a.dtype, mm.dtype)));
    code += entry("fb_gather_a", grid_loop("e", m * kk, take_lines("    ")));
    line(fmt::format("const long long r = e / {0}LL, j = e % {0}LL;", n));
    line(fmt::format("c.s1[e] = {};", convert(value(b.id, out_.batched_b ? batch_index(b.shape, "r", "j") : Index{"r", "j"}), b.dtype, mm.dtype)));
    code += entry("fb_gather_b", grid_loop("e", kk * n, take_lines("    ")));
    line(fmt::format("const long long r = e / {0}LL, j = e % {0}LL;", n));
    bound_[mm.id] = anchor_value(mm, "c.s2[e]");
    store_members(k_.members, batch_index(mm.shape, "r", "j"), fmt::format("(c.batch * {}LL + e)", m * n));
    code += entry("fb_epilogue", grid_loop("e", m * n, take_lines("    ")));
    out_.code.lowering.push_back(fmt::format("{}: cuBLAS GEMM ({} accumulation), epilogue on the {} result", mm.name,
                                             ctype(mm.dtype), ctype(mm.dtype)));
    out_.scratch_elements[0] = m * kk;
    out_.scratch_elements[1] = kk * n;
    out_.scratch_elements[2] = m * n;
    launch("fb_gather_a", blocks_for(m * kk));
    launch("fb_gather_b", blocks_for(kk * n));
    launch("fb_epilogue", blocks_for(m * n));
    return code;
  }

  const Graph& g_;
  const KernelPlan& k_;
  const EngineOptions& o_;
  std::set<NodeId> members_;
  std::map<NodeId, std::string> buffers_;
  std::map<NodeId, std::string> bound_;
  std::map<std::string, std::string> identity_;
  std::vector<Scope> scopes_;
  CudaKernel out_;
  int buffer_count_ = 0;
  int counter_ = 0;
};
}  // namespace

CudaKernel emit_cuda_kernel(const Graph& graph, const KernelPlan& kernel, const EngineOptions& options) {
  return CudaEmitter(graph, kernel, options).emit();
}

}  // namespace fusebench::engine
