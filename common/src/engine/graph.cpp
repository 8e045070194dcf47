#include "fusebench/engine/graph.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <numeric>

namespace fusebench::engine {

namespace {
// What the classification functions (is_elementwise, is_reduction, is_data_movement) answer: a
// column of the op table, so that no answer depends on where a kind sits in the enum.
enum class OpClass { Input, Elementwise, Reduction, Rowwise, Matmul, Indexed, DataMovement };
struct OpInfo {
  OpKind kind;
  std::string_view name;
  OpClass op_class;
};
constexpr OpInfo kOps[] = {
    {OpKind::Input, "input", OpClass::Input},
    {OpKind::Add, "add", OpClass::Elementwise},
    {OpKind::Sub, "sub", OpClass::Elementwise},
    {OpKind::Mul, "mul", OpClass::Elementwise},
    {OpKind::Div, "div", OpClass::Elementwise},
    {OpKind::AddScalar, "add_scalar", OpClass::Elementwise},
    {OpKind::MulScalar, "mul_scalar", OpClass::Elementwise},
    {OpKind::Neg, "neg", OpClass::Elementwise},
    {OpKind::Exp, "exp", OpClass::Elementwise},
    {OpKind::Sqrt, "sqrt", OpClass::Elementwise},
    {OpKind::Rsqrt, "rsqrt", OpClass::Elementwise},
    {OpKind::GeluErf, "gelu", OpClass::Elementwise},
    {OpKind::GeluTanh, "gelu_tanh", OpClass::Elementwise},
    {OpKind::Cast, "cast", OpClass::Elementwise},
    {OpKind::Log, "log", OpClass::Elementwise},
    {OpKind::GeluTanhBackward, "gelu_tanh_backward", OpClass::Elementwise},
    {OpKind::CausalMask, "causal_mask", OpClass::Elementwise},
    {OpKind::Sum, "sum", OpClass::Reduction},
    {OpKind::Mean, "mean", OpClass::Reduction},
    {OpKind::Max, "max", OpClass::Reduction},
    {OpKind::LayerNorm, "layernorm", OpClass::Rowwise},
    {OpKind::Softmax, "softmax", OpClass::Rowwise},
    {OpKind::Matmul, "matmul", OpClass::Matmul},
    {OpKind::GatherRows, "gather_rows", OpClass::Indexed},
    {OpKind::ScatterAddRows, "scatter_add_rows", OpClass::Indexed},
    {OpKind::Permute, "permute", OpClass::DataMovement},
    {OpKind::Reshape, "reshape", OpClass::DataMovement},
    {OpKind::Slice, "slice", OpClass::DataMovement},
    {OpKind::Concat, "concat", OpClass::DataMovement},
    {OpKind::Expand, "expand", OpClass::DataMovement},
};

const OpInfo* find_op(OpKind kind) {
  for (const auto& op : kOps) {
    if (op.kind == kind) return &op;
  }
  return nullptr;
}
bool in_class(OpKind kind, OpClass op_class) {
  const OpInfo* op = find_op(kind);
  return op != nullptr && op->op_class == op_class;
}

int normalise_axis(int axis, int rank, std::string_view what) {
  if (axis < -rank || axis >= rank)
    throw_input_error("{}: axis {} out of range for rank {}", what, axis, rank);
  return axis < 0 ? axis + rank : axis;
}
}  // namespace

std::string_view op_kernel_kind(OpKind kind) {
  const OpInfo* op = find_op(kind);
  switch (op != nullptr ? op->op_class : OpClass::Input) {
    case OpClass::Elementwise:
      return "pointwise";
    case OpClass::Reduction:
      return "reduction";
    case OpClass::Rowwise:
      return "rowwise";
    case OpClass::Matmul:
      return "matmul";
    case OpClass::Indexed:
      return "indexed";
    case OpClass::DataMovement:
      return "copy";
    case OpClass::Input:
      break;
  }
  return "input";
}

std::string_view op_name(OpKind kind) {
  const OpInfo* op = find_op(kind);
  return op != nullptr ? op->name : "?";
}

bool is_elementwise(OpKind k) { return in_class(k, OpClass::Elementwise); }
bool is_reduction(OpKind k) { return in_class(k, OpClass::Reduction); }
bool is_data_movement(OpKind k) { return in_class(k, OpClass::DataMovement); }

DType promote(DType a, DType b) {
  if (a == b) return a;
  if ((a == DType::f16 && b == DType::bf16) || (a == DType::bf16 && b == DType::f16))
    return DType::f32;
  auto rank = [](DType d) { return d == DType::f64 ? 3 : d == DType::f32 ? 2 : 1; };
  return rank(a) >= rank(b) ? a : b;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view what) {
  const std::size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    const std::int64_t x = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const std::int64_t y = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (x != y && x != 1 && y != 1) {
      throw_input_error("{}: shapes {} and {} do not broadcast", what, shape_string(a),
                        shape_string(b));
    }
    out[i] = x == 1 ? y : x;
  }
  return out;
}

