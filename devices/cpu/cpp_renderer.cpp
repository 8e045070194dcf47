#include "cpp_renderer.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <optional>

#include "gemm.hpp"

namespace fusebench::cpu {

using namespace engine;
using namespace engine::emit;

namespace {
// elements per task (fixed: results do not depend on threads)
constexpr std::int64_t kPointwiseChunk = 16384;
constexpr std::int64_t kRowwiseChunk = 65536;  // elements per row-wise task (whole rows)
// elements per f16 staging run: a run's widened values stay in L1 beside the loop that reads
// them (the Engine suite's f16 Chain ran faster at 128 than at 512)
constexpr std::int64_t kStageBlock = 128;
// A pointwise task is whole blocks, so that a block of rows whose length is a multiple or a divisor
// of kStageBlock holds whole row segments.
static_assert(kPointwiseChunk % kStageBlock == 0);
constexpr std::int64_t kMinRowRun = 16;  // shortest row a pointwise loop runs segment by segment
// elements ahead that pointwise kernels prefetch their staged inputs
constexpr std::int64_t kPrefetchAhead = 512;
// f16 gather rows up to this length live on the stack (32 KiB)
constexpr std::int64_t kStackRowBits = 16384;
// Shortest f16 gather that is copied as bits and widened as one run: below one 16-lane vector the
// run converter's padded tail costs more than it saves (task E's wpe gradient, a sum over 8 rows,
// ran slower as one run).
constexpr std::int64_t kMinBitsRun = 16;
// operand gathers and epilogues: elements per task
constexpr std::int64_t kMatmulTaskElements = 8192;

class CppRenderer final : public CStyleEmitter {
 public:
  CppRenderer(const engine::Graph& g, const engine::KernelPlan& k, const engine::EngineOptions& o)
      : CStyleEmitter(g, k, o) {}

  EmittedKernel emit() {
    const std::string body = kernel_body();
    // The source names no node or kernel: kernels of the same structure (a transformer's layers,
    // one graph built twice) are one source, compiled once and shared through the kernel cache.
    // The trace keeps the names (KernelTrace::name, ops).
    std::string header = fmt::format("// fusebench fused kernel ({})\n// knobs: {}\n",
                                     kernel_kind_name(k_.kind), o_.describe());
    for (NodeId m : k_.members) {
      const Node& n = g_.node(m);
      header += fmt::format("//   {} -> {}{}{}\n", op_name(n.kind), dtype_name(n.dtype),
                            shape_string(n.shape), switches_comment(m));
    }
    std::string ctx =
        "namespace {\nstruct Ctx {\n  const FbKernelServices* services;\n  std::int64_t batch;\n";
    std::string bind;
    int index = 0;
    auto add_buffer = [&](const std::string& name, DType d, bool writable) {
      ctx += fmt::format("  {}{}* {};\n", writable ? "" : "const ", storage_type(d), name);
      bind += fmt::format("  c.{} = static_cast<{}{}*>(args->buffers[{}]);\n", name,
                          writable ? "" : "const ", storage_type(d), index++);
    };
    for (NodeId id : out_.loads) add_buffer(buffers_.at(id), g_.node(id).dtype, false);
    for (NodeId id : out_.stores) add_buffer(buffers_.at(id), g_.node(id).dtype, true);
    for (std::size_t i = 0; i < out_.constants.size(); ++i)
      add_buffer(fmt::format("c{}", i), out_.constants[i].dtype(), false);
    ctx += extra_ctx_ + "};\n";
    out_.source = header + kernel_prelude() + ctx + body +
                  "}  // namespace\n\nextern \"C\" void fusebench_kernel(const FbKernelArgs* args) "
                  "{\n  Ctx c{};\n"
                  "  c.services = args->services;\n" +
                  bind + "  run(c);\n}\n";
    return std::move(out_);
  }

 private:
  // ---- the C++ language
  std::string_view emitter_name() const override { return "emitter"; }
  std::string index_type() const override { return "std::int64_t"; }
  // A lambda per concat, so that each part's lines stay in its own branch and the value is const.
  std::string concat_statement(const std::string& type, const std::string& result,
                               const std::vector<ConcatPart>& parts) const override {
    std::string code = fmt::format("const {} {} = [&]() -> {} {{\n", type, result, type);
    for (const ConcatPart& part : parts) {
      code += part.condition.empty() ? "  {\n" : fmt::format("  if ({}) {{\n", part.condition);
      for (const auto& l : part.lines) code += "    " + l + "\n";
      code += fmt::format("    return {};\n  }}\n", part.value);
    }
    return code + "}();";
  }
  bool reshape_reads_at_flat_offset() const override { return true; }
  std::optional<std::string> staged_load(DType d, const std::string& buffer,
                                         const std::string& offset) override {
    if (!staged(d, offset)) return std::nullopt;
    return staged_element(staging_->loads, "in", buffer);
  }
  std::optional<std::string> staged_store(DType d, const std::string& buffer,
                                          const std::string& flat) override {
    if (!staged(d, flat)) return std::nullopt;
    return staged_element(staging_->stores, "out", buffer);
  }

  // ---- f16 staging: operands and results of a loop at the loop's own flat offset are converted a
  // run at a time (F16C where the target has it) into fp32 buffers outside the element loop, so
  // the loop body holds no conversion code. Values and rounding are those of the per-element
  // conversions.
  struct Staging {
    std::string flat;      // the loop's identity offset, e.g. "i"
    std::string base;      // flat offset of the run's first element
    std::string relative;  // the loop variable's index into the staging buffers
    std::vector<std::pair<std::string, std::string>> loads, stores;  // (buffer, staging buffer)
  };

