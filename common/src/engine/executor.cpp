#include "fusebench/engine/executor.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "fusebench/hash.hpp"
#include "fusebench/npy.hpp"

namespace fusebench::engine {

// ---- options
void EngineOptions::validate() const {
  if (reduce_tile < 1)
    throw_input_error("engine option reduce_tile must be >= 1, got {}", reduce_tile);
  if (rsqrt_newton_iters < 0 || rsqrt_newton_iters > 3) {
    throw_input_error("engine option rsqrt_newton_iters must be in 0..3, got {}",
                      rsqrt_newton_iters);
  }
  if (div_newton_iters < 0 || div_newton_iters > 3) {
    throw_input_error("engine option div_newton_iters must be in 0..3, got {}", div_newton_iters);
  }
  if (threads < 1 || threads > 256)
    throw_input_error("engine option threads must be in 1..256, got {}", threads);
  for (const auto& entry : per_op) {
    if (!entry.second.compiler_options.empty()) {
      throw_input_error(
          "per-op knobs of {}: {} is a compile option of the whole graph, not of an op",
          entry.first, entry.second.describe());
    }
    try {
      at_op(entry.first).validate();
    } catch (const InputError& e) {
      throw_input_error("per-op knobs of {}: {}", entry.first, e.what());
    }
  }
}

EngineOptions EngineOptions::with_knobs(const OpKnobs& k) const {
  EngineOptions o = *this;
  o.reduce_tile = k.reduce_tile.value_or(o.reduce_tile);
  o.accumulator = k.accumulator.value_or(o.accumulator);
  o.rsqrt = k.rsqrt.value_or(o.rsqrt);
  o.div = k.div.value_or(o.div);
  o.rsqrt_newton_iters = k.rsqrt_newton_iters.value_or(o.rsqrt_newton_iters);
  o.div_newton_iters = k.div_newton_iters.value_or(o.div_newton_iters);
  o.scalar_lowering = k.scalar_lowering.value_or(o.scalar_lowering);
  o.fma_contraction = k.fma_contraction.value_or(o.fma_contraction);
  o.emulate_per_op_rounding = k.emulate_per_op_rounding.value_or(o.emulate_per_op_rounding);
  for (const auto& [name, value] : k.compiler_options) o.compiler_options[name] = value;
  return o;
}

EngineOptions EngineOptions::at_op(const std::string& name) const {
  const auto found = per_op.find(name);
  EngineOptions o = found == per_op.end() ? *this : with_knobs(found->second);
  o.per_op.clear();
  return o;
}

void OpKnobs::merge(const OpKnobs& k) {
  auto take = [](auto& field, const auto& other) {
    if (other) field = other;
  };
  take(reduce_tile, k.reduce_tile);
  take(accumulator, k.accumulator);
  take(rsqrt, k.rsqrt);
  take(div, k.div);
  take(rsqrt_newton_iters, k.rsqrt_newton_iters);
  take(div_newton_iters, k.div_newton_iters);
  take(scalar_lowering, k.scalar_lowering);
  take(fma_contraction, k.fma_contraction);
  take(emulate_per_op_rounding, k.emulate_per_op_rounding);
  split_after |= k.split_after;
  for (const auto& [name, value] : k.compiler_options) compiler_options[name] = value;
}

namespace {
std::string_view approx_name(ApproxMode m) {
  return m == ApproxMode::Ieee             ? "ieee"
         : m == ApproxMode::NewtonBitTrick ? "newton-bittrick"
                                           : "newton-hw";
}
}  // namespace

bool OpKnobs::empty() const { return describe().empty(); }

std::string OpKnobs::describe() const {
  std::vector<std::string> parts;
  if (reduce_tile) parts.push_back(fmt::format("tile={}", *reduce_tile));
  if (accumulator)
    parts.push_back(
        fmt::format("acc={}", *accumulator == AccumulatorDtype::F32 ? "f32" : "storage"));
  if (rsqrt) parts.push_back(fmt::format("rsqrt={}", approx_name(*rsqrt)));
  if (rsqrt_newton_iters) parts.push_back(fmt::format("rsqrt_iters={}", *rsqrt_newton_iters));
  if (div) parts.push_back(fmt::format("div={}", approx_name(*div)));
  if (div_newton_iters) parts.push_back(fmt::format("div_iters={}", *div_newton_iters));
  if (scalar_lowering) {
    parts.push_back(fmt::format(
        "scalar={}", *scalar_lowering == ScalarLowering::ImmediateF32 ? "immediate" : "broadcast"));
  }
  if (fma_contraction) parts.push_back(fmt::format("fma={}", *fma_contraction ? "on" : "off"));
  if (emulate_per_op_rounding)
    parts.push_back(fmt::format("rounding={}", *emulate_per_op_rounding ? "on" : "off"));
  if (split_after) parts.push_back("split");
  for (const auto& [name, value] : compiler_options)
    parts.push_back(fmt::format("compiler:{}={}", name, value));
  return fmt::format("{}", fmt::join(parts, " "));
}

std::string EngineOptions::describe() const {
  std::string per_op_text;
  for (const auto& [op, knobs] : per_op)
    per_op_text += fmt::format(" {}({})", op, knobs.describe());
  if (!per_op_text.empty()) per_op_text = " per-op:" + per_op_text;
  for (const auto& [name, value] : compiler_options)
    per_op_text += fmt::format(" compiler:{}={}", name, value);
  return per_op_text.insert(
      0,
      fmt::format(
          "tile={} acc={} rsqrt={}{} div={}{} scalar={} fma={} emulate_rounding={} threads={}",
          reduce_tile, accumulator == AccumulatorDtype::F32 ? "f32" : "storage", approx_name(rsqrt),
          rsqrt == ApproxMode::Ieee ? "" : fmt::format("x{}", rsqrt_newton_iters), approx_name(div),
          div == ApproxMode::Ieee ? "" : fmt::format("x{}", div_newton_iters),
          scalar_lowering == ScalarLowering::ImmediateF32 ? "immediate" : "broadcast",
          fma_contraction ? "on" : "off", emulate_per_op_rounding ? "on" : "off", threads));
}

nlohmann::json EngineOptions::to_json() const {
  nlohmann::json j = {{"reduce_tile", reduce_tile},
                      {"accumulator", accumulator == AccumulatorDtype::F32 ? "f32" : "storage"},
                      {"rsqrt", approx_name(rsqrt)},
                      {"rsqrt_newton_iters", rsqrt_newton_iters},
                      {"div", approx_name(div)},
                      {"div_newton_iters", div_newton_iters},
                      {"scalar_lowering",
                       scalar_lowering == ScalarLowering::ImmediateF32 ? "immediate" : "broadcast"},
                      {"fma_contraction", fma_contraction},
                      {"emulate_per_op_rounding", emulate_per_op_rounding},
                      {"threads", threads}};
  for (const auto& [op, knobs] : per_op) j["per_op"][op] = knobs.describe();
  for (const auto& [name, value] : compiler_options) j["compiler_options"][name] = value;
  return j;
}

std::string compiler_options_refused(const EngineOptions& options, const std::string& device) {
  if (options.compiler_options.empty()) return {};
  return fmt::format("compiler options ({}): device {} has none; its knobs are the engine's own",
                     fmt::join(options.compiler_options, ", "), device);
}

nlohmann::json KernelTrace::to_json() const {
  return {{"name", name},
          {"kind", kind},
          {"ops", ops},
          {"lowering", lowering},
          {"cache_key", cache_key},
          {"source", source_path},
          {"artifact", artifact_path},
          {"artifact_sha256", artifact_sha256},
          {"compile_ms", compile_ms},
          {"source_sha256", source_sha256},
          {"evidence", evidence},
          {"cache_hit", cache_hit},
          {"run_ms", run_ms},
          {"bytes_moved", bytes_moved}};
}

// ---- devices
namespace {
std::map<std::string, DeviceFactory>& registry() {
  static std::map<std::string, DeviceFactory> devices;
  return devices;
}
std::map<std::string, DeviceVariantFactory>& families() {
  static std::map<std::string, DeviceVariantFactory> bases;
  return bases;
}
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
// The family factory for BASE/VARIANT, with the variant, when `name` names one.
std::pair<const DeviceVariantFactory*, std::string> family_of(const std::string& name) {
  const auto slash = name.find('/');
  if (slash == std::string::npos || slash + 1 == name.size()) return {nullptr, {}};
  auto it = families().find(name.substr(0, slash));
  return it == families().end() ? std::pair<const DeviceVariantFactory*, std::string>{nullptr, {}}
                                : std::pair{&it->second, name.substr(slash + 1)};
}
}  // namespace

void register_device(const std::string& name, DeviceFactory factory) {
  std::lock_guard lock(registry_mutex());
  registry()[name] = std::move(factory);
}

void register_device_family(const std::string& base, DeviceVariantFactory factory) {
  std::lock_guard lock(registry_mutex());
  families()[base] = std::move(factory);
}

std::unique_ptr<Device> make_device(const std::string& name) {
  std::unique_lock lock(registry_mutex());
  if (auto it = registry().find(name); it != registry().end()) return it->second();
  if (auto [factory, variant] = family_of(name); factory != nullptr) {
    const DeviceVariantFactory make = *factory;
    lock.unlock();  // the factory may start a process; other lookups need not wait for it
    return make(variant);
  }
  std::vector<std::string> known;
  for (const auto& [n, f] : registry()) known.push_back(n);
  for (const auto& [n, f] : families()) known.push_back(n + "/VARIANT");
  throw_input_error("unknown device '{}' (this build has: {})", name, fmt::join(known, ", "));
}

bool device_known(const std::string& name) {
  std::lock_guard lock(registry_mutex());
  return registry().count(name) != 0 || family_of(name).first != nullptr;
}

std::vector<std::string> device_names() {
  std::lock_guard lock(registry_mutex());
  std::vector<std::string> names;
  for (const auto& [n, f] : registry()) names.push_back(n);
  return names;
}

// ---- shared helpers
void check_inputs(const Graph& graph, const Inputs& inputs) {
  for (NodeId id : graph.inputs()) {
    const Node& n = graph.node(id);
    auto it = inputs.find(n.name);
    if (it == inputs.end())
      throw_input_error("run: input '{}' ({}{}) was not given", n.name, dtype_name(n.dtype),
                        shape_string(n.shape));
    if (it->second.dtype() != n.dtype || it->second.shape() != n.shape) {
      throw_input_error("run: input '{}' must be {}{}, got {}", n.name, dtype_name(n.dtype),
                        shape_string(n.shape), it->second.describe());
    }
  }
  for (const auto& [name, tensor] : inputs) {
    bool known = false;
    for (NodeId id : graph.inputs()) known |= graph.node(id).name == name;
    if (!known) throw_input_error("run: '{}' is not an input of the graph", name);
  }
}

std::vector<std::int64_t> checked_row_ids(const Node& n, const Tensor& ids, std::int64_t rows) {
  const Tensor flat = ids.contiguous();
  std::vector<std::int64_t> out(std::size_t(flat.numel()));
  if (flat.dtype() == DType::i32) {
    const auto v = flat.span<std::int32_t>();
    std::copy(v.begin(), v.end(), out.begin());
  } else if (flat.dtype() == DType::i64) {
    const auto v = flat.span<std::int64_t>();
    std::copy(v.begin(), v.end(), out.begin());
  } else {
    throw_input_error("{} {}: ids must be i32 or i64, got {}", op_name(n.kind), n.name,
                      ids.describe());
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] < 0 || out[i] >= rows) {
      throw_input_error("{} {}: id {} at position {} is outside [0, {}) (the table has {} rows)",
                        op_name(n.kind), n.name, out[i], i, rows, rows);
    }
  }
  return out;
}

