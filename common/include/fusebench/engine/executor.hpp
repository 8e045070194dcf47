// Executors run a Graph on named input tensors: the fp64 reference (here, device-independent),
// and each device's eager and fused executors (devices/<name>/). A device is a plug-in: it
// registers a factory under its name.
//
// The Device interface is all a suite may use (suites never name a device's own classes):
//   eager / fused            executors with the engine's knobs;
//   unsupported_knobs        which knob values the device cannot realise, and why ("n/a on <device>:
//                            <reason>" in the report, never a figure);
//   fused_cold               a fused executor compiling into a fresh, emptied cache directory (task
//                            A's cold restart; a framework device also starts a fresh compiler process);
//   instruction_histogram    machine-instruction counts of a compiled kernel, where there is machine
//                            code to disassemble; a kernel's source and artifact hash are in its trace.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fusebench/engine/graph.hpp"
#include "fusebench/engine/options.hpp"
#include "fusebench/tensor.hpp"

namespace fusebench::engine {

using Inputs = std::map<std::string, Tensor>;  // by input name

// What one executed kernel did: the evidence trail of a run.
struct KernelTrace {
  std::string name;  // kernel or eager op
  // What it computes: pointwise, reduction, rowwise, matmul, indexed or copy (a framework's whole
  // graph: graph).
  std::string kind;
  std::vector<std::string> ops;       // "name=op" of every node it computes
  std::vector<std::string> lowering;  // decisions, e.g. "mul_scalar4: fp32 immediate 0.699999988"
  std::string cache_key;              // fused only
  // artifact_sha256: the compiled artifact's hash
  std::string source_path, artifact_path, artifact_sha256;
  // hash of the generated source (stable even where the binary is not)
  std::string source_sha256;
  // device-specific extras (a framework's command line, HLO, fingerprint...)
  nlohmann::json evidence;
  double compile_ms = 0;  // 0 on a cache hit
  bool cache_hit = false;
  // wall time of the kernel itself (not emission, lookup or allocation)
  double run_ms = 0;
  // bytes the kernel reads (its operands) plus the bytes it writes
  double bytes_moved = 0;
  nlohmann::json to_json() const;
};

struct RunOptions {
  std::filesystem::path dump_dir;  // empty: no dumps
  bool dump_intermediates = true;  // with dump_dir: every materialised node, not only outputs
};

struct RunResult {
  std::vector<Tensor> outputs;      // in graph.outputs() order
  std::map<NodeId, Tensor> values;  // every materialised node (inputs included)
  std::vector<KernelTrace> trace;   // kernels in execution order
};

// Task A's runs: each run's output 0 hashed as tensor_chunked_md5_hex (fusebench/hash.hpp).
struct HashedRuns {
  std::vector<std::string> output_md5;  // one per run, in order
  Tensor last_output;                   // output 0 of the last run
  double seconds = 0;                   // every run, hashing included
  double hash_seconds = 0;              // the part of `seconds` spent hashing
  std::string hashed_where;             // where and how, for the evidence
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string name() const = 0;  // "reference", "eager", "fused"
  virtual RunResult run(const Graph& graph, const Inputs& inputs, const RunOptions& run = {}) = 0;
  // `runs` runs, `progress(done)` after each batch. By default each run's output comes to this
  // process and is hashed here; an executor whose outputs live in another process hashes them
  // there, so that only digests travel.
  virtual HashedRuns run_hashed(const Graph& graph, const Inputs& inputs, int runs,
                                const std::function<void(int)>& progress);
};

// The fp64 reference: every op in fp64 with the C library's math, casts ignored (the truth of
// the math the graph describes). Outputs are f64.
class ReferenceExecutor final : public Executor {
 public:
  std::string name() const override { return "reference"; }
  RunResult run(const Graph& graph, const Inputs& inputs, const RunOptions& run = {}) override;
};

// The toolkit's fp64_reference(graph, inputs): the graph's outputs in fp64.
std::vector<Tensor> fp64_reference(const Graph& graph, const Inputs& inputs);

// ---- devices
// A compile option of a framework that sets one of its fused path's mechanisms to eager's
// behaviour, offered to attribution as a graph-wide switch (EngineOptions::compiler_options).
struct CompilerSwitch {
  std::string name, value;  // e.g. "pattern_matcher", "false"
  std::string mechanism;    // what it turns off, in the framework's terms
  // the graph must hold one of these ops for the switch to matter (empty: any graph)
  std::vector<OpKind> applies_to;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  // Empty when the device can run here; otherwise why not (e.g. "no CUDA GPU").
  virtual std::string unavailable_reason() const = 0;
  virtual std::unique_ptr<Executor> eager(const EngineOptions& options) const = 0;
  virtual std::unique_ptr<Executor> fused(const EngineOptions& options) const = 0;
  // Empty when the device realises every knob of `options` for this executor kind; otherwise the
  // reason it cannot (names the knob). A knob at its EngineOptions default means "the device's own
  // behaviour" and is always accepted.
  virtual std::string unsupported_knobs(const EngineOptions& options, bool fused) const = 0;
  // The framework compile options this device offers as attribution switches (none on an engine
  // whose knobs are its own).
  virtual std::vector<CompilerSwitch> compiler_switches() const { return {}; }
  // A fused executor that compiles cold into `cache_dir` (emptied first).
  virtual std::unique_ptr<Executor> fused_cold(const EngineOptions& options,
                                               const std::filesystem::path& cache_dir) const = 0;
  // Mnemonic -> count of a compiled kernel's machine code; empty where the device has none (e.g.
  // eager ops, or a framework whose executable cannot be disassembled).
  virtual std::map<std::string, int> instruction_histogram(const KernelTrace& kernel) const = 0;
};

using DeviceFactory = std::function<std::unique_ptr<Device>()>;
void register_device(const std::string& name, DeviceFactory factory);
// A family of devices named BASE/VARIANT, made on demand from the variant (e.g. "torch/aot_eager":
// torch.compile with any backend torch._dynamo knows, which no list can hold in advance).
using DeviceVariantFactory = std::function<std::unique_ptr<Device>(const std::string& variant)>;
void register_device_family(const std::string& base, DeviceVariantFactory factory);
std::unique_ptr<Device> make_device(const std::string& name);  // InputError for unknown names
// a registered name, or BASE/VARIANT of a registered family
bool device_known(const std::string& name);
std::vector<std::string> device_names();  // the registered names (families as BASE/VARIANT)

// ---- shared by executors
// The reason an engine device (cpu, cuda) gives for compile options, which only frameworks have;
// empty when there are none.
std::string compiler_options_refused(const EngineOptions& options, const std::string& device);
// Checks that every graph input is given with its shape and dtype (InputError naming it).
void check_inputs(const Graph& graph, const Inputs& inputs);
// The ids operand of gather_rows / scatter_add_rows `n` as int64, each checked to lie in [0, rows)
// (InputError naming the op, the position and the id otherwise).
std::vector<std::int64_t> checked_row_ids(const Node& n, const Tensor& ids, std::int64_t rows);
// Writes <dir>/<node>.npy for the chosen values and <dir>/manifest.json (name, op, shape, dtype,
// executor) atomically.
void dump_run(const Graph& graph, const RunResult& result, const std::string& executor,
              const RunOptions& run);

}  // namespace fusebench::engine
