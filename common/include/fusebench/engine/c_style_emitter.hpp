// The device-independent core of fused-kernel emission, for languages of the C family (tinygrad's
// CStyleLanguage): one source per KernelPlan, specialised on shapes and knobs, table-driven (op ->
// formatter). It owns what every renderer shares:
//   - the spellings of loads, stores, roundings, literals and knob objects, and index arithmetic
//     (namespace emit);
//   - the op table of element-wise ops (emit::elementwise_formula);
//   - CStyleEmitter: a node's value at an index (memoised per scope), views folded into index
//     arithmetic, operand conversion, the stores of a kernel's members, loop indices and the
//     identity-offset map (a load at the loop's own position reads at the loop's flat offset).
// A device's renderer (devices/<name>/) derives from CStyleEmitter and writes only what differs:
// the index type, the form of a concat's operand choice, load/store hooks (the CPU's f16
// staging), the kernel skeletons and the launch scaffolding. Every renderer pastes the same
// float_formats.hpp and scalar_math.hpp text, so an op's formula is the same text on every device.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "fusebench/engine/graph.hpp"
#include "fusebench/engine/options.hpp"
#include "fusebench/engine/planner.hpp"

namespace fusebench::engine {

struct EmittedKernel {
  std::string source;
  std::vector<NodeId> loads, stores;  // buffers 0.. in this order, then the constants
  std::vector<Tensor> constants;      // scalars lowered as broadcast tensors
  std::vector<std::string> lowering;  // decisions worth a line in the trace
};

namespace emit {

using Index = std::vector<std::string>;  // one index expression per axis

std::string ctype(DType d);         // compute type: double for f64, else float
std::string storage_type(DType d);  // InputError for non-floating dtypes
std::string load_expr(DType d, const std::string& buffer, const std::string& offset);
std::string store_expr(DType d, DType value_dtype, const std::string& v);
// A compute-type value rounded to dtype d and kept in the compute type (a store and a reload).
std::string round_to_dtype(DType d, DType value_dtype, const std::string& v);
std::string literal(double value, DType compute);
std::string newton(std::string_view family, ApproxMode mode, int iterations);
std::string accumulator_rounding(const EngineOptions& o, DType d);
std::string flat_offset(const Shape& shape, const Index& idx);
Index unravel(const Shape& shape, const std::string& flat);

// The op table: the expression of element-wise node n in its compute type. operand(i) is input i
// converted to n's compute type, raw(i) input i as computed (casts round it themselves). Scalars
// lowered as broadcast tensors are appended to out.constants (read as c.c<slot>[0]), and every
// lowering decision to out.lowering. idx: the node's own index expressions (a causal mask
// compares its row and column).
using OperandText = std::function<std::string(std::size_t)>;
std::string elementwise_formula(const Graph& graph, const Node& n, const OperandText& operand,
                                const OperandText& raw, const Index& idx,
                                const EngineOptions& options, EmittedKernel& out);

}  // namespace emit

class CStyleEmitter {
 public:
  virtual ~CStyleEmitter() = default;
  CStyleEmitter(const CStyleEmitter&) = delete;
  CStyleEmitter& operator=(const CStyleEmitter&) = delete;

 protected:
  using Index = emit::Index;

  // Buffers are named b0, b1, ... in the order loads, stores (out_.loads, out_.stores).
  CStyleEmitter(const Graph& g, const KernelPlan& k, const EngineOptions& o);

  // ---- what a renderer says about its language
  // Prefix of the emitter's error messages ("emitter", "CUDA emitter").
  virtual std::string_view emitter_name() const = 0;
  // The type of index variables ("std::int64_t", "long long").
  virtual std::string index_type() const = 0;
  // One operand of a concat: while `condition` holds (empty for the last operand), the concat's
  // value is `value`, computed by `lines`.
  struct ConcatPart {
    std::string condition;
    std::vector<std::string> lines;
    std::string value;
  };
  // The statement that declares `result` of `type` as the value of the part whose condition holds
  // first. Only the selected part's lines may run (the others may read out of bounds).
  virtual std::string concat_statement(const std::string& type, const std::string& result,
                                       const std::vector<ConcatPart>& parts) const = 0;
  // Whether a load of a reshape's input at the indices unravelled from the reshape's flat offset
  // reads at that offset itself (the identity map) instead of ravelling the indices again. Both
  // read the same element; the source text differs.
  virtual bool reshape_reads_at_flat_offset() const = 0;
  // Hooks for a renderer that converts a loop's f16 loads and stores a run at a time: the
  // expression that replaces the per-element load of `buffer` at `offset` (a compute-type value),
  // and the lvalue that replaces the store's element (it takes the compute-type value). nullopt:
  // the per-element conversion.
  virtual std::optional<std::string> staged_load(DType, const std::string& /*buffer*/,
                                                 const std::string& /*offset*/) {
    return std::nullopt;
  }
  virtual std::optional<std::string> staged_store(DType, const std::string& /*buffer*/,
                                                  const std::string& /*flat*/) {
    return std::nullopt;
  }

