// Task A (claim §3.3): fused execution is bit-deterministic, and so is its compilation.
// Graph matmul -> add -> layernorm -> gelu (the first half of a transformer FFN). Per dtype and
// thread count:
//   1. inputs from a fixed seed, saved as .npy and reloaded (bit-checked);
//   2. round 1: a fresh kernel cache, compile, record every kernel's artifact SHA-256 (H_k0), run
//      `runs` times keeping each output's MD5 (tensor_chunked_md5_hex: the MD5s of its 4 MiB
//      chunks, taken on every host thread, since one thread takes 0.25 s for the plan's 128 MiB);
//   3. clear the kernel cache, start a fresh process (this binary, --determinism-round2), which
//      recompiles and runs `runs` times again;
//   4. beside it, a negative control that must be caught: a third process with one compile option
//      flipped, the first of these the device realises: FMA contraction (the engine; Inductor's
//      cpp.enable_floating_point_contract_flag), per-op rounding (XLA: xla_allow_excess_precision;
//      a torch.compile backend without Inductor has neither, so it has no control).
//      negative_control_knob says which (1 contraction, 2 per-op rounding, -1 none).
// Any device: the cold restart is the device's fused_cold (the engine: an emptied kernel cache;
// Inductor: a fresh TORCHINDUCTOR_CACHE_DIR in a fresh worker process; XLA: a fresh process, no
// persistent cache). A kernel's hash is its artifact's (the .so; XLA: the executable fingerprint),
// kernel_source_stable compares the generated sources' hashes (Inductor: source + command line
// with the cache directory factored out), and kernel_text_stable the machine code alone (the
// .so's .text section; -1 where the device reports none): both can be stable where the binary is
// not (Inductor's -g1 writes the cache directory's path into the .so's debug sections).
// Counters: runs, distinct output hashes (expected 1), kernel hash stable (expected 1), max ULP of
// round 2 against round 1 (expected 0), and whether the negative control was detected (by the
// artifact's or the code's hash: control_artifact_differs, control_source_differs; and the
// outputs). Time is the mean time of one run of round 1 (manual timing), hashing the output
// included (hash_seconds_per_run says how much of it the hash took; the evidence's output_hash
// says where: in fusebench after the output's copy to the host, or in a framework's worker, where
// the output is): round 2 and the control run side by side after it.
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <fstream>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "fusebench/compare.hpp"
#include "fusebench/hash.hpp"
#include "fusebench/npy.hpp"
#include "fusebench/rng.hpp"
#include "support/cases.hpp"
#include "support/engine_support.hpp"

extern char** environ;