  bool staged(DType d, const std::string& offset) const {
    return staging_ && d == DType::f16 && offset == staging_->flat;
  }
  std::string staged_element(std::vector<std::pair<std::string, std::string>>& list,
                             const char* prefix, const std::string& buffer) {
    auto it =
        std::find_if(list.begin(), list.end(), [&](const auto& e) { return e.first == buffer; });
    if (it == list.end()) {
      list.emplace_back(buffer, fmt::format("{}_{}", prefix, buffer));
      it = list.end() - 1;
    }
    return fmt::format("{}[{}]", it->second, staging_->relative);
  }
  // `{type}* const {name}` over `count` values of kernel scratch: from the engine's buffer
  // allocator, 64-byte aligned (operator new's 16 bytes split every 512-bit access across two
  // cache lines) and reused without page faults on a repeated run. Written in full before it is
  // read: no zero-fill.
  static std::string scratch(const std::string& type, const std::string& name,
                             const std::string& count) {
    return fmt::format(
        "  const FbScratch<{0}> {1}_buffer(c.services, {2});\n  {0}* const {1} = "
        "{1}_buffer.data;\n",
        type, name, count);
  }
  // Staging buffers of `capacity` floats (on the stack for a fixed block, else scratch), the
  // widening before the loop and the narrowing after it, for `count` elements.
  struct StagedCode {
    std::string declare, before, after;
  };
  // With `prefetch_below` (the loop's element count), each staged input is also prefetched
  // kPrefetchAhead elements ahead of the run, for a run's worth, while that stays inside the buffer.
  StagedCode staged_code(std::int64_t capacity, bool on_stack, const std::string& count,
                         const std::string& indent,
                         std::optional<std::int64_t> prefetch_below = std::nullopt) {
    StagedCode code;
    auto declare = [&](const std::string& name) {
      code.declare += on_stack ? fmt::format("  alignas(64) float {}[{}];\n", name, capacity)
                               : scratch("float", name, std::to_string(capacity));
    };
    std::string prefetches;
    for (const auto& [buffer, name] : staging_->loads) {
      declare(name);
      if (prefetch_below) {
        prefetches += fmt::format("{}  fbk::prefetch_run(c.{} + {} + {}, {});\n", indent, buffer,
                                  staging_->base, kPrefetchAhead, capacity);
      }
      code.before += fmt::format("{}fbk::f16_to_f32_n(c.{} + {}, {}, {});\n", indent, buffer,
                                 staging_->base, name, count);
    }
    if (!prefetches.empty()) {
      code.before =
          fmt::format("{0}if ({1} + {2} + {3} <= {4}) {{\n{5}{0}}}\n", indent, staging_->base,
                      kPrefetchAhead, capacity, *prefetch_below, prefetches) +
          code.before;
    }
    for (const auto& [buffer, name] : staging_->stores) {
      declare(name);
      code.after += fmt::format("{}fbk::f32_to_f16_n({}, c.{} + {}, {});\n", indent, name, buffer,
                                staging_->base, count);
    }
    staging_.reset();
    return code;
  }