const Node& Graph::node(NodeId id) const {
  if (id < 0 || id >= NodeId(nodes_.size())) throw_input_error("graph: no node with id {}", id);
  return nodes_[std::size_t(id)];
}

std::string Graph::operand_text(NodeId id) const {
  const Node& n = node(id);
  return fmt::format("{}: {}{}", n.name, dtype_name(n.dtype), shape_string(n.shape));
}

NodeId Graph::push(Node node) {
  node.id = NodeId(nodes_.size());
  if (node.name.empty()) node.name = fmt::format("{}{}", op_name(node.kind), node.id);
  for (auto extent : node.shape) {
    if (extent <= 0) {
      throw_input_error("{}: empty tensor (shape {}); every extent must be positive",
                        op_name(node.kind), shape_string(node.shape));
    }
  }
  nodes_.push_back(std::move(node));
  return nodes_.back().id;
}

NodeId Graph::input(std::string name, Shape shape, DType dtype) {
  for (const auto& n : nodes_) {
    if (n.name == name) throw_input_error("input: name '{}' is already used", name);
  }
  Node n;
  n.kind = OpKind::Input;
  n.name = std::move(name);
  n.shape = std::move(shape);
  n.dtype = dtype;
  return push(std::move(n));
}

namespace {
void require_floating(const Node& n, OpKind kind, const std::string& operand) {
  if (!is_floating(n.dtype)) {
    throw_input_error(
        "{}: operand {} has dtype {}, which the op does not support (f16, bf16, f32, f64)",
        op_name(kind), operand, dtype_name(n.dtype));
  }
}
}  // namespace

NodeId Graph::binary(OpKind kind, NodeId a, NodeId b) {
  const Node& x = node(a);
  const Node& y = node(b);
  require_floating(x, kind, operand_text(a));
  require_floating(y, kind, operand_text(b));
  Node n;
  n.kind = kind;
  n.inputs = {a, b};
  n.shape = broadcast_shapes(
      x.shape, y.shape, fmt::format("{}({}, {})", op_name(kind), operand_text(a), operand_text(b)));
  n.dtype = promote(x.dtype, y.dtype);
  return push(std::move(n));
}

NodeId Graph::view(OpKind kind, NodeId x, Shape shape) {
  Node n;
  n.kind = kind;
  n.inputs = {x};
  n.dtype = node(x).dtype;
  n.shape = std::move(shape);
  return push(std::move(n));
}

NodeId Graph::unary(OpKind kind, NodeId x) {
  const Node& in = node(x);
  require_floating(in, kind, operand_text(x));
  Node n;
  n.kind = kind;
  n.inputs = {x};
  n.shape = in.shape;
  n.dtype = in.dtype;
  return push(std::move(n));
}

NodeId Graph::add(NodeId a, NodeId b) { return binary(OpKind::Add, a, b); }
NodeId Graph::sub(NodeId a, NodeId b) { return binary(OpKind::Sub, a, b); }
NodeId Graph::mul(NodeId a, NodeId b) { return binary(OpKind::Mul, a, b); }
NodeId Graph::div(NodeId a, NodeId b) { return binary(OpKind::Div, a, b); }
NodeId Graph::neg(NodeId x) { return unary(OpKind::Neg, x); }
NodeId Graph::exp(NodeId x) { return unary(OpKind::Exp, x); }
NodeId Graph::sqrt(NodeId x) { return unary(OpKind::Sqrt, x); }
NodeId Graph::rsqrt(NodeId x) { return unary(OpKind::Rsqrt, x); }
NodeId Graph::gelu(NodeId x, bool tanh_approximation) {
  return unary(tanh_approximation ? OpKind::GeluTanh : OpKind::GeluErf, x);
}