namespace fusebench::suite {

namespace {
namespace fs = std::filesystem;
const char* const kInputs[] = {"x", "w", "b", "gamma", "beta"};

// The option the negative control flips.
enum class Control { none = -1, fma_contraction = 1, per_op_rounding = 2 };

const char* control_name(Control c) {
  switch (c) {
    case Control::fma_contraction:
      return "fma_contraction";
    case Control::per_op_rounding:
      return "emulate_per_op_rounding";
    case Control::none:
      break;
  }
  return "none";
}

Control parse_control(const std::string& name) {
  for (Control c : {Control::fma_contraction, Control::per_op_rounding, Control::none}) {
    if (name == control_name(c)) return c;
  }
  throw std::invalid_argument(fmt::format("determinism: unknown negative control '{}'", name));
}

engine::EngineOptions flipped(engine::EngineOptions o, Control c) {
  if (c == Control::fma_contraction) o.fma_contraction = !o.fma_contraction;
  if (c == Control::per_op_rounding) o.emulate_per_op_rounding = !o.emulate_per_op_rounding;
  return o;
}

engine::Graph ffn_graph(DType dtype, const Shape& x_shape) {
  engine::Graph g;
  const std::int64_t h = x_shape.back();
  const auto x = g.input("x", x_shape, dtype);
  const auto w = g.input("w", {h, h}, dtype);
  const auto b = g.input("b", {h}, dtype);
  const auto gamma = g.input("gamma", {h}, dtype);
  const auto beta = g.input("beta", {h}, dtype);
  g.mark_output(g.gelu(g.layernorm(g.add(g.matmul(x, w), b), gamma, beta)));
  return g;
}

struct Round {
  std::vector<std::string> kernel_sha256, source_sha256;
  nlohmann::json kernel_evidence = nlohmann::json::array();
  std::set<std::string> output_md5;
  Tensor last_output;
  double seconds = 0;
  double hash_seconds = 0;   // the part of `seconds` spent hashing outputs
  std::string hashed_where;  // where and how the outputs were hashed
};

// Runs the graph `runs` times on a fresh cache in `cache_dir`.
Round run_round(const engine::Device& device, const engine::Graph& g, const engine::Inputs& in,
                const engine::EngineOptions& o, const fs::path& cache_dir, int runs,
                const std::string& label) {
  auto cold = device.fused_cold(o, cache_dir);
  auto& executor = *cold;
  Round round;
  auto first = executor.run(g, in);
  for (const auto& k : first.trace) {
    round.kernel_sha256.push_back(k.artifact_sha256);
    round.source_sha256.push_back(k.source_sha256);
    round.kernel_evidence.push_back(k.to_json());
  }
  Progress progress(label, runs);
  engine::HashedRuns hashed =
      executor.run_hashed(g, in, runs, [&](int done) { progress.tick(done); });
  round.output_md5.insert(hashed.output_md5.begin(), hashed.output_md5.end());
  round.last_output = std::move(hashed.last_output);
  round.seconds = hashed.seconds;
  round.hash_seconds = hashed.hash_seconds;
  round.hashed_where = hashed.hashed_where;
  return round;
}

// The machine code's own hashes where the device reports them (Inductor: each .so's .text
// section, which excludes the debug information that -g1 fills with the cache directory's path).
std::vector<std::string> text_hashes(const nlohmann::json& kernels) {
  std::vector<std::string> hashes;
  for (const auto& k : kernels) {
    if (!k.contains("evidence") || !k["evidence"].is_object() || !k["evidence"].contains("kernels"))
      continue;
    for (const auto& part : k["evidence"]["kernels"]) {
      if (part.contains("text_sha256")) hashes.push_back(part["text_sha256"].get<std::string>());
    }
  }
  return hashes;
}

// How often the kernels' binaries name their cache directory (Inductor's -g1 debug paths); -1
// where the device reports nothing of the kind.
double cache_dir_mentions(const nlohmann::json& kernels) {
  double total = -1;
  for (const auto& k : kernels) {
    if (!k.contains("evidence") || !k["evidence"].is_object() || !k["evidence"].contains("kernels"))
      continue;
    for (const auto& part : k["evidence"]["kernels"]) {
      if (part.contains("cache_dir_mentions"))
        total = std::max(total, 0.0) + part["cache_dir_mentions"].get<double>();
    }
  }
  return total;
}

engine::Inputs load_inputs(const fs::path& dir) {
  engine::Inputs in;
  for (const char* name : kInputs) in[name] = read_npy(dir / (std::string(name) + ".npy"));
  return in;
}

// A round in a fresh process: the same binary, which then runs child_round(). Started by the
// constructor and read by result(); one not read (an exception in between) is stopped and reaped.
class SpawnedRound {
 public:
  SpawnedRound(const std::string& device, const fs::path& dir, DType dtype, int threads, int runs,
               Control control, std::string tag)
      : dir_(dir), tag_(std::move(tag)) {
    const std::vector<std::string> args = {
        "/proc/self/exe",     "--determinism-round2",         device,
        dir.string(),         std::string(dtype_name(dtype)), std::to_string(threads),
        std::to_string(runs), control_name(control),          tag_};
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, argv[0], nullptr, nullptr, argv.data(), environ) != 0) {
      throw std::runtime_error(fmt::format("determinism: cannot start the {} process", tag_));
    }
  }
  SpawnedRound(const SpawnedRound&) = delete;
  SpawnedRound& operator=(const SpawnedRound&) = delete;
  ~SpawnedRound() {
    if (pid_ == 0) return;
    ::kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
  }

  Round result() {
    int status = 0;
    waitpid(std::exchange(pid_, 0), &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      throw std::runtime_error(
          fmt::format("determinism: {} process failed with status {}", tag_, status));
    }
    std::ifstream in(dir_ / (tag_ + ".json"));
    const auto j = nlohmann::json::parse(in);
    Round r;
    r.kernel_sha256 = j.at("kernel_sha256").get<std::vector<std::string>>();
    r.source_sha256 = j.at("source_sha256").get<std::vector<std::string>>();
    r.kernel_evidence = j.at("kernels");
    for (const auto& h : j.at("output_md5")) r.output_md5.insert(h.get<std::string>());
    r.last_output = read_npy(dir_ / (tag_ + "_out.npy"));
    r.seconds = j.at("seconds").get<double>();
    r.hash_seconds = j.value("hash_seconds", 0.0);
    r.hashed_where = j.value("hashed_where", std::string());
    return r;
  }

 private:
  fs::path dir_;
  std::string tag_;
  pid_t pid_ = 0;
};