  // Whole runs instead of per-element loops, where a run is a plain f16 buffer and the compute
  // type is fp32: `count` values of kernel input n from flat offset `base` widened into `dst`
  // (nullopt if n is computed here or is not f16), ...
  std::optional<std::string> widen_input(const Node& n, DType compute, const std::string& base,
                                         const std::string& dst, const std::string& count) const {
    const bool input = buffers_.count(n.id) && !members_.count(n.id) && !bound_.count(n.id);
    if (!input || n.dtype != DType::f16 || compute == DType::f64) return std::nullopt;
    return fmt::format("fbk::f16_to_f32_n(c.{} + {}, {}, {});\n", buffers_.at(n.id), base, dst,
                       count);
  }
  // ... and `src` narrowed into the anchor's buffer at `base` when the anchor is the only member
  // computed from `members` on and is stored as f16 (nullopt otherwise: an epilogue runs per element).
  // With a `scale`, the values narrowed are src[i] * scale.
  std::optional<std::string> narrow_anchor(const Node& anchor, const std::vector<NodeId>& members,
                                           const std::string& src, const std::string& base,
                                           const std::string& count,
                                           const std::string& scale = "") const {
    const bool stored = std::find(k_.stores.begin(), k_.stores.end(), anchor.id) != k_.stores.end();
    if (members != std::vector<NodeId>{anchor.id} || !stored || anchor.dtype != DType::f16)
      return std::nullopt;
    if (!scale.empty()) {
      return fmt::format("fbk::f32_scaled_to_f16_n({}, {}, c.{} + {}, {});\n", src, scale,
                         buffers_.at(anchor.id), base, count);
    }
    return fmt::format("fbk::f32_to_f16_n({}, c.{} + {}, {});\n", src, buffers_.at(anchor.id), base,
                       count);
  }
  // True when every value of n is a load of an f16 kernel input read through views only (transposes,
  // head permutations, broadcasts, slices, reshapes, concats of such): no arithmetic, no
  // promotion, nothing computed in this kernel. Follows value()'s own order of cases.
  bool f16_views_of_inputs(const Node& n) const {
    if (bound_.count(n.id) || n.dtype != DType::f16) return false;
    if (buffers_.count(n.id) && !members_.count(n.id)) return true;
    if (!is_data_movement(n.kind)) return false;
    return std::all_of(n.inputs.begin(), n.inputs.end(),
                       [&](NodeId i) { return f16_views_of_inputs(g_.node(i)); });
  }
  // Row r of a matmul operand gathered into dst (row length `length`) as the compute type. An
  // operand that concatenates along its last axis (attention's merged q, k, v gradients) gets one
  // loop per part: each element then reads its part directly, instead of choosing the part by a
  // branch per element.
  // An f16 operand that is only views of kernel inputs is gathered as its storage bits (a 16-bit
  // copy through the index arithmetic) into a row on the stack, which is then widened in one
  // vector run (F16C): the per-element software widening does not vectorise in a gather that
  // reads through a transpose or a permutation, and cost more than the GEMM's own row of work.
  // The values are those of the per-element widening (both are exact).
  std::string gather_row(const Node& operand, DType compute, const std::string& dst,
                         std::int64_t length,
                         const std::function<Index(const std::string&)>& index_of) {
    const std::string loop = "  for (std::int64_t j = 0; j < {}; ++j) {{\n{}  }}\n";
    const bool bits =
        compute != DType::f64 && length >= kMinBitsRun && f16_views_of_inputs(operand);
    auto element = [&](std::int64_t start, const std::string& v, DType v_dtype) {
      const std::string at = start == 0 ? "j" : fmt::format("{} + j", start);
      if (bits) return fmt::format("bits[{}] = {};", at, v);
      return fmt::format("{}[r * {} + {}] = {};", dst, length, at, convert(v, v_dtype, compute));
    };
    raw_copy_ = bits;  // value() then yields storage bits, and views move them as they are
    std::string code;
    const bool materialised =
        buffers_.count(operand.id) || bound_.count(operand.id) || members_.count(operand.id);
    if (operand.kind != OpKind::Concat || materialised ||
        operand.axis != int(operand.shape.size()) - 1) {
      line(element(0, value(operand.id, index_of("j")), operand.dtype));
      code = fmt::format(fmt::runtime(loop), length, take_lines("      "));
    } else {
      std::int64_t start = 0;
      for (NodeId p : operand.inputs) {
        const Node& part = g_.node(p);
        std::string v = value(part.id, index_of("j"));
        // the concat's promotion
        if (part.dtype != operand.dtype) v = round_to_dtype(operand.dtype, part.dtype, v);
        line(element(start, v, operand.dtype));
        code += fmt::format(fmt::runtime(loop), part.shape.back(), take_lines("      "));
        start += part.shape.back();
      }
    }
    raw_copy_ = false;
    if (!bits) return code;
    out_.lowering.push_back(
        fmt::format("{}: gathered as f16 bits, widened a row at a time", operand.name));
    const std::string row = length <= kStackRowBits
                                ? fmt::format("  alignas(64) std::uint16_t bits[{}];\n", length)
                                : scratch("std::uint16_t", "bits", std::to_string(length));
    return row + code +
           fmt::format("  fbk::f16_to_f32_n(bits, {} + r * {}, {});\n", dst, length, length);
  }
  // A loop over var in [0, count) around `body`, or nothing when the body is empty.
  static std::string element_loop(const std::string& var, const std::string& count,
                                  const std::string& body) {
    if (body.empty()) return "";
    return fmt::format("    for (std::int64_t {0} = 0; {0} < {1}; ++{0}) {{\n{2}    }}\n", var,
                       count, body);
  }

  // ---- kernel skeletons
  std::string task_wrapper(const std::string& name, const std::string& body) {
    return fmt::format(
        "void {}(void* context, std::int64_t task) {{\n  Ctx& c = "
        "*static_cast<Ctx*>(context);\n{}}}\n",
        name, body);
  }

  std::string pointwise() override {
    const Node& anchor = g_.node(k_.anchor);
    const std::int64_t n = shape_numel(anchor.shape);
    const std::int64_t tasks = (n + kPointwiseChunk - 1) / kPointwiseChunk;
    scopes_.emplace_back();
    // A kernel of views only whose loads all have the stored dtype (a materialised concat) moves
    // storage bits: no widening to the compute type and narrowing back.
    raw_copy_ = std::all_of(k_.members.begin(), k_.members.end(),
                            [&](NodeId m) { return is_data_movement(g_.node(m).kind); }) &&
                std::all_of(k_.loads.begin(), k_.loads.end(),
                            [&](NodeId l) { return g_.node(l).dtype == anchor.dtype; });
    if (raw_copy_) {
      out_.lowering.push_back(
          fmt::format("{}: a copy of views: storage bits moved as they are", anchor.name));
    } else {
      staging_ = Staging{"i", "block", "(i - block)", {}, {}};
    }
    // `ivdep` on the element loop: no iteration depends on another's stores. A kernel's stores are
    // fresh tensors that alias none of its loads (FusedExecutor::run allocates them), and staging
    // buffers are its own; GCC, which cannot know that, compared every store with every load at
    // run time and gave up past ten pairs, leaving a kernel of four loads and three stores scalar.
    // The loop runs a row segment at a time where the last axis allows (a multiple of
    // kStageBlock, or a divisor of it of at least kMinRowRun: a segment then lies inside one row),
    // with the indices of all but the last axis computed once per segment. A value broadcast along
    // the row (a per-row scale, a softmax's row sum) is then loop-invariant, where read per element
    // through i / W it was a 16-bit gather that kept GCC from vectorising the whole loop.
    const std::int64_t width = anchor.shape.back();
    const bool by_rows =
        anchor.shape.size() > 1 &&
        (width % kStageBlock == 0 || (kStageBlock % width == 0 && width >= kMinRowRun));
    const std::int64_t run = by_rows ? std::min(width, kStageBlock) : 0;
    std::string row_indices;
    Index idx;
    if (by_rows) {
      const Index lead = unravel(anchor.shape, "row");
      for (std::size_t j = 0; j + 1 < anchor.shape.size(); ++j) {
        if (lead[j] == "0") {
          idx.push_back("0");
          continue;
        }
        row_indices += fmt::format("      const std::int64_t i{} = {};\n", j, lead[j]);
        idx.push_back(fmt::format("i{}", j));
      }
      const std::string last = fmt::format("i{}", anchor.shape.size() - 1);
      line(fmt::format("const std::int64_t {} = {};", last, unravel(anchor.shape, "i").back()));
      idx.push_back(last);
      mark_identity(anchor.shape, idx, "i");
    } else {
      idx = loop_index(anchor.shape, "i", "i");
    }
    std::vector<NodeId> all = k_.members;
    store_members(all, idx, "i");
    const std::string inner = take_lines(by_rows ? "        " : "      ");
    const StagedCode staged =
        raw_copy_ ? StagedCode{} : staged_code(kStageBlock, true, "(block_end - block)", "    ", n);
    const std::string elements =
        by_rows
            ? fmt::format(
                  "    for (std::int64_t row = block; row < block_end; row += {0}) {{\n{1}"
                  "#pragma GCC ivdep\n"
                  "      for (std::int64_t i = row; i < row + {0}; ++i) {{\n{2}      }}\n    }}\n",
                  run, row_indices, inner)
            : fmt::format(
                  "#pragma GCC ivdep\n    for (std::int64_t i = block; i < block_end; ++i) {{\n{}  "
                  "  }}\n",
                  inner);
    std::string body = fmt::format(
        "  const std::int64_t begin = task * {0}, end = begin + {0} < {1} ? begin + {0} : {1};\n{2}"
        "  for (std::int64_t block = begin; block < end; block += {3}) {{\n"
        "    const std::int64_t block_end = block + {3} < end ? block + {3} : end;\n{4}{5}{6}  "
        "}}\n",
        kPointwiseChunk, n, staged.declare, kStageBlock, staged.before, elements, staged.after);
    return task_wrapper("pointwise_task", body) +
           fmt::format(
               "void run(Ctx& c) {{ c.services->parallel_for(c.services->pool, {}, pointwise_task, "
               "&c); }}\n",
               tasks);
  }