void dump_run(const Graph& graph, const RunResult& result, const std::string& executor,
              const RunOptions& run) {
  if (run.dump_dir.empty()) return;
  const auto dir = run.dump_dir / executor;
  std::filesystem::create_directories(dir);
  nlohmann::json manifest = nlohmann::json::array();
  const auto& outputs = graph.outputs();
  for (const auto& [id, tensor] : result.values) {
    const Node& n = graph.node(id);
    const bool is_output = std::find(outputs.begin(), outputs.end(), id) != outputs.end();
    if (!run.dump_intermediates && !is_output && n.kind != OpKind::Input) continue;
    const std::string file = n.name + ".npy";
    write_npy(dir / file, tensor);
    manifest.push_back({{"name", n.name},
                        {"file", file},
                        {"op", op_name(n.kind)},
                        {"shape", tensor.shape()},
                        {"dtype", dtype_name(tensor.dtype())},
                        {"role", n.kind == OpKind::Input ? "input"
                                 : is_output             ? "output"
                                                         : "intermediate"},
                        {"executor", executor}});
  }
  nlohmann::json kernels = nlohmann::json::array();
  for (const auto& k : result.trace) kernels.push_back(k.to_json());
  write_file_atomically(dir / "manifest.json",
                        nlohmann::json{{"tensors", manifest}, {"kernels", kernels}}.dump(2));
}

HashedRuns Executor::run_hashed(const Graph& graph, const Inputs& inputs, int runs,
                                const std::function<void(int)>& progress) {
  using Clock = std::chrono::steady_clock;
  HashedRuns hashed;
  const auto start = Clock::now();
  for (int r = 0; r < runs; ++r) {
    RunResult result = run(graph, inputs);
    const auto hash_start = Clock::now();
    hashed.output_md5.push_back(tensor_chunked_md5_hex(result.outputs.at(0)));
    hashed.hash_seconds += std::chrono::duration<double>(Clock::now() - hash_start).count();
    if (r + 1 == runs) hashed.last_output = result.outputs.at(0);
    progress(r + 1);
  }
  hashed.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  hashed.hashed_where = fmt::format(
      "in fusebench after each run's copy to the host: md5 of {} MiB chunk md5s on up to {} "
      "thread{}",
      kMd5ChunkBytes >> 20, cores, cores == 1 ? "" : "s");
  return hashed;
}

}  // namespace fusebench::engine