NodeId Graph::add_scalar(NodeId x, double value) {
  const NodeId id = unary(OpKind::AddScalar, x);
  nodes_[std::size_t(id)].scalar = value;
  return id;
}
NodeId Graph::mul_scalar(NodeId x, double value) {
  const NodeId id = unary(OpKind::MulScalar, x);
  nodes_[std::size_t(id)].scalar = value;
  return id;
}

NodeId Graph::cast(NodeId x, DType dtype) {
  const NodeId id = unary(OpKind::Cast, x);
  if (!is_floating(dtype))
    throw_input_error("cast: target dtype {} is not floating", dtype_name(dtype));
  nodes_[std::size_t(id)].dtype = dtype;
  return id;
}

NodeId Graph::log(NodeId x) { return unary(OpKind::Log, x); }

NodeId Graph::gelu_tanh_backward(NodeId dy, NodeId x) {
  return binary(OpKind::GeluTanhBackward, dy, x);
}

NodeId Graph::causal_mask(NodeId x, double fill) {
  if (node(x).shape.size() < 2)
    throw_input_error("causal_mask: operand {} needs rank >= 2", operand_text(x));
  const NodeId id = unary(OpKind::CausalMask, x);
  nodes_[std::size_t(id)].scalar = fill;
  return id;
}

NodeId Graph::reduction(OpKind kind, NodeId x, int axis, bool keepdim) {
  const Node& in = node(x);
  require_floating(in, kind, operand_text(x));
  Node n;
  n.kind = kind;
  n.inputs = {x};
  n.axis = normalise_axis(axis, int(in.shape.size()),
                          fmt::format("{}({})", op_name(kind), operand_text(x)));
  n.keepdim = keepdim;
  n.dtype = in.dtype;
  n.shape = in.shape;
  if (keepdim) {
    n.shape[std::size_t(n.axis)] = 1;
  } else {
    n.shape.erase(n.shape.begin() + n.axis);
  }
  return push(std::move(n));
}

NodeId Graph::sum(NodeId x, int axis, bool keepdim) {
  return reduction(OpKind::Sum, x, axis, keepdim);
}
NodeId Graph::mean(NodeId x, int axis, bool keepdim) {
  return reduction(OpKind::Mean, x, axis, keepdim);
}
NodeId Graph::max(NodeId x, int axis, bool keepdim) {
  return reduction(OpKind::Max, x, axis, keepdim);
}

NodeId Graph::layernorm(NodeId x, NodeId weight, NodeId bias, double eps) {
  const Node& in = node(x);
  require_floating(in, OpKind::LayerNorm, operand_text(x));
  if (in.shape.empty()) throw_input_error("layernorm: operand {} has rank 0", operand_text(x));
  const Shape row = {in.shape.back()};
  for (NodeId p : {weight, bias}) {
    require_floating(node(p), OpKind::LayerNorm, operand_text(p));
    if (node(p).shape != row) {
      throw_input_error("layernorm({}): weight/bias {} must have shape {}", operand_text(x),
                        operand_text(p), shape_string(row));
    }
  }
  if (!(eps > 0))
    throw_input_error("layernorm({}): eps must be positive, got {}", operand_text(x), eps);
  Node n;
  n.kind = OpKind::LayerNorm;
  n.inputs = {x, weight, bias};
  n.shape = in.shape;
  n.dtype = in.dtype;
  n.eps = eps;
  return push(std::move(n));
}

NodeId Graph::softmax(NodeId x) {
  if (node(x).shape.empty()) throw_input_error("softmax: operand {} has rank 0", operand_text(x));
  return unary(OpKind::Softmax, x);
}