  std::string reduction() override {
    const Node& r = g_.node(k_.anchor);
    const Node& x = g_.node(r.inputs[0]);
    std::int64_t outer = 1, inner = 1;
    const std::int64_t extent = x.shape[std::size_t(r.axis)];
    for (int j = 0; j < r.axis; ++j) outer *= x.shape[std::size_t(j)];
    for (std::size_t j = std::size_t(r.axis) + 1; j < x.shape.size(); ++j) inner *= x.shape[j];
    const std::int64_t positions = outer * inner;
    const std::int64_t per_task = std::max<std::int64_t>(1, kPointwiseChunk / extent);
    const std::int64_t tasks = (positions + per_task - 1) / per_task;
    // gather: x at (outer position a, k, inner position b)
    scopes_.emplace_back();
    Index xi;
    const Shape outer_shape(x.shape.begin(), x.shape.begin() + r.axis);
    const Shape inner_shape(x.shape.begin() + r.axis + 1, x.shape.end());
    for (const auto& e : unravel(outer_shape, "a")) xi.push_back(e);
    xi.push_back("k");
    for (const auto& e : unravel(inner_shape, "b")) xi.push_back(e);
    if (inner == 1) {
      const std::string row_flat = fmt::format("(p * {} + k)", extent);
      mark_identity(x.shape, xi, row_flat);
      staging_ = Staging{row_flat, fmt::format("p * {}", extent), "k", {}, {}};
    }
    std::string widen, bits_row, widen_bits;
    if (auto run = inner == 1 ? widen_input(x, r.dtype, fmt::format("p * {}", extent), "row", "K")
                              : std::nullopt) {
      widen = "    " + *run;
    } else if (r.dtype != DType::f64 && extent >= kMinBitsRun && f16_views_of_inputs(x)) {
      // A strided f16 gather (a column sum: bias and layer-norm gradients) copies storage bits and
      // widens the row in one run, as gather_row does for matmul operands.
      raw_copy_ = true;
      line(fmt::format("bits[k] = {};", value(x.id, xi)));
      raw_copy_ = false;
      bits_row = scratch("std::uint16_t", "bits", "K");
      widen_bits = "    fbk::f16_to_f32_n(bits, row, K);\n";
      out_.lowering.push_back(
          fmt::format("{}: gathered as f16 bits, widened a row at a time", x.name));
    } else {
      line(fmt::format("row[k] = {};", convert(value(x.id, xi), x.dtype, r.dtype)));
    }
    const std::string gather = take_lines("      ");
    StagedCode staged = staging_ ? staged_code(extent, false, "K", "    ") : StagedCode{};
    staged.declare += bits_row;
    // the reduction and its epilogue at output position p
    std::string reduce;
    const std::string round = accumulator_rounding(o_, r.dtype);
    if (r.kind == OpKind::Max) {
      reduce = "fbk::row_max(row, K)";
    } else {
      reduce = fmt::format("fbk::tiled_sum(row, K, {}, {})", o_.reduce_tile, round);
      if (r.kind == OpKind::Mean) reduce = fmt::format("({} / {}(K))", reduce, ctype(r.dtype));
    }
    out_.lowering.push_back(
        fmt::format("{}: tiled sum, tile {}, {} lanes, accumulator {}", r.name, o_.reduce_tile, 32,
                    round == "fbk::NoRounding{}" ? ctype(r.dtype) : dtype_name(r.dtype)));
    Index ri = unravel(r.shape, "p");
    mark_identity(r.shape, ri, "p");
    bound_[r.id] = anchor_value(r, "reduced");
    const std::vector<NodeId> epilogue = epilogue_members();
    store_members(epilogue, ri, "p");
    const std::string after = take_lines("    ");
    std::string body = fmt::format(
        "  constexpr std::int64_t K = {0};\n{11}{8}"
        "  const std::int64_t begin = task * {2}, end = begin + {2} < {3} ? begin + {2} : {3};\n"
        "  for (std::int64_t p = begin; p < end; ++p) {{\n    const std::int64_t a = p / {4}, b = "
        "p % {4};\n"
        "    (void)a; (void)b;\n{9}{10}{5}"
        "    const {1} reduced = {6};\n{7}  }}\n",
        extent, ctype(r.dtype), per_task, positions, inner,
        element_loop("k", "K", gather) + widen_bits, reduce, after, staged.declare, staged.before,
        widen, scratch(ctype(r.dtype), "row", "K"));
    return task_wrapper("reduction_task", body) +
           fmt::format(
               "void run(Ctx& c) {{ c.services->parallel_for(c.services->pool, {}, reduction_task, "
               "&c); }}\n",
               tasks);
  }