void run_case(benchmark::State& state, DType dtype, int threads, const SuiteConfig& config) {
  engine::EngineOptions o;
  o.threads = threads;
  if (!realisable(state, config, true, o)) return;
  // A framework's cold compile in a fresh process takes 12-20 s (Inductor: its ISA probes and the
  // kernel, in an empty cache), three per configuration: its quick profile keeps the plan's dtype,
  // f16, with 2 threads, where a parallel reduction could differ between runs.
  if ((dtype != DType::f16 || threads == 1) &&
      !kept_in_quick_profile(state, config,
                             "three cold compiles in fresh processes per configuration; the quick "
                             "profile runs f16 with 2 threads")) {
    return;
  }
  const Shape x_shape = config.quick() ? Shape{2, 64, 256} : Shape{8, 2048, 4096};
  const int runs = config.quick() ? 100 : 1000;
  const fs::path dir = (config.dump_dir.empty()
                            ? fs::temp_directory_path() / fmt::format("fusebench-A-{}", ::getpid())
                            : config.dump_dir) /
                       fmt::format("A_{}_threads{}", dtype_name(dtype), threads);
  fs::create_directories(dir);
  const engine::Graph g = ffn_graph(dtype, x_shape);
  const std::int64_t h = x_shape.back();
  // 1. inputs from a fixed seed, through the disk and back
  engine::Inputs generated = {{"x", random_uniform(dtype, x_shape, -1, 1, 2024, 0)},
                              {"w", random_uniform(dtype, {h, h}, -0.05, 0.05, 2024, 1)},
                              {"b", random_uniform(dtype, {h}, -0.1, 0.1, 2024, 2)},
                              {"gamma", random_uniform(dtype, {h}, 0.5, 1.5, 2024, 3)},
                              {"beta", random_uniform(dtype, {h}, -0.5, 0.5, 2024, 4)}};
  for (const char* name : kInputs)
    write_npy(dir / (std::string(name) + ".npy"), generated.at(name));
  const engine::Inputs in = load_inputs(dir);
  bool reload_exact = true;
  for (const char* name : kInputs) reload_exact &= bit_equal(in.at(name), generated.at(name)).equal;
  Control control_knob = Control::none;
  std::vector<std::string> control_refused;  // why each option could not serve, for the evidence
  for (Control c : {Control::fma_contraction, Control::per_op_rounding}) {
    const std::string why = not_applicable(config, true, flipped(o, c));
    if (why.empty()) {
      control_knob = c;
      break;
    }
    control_refused.push_back(why);
  }
  const bool control_possible = control_knob != Control::none;
  for (auto _ : state) {
    const Round first = run_round(
        device(config), g, in, o, dir / "cache_round1", runs,
        fmt::format("A {} threads {} round 1 on {}", dtype_name(dtype), threads, config.device));
    fs::remove_all(dir / "cache_round1");
    // Round 2 and the control side by side, each a fresh process with its own cache directory: on
    // a framework each is a cold compile of 12-20 s. Round 1's runs, alone on the machine, are
    // the time.
    SpawnedRound second_process(config.device, dir, dtype, threads, runs, Control::none, "round2");
    std::optional<SpawnedRound> control_process;
    if (control_possible) {
      control_process.emplace(config.device, dir, dtype, threads, 1, control_knob,
                              std::string("control_") + control_name(control_knob));
    }
    const Round second = second_process.result();
    const Round control = control_process ? control_process->result() : Round{};
    state.SetIterationTime(first.seconds / runs);
    std::set<std::string> all = first.output_md5;
    all.insert(second.output_md5.begin(), second.output_md5.end());
    const auto drift = ulp_diff(second.last_output, first.last_output);
    const bool control_outputs_differ =
        control_possible && !bit_equal(control.last_output, first.last_output).equal;
    state.counters["runs"] = 2.0 * runs;
    state.counters["distinct_hashes"] = double(all.size());
    state.counters["round1_distinct_hashes"] = double(first.output_md5.size());
    state.counters["kernel_hash_stable"] = second.kernel_sha256 == first.kernel_sha256 ? 1 : 0;
    state.counters["kernel_source_stable"] = second.source_sha256 == first.source_sha256 ? 1 : 0;
    state.counters["kernels"] = double(first.kernel_sha256.size());
    const auto text1 = text_hashes(first.kernel_evidence),
               text2 = text_hashes(second.kernel_evidence);
    state.counters["kernel_text_stable"] = text1.empty() ? -1 : (text1 == text2 ? 1 : 0);
    state.counters["artifact_cache_dir_mentions"] = cache_dir_mentions(first.kernel_evidence);
    state.counters["max_ulp_vs_round1"] = double(drift.max_distance);
    state.counters["inputs_reload_exact"] = reload_exact ? 1 : 0;
    state.counters["hash_seconds_per_run"] = first.hash_seconds / runs;
    // -1: the device realises none of the control's options, so there is no control.
    const bool artifact_differs = control.kernel_sha256 != first.kernel_sha256;
    const bool source_differs = control.source_sha256 != first.source_sha256;
    state.counters["negative_control_knob"] = double(int(control_knob));
    state.counters["control_artifact_differs"] =
        !control_possible ? -1 : (artifact_differs ? 1 : 0);
    state.counters["control_source_differs"] = !control_possible ? -1 : (source_differs ? 1 : 0);
    state.counters["negative_control_detected"] =
        !control_possible ? -1 : (artifact_differs || source_differs ? 1 : 0);
    state.counters["negative_control_outputs_differ"] =
        !control_possible ? -1 : (control_outputs_differ ? 1 : 0);
    write_evidence(config, fmt::format("A_{}_threads{}", dtype_name(dtype), threads),
                   {{"H_k0", first.kernel_sha256},
                    {"round2_kernel_sha256", second.kernel_sha256},
                    {"control_kernel_sha256", control.kernel_sha256},
                    {"control_source_sha256", control.source_sha256},
                    {"negative_control", control_name(control_knob)},
                    {"negative_control_refused", control_refused},
                    {"control_kernels", control.kernel_evidence},
                    {"source_sha256", first.source_sha256},
                    {"round2_source_sha256", second.source_sha256},
                    {"round1_kernels", first.kernel_evidence},
                    {"round2_kernels", second.kernel_evidence},
                    {"device", config.device},
                    {"output_md5", std::vector<std::string>(all.begin(), all.end())},
                    {"output_hash", first.hashed_where},
                    {"hash_seconds_per_run", first.hash_seconds / runs},
                    {"round2_hash_seconds_per_run", second.hash_seconds / runs},
                    {"shape", x_shape}});
  }
  if (config.dump_dir.empty()) fs::remove_all(dir.parent_path());
}