NodeId Graph::matmul(NodeId a, NodeId b) {
  const Node& x = node(a);
  const Node& y = node(b);
  require_floating(x, OpKind::Matmul, operand_text(a));
  require_floating(y, OpKind::Matmul, operand_text(b));
  const auto what = fmt::format("matmul({}, {})", operand_text(a), operand_text(b));
  if (x.shape.size() < 2 || y.shape.size() < 2)
    throw_input_error("{}: operands need rank >= 2", what);
  if (x.shape.back() != y.shape[y.shape.size() - 2])
    throw_input_error("{}: inner extents differ", what);
  const Shape batch_x(x.shape.begin(), x.shape.end() - 2);
  const Shape batch_y(y.shape.begin(), y.shape.end() - 2);
  if (!batch_y.empty() && batch_y != batch_x) {
    throw_input_error("{}: batch dimensions must be equal, or the right operand unbatched", what);
  }
  Node n;
  n.kind = OpKind::Matmul;
  n.inputs = {a, b};
  n.shape = batch_x;
  n.shape.push_back(x.shape[x.shape.size() - 2]);
  n.shape.push_back(y.shape.back());
  n.dtype = promote(x.dtype, y.dtype);
  return push(std::move(n));
}

namespace {
void require_row_ids(const Node& ids, OpKind kind, const std::string& operand, std::int64_t rows) {
  if ((ids.dtype != DType::i32 && ids.dtype != DType::i64) || ids.shape.size() != 1 ||
      ids.shape[0] != rows) {
    throw_input_error("{}: ids {} must be i32 or i64 of shape [{}] (one id per row)", op_name(kind),
                      operand, rows);
  }
}
}  // namespace

NodeId Graph::gather_rows(NodeId table, NodeId ids) {
  const Node& t = node(table);
  require_floating(t, OpKind::GatherRows, operand_text(table));
  if (t.shape.size() != 2)
    throw_input_error("gather_rows: table {} must have rank 2 ([rows, width])",
                      operand_text(table));
  const Node& i = node(ids);
  if (i.shape.size() != 1)
    throw_input_error("gather_rows: ids {} must have rank 1", operand_text(ids));
  require_row_ids(i, OpKind::GatherRows, operand_text(ids), i.shape[0]);
  Node n;
  n.kind = OpKind::GatherRows;
  n.inputs = {table, ids};
  n.shape = {i.shape[0], t.shape[1]};
  n.dtype = t.dtype;
  return push(std::move(n));
}

NodeId Graph::scatter_add_rows(NodeId src, NodeId ids, std::int64_t rows) {
  const Node& s = node(src);
  require_floating(s, OpKind::ScatterAddRows, operand_text(src));
  if (s.shape.size() != 2)
    throw_input_error("scatter_add_rows: src {} must have rank 2 ([N, width])", operand_text(src));
  require_row_ids(node(ids), OpKind::ScatterAddRows, operand_text(ids), s.shape[0]);
  if (rows < 1) throw_input_error("scatter_add_rows: rows {} must be positive", rows);
  Node n;
  n.kind = OpKind::ScatterAddRows;
  n.inputs = {src, ids};
  n.shape = {rows, s.shape[1]};
  n.dtype = s.dtype;
  return push(std::move(n));
}

NodeId Graph::permute(NodeId x, std::vector<int> order) {
  const Node& in = node(x);
  std::vector<int> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> identity(in.shape.size());
  std::iota(identity.begin(), identity.end(), 0);
  if (sorted != identity) {
    throw_input_error("permute({}): order [{}] is not a permutation of its {} axes",
                      operand_text(x), fmt::join(order, ", "), in.shape.size());
  }
  Node n;
  n.kind = OpKind::Permute;
  n.inputs = {x};
  n.dtype = in.dtype;
  for (int axis : order) n.shape.push_back(in.shape[std::size_t(axis)]);
  n.permutation = std::move(order);
  return push(std::move(n));
}

NodeId Graph::transpose(NodeId x, int axis_a, int axis_b) {
  const int rank = int(node(x).shape.size());
  std::vector<int> order(static_cast<std::size_t>(rank), 0);
  std::iota(order.begin(), order.end(), 0);
  const auto what = fmt::format("transpose({})", operand_text(x));
  std::swap(order[std::size_t(normalise_axis(axis_a, rank, what))],
            order[std::size_t(normalise_axis(axis_b, rank, what))]);
  return permute(x, order);
}