  std::string rowwise() override {
    const Node& r = g_.node(k_.anchor);
    const Node& x = g_.node(r.inputs[0]);
    const std::int64_t extent = x.shape.back(), rows = shape_numel(x.shape) / extent;
    // Larger tasks than a pointwise kernel's: each task widens the row parameters once.
    const std::int64_t per_task = std::max<std::int64_t>(1, kRowwiseChunk / extent);
    const std::int64_t tasks = (rows + per_task - 1) / per_task;
    const std::string ct = ctype(r.dtype);
    scopes_.emplace_back();
    const Shape row_shape(x.shape.begin(), x.shape.end() - 1);
    Index xi = unravel(row_shape, "q");
    xi.push_back("k");
    const std::string row_flat = fmt::format("(q * {} + k)", extent);
    mark_identity(x.shape, xi, row_flat);
    const std::string row_base = fmt::format("q * {}", extent);
    staging_ = Staging{row_flat, row_base, "k", {}, {}};
    // An f16 kernel input is widened straight into the row; anything else is gathered per element.
    std::string widen, next_in;
    if (auto run = widen_input(x, r.dtype, row_base, "x", "K")) {
      widen = "    " + *run;
      bound_[x.id] = "x[k]";
      next_in = fmt::format("reinterpret_cast<const char*>(c.{} + (q + 1) * {})", buffers_.at(x.id),
                            extent);
    } else {
      line(fmt::format("x[k] = {};", convert(value(x.id, xi), x.dtype, r.dtype)));
    }
    const std::string gather = take_lines("      ");
    std::string params, call;
    const std::string round = accumulator_rounding(o_, r.dtype);
    if (r.kind == OpKind::LayerNorm) {
      for (int p = 1; p <= 2; ++p) {
        const Node& wb = g_.node(r.inputs[std::size_t(p)]);
        line(fmt::format("{}[k] = {};", p == 1 ? "w" : "bias",
                         convert(value(wb.id, Index{"k"}), wb.dtype, r.dtype)));
      }
      params = take_lines("    ");
    }
    out_.lowering.push_back(
        fmt::format("{}: row-wise {}, tile {}", r.name, op_name(r.kind), o_.reduce_tile));
    bound_[r.id] = anchor_value(r, "y[k]");
    const std::vector<NodeId> epilogue = epilogue_members();
    // A row that is the kernel's only f16 result is narrowed straight from y; softmax's last
    // multiply by 1 / sum then happens in the narrowing.
    const std::string div = newton("Div", o_.div, o_.div_newton_iters);
    const bool softmax = r.kind == OpKind::Softmax;
    std::string narrow, next_out;
    if (auto run = narrow_anchor(r, epilogue, "y", row_base, "K", softmax ? "inverse" : "")) {
      narrow = "    " + *run;
      next_out =
          fmt::format("reinterpret_cast<char*>(c.{} + (q + 1) * {})", buffers_.at(r.id), extent);
    } else {
      store_members(epilogue, xi, row_flat);
    }
    // The next row's plain f16 input and output lines (2 bytes an element: only f16 rows are
    // widened or narrowed whole) are requested while this row is computed (none after the last).
    std::string prefetch = "fbk::NoPrefetch{}";
    if (!next_in.empty() || !next_out.empty()) {
      auto pointer = [&](const std::string& p) {
        return p.empty() ? std::string("nullptr")
                         : fmt::format("q + 1 < {} ? {} : nullptr", rows, p);
      };
      prefetch =
          fmt::format("fbk::RowPrefetch{{{}, 2, {}, 2}}", pointer(next_in), pointer(next_out));
    }
    if (r.kind == OpKind::LayerNorm) {
      call = fmt::format("fbk::layernorm_row(x, w, bias, y, K, {}, {}({}), {}, {}, {});",
                         o_.reduce_tile, ct, literal(r.eps, r.dtype), round,
                         newton("Rsqrt", o_.rsqrt, o_.rsqrt_newton_iters), prefetch);
    } else if (!narrow.empty()) {
      call = fmt::format("const {} inverse = {}({}(1), fbk::softmax_exp_row(x, y, K, {}, {}, {}));",
                         ct, div, ct, o_.reduce_tile, round, prefetch);
    } else {
      call = fmt::format("fbk::softmax_row(x, y, K, {}, {}, {}, {});", o_.reduce_tile, round, div,
                         prefetch);
    }
    const std::string after = take_lines("      ");
    const StagedCode staged = staged_code(extent, false, "K", "    ");
    std::string buffers;
    for (const char* b : r.kind == OpKind::LayerNorm
                             ? std::vector<const char*>{"x", "y", "w", "bias"}
                             : std::vector<const char*>{"x", "y"}) {
      buffers += scratch(ct, b, "K");
    }
    std::string body = fmt::format(
        "  constexpr std::int64_t K = {0};\n{1}{8}"
        "  for (std::int64_t k = 0; k < K; ++k) {{\n{2}  }}\n"
        "  const std::int64_t begin = task * {3}, end = begin + {3} < {4} ? begin + {3} : {4};\n"
        "  for (std::int64_t q = begin; q < end; ++q) {{\n{9}{11}{5}"
        "    {6}\n{7}{10}{12}  }}\n",
        extent, buffers, params, per_task, rows, element_loop("k", "K", gather), call,
        element_loop("k", "K", after), staged.declare, staged.before, staged.after, widen, narrow);
    return task_wrapper("rowwise_task", body) +
           fmt::format(
               "void run(Ctx& c) {{ c.services->parallel_for(c.services->pool, {}, rowwise_task, "
               "&c); }}\n",
               tasks);
  }

