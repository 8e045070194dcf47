// What the C++ and CUDA emitters share (defined in emit_cpp.cpp): the spellings of loads, stores,
// roundings, literals and knob objects, index arithmetic, and the op table of element-wise ops.
// Both emitters paste the same scalar_math.hpp text, so an op's formula is the same text in a CPU
// and in a GPU kernel; only the loop skeletons and the launch differ.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "fusebench/engine/emit_cpp.hpp"
#include "fusebench/engine/graph.hpp"
#include "fusebench/engine/options.hpp"

namespace fusebench::engine::emit {

using Index = std::vector<std::string>;  // one index expression per axis

std::string ctype(DType d);          // compute type: double for f64, else float
std::string storage_type(DType d);   // InputError for non-floating dtypes
std::string load_expr(DType d, const std::string& buffer, const std::string& offset);
std::string store_expr(DType d, DType value_dtype, const std::string& v);
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
std::string elementwise_formula(const Graph& graph, const Node& n, const OperandText& operand, const OperandText& raw,
                                const Index& idx, const EngineOptions& options, EmittedKernel& out);

}  // namespace fusebench::engine::emit
