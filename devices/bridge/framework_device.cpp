// The bridge's device: eager and fused executors over a worker, the device's knob policy (what it
// realises, what it refuses and why), task A's cold restart, the kernels' instruction counts, the
// repro scripts, and the registration of the framework devices.
#include "bridge.hpp"
#include "call_timing.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "framework_devices.hpp"
#include "fusebench/engine/kernel_cache.hpp"
#include "fusebench/engine/recoveries.hpp"
#include "fusebench/error.hpp"
#include "fusebench/hash.hpp"
#include "fusebench/npy.hpp"
#include "jit_compiler.hpp"

namespace fusebench::framework {

namespace fs = std::filesystem;

// ---- the device
namespace {

class FrameworkExecutor final : public engine::Executor, public CallTimedExecutor {
 public:
  FrameworkExecutor(FrameworkSpec spec, engine::EngineOptions options, bool fused,
                    std::shared_ptr<Worker> worker)
      : spec_(std::move(spec)), options_(options), fused_(fused), worker_(std::move(worker)) {}

  std::string name() const override { return fused_ ? "fused" : "eager"; }

  engine::RunResult run(const engine::Graph& graph, const engine::Inputs& inputs,
                        const engine::RunOptions& run) override {
    engine::check_inputs(graph, inputs);
    for (const engine::Node& n : graph.nodes()) {
      if (auto why = spec_.dtype_unsupported(n.dtype); !why.empty()) {
        throw_input_error("device {} cannot run node {} ({}) on {}{}: {}", spec_.device, n.name,
                          engine::op_name(n.kind), dtype_name(n.dtype), shape_string(n.shape), why);
      }
    }
    if (!worker_->unavailable_reason().empty()) {
      throw InputError(
          fmt::format("device {} is unavailable: {}", spec_.device, worker_->unavailable_reason()));
    }
    const std::string module = emit_python_module(graph, spec_, options_, fused_);
    const std::string digest = sha256_hex(std::string_view(module));
    const std::string file =
        fmt::format("graph_{}_{}.py", fused_ ? "fused" : "eager", digest.substr(0, 16));
    std::lock_guard lock(worker_->mutex());
    // Content-addressed and the same in every process: the framework records the source's path
    // (XLA puts it in the HLO's metadata, which its executable fingerprint covers), so a path
    // naming the process would make every process's executable look different.
    const fs::path source =
        fs::temp_directory_path() / "fusebench-graphs" / device_file_name(spec_.device) / file;
    if (!fs::exists(source)) {
      fs::create_directories(source.parent_path());
      write_file_atomically(source, module);
    }
    fs::path repro;  // kept after the run (the scratch directory goes with the worker)
    if (!repro_dir().empty()) {
      repro = repro_dir() / device_file_name(spec_.device) / file;
      if (!fs::exists(repro)) {
        fs::create_directories(repro.parent_path());
        write_file_atomically(repro, module);
      }
    }

    engine::RunResult result;
    nlohmann::json in = nlohmann::json::array(), out = nlohmann::json::array();
    double bytes = 0;
    int k = 0;
    for (engine::NodeId id : graph.inputs()) {
      const engine::Node& n = graph.node(id);
      const Tensor& t = inputs.at(n.name);
      const fs::path path = worker_->stage_input(std::size_t(k++), t);
      in.push_back({{"name", n.name}, {"path", path.string()}});
      result.values[id] = t;
      bytes += double(t.nbytes());
    }
    for (std::size_t o = 0; o < graph.outputs().size(); ++o)
      out.push_back((worker_->scratch() / fmt::format("out{}.npy", o)).string());
    const nlohmann::json settings = framework_settings(spec_, options_, fused_);
    nlohmann::json request = {{"cmd", "run"},    {"source", source.string()},
                              {"fused", fused_}, {"settings", settings},
                              {"key", digest},   {"inputs", in},
                              {"outputs", out}};
    if (extra_request_.is_object()) request.update(extra_request_);
    const nlohmann::json reply = worker_->request(request);
    last_reply_ = reply;
    if (!reply.value("ok", false)) {
      const std::string node = reply.contains("node") && reply["node"].is_string()
                                   ? reply["node"].get<std::string>()
                                   : "";
      throw FrameworkError(fmt::format(
          "device {} ({}, {}): {}{} [repro: {}]", spec_.device, fused_ ? "fused" : "eager",
          worker_->framework_version(), node.empty() ? "" : "node " + node + ": ",
          reply.value("error", std::string("unknown error")), source.string()));
    }
    if (const auto& recovered = reply.value("recovered", nlohmann::json()); recovered.is_object()) {
      // a corrupt compiled artifact in the framework's cache: moved aside, the graph recompiled
      const std::string what = recovered.contains("action")
                                   ? recovered.value("action", std::string("?"))
                                   : fmt::format("moved {} aside to {} and recompiled the graph",
                                                 recovered.value("moved", std::string("?")),
                                                 recovered.value("to", std::string("?")));
      fmt::print(stderr,
                 "fusebench: device {} ({}): a corrupt compiled artifact in {}'s cache ({}): {} "
                 "[repro: {}]\n",
                 spec_.device, fused_ ? "fused" : "eager", spec_.framework,
                 recovered.value("error", std::string("?")), what, source.string());
      engine::record_recovery("framework_cache_recovered");
    }
    for (std::size_t o = 0; o < graph.outputs().size(); ++o) {
      Tensor t = read_npy(out[o].get<std::string>());
      bytes += double(t.nbytes());
      result.values[graph.outputs()[o]] = t;
      result.outputs.push_back(std::move(t));
    }

    engine::KernelTrace trace;
    trace.name = fused_ ? fmt::format("{} fused graph_{}", spec_.device, digest.substr(0, 16))
                        : fmt::format("{} eager graph_{}", spec_.device, digest.substr(0, 16));
    trace.kind = "graph";  // the framework's whole graph, however it splits it into kernels
    for (const engine::Node& n : graph.nodes()) {
      if (n.kind != engine::OpKind::Input)
        trace.ops.push_back(fmt::format("{}={}", n.name, engine::op_name(n.kind)));
    }
    trace.lowering = {options_.describe(), "framework settings: " + settings.dump(),
                      worker_->framework_version()};
    trace.cache_key = digest;
    trace.source_path = repro.empty() ? source.string() : repro.string();
    const nlohmann::json& evidence = reply["evidence"];
    trace.evidence = evidence;
    trace.artifact_sha256 = evidence.value("artifact_sha256", std::string());
    trace.source_sha256 = evidence.value("source_sha256", fused_ ? std::string() : digest);
    trace.artifact_path = evidence.value("artifact_path", std::string());
    trace.compile_ms = reply.value("compile_ms", 0.0);
    trace.cache_hit = fused_ && !reply.value("compiled", false);
    trace.run_ms = reply.value("run_ms", 0.0);
    trace.bytes_moved = bytes;
    result.trace.push_back(std::move(trace));
    if (!run.dump_dir.empty()) engine::dump_run(graph, result, name(), run);
    return result;
  }