  std::string matmul() override {
    const Node& mm = g_.node(k_.anchor);
    const Node& a = g_.node(mm.inputs[0]);
    const Node& b = g_.node(mm.inputs[1]);
    const std::string ct = ctype(mm.dtype);
    const std::int64_t m = a.shape[a.shape.size() - 2], kk = a.shape.back(), n = b.shape.back();
    const std::int64_t batches = shape_numel(a.shape) / (m * kk);
    const bool batched_b = b.shape.size() > 2;
    extra_ctx_ = fmt::format("  {0}* a_buf;\n  {0}* b_buf;\n  {0}* c_buf;\n", ct);
    auto batch_index = [&](const Shape& shape, const std::string& row, const std::string& col) {
      Index idx = unravel(Shape(shape.begin(), shape.end() - 2), "c.batch");
      idx.push_back(row);
      idx.push_back(col);
      return idx;
    };
    // gather A rows and B rows as the compute type: an f16 kernel input is widened a row at a time
    const std::string loop = "  for (std::int64_t j = 0; j < {}; ++j) {{\n{}  }}\n";
    const Shape out_batch(mm.shape.begin(), mm.shape.end() - 2);
    std::string gather_a, gather_b, epilogue;
    scopes_.emplace_back();
    if (auto run = widen_input(a, mm.dtype, fmt::format("c.batch * {} + r * {}", m * kk, kk),
                               fmt::format("c.a_buf + r * {}", kk), std::to_string(kk))) {
      gather_a = "  " + *run;
    } else {
      gather_a = gather_row(a, mm.dtype, "c.a_buf", kk,
                            [&](const std::string& col) { return batch_index(a.shape, "r", col); });
    }
    const bool b_like_output = !batched_b || Shape(b.shape.begin(), b.shape.end() - 2) == out_batch;
    const std::string b_base =
        fmt::format("{}r * {}", batched_b ? fmt::format("c.batch * {} + ", kk * n) : "", n);
    if (auto run = b_like_output
                       ? widen_input(b, mm.dtype, b_base, fmt::format("c.b_buf + r * {}", n),
                                     std::to_string(n))
                       : std::nullopt) {
      gather_b = "  " + *run;
    } else {
      gather_b = gather_row(b, mm.dtype, "c.b_buf", n, [&](const std::string& col) {
        return batched_b ? batch_index(b.shape, "r", col) : Index{"r", col};
      });
    }
    // A plain f16 matmul result is narrowed a row at a time; an epilogue runs per element.
    if (auto run =
            narrow_anchor(mm, k_.members, fmt::format("c.c_buf + r * {}", n),
                          fmt::format("c.batch * {} + r * {}", m * n, n), std::to_string(n))) {
      epilogue = "  " + *run;
    } else {
      // An f16 epilogue's loads and stores at the result's own position are staged a row at a time
      // (F16C runs, as in pointwise kernels) instead of converted per element in software. (Other
      // dtypes keep their kernels' text as it was.)
      const Index ci = batch_index(mm.shape, "r", "j");
      const std::string flat = fmt::format("(c.batch * {} + r * {} + j)", m * n, n);
      if (mm.dtype == DType::f16) {
        mark_identity(mm.shape, ci, flat);
        staging_ = Staging{flat, fmt::format("c.batch * {} + r * {}", m * n, n), "j", {}, {}};
      }
      bound_[mm.id] = anchor_value(mm, fmt::format("c.c_buf[r * {} + j]", n));
      store_members(k_.members, ci, flat);
      const std::string body = take_lines("      ");
      StagedCode staged;
      if (staging_) {
        if (!staging_->loads.empty() || !staging_->stores.empty()) {
          out_.lowering.push_back(
              fmt::format("{}: epilogue's f16 loads and stores staged a row at a time", mm.name));
        }
        staged = staged_code(n, n <= kStackRowBits / 4, std::to_string(n), "  ");
      }
      epilogue =
          staged.declare + staged.before + fmt::format(fmt::runtime(loop), n, body) + staged.after;
    }
    out_.lowering.push_back(fmt::format(
        "{}: extern GEMM ({} accumulation), epilogue on the {} result", mm.name, ct, ct));
    std::string code;
    // Several rows per task (about kMatmulTaskElements elements): one row per task paid a pool
    // dispatch for every few dozen elements. The rows and their work are those of one row per task.
    auto rows_per_task = [](std::int64_t row_length) {
      return std::max<std::int64_t>(1, kMatmulTaskElements / row_length);
    };
    const std::int64_t ra = rows_per_task(kk), rb = rows_per_task(n);
    const std::int64_t tasks_a = (m + ra - 1) / ra, tasks_b = (kk + rb - 1) / rb,
                       tasks_e = (m + rb - 1) / rb;
    auto rows = [](std::int64_t per_task, std::int64_t total, const std::string& body) {
      return fmt::format(
          "  for (std::int64_t r = task * {0}; r < (task + 1) * {0} && r < {1}; ++r) {{\n{2}  }}\n",
          per_task, total, body);
    };
    code += task_wrapper("gather_a", rows(ra, m, gather_a));
    code += task_wrapper("gather_b", rows(rb, kk, gather_b));
    code += task_wrapper("epilogue", rows(rb, m, epilogue));
    // Operand and result buffers come from the buffer cache and are written in full before they
    // are read: no zero-fill, no page faults on a repeated run.
    if (batches > 1 && m <= kGemmRowTile) {
      // Many small GEMMs (attention's per-head products): one task per batch element, each with
      // its own buffers, instead of four pool dispatches of a few rows each per batch element
      // (which cost more than the arithmetic). A GEMM of at most kGemmRowTile rows is one task of
      // the device's GEMM, run on the calling thread: the same call, and the same bits, as the
      // per-batch form and eager's.
      code += fmt::format(
          "void batch_task(void* context, std::int64_t task) {{\n"
          "  Ctx c = *static_cast<Ctx*>(context);\n  c.batch = task;\n"
          "  const FbScratch<{0}> a(c.services, {1} * {2}), b(c.services, {2} * {3}), "
          "cm(c.services, {1} * {3});\n"
          "  c.a_buf = a.data; c.b_buf = b.data; c.c_buf = cm.data;\n"
          "  for (std::int64_t t = 0; t < {6}; ++t) gather_a(&c, t);\n"
          "  for (std::int64_t t = 0; t < {7}; ++t) gather_b(&c, t);\n"
          "  c.services->{4}(c.services->pool, {1}, {3}, {2}, c.a_buf, c.b_buf, c.c_buf);\n"
          "  for (std::int64_t t = 0; t < {8}; ++t) epilogue(&c, t);\n}}\n"
          "void run(Ctx& c) {{ c.services->parallel_for(c.services->pool, {5}, batch_task, &c); "
          "}}\n",
          ct, m, kk, n, ct == "double" ? "gemm_f64" : "gemm_f32", batches, tasks_a, tasks_b,
          tasks_e);
      out_.lowering.push_back(
          fmt::format("{}: {} GEMMs of {} rows, one task each", mm.name, batches, m));
      return code;
    }
    if (m > kGemmRowTile) {
      // One task per GEMM row tile (the device GEMM's own tiles, so the same calls and bits):
      // it gathers its rows of A, multiplies them (a single tile runs on the calling thread) and
      // applies the epilogue to its rows while they are in cache. Two pool dispatches per batch
      // element (B, then the tiles) instead of four, each a barrier that waits for the slowest
      // thread.
      const std::int64_t tiles = (m + kGemmRowTile - 1) / kGemmRowTile;
      auto row_range = [](const std::string& name, const std::string& body) {
        return fmt::format(
            "void {}(Ctx& c, std::int64_t r0, std::int64_t r1) {{\n  for (std::int64_t r = r0; r < "
            "r1; ++r) {{\n{}  }}\n}}\n",
            name, body);
      };
      code += row_range("gather_a_rows", gather_a);
      code += row_range("epilogue_rows", epilogue);
      code += fmt::format(
          "void tile_task(void* context, std::int64_t tile) {{\n  Ctx& c = "
          "*static_cast<Ctx*>(context);\n"
          "  const std::int64_t r0 = tile * {0}, r1 = r0 + {0} < {1} ? r0 + {0} : {1};\n"
          "  gather_a_rows(c, r0, r1);\n"
          "  c.services->{4}(c.services->pool, r1 - r0, {3}, {2}, c.a_buf + r0 * {2}, c.b_buf, "
          "c.c_buf + r0 * {3});\n"
          "  epilogue_rows(c, r0, r1);\n}}\n"
          "void run(Ctx& c) {{\n  const FbScratch<{5}> a(c.services, {1} * {2}), b(c.services, {2} "
          "* {3}), cm(c.services, {1} * {3});\n"
          "  c.a_buf = a.data; c.b_buf = b.data; c.c_buf = cm.data;\n"
          "  for (c.batch = 0; c.batch < {6}; ++c.batch) {{\n"
          "    if ({7} || c.batch == 0) c.services->parallel_for(c.services->pool, {8}, gather_b, "
          "&c);\n"
          "    c.services->parallel_for(c.services->pool, {9}, tile_task, &c);\n  }}\n}}\n",
          kGemmRowTile, m, kk, n, ct == "double" ? "gemm_f64" : "gemm_f32", ct, batches,
          batched_b ? "true" : "false", tasks_b, tiles);
      out_.lowering.push_back(
          fmt::format("{}: {} row tiles of {}, each gathered, multiplied and finished in one task",
                      mm.name, tiles, kGemmRowTile));
      return code;
    }
    code += fmt::format(
        "void run(Ctx& c) {{\n  const FbScratch<{0}> a(c.services, {1} * {2}), b(c.services, {2} * "
        "{3}), cm(c.services, {1} * {3});\n"
        "  c.a_buf = a.data; c.b_buf = b.data; c.c_buf = cm.data;\n"
        "  for (c.batch = 0; c.batch < {4}; ++c.batch) {{\n"
        "    c.services->parallel_for(c.services->pool, {7}, gather_a, &c);\n"
        "    if ({5} || c.batch == 0) c.services->parallel_for(c.services->pool, {8}, gather_b, "
        "&c);\n"
        "    c.services->{6}(c.services->pool, {1}, {3}, {2}, c.a_buf, c.b_buf, c.c_buf);\n"
        "    c.services->parallel_for(c.services->pool, {9}, epilogue, &c);\n  }}\n}}\n",
        ct, m, kk, n, batches, batched_b ? "true" : "false",
        ct == "double" ? "gemm_f64" : "gemm_f32", tasks_a, tasks_b, tasks_e);
    return code;
  }

