#include "fusebench/engine/c_style_emitter.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

namespace fusebench::engine {

// ---- text every renderer shares
namespace emit {
std::string ctype(DType d) { return d == DType::f64 ? "double" : "float"; }
std::string storage_type(DType d) {
  switch (d) {
    case DType::f16:
    case DType::bf16:
      return "std::uint16_t";
    case DType::f32:
      return "float";
    case DType::f64:
      return "double";
    case DType::i32:
      return "std::int32_t";  // gather_rows / scatter_add_rows ids
    case DType::i64:
      return "std::int64_t";
    default:
      throw_input_error(
          "fused kernels: dtype {} cannot be stored (floating dtypes, and i32 / i64 ids)",
          dtype_name(d));
  }
}
std::string load_expr(DType d, const std::string& buffer, const std::string& offset) {
  const std::string element = fmt::format("{}[{}]", buffer, offset);
  switch (d) {
    case DType::f16:
      return fmt::format("fusebench::fp16_bits_to_fp32({})", element);
    case DType::bf16:
      return fmt::format("fusebench::bf16_bits_to_fp32({})", element);
    default:
      return element;
  }
}
std::string store_expr(DType d, DType value_dtype, const std::string& v) {
  const bool wide = value_dtype == DType::f64;
  switch (d) {
    case DType::f16:
      return wide ? fmt::format("fusebench::round_to_format_bits<fusebench::Half>({})", v)
                  : fmt::format("fusebench::fp32_to_fp16_bits({})", v);
    case DType::bf16:
      return wide ? fmt::format("fusebench::round_to_format_bits<fusebench::BFloat16>({})", v)
                  : fmt::format("fusebench::fp32_to_bf16_bits({})", v);
    case DType::f32:
      return wide ? fmt::format("(float){}", v) : v;
    default:
      return wide ? v : fmt::format("(double){}", v);
  }
}
std::string round_to_dtype(DType d, DType value_dtype, const std::string& v) {
  if (value_dtype == DType::f64) {
    switch (d) {
      case DType::f16:
        return fmt::format(
            "fusebench::fp16_bits_to_fp32(fusebench::round_to_format_bits<fusebench::Half>({}))",
            v);
      case DType::bf16:
        return fmt::format(
            "fusebench::bf16_bits_to_fp32(fusebench::round_to_format_bits<fusebench::BFloat16>({})"
            ")",
            v);
      case DType::f32:
        return fmt::format("(float){}", v);
      default:
        return v;
    }
  }
  switch (d) {
    case DType::f16:
      return fmt::format("fbk::round_f16({})", v);
    case DType::bf16:
      return fmt::format("fbk::round_bf16({})", v);
    case DType::f64:
      return fmt::format("(double){}", v);
    default:
      return v;
  }
}
std::string literal(double value, DType compute) {
  if (compute == DType::f64) return fmt::format("{:a}", value);
  return fmt::format("{:a}f", double(float(value)));
}
std::string newton(std::string_view family, ApproxMode mode, int iterations) {
  switch (mode) {
    case ApproxMode::Ieee:
      return fmt::format("fbk::{}Ieee{{}}", family);
    case ApproxMode::NewtonBitTrick:
      return fmt::format("fbk::{}NewtonBitTrick<{}>{{}}", family, iterations);
    case ApproxMode::NewtonHardware:
      return fmt::format("fbk::{}NewtonHardware<{}>{{}}", family, iterations);
  }
  return "";
}
std::string accumulator_rounding(const EngineOptions& o, DType d) {
  if (o.accumulator == AccumulatorDtype::Storage) {
    if (d == DType::f16) return "fbk::RoundF16{}";
    if (d == DType::bf16) return "fbk::RoundBF16{}";
  }
  return "fbk::NoRounding{}";
}
Shape strides_of(const Shape& shape) { return contiguous_strides(shape); }
std::string flat_offset(const Shape& shape, const Index& idx) {
  const Shape strides = strides_of(shape);
  std::vector<std::string> terms;
  for (std::size_t j = 0; j < shape.size(); ++j) {
    if (shape[j] == 1) continue;
    terms.push_back(strides[j] == 1 ? idx[j] : fmt::format("{} * {}", idx[j], strides[j]));
  }
  return terms.empty() ? "0" : fmt::format("({})", fmt::join(terms, " + "));
}
// Index variables of `shape` unravelled from a flat expression. The division and remainder are
// unsigned (a flat index is never negative): signed ones by a constant cost a rounding fix-up
// each, and a power of two that is a shift or a mask unsigned took four or five instructions
// signed. In a copy through a head permutation (attention's merged q/k/v gradients), index
// arithmetic was most of the kernel's time. The casts are plain C++, valid in CUDA sources too.
Index unravel(const Shape& shape, const std::string& flat) {
  const Shape strides = strides_of(shape);
  const std::string u = fmt::format("(unsigned long long)({})", flat);
  Index idx;
  for (std::size_t j = 0; j < shape.size(); ++j) {
    if (shape[j] == 1) {
      idx.push_back("0");
    } else if (j == 0) {
      idx.push_back(strides[j] == 1 ? flat
                                    : fmt::format("((long long)({} / {}ULL))", u, strides[j]));
    } else {
      idx.push_back(strides[j] == 1 ? fmt::format("((long long)({} % {}ULL))", u, shape[j])
                                    : fmt::format("((long long)({} / {}ULL % {}ULL))", u,
                                                  strides[j], shape[j]));
    }
  }
  return idx;
}

std::string elementwise_formula(const Graph& graph, const Node& n, const OperandText& operand,
                                const OperandText& raw, const Index& idx,
                                const EngineOptions& options, EmittedKernel& out) {
  const DType compute = n.dtype;
  std::string expr;
  switch (n.kind) {
    case OpKind::Add:
      expr = fmt::format("({} + {})", operand(0), operand(1));
      break;
    case OpKind::Sub:
      expr = fmt::format("({} - {})", operand(0), operand(1));
      break;
    case OpKind::Mul:
      expr = fmt::format("({} * {})", operand(0), operand(1));
      break;
    case OpKind::Div:
      expr = fmt::format("{}({}, {})", newton("Div", options.div, options.div_newton_iters),
                         operand(0), operand(1));
      break;
    case OpKind::AddScalar:
    case OpKind::MulScalar: {
      const char op = n.kind == OpKind::AddScalar ? '+' : '*';
      std::string c;
      if (options.scalar_lowering == ScalarLowering::BroadcastTensor && compute != DType::f64) {
        const std::size_t slot = out.constants.size();
        out.constants.push_back(visit_floating(n.dtype, "constant", [&](auto tag) {
          using T = decltype(tag);
          const std::vector<T> v = {round_to<T>(n.scalar)};
          return Tensor::from_values<T>({1}, v);
        }));
        c = load_expr(n.dtype, fmt::format("c.c{}", slot), "0");
        out.lowering.push_back(fmt::format("{}: broadcast tensor {} {:.9g} (loaded from memory)",
                                           n.name, dtype_name(n.dtype),
                                           out.constants.back().value_at(0)));
      } else {
        c = literal(n.scalar, compute);
        out.lowering.push_back(
            fmt::format("{}: {} immediate {}", n.name, compute == DType::f64 ? "fp64" : "fp32", c));
      }
      expr = fmt::format("({} {} {})", operand(0), op, c);
      break;
    }
    case OpKind::Neg:
      expr = fmt::format("(-{})", operand(0));
      break;
    case OpKind::Exp:
      expr = fmt::format("fbk::exp_c({})", operand(0));
      break;
    case OpKind::Sqrt:
      expr = fmt::format("std::sqrt({})", operand(0));
      break;
    case OpKind::Rsqrt:
      expr = fmt::format("{}({})", newton("Rsqrt", options.rsqrt, options.rsqrt_newton_iters),
                         operand(0));
      break;
    case OpKind::GeluErf:
      expr = fmt::format("fbk::gelu_erf_c({})", operand(0));
      break;
    case OpKind::GeluTanh:
      expr = fmt::format("fbk::gelu_tanh_c({})", operand(0));
      break;
    case OpKind::Log:
      expr = fmt::format("fbk::log_c({})", operand(0));
      break;
    case OpKind::GeluTanhBackward:
      expr = fmt::format("fbk::gelu_tanh_backward_c({}, {})", operand(0), operand(1));
      break;
    case OpKind::CausalMask: {
      // Index arithmetic on the node's own (row, column) index: the mask is never a tensor.
      const std::string& row = idx[idx.size() - 2];
      const std::string& col = idx[idx.size() - 1];
      std::string fill = literal(n.scalar, compute);
      if (std::isinf(n.scalar)) {
        fill = fmt::format("{}std::numeric_limits<{}>::infinity()", n.scalar < 0 ? "-" : "",
                           ctype(compute));
      }
      expr = fmt::format("({} > {} ? {} : {})", col, row, fill, operand(0));
      out.lowering.push_back(
          fmt::format("{}: causal mask by index comparison, fill {}", n.name, fill));
      break;
    }
    case OpKind::Cast: {
      expr = round_to_dtype(n.dtype, graph.node(n.inputs[0]).dtype, raw(0));
      break;
    }
    default:
      throw_input_error("emitter: {} ({}) is not element-wise", n.name, op_name(n.kind));
  }
  return expr;
}
}  // namespace emit

// ---- values
using namespace emit;

CStyleEmitter::CStyleEmitter(const Graph& g, const KernelPlan& k, const EngineOptions& o)
    : g_(g), k_(k), graph_options_(o), o_(o.at_op(g.node(k.anchor).name)) {
  members_.insert(k.members.begin(), k.members.end());
  int buffer_count = 0;
  for (NodeId id : k.loads) {
    buffers_[id] = fmt::format("b{}", buffer_count++);
    out_.loads.push_back(id);
  }
  for (NodeId id : k.stores) {
    buffers_[id] = fmt::format("b{}", buffer_count++);
    out_.stores.push_back(id);
  }
}

std::string CStyleEmitter::take_lines(const std::string& indent) {
  std::string out;
  for (const auto& l : scopes_.back().lines) out += indent + l + "\n";
  scopes_.back().lines.clear();
  scopes_.back().memo.clear();
  return out;
}

// Storage bits (raw_copy_) and compute-type values of the same element are different variables.
std::string CStyleEmitter::memo_key(NodeId id, const Index& idx) const {
  return fmt::format("{}{}|{}", raw_copy_ ? "bits:" : "", id, fmt::join(idx, ","));
}

const std::string* CStyleEmitter::find_memo(const std::string& key) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto found = it->memo.find(key);
    if (found != it->memo.end()) return &found->second;
  }
  return nullptr;
}

