// The bridge's code generation: a graph as the framework's Python module (graph_fn over the
// framework's ops, the settings fusebench's knobs map to, and a repro main), from the device's
// FrameworkSpec.
#include "bridge.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <set>

#include "fusebench/error.hpp"

namespace fusebench::framework {

// ---- graph -> Python
namespace {
std::string identifier(const std::string& name, std::set<std::string>& used) {
  static const std::set<std::string> reserved = {
      "False", "None",     "True",  "and",    "as",   "assert",   "async",  "await",    "break",
      "class", "continue", "def",   "del",    "elif", "else",     "except", "finally",  "for",
      "from",  "global",   "if",    "import", "in",   "is",       "lambda", "nonlocal", "not",
      "or",    "pass",     "raise", "return", "try",  "while",    "with",   "yield",    "torch",
      "F",     "jax",      "jnp",   "np",     "lax",  "graph_fn", "INPUTS", "SETTINGS"};
  std::string id;
  for (char c : name) id += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (id.empty() || std::isdigit(static_cast<unsigned char>(id[0]))) id = "t_" + id;
  if (reserved.count(id)) id += "_";
  std::string unique = id;
  for (int k = 2; used.count(unique); ++k) unique = fmt::format("{}_{}", id, k);
  used.insert(unique);
  return unique;
}

// The module-level name of node `id`'s eager function (emit_eager_graph); kept from the graph's
// variable names, so that no variable shadows it inside eager_graph_fn.
std::string eager_op_name(engine::NodeId id) { return fmt::format("_eager_op_{}", id); }
}  // namespace

nlohmann::json framework_settings(const FrameworkSpec& spec, const engine::EngineOptions& options,
                                  bool fused) {
  nlohmann::json settings = spec.settings(options, fused);
  if (!fused || options.compiler_options.empty()) return settings;
  if (spec.compiler_section.empty()) {
    throw_input_error("device {}: compiler options {} given, but it takes none", spec.device,
                      options.describe());
  }
  for (const auto& [name, value] : options.compiler_options) {
    const nlohmann::json parsed = nlohmann::json::parse(value, nullptr, false);
    settings[spec.compiler_section][name] = parsed.is_discarded() ? nlohmann::json(value) : parsed;
  }
  return settings;
}

namespace {
// The fused module's stages where the framework splits by cutting graph_fn (split_into_stages):
// one function per stage, each taking the values it reads (graph inputs and earlier stages'
// values, in node order) and returning those a later stage or the graph's outputs read.
std::string emit_stages(const engine::Graph& graph, const std::vector<std::string>& var,
                        const std::vector<std::string>& statements,
                        const std::vector<std::size_t>& cuts) {
  const auto& nodes = graph.nodes();
  std::vector<std::size_t> bounds = {0};
  bounds.insert(bounds.end(), cuts.begin(), cuts.end());
  bounds.push_back(nodes.size());
  // last_read[v]: the last node index that reads v (an output is read after every node)
  std::vector<std::size_t> last_read(nodes.size(), 0);
  for (const engine::Node& n : nodes) {
    for (engine::NodeId in : n.inputs) last_read[std::size_t(in)] = std::size_t(n.id);
  }
  for (engine::NodeId o : graph.outputs()) last_read[std::size_t(o)] = nodes.size();
  std::string text;
  std::vector<std::string> stage_names;
  for (std::size_t k = 0; k + 1 < bounds.size(); ++k) {
    const std::size_t begin = bounds[k], end = bounds[k + 1];
    std::vector<std::string> takes, gives;
    for (std::size_t v = 0; v < nodes.size(); ++v) {
      const bool input = nodes[v].kind == engine::OpKind::Input;
      // defined before this stage (an input before the first: the first takes every input, in
      // graph_fn's order) and read in it or later
      if ((input || v < begin) && last_read[v] >= begin) takes.push_back(var[v]);
      // defined here or before, and read after this stage
      if ((v < end || input) && last_read[v] >= end) gives.push_back(var[v]);
    }
    if (k + 1 == bounds.size() - 1) {
      gives.clear();
      for (engine::NodeId o : graph.outputs()) gives.push_back(var[std::size_t(o)]);
    }
    const std::string name = fmt::format("_stage_{}", k);
    stage_names.push_back(name);
    text += fmt::format("\n\ndef {}({}):\n", name, fmt::join(takes, ", "));
    for (std::size_t v = begin; v < end; ++v) {
      if (!statements[v].empty()) text += statements[v] + "\n";
    }
    text += fmt::format("    return ({},)\n", fmt::join(gives, ", "));
  }
  text += fmt::format(
      "\n\n# fusion switch split: each stage a jax.jit of its own, run in turn\n"
      "graph_fn.stages = [{}]\n",
      fmt::join(stage_names, ", "));
  return text;
}

// The eager graph where the framework defines one (spec.eager_op_function): each op node a
// module-level function of its own (its expression without fusion switches, which are the fused
// path's), called in node order by `eager_graph_fn`, listed as `graph_fn.eager`.
std::string emit_eager_graph(const engine::Graph& graph, const FrameworkSpec& spec,
                             const engine::EngineOptions& options,
                             const std::vector<std::string>& var,
                             const std::vector<std::string>& params,
                             const std::vector<std::string>& outs) {
  std::string functions, body;
  for (const engine::Node& n : graph.nodes()) {
    if (n.kind == engine::OpKind::Input) continue;
    std::vector<std::string> operands;  // each variable once, in order: the function's parameters
    for (engine::NodeId in : n.inputs) {
      const std::string& a = var[std::size_t(in)];
      if (std::find(operands.begin(), operands.end(), a) == operands.end()) operands.push_back(a);
    }
    std::vector<std::string> args;
    for (engine::NodeId in : n.inputs) args.push_back(var[std::size_t(in)]);
    const std::string function = eager_op_name(n.id);
    functions +=
        fmt::format("{} = {}  # node {}: {} {}{}\n", function,
                    spec.eager_op_function(spec.emit_op(n, args, options), operands), n.name,
                    engine::op_name(n.kind), dtype_name(n.dtype), shape_string(n.shape));
    body += fmt::format("    {} = {}({})\n", var[std::size_t(n.id)], function,
                        fmt::join(operands, ", "));
  }
  return fmt::format(
      "\n\n# eager: each op a function of its own, called one after another\n{}\n\n"
      "def eager_graph_fn({}):\n{}    return ({},)\n\n\n"
      "graph_fn.eager = eager_graph_fn\n",
      functions, fmt::join(params, ", "), body, fmt::join(outs, ", "));
}
}  // namespace

std::string emit_python_module(const engine::Graph& graph, const FrameworkSpec& spec,
                               const engine::EngineOptions& options, bool fused) {
  std::set<std::string> used;
  std::vector<std::string> var(graph.nodes().size());
  std::vector<std::string> params, input_specs, body;
  std::vector<std::string> statements(graph.nodes().size());  // by node, for the stages
  std::vector<std::size_t> cuts;            // node indices a stage starts at (split_into_stages)
  if (spec.eager_op_function != nullptr) {  // the eager graph's module-level names
    used.insert("eager_graph_fn");
    for (const engine::Node& n : graph.nodes()) used.insert(eager_op_name(n.id));
  }
  for (const engine::Node& n : graph.nodes()) {
    var[std::size_t(n.id)] = identifier(n.name, used);
    if (n.kind == engine::OpKind::Input) {
      params.push_back(var[std::size_t(n.id)]);
      input_specs.push_back(fmt::format("    ({:?}, {:?}, [{}]),", n.name, dtype_name(n.dtype),
                                        fmt::join(n.shape, ", ")));
      continue;
    }
    std::vector<std::string> args;
    for (engine::NodeId in : n.inputs) args.push_back(var[std::size_t(in)]);
    const auto knobs = options.per_op.find(n.name);
    const bool switched = fused && knobs != options.per_op.end();
    std::string expression = spec.emit_op(n, args, options);
    if (switched && knobs->second.emulate_per_op_rounding.value_or(false) &&
        spec.rounded_op != nullptr) {
      std::vector<std::string> operands;  // each variable once, in order
      for (const std::string& a : args) {
        if (std::find(operands.begin(), operands.end(), a) == operands.end()) operands.push_back(a);
      }
      expression = spec.rounded_op(expression, operands);
    }
    std::string statement =
        fmt::format("    {} = {}  # node {}: {} {}{}{}", var[std::size_t(n.id)], expression, n.name,
                    engine::op_name(n.kind), dtype_name(n.dtype), shape_string(n.shape),
                    switched ? fmt::format(" (fusion switch: {})", knobs->second.describe()) : "");
    body.push_back(statement);
    statements[std::size_t(n.id)] = std::move(statement);
    if (switched && knobs->second.split_after) {
      if (spec.split_into_stages) {
        if (std::size_t(n.id) + 1 < graph.nodes().size()) cuts.push_back(std::size_t(n.id) + 1);
      } else {
        body.push_back(
            fmt::format("    {}  # fusion switch: split after {}", spec.split_statement, n.name));
      }
    }
  }
  std::vector<std::string> outs;
  for (engine::NodeId o : graph.outputs()) outs.push_back(var[std::size_t(o)]);
  const std::string stages = (cuts.empty() ? "" : emit_stages(graph, var, statements, cuts)) +
                             (spec.eager_op_function == nullptr
                                  ? ""
                                  : emit_eager_graph(graph, spec, options, var, params, outs));
  const nlohmann::json settings = framework_settings(spec, options, fused);
  return fmt::format(
      "# fusebench graph on device {device} ({path}); generated by devices/bridge, runnable as a "
      "repro:\n"
      "#   python THIS_FILE [DIR]   (DIR: one <input>.npy per graph input; default: uniform(-1, 1) "
      "inputs)\n"
      "# It runs the graph eagerly and fused and prints how many output elements differ.\n"
      "# fusebench knobs: {knobs}\n"
      "{preamble}\n\n"
      "def graph_fn({params}):\n{body}\n    return ({outs},)\n{stages}\n\n"
      "INPUTS = [  # name, dtype, shape\n{inputs}\n]\n"
      "SETTINGS = json.loads({settings:?})  # the framework settings fusebench's knobs map to\n\n"
      "{main}",
      fmt::arg("device", spec.device), fmt::arg("path", fused ? "fused" : "eager"),
      fmt::arg("knobs", options.describe()), fmt::arg("preamble", spec.preamble),
      fmt::arg("params", fmt::join(params, ", ")), fmt::arg("body", fmt::join(body, "\n")),
      fmt::arg("outs", fmt::join(outs, ", ")), fmt::arg("stages", stages),
      fmt::arg("inputs", fmt::join(input_specs, "\n")), fmt::arg("settings", settings.dump()),
      fmt::arg("main", spec.repro_main));
}

}  // namespace fusebench::framework