NodeId Graph::reshape(NodeId x, Shape shape) {
  const Node& in = node(x);
  if (shape_numel(shape) != shape_numel(in.shape)) {
    throw_input_error("reshape({}) to {}: element counts differ", operand_text(x),
                      shape_string(shape));
  }
  return view(OpKind::Reshape, x, std::move(shape));
}

NodeId Graph::slice(NodeId x, int axis, std::int64_t start, std::int64_t stop) {
  const Node& in = node(x);
  const auto what = fmt::format("slice({})", operand_text(x));
  axis = normalise_axis(axis, int(in.shape.size()), what);
  if (start < 0 || stop <= start || stop > in.shape[std::size_t(axis)]) {
    throw_input_error("{}: range [{}, {}) is empty or outside axis {} of extent {}", what, start,
                      stop, axis, in.shape[std::size_t(axis)]);
  }
  Node n;
  n.kind = OpKind::Slice;
  n.inputs = {x};
  n.dtype = in.dtype;
  n.shape = in.shape;
  n.shape[std::size_t(axis)] = stop - start;
  n.axis = axis;
  n.start = start;
  return push(std::move(n));
}

NodeId Graph::concat(const std::vector<NodeId>& xs, int axis) {
  if (xs.size() < 2) throw_input_error("concat: needs at least two operands, got {}", xs.size());
  const Node& first = node(xs[0]);
  axis =
      normalise_axis(axis, int(first.shape.size()), fmt::format("concat({})", operand_text(xs[0])));
  Node n;
  n.kind = OpKind::Concat;
  n.inputs = xs;
  n.axis = axis;
  n.shape = first.shape;
  n.shape[std::size_t(axis)] = 0;
  n.dtype = first.dtype;
  for (NodeId id : xs) {
    const Node& in = node(id);
    Shape expected = first.shape;
    expected[std::size_t(axis)] =
        in.shape.size() == first.shape.size() ? in.shape[std::size_t(axis)] : -1;
    if (in.shape != expected) {
      throw_input_error("concat along axis {}: {} does not match {} off that axis", axis,
                        operand_text(id), operand_text(xs[0]));
    }
    if (in.dtype != first.dtype) {
      // Mixed dtypes promote, as the framework's concat does (the implicit type promotion that
      // task D's counter-examples are about).
      n.dtype = promote(n.dtype, in.dtype);
    }
    n.shape[std::size_t(axis)] += in.shape[std::size_t(axis)];
  }
  return push(std::move(n));
}

std::vector<NodeId> Graph::split(NodeId x, int axis, const std::vector<std::int64_t>& sizes) {
  const Node& in = node(x);
  axis = normalise_axis(axis, int(in.shape.size()), fmt::format("split({})", operand_text(x)));
  std::int64_t total = 0;
  for (auto s : sizes) total += s;
  if (total != in.shape[std::size_t(axis)]) {
    throw_input_error("split({}): sizes [{}] do not add up to extent {} of axis {}",
                      operand_text(x), fmt::join(sizes, ", "), in.shape[std::size_t(axis)], axis);
  }
  // A split is a set of slices: that is how it lowers in every framework we model.
  std::vector<NodeId> parts;
  std::int64_t start = 0;
  for (auto s : sizes) {
    parts.push_back(slice(x, axis, start, start + s));
    start += s;
  }
  return parts;
}

NodeId Graph::expand(NodeId x, Shape shape) {
  const Node& in = node(x);
  const auto what = fmt::format("expand({}) to {}", operand_text(x), shape_string(shape));
  if (broadcast_shapes(in.shape, shape, what) != shape)
    throw_input_error("{}: not a broadcast of the operand", what);
  return view(OpKind::Expand, x, std::move(shape));
}

void Graph::mark_output(NodeId id) {
  node(id);
  if (std::find(outputs_.begin(), outputs_.end(), id) == outputs_.end()) outputs_.push_back(id);
}

void Graph::set_name(NodeId id, std::string name) {
  node(id);
  for (const auto& n : nodes_) {
    if (n.name == name && n.id != id) throw_input_error("set_name: '{}' is already used", name);
  }
  nodes_[std::size_t(id)].name = std::move(name);
}