  // ---- kernel skeletons, one per KernelKind; kernel_body() picks the plan's. A renderer without a
  // lowering for a kind throws, naming the kernel.
  virtual std::string pointwise() = 0;
  virtual std::string reduction() = 0;
  virtual std::string rowwise() = 0;
  virtual std::string matmul() = 0;
  virtual std::string indexed() = 0;
  std::string kernel_body();

  // ---- values
  struct Scope {
    std::vector<std::string> lines;
    std::map<std::string, std::string> memo;
  };
  std::string fresh() { return "v" + std::to_string(counter_++); }
  void line(std::string text) { scopes_.back().lines.push_back(std::move(text)); }
  // The scope's lines, each indented, and an empty scope (lines and memo) after them.
  std::string take_lines(const std::string& indent);

  // A kernel input: a buffer it loads rather than a node it computes.
  bool is_kernel_input(NodeId id) const { return buffers_.count(id) && !members_.count(id); }
  std::string convert(const std::string& v, DType from, DType to) const;
  Index broadcast_index(const Node& input, const Shape& out_shape, const Index& idx) const;

  // Loads and stores of a tensor of `shape` at `idx` are at `flat` (offset_for), not at idx ravelled.
  void mark_identity(const Shape& shape, const Index& idx, const std::string& flat);
  std::string offset_for(NodeId id, const Index& idx) const;

  // Node id's value at idx (its storage bits where raw_copy_), emitting the lines that compute it
  // into the current scope.
  std::string value(NodeId id, const Index& idx);
  std::string view_value(const Node& n, const Index& idx);
  // input i in n's compute type
  std::string operand(const Node& n, std::size_t i, const Index& idx);
  std::string compute_value(const Node& n, const Index& idx);

  // Members computed after the anchor (the anchor included).
  std::vector<NodeId> epilogue_members() const;
  // The anchor's value as its epilogue sees it: with per-op rounding emulated, rounded to its dtype
  // like every other op's value (as eager stores and reloads it).
  std::string anchor_value(const Node& anchor, const std::string& expr) const;
  // The source's comment on member m's per-op switches ("" without any): it names no node, so that
  // kernels of one structure stay one source.
  std::string switches_comment(NodeId m) const;
  // Statements that store every stored member among `candidates` with the iteration shape at flat
  // offset `flat`.
  void store_members(const std::vector<NodeId>& candidates, const Index& idx,
                     const std::string& flat);
  // Index variables <prefix><axis> of `shape` unravelled from `flat`, declared in the current
  // scope; loads and stores at them are at `flat`.
  Index loop_index(const Shape& shape, const std::string& flat, const std::string& prefix);

  const Graph& g_;
  const KernelPlan& k_;
  const EngineOptions& graph_options_;
  const EngineOptions o_;  // the knobs at the kernel's anchor (its per-op switches applied)
  EmittedKernel out_;
  std::set<NodeId> members_;
  std::map<NodeId, std::string> buffers_;  // kernel inputs and stored members: "b<index>"
  // nodes whose value is a fixed expression (an anchor's result)
  std::map<NodeId, std::string> bound_;
  std::vector<Scope> scopes_;
  bool raw_copy_ = false;  // values are storage bits, moved through views as they are

 private:
  std::string memo_key(NodeId id, const Index& idx) const;
  const std::string* find_memo(const std::string& key) const;
  std::map<std::string, std::string> identity_;
  int counter_ = 0;
};

}  // namespace fusebench::engine