  // gather_rows / scatter_add_rows. The ids are read by flat position from the buffer they are
  // (or are a reshape of); the fused executor checks their range before the kernel runs.
  std::string ids_element(const Node& op, const std::string& position) const {
    const Node* ids = &g_.node(op.inputs[1]);
    while (ids->kind == OpKind::Reshape) ids = &g_.node(ids->inputs[0]);
    if (!buffers_.count(ids->id) || members_.count(ids->id)) {
      throw_input_error(
          "fused: {} reads ids {} through a {}: only a tensor or a reshape of one is supported",
          op.name, g_.node(op.inputs[1]).name, op_name(ids->kind));
    }
    return fmt::format("std::int64_t(c.{}[{}])", buffers_.at(ids->id), position);
  }

  std::string indexed() override {
    const Node& op = g_.node(k_.anchor);
    const Node& data = g_.node(op.inputs[0]);  // the table (gather) or the rows to add (scatter)
    const std::int64_t width = op.shape[1];
    const std::int64_t count = g_.node(op.inputs[1]).shape[0];  // ids
    const std::string ct = ctype(op.dtype);
    const bool stored = std::find(k_.stores.begin(), k_.stores.end(), op.id) != k_.stores.end();
    if (!stored) return "void run(Ctx&) {}\n";  // nothing reads the result
    const std::string out = "c." + buffers_.at(op.id);
    scopes_.emplace_back();
    if (op.kind == OpKind::GatherRows) {
      // Whole rows per task; each element a copy through the compute type (exact).
      const std::int64_t per_task = std::max<std::int64_t>(1, kPointwiseChunk / width);
      const std::int64_t tasks = (count + per_task - 1) / per_task;
      const std::string v = value(data.id, Index{"id", "k"});
      const std::string copy = take_lines("      ");
      out_.lowering.push_back(fmt::format("{}: {} rows of {} gathered by id, {} per task", op.name,
                                          count, width, per_task));
      const std::string body = fmt::format(
          "  for (std::int64_t r = task * {0}; r < (task + 1) * {0} && r < {1}; ++r) {{\n"
          "    const std::int64_t id = {2};\n"
          "    for (std::int64_t k = 0; k < {3}; ++k) {{\n{4}      {5}[r * {3} + k] = {6};\n    "
          "}}\n  }}\n",
          per_task, count, ids_element(op, "r"), width, copy, out,
          store_expr(op.dtype, op.dtype, v));
      return task_wrapper("gather_task", body) +
             fmt::format(
                 "void run(Ctx& c) {{ c.services->parallel_for(c.services->pool, {}, gather_task, "
                 "&c); }}\n",
                 tasks);
    }
    // scatter_add_rows: a zeroed compute-type table; each task owns a band of columns and adds
    // the rows in id order (the same order, and in fp32 the same bits, as the eager kernel).
    constexpr std::int64_t kColumns = 16;
    const std::int64_t rows = op.shape[0];
    const std::int64_t tasks = (width + kColumns - 1) / kColumns;
    extra_ctx_ = fmt::format("  {}* acc;\n", ct);
    const std::string v = value(data.id, Index{"i", "k"});
    const std::string add = take_lines("      ");
    out_.lowering.push_back(fmt::format(
        "{}: {} rows added into {} by id in id order, {} accumulation, {} columns per task",
        op.name, count, rows, ct == "double" ? "f64" : "f32", kColumns));
    const std::string body = fmt::format(
        "  const std::int64_t k0 = task * {0}, k1 = k0 + {0} < {1} ? k0 + {0} : {1};\n"
        "  for (std::int64_t q = 0; q < {2}; ++q) {{\n    for (std::int64_t k = k0; k < k1; ++k) "
        "c.acc[q * {1} + k] = 0;\n  }}\n"
        "  for (std::int64_t i = 0; i < {3}; ++i) {{\n    const std::int64_t id = {4};\n"
        "    for (std::int64_t k = k0; k < k1; ++k) {{\n{5}      c.acc[id * {1} + k] += {6};\n    "
        "}}\n  }}\n"
        "  for (std::int64_t q = 0; q < {2}; ++q) {{\n    for (std::int64_t k = k0; k < k1; ++k) "
        "{7}[q * {1} + k] = {8};\n  }}\n",
        kColumns, width, rows, count, ids_element(op, "i"), add, v, out,
        store_expr(op.dtype, op.dtype, fmt::format("c.acc[q * {} + k]", width)));
    return task_wrapper("scatter_task", body) +
           fmt::format(
               "void run(Ctx& c) {{\n  const FbScratch<{0}> acc(c.services, {1});\n  c.acc = "
               "acc.data;\n"
               "  c.services->parallel_for(c.services->pool, {2}, scatter_task, &c);\n}}\n",
               ct, rows * width, tasks);
  }
  std::string extra_ctx_;
  std::optional<Staging> staging_;
};
}  // namespace

EmittedKernel emit_cpp_kernel(const Graph& graph, const KernelPlan& kernel,
                              const EngineOptions& options) {
  return CppRenderer(graph, kernel, options).emit();
}

}  // namespace fusebench::cpu