  // The worker's "time" request: the calls and their clock run there; the request's round trip
  // is timed here around the whole of run() (the module, staging, the reply, the outputs read).
  CallTiming time_calls(const engine::Graph& graph, const engine::Inputs& inputs, int warmup,
                        int calls) override {
    if (warmup < 0 || calls < 1) {
      throw_input_error("device {}: timed calls need warmup >= 0 and calls >= 1, got {} and {}",
                        spec_.device, warmup, calls);
    }
    extra_request_ = {{"cmd", "time"}, {"warmup", warmup}, {"calls", calls}};
    const auto start = std::chrono::steady_clock::now();
    try {
      (void)run(graph, inputs, {});
    } catch (...) {
      extra_request_ = nullptr;
      throw;
    }
    extra_request_ = nullptr;
    CallTiming t;
    t.round_trip_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    t.warmup = last_reply_.value("warmup", -1);
    t.calls = last_reply_.value("calls", 0);
    if (t.warmup != warmup || t.calls != calls || !last_reply_.contains("call_ms")) {
      throw FrameworkError(fmt::format(
          "device {}: asked the worker for {} warm-up and {} timed calls, it answered {}",
          spec_.device, warmup, calls, last_reply_.dump().substr(0, 400)));
    }
    t.call_seconds = last_reply_.value("call_ms", 0.0) * 1e-3;
    t.worker_seconds = last_reply_.value("worker_ms", 0.0) * 1e-3;
    t.clock = last_reply_.value("clock", std::string());
    return t;
  }