std::string CStyleEmitter::convert(const std::string& v, DType from, DType to) const {
  if (ctype(from) == ctype(to)) return v;
  return fmt::format("({}){}", ctype(to), v);
}

Index CStyleEmitter::broadcast_index(const Node& input, const Shape& out_shape,
                                     const Index& idx) const {
  Index in;
  const std::size_t lead = out_shape.size() - input.shape.size();
  for (std::size_t j = 0; j < input.shape.size(); ++j) {
    in.push_back(input.shape[j] == 1 && out_shape[lead + j] != 1 ? "0" : idx[lead + j]);
  }
  return in;
}

namespace {
std::string identity_key(const Shape& shape, const Index& idx) {
  return fmt::format("{}|{}", shape_string(shape), fmt::join(idx, ","));
}
}  // namespace

void CStyleEmitter::mark_identity(const Shape& shape, const Index& idx, const std::string& flat) {
  identity_[identity_key(shape, idx)] = flat;
}

std::string CStyleEmitter::offset_for(NodeId id, const Index& idx) const {
  auto it = identity_.find(identity_key(g_.node(id).shape, idx));
  if (it != identity_.end()) return it->second;
  return flat_offset(g_.node(id).shape, idx);
}

std::string CStyleEmitter::value(NodeId id, const Index& idx) {
  const std::string key = memo_key(id, idx);
  if (const std::string* hit = find_memo(key)) return *hit;
  const Node& n = g_.node(id);
  std::string result;
  auto bound = bound_.find(id);
  if (bound != bound_.end()) {
    result = bound->second;
  } else if (is_kernel_input(id)) {
    result = fresh();
    const std::string& buffer = buffers_.at(id);
    const std::string offset = offset_for(id, idx);
    if (raw_copy_) {
      line(fmt::format("const {} {} = c.{}[{}];", storage_type(n.dtype), result, buffer, offset));
    } else {
      std::optional<std::string> load = staged_load(n.dtype, buffer, offset);
      if (!load) load = load_expr(n.dtype, "c." + buffer, offset);
      line(fmt::format("const {} {} = {};", ctype(n.dtype), result, *load));
    }
  } else if (is_data_movement(n.kind)) {
    result = view_value(n, idx);
  } else {
    result = compute_value(n, idx);
  }
  scopes_.back().memo[key] = result;
  return result;
}

