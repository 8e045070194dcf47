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
// Row kernels: up to kRowWarps rows (one a warp) per block, their rows in at most kRowSharedBytes
// of shared memory (the static limit, no opt-in).
constexpr std::int64_t kRowWarps = 8;
constexpr std::int64_t kRowSharedBytes = 48 * 1024;
constexpr int kRowBatch = 4;  // chunks a lane loads before it converts the first
// Blocks of a row kernel whose rows live in global scratch: the scratch is a row per warp of the
// grid, so the grid stays at about what a GPU keeps resident and loops over the rows.
constexpr std::int64_t kScratchRowGrid = 256;

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
  std::string index_type() const override { return index_type_; }
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

  // ---- vector access: the loads and stores of a loop at its own flat position, 16 bytes at a time
  // A loop over chunks of V consecutive elements (the chunk index g, the element kv, k or i =
  // g * V + kv): its kernel inputs and stored members at the loop's flat offset are read and
  // written as one fbw::Vec each per chunk (16-byte LDG / STG where aligned), and the per-element
  // code reads and writes those vectors' elements. Everything else (broadcast operands, views) is
  // loaded per element as before.
  struct VectorLoop {
    std::string body;                                          // the per-element lines
    std::vector<std::pair<std::string, DType>> loads, stores;  // buffer, storage dtype
  };
  std::optional<std::string> staged_load(DType d, const std::string& buffer,
                                         const std::string& offset) override {
    if (vectors_ == nullptr || offset != vector_flat_) return std::nullopt;
    add_unique(vectors_->loads, {buffer, d});
    return load_expr(d, fmt::format("in_{}.v", buffer), "kv");
  }
  std::optional<std::string> staged_store(DType d, const std::string& buffer,
                                          const std::string& flat) override {
    if (vectors_ == nullptr || flat != vector_flat_) return std::nullopt;
    add_unique(vectors_->stores, {buffer, d});
    return fmt::format("out_{}.v[kv]", buffer);
  }
  static void add_unique(std::vector<std::pair<std::string, DType>>& list,
                         std::pair<std::string, DType> entry) {
    if (std::find(list.begin(), list.end(), entry) == list.end()) list.push_back(std::move(entry));
  }
  // The lines `emit_lines` writes, with vector access at `flat`.
  template <class EmitLines>
  VectorLoop vector_loop(const std::string& flat, const std::string& indent, EmitLines emit_lines) {
    VectorLoop loop;
    vectors_ = &loop;
    vector_flat_ = flat;
    emit_lines();
    vectors_ = nullptr;
    loop.body = take_lines(indent);
    return loop;
  }
  // Elements per chunk: 16 bytes of the narrowest vector buffer (and of the compute type where
  // `compute` is set), halved until it divides `count` (a row, or the whole loop), so that every
  // chunk is whole and aligned.
  static int vector_width(std::int64_t count, const std::vector<const VectorLoop*>& loops,
                          std::optional<DType> compute) {
    std::int64_t narrowest = compute ? std::int64_t(dtype_size(*compute)) : 16;
    for (const VectorLoop* loop : loops) {
      for (const auto& list : {loop->loads, loop->stores}) {
        for (const auto& [buffer, d] : list)
          narrowest = std::min<std::int64_t>(narrowest, dtype_size(d));
      }
    }
    int width = int(16 / narrowest);
    while (width > 1 && count % width != 0) width /= 2;
    return width;
  }
  // The vector loads before a chunk's elements, and the stores after them; `base` is the flat
  // offset of the chunk's first element.
  static std::string vector_loads(const VectorLoop& loop, int width, const std::string& base,
                                  const std::string& indent) {
    std::string code;
    for (const auto& [buffer, d] : loop.loads) {
      code += fmt::format(
          "{0}const fbw::Vec<{1}, {2}> in_{3} = *reinterpret_cast<const fbw::Vec<{1}, {2}>*>(c.{3} "
          "+ {4});\n",
          indent, storage_type(d), width, buffer, base);
    }
    for (const auto& [buffer, d] : loop.stores)
      code += fmt::format("{}fbw::Vec<{}, {}> out_{};\n", indent, ctype(d), width, buffer);
    return code;
  }
  static std::string vector_stores(const VectorLoop& loop, int width, const std::string& base,
                                   const std::string& indent) {
    std::string code;
    for (const auto& [buffer, d] : loop.stores) {
      code += fmt::format(
          "{0}{{\n{0}  fbw::Vec<{1}, {2}> packed;\n"
          "{0}  for (int kv = 0; kv < {2}; ++kv) packed.v[kv] = {4};\n"
          "{0}  *reinterpret_cast<fbw::Vec<{1}, {2}>*>(c.{3} + {5}) = packed;\n{0}}}\n",
          indent, storage_type(d), width, buffer,
          store_expr(d, d, fmt::format("out_{}.v[kv]", buffer)), base);
    }
    return code;
  }
  // 32-bit unsigned index arithmetic where every flat offset of the loop fits: a 64-bit division
  // or remainder by a constant is several times the instructions of a 32-bit one.
  static std::string index_type_for(std::int64_t count) {
    return count < (std::int64_t(1) << 31) ? "unsigned" : "long long";
  }

  // ---- kernel skeletons
  // Chunks of V elements per thread (vector_width), a grid-stride loop over the chunks.
  std::string pointwise() override {
    const Node& anchor = g_.node(k_.anchor);
    const std::int64_t n = shape_numel(anchor.shape);
    scopes_.emplace_back();
    const std::string index = index_type_ = index_type_for(n);
    const VectorLoop loop = vector_loop("i", "      ", [&] {
      const Index idx = loop_index(anchor.shape, "i", "i");
      store_members(k_.members, idx, "i");
    });
    const int width = vector_width(n, {&loop}, std::nullopt);
    const std::int64_t chunks = n / width;
    out_.lowering.push_back(fmt::format("{}: {}-element vectors, {} indices", k_.name, width,
                                        index == "unsigned" ? "32-bit" : "64-bit"));
    launch("fb_pointwise", blocks_for(chunks));
    const std::string base = fmt::format("g * {}", width);
    return entry(
        "fb_pointwise",
        fmt::format(
            "  for ({0} g = blockIdx.x * blockDim.x + threadIdx.x; g < {1}; g += gridDim.x "
            "* blockDim.x) {{\n{2}#pragma unroll\n"
            "    for (int kv = 0; kv < {3}; ++kv) {{\n      const {0} i = g * {3} + kv;\n{4}"
            "    }}\n{5}  }}\n",
            index, chunks, vector_loads(loop, width, base, "    "), width, loop.body,
            vector_stores(loop, width, base, "    ")));
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

  // One warp per row, several rows per block. The row is gathered (its fused prologue computed)
  // into shared memory in the compute type, in chunks of V elements per lane with 16-byte vector
  // loads where vector_width allows; fbw's warp reductions then read it there in the CPU's tiled
  // order (warp_rows.cuh), and the epilogue writes each element once, in chunks again. A row
  // longer than fits in shared memory lives in a global scratch row per warp instead (the same
  // code on another pointer).
  std::string rowwise() override {
    const Node& r = g_.node(k_.anchor);
    const Node& x = g_.node(r.inputs[0]);
    const std::int64_t extent = x.shape.back(), rows = shape_numel(x.shape) / extent;
    const std::string ct = ctype(r.dtype);
    const std::string round = accumulator_rounding(o_, r.dtype);
    const std::int64_t row_bytes = extent * std::int64_t(dtype_size(kernel_.compute));
    const bool in_shared = row_bytes <= kRowSharedBytes;
    const std::int64_t warps =
        std::clamp<std::int64_t>(in_shared ? kRowSharedBytes / row_bytes : kRowWarps, 1, kRowWarps);
    const std::int64_t grid =
        std::min<std::int64_t>(in_shared ? kMaxGrid : kScratchRowGrid, (rows + warps - 1) / warps);
    index_type_ = index_type_for(rows * extent);
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
    const VectorLoop gather = vector_loop(row_flat, "            ", [&] {
      line(fmt::format("xs.v[kv] = {};", convert(value(x.id, xi), x.dtype, r.dtype)));
    });
    std::string statistics;
    if (r.kind == OpKind::LayerNorm) {
      statistics = fmt::format(
          "const fbw::RowStatistics<{0}> stats = fbw::layernorm_statistics<{0}>(warp, x, K, "
          "{1}LL, {0}({2}), {3}, {4});",
          ct, o_.reduce_tile, literal(r.eps, r.dtype), round,
          newton("Rsqrt", o_.rsqrt, o_.rsqrt_newton_iters));
      bound_[r.id] = anchor_value(
          r,
          fmt::format("fbw::layernorm_element(xv.v[kv], stats, c.s2[k], c.s2[{}LL + k])", extent));
    } else {
      statistics = fmt::format(
          "const {0} inverse = {1}({0}(1), fbw::softmax_exp<{0}>(warp, x, K, {2}LL, {3}));", ct,
          newton("Div", o_.div, o_.div_newton_iters), o_.reduce_tile, round);
      bound_[r.id] = anchor_value(r, "(xv.v[kv] * inverse)");
    }
    const VectorLoop epilogue = vector_loop(
        row_flat, "            ", [&] { store_members(epilogue_members(), xi, row_flat); });
    const int width = vector_width(extent, {&gather, &epilogue}, kernel_.compute);
    out_.lowering.push_back(
        fmt::format("{}: row-wise {}, one warp per row ({} rows a block), the row in {} memory, "
                    "{}-element vectors, tile {} summed in the cpu's order",
                    r.name, op_name(r.kind), warps, in_shared ? "shared" : "global scratch", width,
                    o_.reduce_tile));
    // One chunk loop of the row: the lane's chunks g = lane, lane + 32, ... of V elements, taken
    // kRowBatch at a time so that a lane has that many vector loads in flight before it uses the
    // first (a row's lanes are few a multiprocessor when rows are long).
    const std::string base = fmt::format("q * {} + g * {}", extent, width);
    const std::int64_t row_chunks = extent / width;
    auto chunks = [&](const VectorLoop& loop, const std::string& before, const std::string& after) {
      std::string batch_loads, aliases;
      for (const auto& [buffer, d] : loop.loads) {
        const std::string vec = fmt::format("fbw::Vec<{}, {}>", storage_type(d), width);
        batch_loads += fmt::format("      {} in_{}_batch[{}];\n", vec, buffer, kRowBatch);
        aliases +=
            fmt::format("{}{}& in_{} = in_{}_batch[u];\n", "          const ", vec, buffer, buffer);
      }
      if (!loop.loads.empty()) {
        batch_loads += fmt::format(
            "#pragma unroll\n      for (int u = 0; u < {0}; ++u) {{\n"
            "        const {1} g = g0 + 32 * u;\n        if (g < {2}) {{\n",
            kRowBatch, index_type_, row_chunks);
        for (const auto& [buffer, d] : loop.loads) {
          batch_loads += fmt::format(
              "          in_{0}_batch[u] = *reinterpret_cast<const fbw::Vec<{1}, {2}>*>(c.{0} + "
              "{3});\n",
              buffer, storage_type(d), width, base);
        }
        batch_loads += "        }\n      }\n";
      }
      std::string outputs;
      for (const auto& [buffer, d] : loop.stores)
        outputs += fmt::format("          fbw::Vec<{}, {}> out_{};\n", ctype(d), width, buffer);
      return fmt::format(
          "    for ({0} g0 = warp.lane(); g0 < {1}; g0 += 32 * {2}) {{\n{3}"
          "#pragma unroll\n      for (int u = 0; u < {2}; ++u) {{\n"
          "        const {0} g = g0 + 32 * u;\n        if (g < {1}) {{\n{4}{5}{6}"
          "#pragma unroll\n          for (int kv = 0; kv < {7}; ++kv) {{\n"
          "            const {0} k = g * {7} + kv;\n{8}          }}\n{9}{10}"
          "        }}\n      }}\n    }}\n",
          index_type_, row_chunks, kRowBatch, batch_loads, aliases, outputs, before, width,
          loop.body, after, vector_stores(loop, width, base, "          "));
    };
    const std::string row_vector = fmt::format("fbw::Vec<{}, {}>", ct, width);
    const std::string gather_loop = chunks(
        gather, fmt::format("          {} xs;\n", row_vector),
        fmt::format("          *reinterpret_cast<{}*>(x + g * {}) = xs;\n", row_vector, width));
    const std::string epilogue_loop =
        chunks(epilogue,
               fmt::format("          const {0} xv = *reinterpret_cast<const {0}*>(x + g * {1});\n",
                           row_vector, width),
               "");
    const std::string row_pointer =
        in_shared
            ? fmt::format(
                  "  __shared__ alignas(16) {0} fb_rows[{1} * {2}];\n"
                  "  {0}* const x = fb_rows + (threadIdx.x / 32) * {2};\n",
                  ct, warps, extent)
            : fmt::format(
                  "  {0}* const x = c.s0 + (blockIdx.x * {1}LL + threadIdx.x / 32) * {2}LL;\n", ct,
                  warps, extent);
    code += entry(
        "fb_rowwise",
        fmt::format("  constexpr long long K = {0};\n{1}"
                    "  const fbw::CudaWarp warp{{int(threadIdx.x % 32)}};\n"
                    "  for ({2} q = blockIdx.x * {3} + threadIdx.x / 32; q < {4}; q += gridDim.x * "
                    "{3}) {{\n{5}    __syncwarp();\n    {6}\n    __syncwarp();\n{7}"
                    "    __syncwarp();\n  }}\n",
                    extent, row_pointer, index_type_, warps, rows, gather_loop, statistics,
                    epilogue_loop));
    kernel_.scratch_elements[0] = in_shared ? 0 : grid * warps * extent;
    kernel_.scratch_elements[1] = 0;
    kernel_.scratch_elements[2] = 2 * extent;
    launch("fb_rowwise", grid, int(warps * kWarp));
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
  VectorLoop* vectors_ = nullptr;  // while a vector loop's lines are emitted
  std::string vector_flat_;
  std::string index_type_ = "long long";  // of the kernel's index variables
};
}  // namespace

CudaKernel emit_cuda_kernel(const Graph& graph, const KernelPlan& kernel,
                            const EngineOptions& options) {
  return CudaRenderer(graph, kernel, options).emit();
}

}  // namespace fusebench::cuda