  // The runs happen in the worker, in batches; each run's output 0 is hashed there, where it is
  // (a GPU's output is copied to the worker's host memory, never through the shared-memory files),
  // and only the digests come back, with the last run's outputs.
  engine::HashedRuns run_hashed(const engine::Graph& graph, const engine::Inputs& inputs, int runs,
                                const std::function<void(int)>& progress) override {
    constexpr int kRunsPerRequest = 50;  // progress between requests
    const engine::Node& output = graph.node(graph.outputs().at(0));
    const std::string header =
        fmt::format("{}{}", dtype_name(output.dtype), shape_string(output.shape));
    engine::HashedRuns hashed;
    const auto start = std::chrono::steady_clock::now();
    int threads = 0;
    for (int done = 0; done < runs;) {
      const int batch = std::min(runs - done, kRunsPerRequest);
      extra_request_ = {{"repeat", batch},
                        {"hash", {{"header", header}, {"chunk_bytes", kMd5ChunkBytes}}}};
      engine::RunResult result;
      try {
        result = run(graph, inputs, {});
      } catch (...) {
        extra_request_ = nullptr;
        throw;
      }
      extra_request_ = nullptr;
      const auto digests = last_reply_.value("digests", nlohmann::json::array());
      if (int(digests.size()) != batch) {
        throw FrameworkError(
            fmt::format("device {}: asked for {} hashed runs, the worker hashed {}", spec_.device,
                        batch, digests.size()));
      }
      for (const auto& d : digests) hashed.output_md5.push_back(d.get<std::string>());
      hashed.hash_seconds += last_reply_.value("hash_s", 0.0);
      threads = last_reply_.value("hash_threads", 0);
      hashed.last_output = result.outputs.at(0);
      done += batch;
      progress(done);
    }
    if (runs > 0 && hashed.last_output.describe() != header) {
      // the digest names the declared output; an output of another dtype or shape would hash apart
      throw FrameworkError(fmt::format("device {}: output 0 is {}, the graph declares {}",
                                       spec_.device, hashed.last_output.describe(), header));
    }
    hashed.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    hashed.hashed_where = fmt::format(
        "in the {} worker, where the output is: each run's output 0 copied to that process's "
        "host memory and hashed there (md5 of {} MiB chunk md5s on {} threads); only digests "
        "come to fusebench",
        spec_.framework, kMd5ChunkBytes >> 20, threads);
    return hashed;
  }