std::string CStyleEmitter::view_value(const Node& n, const Index& idx) {
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
    case OpKind::Expand:
      return value(input.id, broadcast_index(input, n.shape, idx));
    case OpKind::Reshape: {
      const std::string flat = fresh();
      line(fmt::format("const {} {} = {};", index_type(), flat, flat_offset(n.shape, idx)));
      // Where the renderer says so, a load of the input at these indices is at `flat` itself: the
      // indices unravelled and ravelled again (x / W * W + x % W) were left to GCC, which kept
      // them, and the load, scalar.
      const Index in = unravel(input.shape, flat);
      if (reshape_reads_at_flat_offset()) mark_identity(input.shape, in, flat);
      return value(input.id, in);
    }
    case OpKind::Concat: {
      // Only the selected operand may be read: each part gets its own scope.
      const std::string result = fresh();
      std::vector<ConcatPart> parts;
      std::int64_t start = 0;
      for (std::size_t p = 0; p < n.inputs.size(); ++p) {
        const Node& part = g_.node(n.inputs[p]);
        const std::int64_t extent = part.shape[std::size_t(n.axis)];
        Index in = idx;
        in[std::size_t(n.axis)] = start == 0
                                      ? idx[std::size_t(n.axis)]
                                      : fmt::format("({} - {})", idx[std::size_t(n.axis)], start);
        scopes_.emplace_back();
        std::string v = value(part.id, in);
        if (part.dtype != n.dtype) {
          v = round_to_dtype(n.dtype, part.dtype, v);  // the concat's implicit promotion
          out_.lowering.push_back(fmt::format("{}: operand {} promoted {} -> {}", n.name, part.name,
                                              dtype_name(part.dtype), dtype_name(n.dtype)));
        }
        const bool last = p + 1 == n.inputs.size();
        parts.push_back({last ? std::string()
                              : fmt::format("{} < {}", idx[std::size_t(n.axis)], start + extent),
                         std::move(scopes_.back().lines), std::move(v)});
        scopes_.pop_back();
        start += extent;
      }
      line(concat_statement(raw_copy_ ? storage_type(n.dtype) : ctype(n.dtype), result, parts));
      return result;
    }
    default:
      break;
  }
  throw_input_error("{}: {} is not a view", emitter_name(), n.name);
}