int child_round(int argc, char** argv) {
  if (argc != 8) {
    fmt::print(stderr, "usage: --determinism-round2 DEVICE DIR DTYPE THREADS RUNS CONTROL TAG\n");
    return 2;
  }
  SuiteConfig config;
  config.device = argv[1];
  const fs::path dir = argv[2];
  const DType dtype = parse_dtype(argv[3]);
  engine::EngineOptions o;
  o.threads = std::stoi(argv[4]);
  const int runs = std::stoi(argv[5]);
  o = flipped(o, parse_control(argv[6]));
  const std::string tag = argv[7];
  const engine::Inputs in = load_inputs(dir);
  const engine::Graph g = ffn_graph(dtype, in.at("x").shape());
  const Round r =
      run_round(device(config), g, in, o, dir / ("cache_" + tag), runs,
                fmt::format("A {} {} on {} (fresh process)", argv[3], tag, config.device));
  write_npy(dir / (tag + "_out.npy"), r.last_output);
  write_file_atomically(dir / (tag + ".json"),
                        nlohmann::json{{"kernel_sha256", r.kernel_sha256},
                                       {"source_sha256", r.source_sha256},
                                       {"kernels", r.kernel_evidence},
                                       {"output_md5", std::vector<std::string>(r.output_md5.begin(),
                                                                               r.output_md5.end())},
                                       {"seconds", r.seconds},
                                       {"hash_seconds", r.hash_seconds},
                                       {"hashed_where", r.hashed_where}}
                            .dump());
  return 0;
}
}  // namespace

void register_benchmarks(const SuiteConfig& config) {
  benchmark::AddCustomContext(
      "output_hash", fmt::format("md5 of {} MiB chunk md5s (dtype and shape first); where: each "
                                 "case's evidence (output_hash)",
                                 kMd5ChunkBytes >> 20));
  for (DType dtype : {DType::f16, DType::bf16, DType::f32}) {
    for (int threads : {1, 2}) {
      register_case("A",
                    Axes()
                        .add("dtype", dtype_name(dtype))
                        .add("threads", threads)
                        .add("device", config.device),
                    [dtype, threads, config](benchmark::State& s, const std::string&) {
                      run_case(s, dtype, threads, config);
                    })
          // One case is its rounds of runs: the full profile's timing repetitions would repeat them five
          // times, and the report would then read the median of counts (a hash seen in one repetition only
          // would vanish from it).
          ->Iterations(1)
          ->Repetitions(1)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
}

}  // namespace fusebench::suite

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--determinism-round2") {
    try {
      return fusebench::suite::child_round(argc - 1, argv + 1);
    } catch (const std::exception& e) {
      fmt::print(stderr, "determinism round 2: {}\n", e.what());
      return 1;
    }
  }
  return fusebench::suite::run_suite(argc, argv, "fusion_determinism");
}