Graph Graph::prefix(NodeId last) const {
  node(last);
  Graph out;
  out.nodes_.assign(nodes_.begin(), nodes_.begin() + last + 1);
  out.outputs_ = {last};
  return out;
}

Graph Graph::with_value_as_input(NodeId id) const {
  node(id);
  Graph out = *this;
  Node& n = out.nodes_[std::size_t(id)];
  n.kind = OpKind::Input;
  n.inputs.clear();
  return out;
}

std::vector<NodeId> Graph::inputs() const {
  std::vector<NodeId> out;
  for (const auto& n : nodes_) {
    if (n.kind == OpKind::Input) out.push_back(n.id);
  }
  return out;
}

std::vector<std::vector<NodeId>> Graph::consumers() const {
  std::vector<std::vector<NodeId>> out(nodes_.size());
  for (const auto& n : nodes_) {
    for (NodeId in : n.inputs) {
      auto& list = out[std::size_t(in)];
      if (std::find(list.begin(), list.end(), n.id) == list.end()) list.push_back(n.id);
    }
  }
  return out;
}

std::string Graph::describe() const {
  std::string out;
  for (const auto& n : nodes_) {
    std::vector<std::string> ins;
    for (NodeId in : n.inputs) ins.push_back(nodes_[std::size_t(in)].name);
    out += fmt::format("{} = {}({}) -> {}{}\n", n.name, op_name(n.kind), fmt::join(ins, ", "),
                       dtype_name(n.dtype), shape_string(n.shape));
  }
  return out;
}

// ---- structural identity (executors' per-graph caches)
namespace {
// FNV-1a over 64-bit words, each word first mixed by splitmix64's finaliser so that small
// integers (ids, extents) spread over all bits.
struct Hasher {
  std::uint64_t state = 0xcbf29ce484222325ull;
  void word(std::uint64_t v) {
    v ^= v >> 30;
    v *= 0xbf58476d1ce4e5b9ull;
    v ^= v >> 27;
    v *= 0x94d049bb133111ebull;
    v ^= v >> 31;
    state = (state ^ v) * 0x100000001b3ull;
  }
  void real(double v) { word(std::bit_cast<std::uint64_t>(v)); }
  void text(const std::string& s) {
    word(s.size());
    std::uint64_t chunk = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
      chunk = (chunk << 8) | std::uint8_t(s[i]);
      if (i % 8 == 7) {
        word(chunk);
        chunk = 0;
      }
    }
    word(chunk);
  }
};

bool same_node(const Node& a, const Node& b) {
  return a.kind == b.kind && a.inputs == b.inputs && a.shape == b.shape && a.dtype == b.dtype &&
         a.name == b.name &&
         std::bit_cast<std::uint64_t>(a.scalar) == std::bit_cast<std::uint64_t>(b.scalar) &&
         a.axis == b.axis && a.keepdim == b.keepdim &&
         std::bit_cast<std::uint64_t>(a.eps) == std::bit_cast<std::uint64_t>(b.eps) &&
         a.permutation == b.permutation && a.start == b.start;
}
}  // namespace

std::uint64_t Graph::fingerprint() const {
  Hasher h;
  h.word(nodes_.size());
  for (const Node& n : nodes_) {
    h.word(std::uint64_t(n.kind));
    h.word(n.inputs.size());
    for (NodeId in : n.inputs) h.word(std::uint64_t(in));
    h.word(n.shape.size());
    for (std::int64_t e : n.shape) h.word(std::uint64_t(e));
    h.word(std::uint64_t(n.dtype));
    h.text(n.name);
    h.real(n.scalar);
    h.word(std::uint64_t(n.axis));
    h.word(n.keepdim ? 1 : 0);
    h.real(n.eps);
    h.word(n.permutation.size());
    for (int p : n.permutation) h.word(std::uint64_t(p));
    h.word(std::uint64_t(n.start));
  }
  h.word(outputs_.size());
  for (NodeId out : outputs_) h.word(std::uint64_t(out));
  return h.state;
}

bool Graph::same_structure(const Graph& other) const {
  if (nodes_.size() != other.nodes_.size() || outputs_ != other.outputs_) return false;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (!same_node(nodes_[i], other.nodes_[i])) return false;
  }
  return true;
}

}  // namespace fusebench::engine