std::string CStyleEmitter::operand(const Node& n, std::size_t i, const Index& idx) {
  const Node& input = g_.node(n.inputs[i]);
  const Index in = broadcast_index(input, n.shape, idx);
  return convert(value(input.id, in), input.dtype, n.dtype);
}

std::string CStyleEmitter::compute_value(const Node& n, const Index& idx) {
  const EngineOptions knobs = graph_options_.at_op(n.name);
  std::string expr = elementwise_formula(
      g_, n, [&](std::size_t i) { return operand(n, i, idx); },
      [&](std::size_t i) { return value(n.inputs[i], idx); }, idx, knobs, out_);
  if (knobs.emulate_per_op_rounding) {
    expr = round_to_dtype(n.dtype, n.dtype, expr);
    if (!o_.emulate_per_op_rounding) out_.lowering.push_back(n.name + ": rounded to its dtype");
  }
  const std::string v = fresh();
  line(fmt::format("const {} {} = {};", ctype(n.dtype), v, expr));
  return v;
}

std::vector<NodeId> CStyleEmitter::epilogue_members() const {
  std::vector<NodeId> out;
  for (NodeId m : k_.members) {
    if (std::find(k_.prologue.begin(), k_.prologue.end(), m) == k_.prologue.end()) out.push_back(m);
  }
  return out;
}

std::string CStyleEmitter::kernel_body() {
  switch (k_.kind) {
    case KernelKind::Pointwise:
      return pointwise();
    case KernelKind::Reduction:
      return reduction();
    case KernelKind::Rowwise:
      return rowwise();
    case KernelKind::Matmul:
      return matmul();
    case KernelKind::Indexed:
      return indexed();
  }
  throw_input_error("{}: kernel {} has an unknown kind", emitter_name(), k_.name);
}

std::string CStyleEmitter::switches_comment(NodeId m) const {
  const auto found = graph_options_.per_op.find(g_.node(m).name);
  if (found == graph_options_.per_op.end() || found->second.empty()) return "";
  return fmt::format(" [switches: {}]", found->second.describe());
}

std::string CStyleEmitter::anchor_value(const Node& anchor, const std::string& expr) const {
  return o_.emulate_per_op_rounding ? round_to_dtype(anchor.dtype, anchor.dtype, expr) : expr;
}

void CStyleEmitter::store_members(const std::vector<NodeId>& candidates, const Index& idx,
                                  const std::string& flat) {
  for (NodeId m : k_.stores) {
    if (std::find(candidates.begin(), candidates.end(), m) == candidates.end()) continue;
    const Node& n = g_.node(m);
    const std::string v = value(m, idx);
    const std::string& buffer = buffers_.at(m);
    if (raw_copy_) {
      line(fmt::format("c.{}[{}] = {};", buffer, flat, v));
    } else if (const std::optional<std::string> staged = staged_store(n.dtype, buffer, flat)) {
      line(fmt::format("{} = {};", *staged, v));
    } else {
      line(fmt::format("c.{}[{}] = {};", buffer, flat, store_expr(n.dtype, n.dtype, v)));
    }
  }
}

Index CStyleEmitter::loop_index(const Shape& shape, const std::string& flat,
                                const std::string& prefix) {
  Index idx;
  const Index expr = unravel(shape, flat);
  for (std::size_t j = 0; j < shape.size(); ++j) {
    if (expr[j] == "0") {
      idx.push_back("0");
      continue;
    }
    const std::string var = fmt::format("{}{}", prefix, j);
    line(fmt::format("const {} {} = {};", index_type(), var, expr[j]));
    idx.push_back(var);
  }
  mark_identity(shape, idx, flat);
  return idx;
}

}  // namespace fusebench::engine