 private:
  FrameworkSpec spec_;
  engine::EngineOptions options_;
  bool fused_;
  std::shared_ptr<Worker> worker_;
  nlohmann::json extra_request_;  // run_hashed's fields for the next request
  nlohmann::json last_reply_;
};

// Mnemonic counts of an Inductor C++ kernel: its `kernel` entry point and the OpenMP regions GCC
// outlines from it (kernel._omp_fn.N), not the Python binding around them.
std::map<std::string, int> kernel_instructions(const fs::path& library) {
  return cpu::instruction_histogram(library, [](const std::string& symbol) {
    return symbol == "kernel" || symbol.rfind("kernel.", 0) == 0 ||
           symbol.rfind("kernel._omp", 0) == 0;
  });
}

// A CUDA target needs a GPU device file in this process's /dev: without one, its worker would import
// the framework (seconds, a server process of its own) only to report that CUDA is unavailable.
std::string no_visible_gpu(const std::string& device) {
  static const std::regex gpu_device_file("nvidia[0-9]+|dxg");  // dxg: WSL2's GPU
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/dev", ec)) {
    if (std::regex_match(entry.path().filename().string(), gpu_device_file)) return {};
  }
  return fmt::format("cannot run device {} here: no GPU is visible (no /dev/nvidiaN device file)",
                     device);
}

class FrameworkDevice final : public engine::Device {
 public:
  explicit FrameworkDevice(FrameworkSpec spec) : spec_(std::move(spec)) {}
  std::string name() const override { return spec_.device; }
  std::string unavailable_reason() const override {
    if (spec_.target == "cuda") {
      if (std::string why = no_visible_gpu(spec_.device); !why.empty()) return why;
    }
    try {
      return shared_worker(spec_)->unavailable_reason();
    } catch (const std::exception& e) {
      return e.what();
    }
  }
  std::unique_ptr<engine::Executor> eager(const engine::EngineOptions& options) const override {
    options.validate();
    return std::make_unique<FrameworkExecutor>(spec_, options, false, shared_worker(spec_));
  }
  std::unique_ptr<engine::Executor> fused(const engine::EngineOptions& options) const override {
    options.validate();
    // Its compile cache lies beside the kernel cache: fusebench-cache clears neither under a run.
    engine::KernelCache::hold_for_use(engine::KernelCache::default_dir());
    return std::make_unique<FrameworkExecutor>(spec_, options, true, shared_worker(spec_));
  }
  // The engine's per-op switches have no framework counterpart here: a framework's own switches
  // are its compile options (devices/README.md).
  std::string unsupported_knobs(const engine::EngineOptions& options, bool fused) const override {
    for (const auto& [option, value] : options.compiler_options) {
      const bool offered =
          std::any_of(spec_.compiler_switches.begin(), spec_.compiler_switches.end(),
                      [&](const engine::CompilerSwitch& c) { return c.name == option; });
      if (!fused || !offered) {
        return fmt::format("compiler option {}={}: {} {}", option, value, name(),
                           !fused ? "compiles nothing on its eager path"
                           : spec_.compiler_switches.empty()
                               ? "offers no compile option"
                               : fmt::format("offers {}", compiler_switch_names()));
      }
    }
    // per op: a split where the framework breaks or cuts its graph, per-op rounding where it
    // rounds an op's values (xla: lax.reduce_precision), fused only
    const bool can_split = !spec_.split_statement.empty() || spec_.split_into_stages;
    const bool can_round = spec_.rounded_op != nullptr;
    for (const auto& [op, knobs] : options.per_op) {
      engine::OpKnobs other = knobs;
      other.split_after = false;
      const bool rounding = other.emulate_per_op_rounding.value_or(false);
      other.emulate_per_op_rounding.reset();
      if (!fused || !other.empty() || (knobs.split_after && !can_split) ||
          (rounding && !can_round)) {
        return fmt::format("per-op switch {} at {}: {} realises {}", knobs.describe(), op, name(),
                           !fused || (!can_split && !can_round) ? "no per-op switch"
                           : !can_round ? "only a split (a graph break) per op"
                           : !can_split ? "only per-op rounding per op"
                                        : "only per-op rounding and a split per op");
      }
    }
    return spec_.unsupported_knobs(options, fused);
  }
  std::vector<engine::CompilerSwitch> compiler_switches() const override {
    return spec_.compiler_switches;
  }
  std::string compiler_switch_names() const {
    std::vector<std::string> names;
    for (const auto& c : spec_.compiler_switches) names.push_back(c.name);
    return fmt::format("only {}", fmt::join(names, ", "));
  }
  // A fresh worker process whose framework cache is `cache_dir`, emptied: nothing compiled in this
  // process or on disk survives.
  std::unique_ptr<engine::Executor> fused_cold(const engine::EngineOptions& options,
                                               const fs::path& cache_dir) const override {
    options.validate();
    fs::remove_all(cache_dir);
    fs::create_directories(cache_dir);
    std::map<std::string, std::string> env;
    if (!spec_.cache_env.empty()) env[spec_.cache_env] = fs::absolute(cache_dir).string();
    return std::make_unique<FrameworkExecutor>(spec_, options, true,
                                               std::make_shared<Worker>(spec_, env));
  }
  std::map<std::string, int> instruction_histogram(
      const engine::KernelTrace& kernel) const override {
    if (!spec_.disassemble || kernel.artifact_path.empty()) return {};
    return kernel_instructions(kernel.artifact_path);
  }

 private:
  FrameworkSpec spec_;
};
}  // namespace

namespace {
std::filesystem::path& repro_dir_setting() {
  static std::filesystem::path dir;
  return dir;
}
}  // namespace

void set_repro_dir(const std::filesystem::path& dir) {
  repro_dir_setting() = dir.empty() ? dir : std::filesystem::absolute(dir);
}
const std::filesystem::path& repro_dir() { return repro_dir_setting(); }

std::unique_ptr<engine::Device> make_framework_device(FrameworkSpec spec) {
  return std::make_unique<FrameworkDevice>(std::move(spec));
}

std::string framework_eager_description(const std::string& device) {
  if (device == "xla") return xla_spec("cpu").eager_description;
  if (device == "xla:cuda") return xla_spec("cuda").eager_description;
  return {};
}

void register_framework_devices() {
  engine::register_device("torch", [] { return make_framework_device(torch_spec("cpu")); });
  engine::register_device("torch:cuda", [] { return make_framework_device(torch_spec("cuda")); });
  // torch[:cuda]/BACKEND: torch.compile with any backend registered with torch._dynamo; the
  // worker checks the name when it starts (an unknown one makes the device unavailable).
  engine::register_device_family("torch", [](const std::string& backend) {
    return make_framework_device(torch_spec("cpu", backend));
  });
  engine::register_device_family("torch:cuda", [](const std::string& backend) {
    return make_framework_device(torch_spec("cuda", backend));
  });
  engine::register_device("xla", [] { return make_framework_device(xla_spec("cpu")); });
  engine::register_device("xla:cuda", [] { return make_framework_device(xla_spec("cuda")); });
}

}  // namespace fusebench::framework
