#include "support/suite_main.hpp"

#include "support/cases.hpp"
#include "support/interleaved.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>

#include "all_devices.hpp"
#include "framework_devices.hpp"
#include "fusebench/engine/executor.hpp"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <iterator>
#include <optional>
#include <ranges>
#include <sstream>
#include <string_view>
#include <thread>
#include <vector>

// Defined in the build_revision.cpp that cmake/write_revision.cmake writes at every build.
extern const char* const fusebench_build_revision;

namespace fusebench::suite {

namespace {
std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

// The vector extensions that decide kernel speed, as the kernel reports them.
std::string isa_summary() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream flags(line.substr(line.find(':') + 1));
    std::string flag, isa;
    while (flags >> flag) {
      for (const char* wanted : {"avx512f", "avx512fp16", "avx512_bf16", "avx2", "fma", "f16c"}) {
        if (flag == wanted) isa += (isa.empty() ? "" : " ") + flag;
      }
    }
    return isa;
  }
  return "unknown";
}

// The console reporter, which also times each benchmark instance by the wall clock from the end of
// the previous report to the end of its own: setup, reference computation and compiles included,
// which is what a shard planner must balance (the JSON's times count the timed loop only). Written
// as "<instance name>\t<seconds>" lines when the run ends, through a temporary file.
class InstanceTimingReporter : public benchmark::ConsoleReporter {
 public:
  explicit InstanceTimingReporter(std::filesystem::path path)
      : benchmark::ConsoleReporter(::isatty(STDOUT_FILENO) ? OO_ColorTabular : OO_Tabular),
        path_(std::move(path)) {}

  bool ReportContext(const Context& context) override {
    last_ = Clock::now();
    return benchmark::ConsoleReporter::ReportContext(context);
  }

  void ReportRuns(const std::vector<Run>& runs) override {
    benchmark::ConsoleReporter::ReportRuns(runs);
    const auto now = Clock::now();
    if (!runs.empty()) {
      const std::string name = runs.front().run_name.str();
      if (!seconds_.count(name)) order_.push_back(name);
      seconds_[name] += std::chrono::duration<double>(now - last_).count();
    }
    last_ = now;
  }

  void Finalize() override {
    benchmark::ConsoleReporter::Finalize();
    const std::filesystem::path partial = path_.string() + ".partial";
    std::ofstream out(partial);
    for (const std::string& name : order_) out << fmt::format("{}\t{:.3f}\n", name, seconds_[name]);
    out.close();
    if (!out) {
      fmt::print(stderr, "error: --instance-times={}: cannot write\n", path_.string());
      std::filesystem::remove(partial);
      failed_ = true;
      return;
    }
    std::filesystem::rename(partial, path_);
  }
  bool failed() const { return failed_; }

 private:
  using Clock = std::chrono::steady_clock;
  std::filesystem::path path_;
  Clock::time_point last_ = Clock::now();
  std::vector<std::string> order_;
  std::map<std::string, double> seconds_;
  bool failed_ = false;
};

// Google Benchmark writes non-finite doubles as the bare tokens NaN, Infinity and -Infinity (its
// aggregate rows hold them: the cv of a zero mean), which strict JSON has no words for. The whole-file
// check reads them as null; the readers (reports/results.py) accept them and check each counter's domain.
std::string with_nonfinite_tokens_as_null(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size())
        out += text[++i];
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    const std::string_view rest = text.substr(i);
    bool replaced = false;
    for (const std::string_view token : {"-Infinity", "Infinity", "NaN"}) {
      if (rest.starts_with(token)) {
        out += "null";
        i += token.size() - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  return out;
}

// Google Benchmark writes --benchmark_out itself and does not report a failed write (a full disk
// leaves a truncated file): the file must parse whole, or it is removed and the run fails.
bool results_file_is_whole(const std::filesystem::path& path) {
  std::ifstream in(path);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  try {
    const nlohmann::json doc = nlohmann::json::parse(with_nonfinite_tokens_as_null(text));
    if (doc.is_object() && doc.contains("benchmarks")) return true;
  } catch (const nlohmann::json::exception&) {
  }
  fmt::print(stderr,
             "error: --benchmark_out={}: the results file is incomplete (a failed write: disk "
             "full?); removed\n",
             path.string());
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec))
    std::filesystem::remove(path, ec);  // not /dev/full
  return false;
}
}  // namespace

[[noreturn]] void usage_error(std::string_view message) {
  fmt::print(stderr, "error: {}\n", message);
  std::exit(2);
}

void register_all_devices() { devices::register_all(); }

std::vector<std::pair<std::string, std::string>> device_availability(
    const std::vector<std::string>& names) {
  // each framework device's answer is its worker's start (an import of seconds): asked at once
  std::vector<std::future<std::string>> answers;
  for (const std::string& name : names) {
    answers.push_back(std::async(
        std::launch::async, [name] { return engine::make_device(name)->unavailable_reason(); }));
  }
  std::vector<std::pair<std::string, std::string>> out;
  for (std::size_t i = 0; i < names.size(); ++i) out.emplace_back(names[i], answers[i].get());
  return out;
}

void register_memory_copy(std::int64_t bytes, int threads) {
  const auto name = fmt::format("MemoryCopy/bytes:{}/threads:{}", bytes, threads);
  benchmark::RegisterBenchmark(
      name.c_str(),
      [bytes, threads](benchmark::State& state) {
        const auto size = static_cast<std::size_t>(bytes);
        std::vector<std::byte> source(size, std::byte{1}), destination(size, std::byte{0});
        const std::size_t part = (size + std::size_t(threads) - 1) / std::size_t(threads);
        auto copy_part = [&](int t) {
          const std::size_t begin = std::min(size, part * std::size_t(t)),
                            end = std::min(size, begin + part);
          std::memcpy(destination.data() + begin, source.data() + begin, end - begin);
        };
        for (auto _ : state) {
          std::vector<std::thread> helpers;
          for (int t = 1; t < threads; ++t) helpers.emplace_back(copy_part, t);
          copy_part(0);
          for (auto& h : helpers) h.join();
          benchmark::DoNotOptimize(destination.data());
          benchmark::ClobberMemory();
        }
        // Traffic, as STREAM counts it: every byte copied is read once and written once.
        state.SetBytesProcessed(std::int64_t(state.iterations()) * bytes * 2);
        state.counters["bytes_copied"] = double(bytes);
        state.counters["threads"] = threads;
      })
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

void keep_freed_heap_memory() {
#ifdef __GLIBC__
  ::mallopt(M_TRIM_THRESHOLD, 1 << 30);
  ::mallopt(M_MMAP_THRESHOLD, 32 << 20);
#endif
}

int run_suite(int argc, char** argv, const char* suite_name) {
  keep_freed_heap_memory();
  SuiteConfig config;
  std::filesystem::path instance_times, results_file;
  std::vector<char*> remaining;
  for (int i = 0; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value_of = [&](std::string_view flag) -> std::optional<std::string_view> {
      if (arg.rfind(flag, 0) == 0 && arg.size() > flag.size() && arg[flag.size()] == '=') {
        return arg.substr(flag.size() + 1);
      }
      return std::nullopt;
    };
    if (auto v = value_of("--profile")) {
      if (*v == "quick")
        config.profile = Profile::Quick;
      else if (*v == "full")
        config.profile = Profile::Full;
      else
        usage_error(fmt::format("--profile={}: expected quick or full", *v));
    } else if (auto d = value_of("--device")) {
      register_all_devices();
      if (!engine::device_known(std::string(*d))) {
        usage_error(fmt::format(
            "--device={}: unknown device (this build has: {}; torch[:cuda]/BACKEND names any "
            "torch.compile backend)",
            *d, fmt::join(engine::device_names(), ", ")));
      }
      config.device = std::string(*d);
    } else if (arg == "--list-devices" || value_of("--list-devices")) {
      // The devices that can run here, one per line (what `tools/run --device all` expands to);
      // each unavailable one with its reason on stderr. With =NAME,NAME only those are asked:
      // asking starts a framework's worker (seconds each).
      register_all_devices();
      std::vector<std::string> asked;
      if (auto names = value_of("--list-devices")) {
        for (const auto part : std::views::split(*names, ',')) {
          const std::string name(part.begin(), part.end());
          if (name.empty()) continue;
          if (!engine::device_known(name))
            usage_error(fmt::format("--list-devices: unknown device {} (this build has: {})", name,
                                    fmt::join(engine::device_names(), ", ")));
          asked.push_back(name);
        }
      } else {
        asked = engine::device_names();
      }
      for (const auto& [name, why] : device_availability(asked)) {
        if (why.empty())
          fmt::print("{}\n", name);
        else
          fmt::print(stderr, "{}: unavailable: {}\n", name, why);
      }
      std::exit(0);
    } else if (auto v = value_of("--interleaved-rounds")) {
      int rounds = 0;
      const auto [end, error] = std::from_chars(v->data(), v->data() + v->size(), rounds);
      if (error != std::errc{} || end != v->data() + v->size())
        usage_error(fmt::format("--interleaved-rounds={}: not a whole number", *v));
      try {
        set_interleaved_rounds(rounds);
      } catch (const std::invalid_argument& e) {
        usage_error(fmt::format("--interleaved-rounds={}: {}", *v, e.what()));
      }
    } else if (auto dir = value_of("--dump-dir")) {
      config.dump_dir = std::string(*dir);
    } else if (auto out = value_of("--benchmark_out")) {
      results_file = std::string(*out);
      remaining.push_back(argv[i]);
    } else if (auto file = value_of("--instance-times")) {
      instance_times = std::string(*file);
    } else if (auto list = value_of("--fusion-switches")) {
      if (std::string_view(suite_name) != "accumulated_error") {
        usage_error(
            fmt::format("--fusion-switches={}: a switch list applies to task B "
                        "(bench_accumulated_error), not to {}",
                        *list, suite_name));
      }
      config.fusion_switches = std::string(*list);
    } else if (auto names = value_of("--compare-devices")) {
      if (std::string_view(suite_name) != "engine_throughput") {
        usage_error(fmt::format(
            "--compare-devices={}: framework comparisons are bench_engine_throughput's, not {}'s",
            *names, suite_name));
      }
      register_all_devices();
      for (const auto part : std::views::split(*names, ',')) {
        const std::string name(part.begin(), part.end());
        if (name.empty()) continue;
        if (name == "cpu" || name.find(':') != std::string::npos || !engine::device_known(name))
          usage_error(
              fmt::format("--compare-devices: {} is not a framework device on the CPU (torch, xla, "
                          "torch/BACKEND; this build has: {})",
                          name, fmt::join(engine::device_names(), ", ")));
        config.compared_devices.push_back(name);
      }
    } else {
      remaining.push_back(argv[i]);
    }
  }
  // --benchmark_list_tests[=true|1|yes]: read before Initialize consumes it
  const bool listing_only = std::any_of(remaining.begin(), remaining.end(), [](const char* arg) {
    const std::string_view a(arg), flag("--benchmark_list_tests");
    if (a.substr(0, flag.size()) != flag) return false;
    const std::string_view value = a.substr(flag.size());
    return value.empty() || value == "=true" || value == "=1" || value == "=yes";
  });
  int remaining_count = int(remaining.size());
  benchmark::Initialize(&remaining_count, remaining.data());
  if (benchmark::ReportUnrecognizedArguments(remaining_count, remaining.data())) return 2;

  benchmark::AddCustomContext("fusebench_suite", suite_name);
  benchmark::AddCustomContext("fusebench_profile", config.profile_name());
  benchmark::AddCustomContext("fusebench_device", config.device);
  if (interleaved_rounds() != kInterleavedRounds)
    benchmark::AddCustomContext("fusebench_interleaved_rounds",
                                std::to_string(interleaved_rounds()));
  // what the framework device's eager path is (xla: one jax.jit per op), for the report's run line
  if (const std::string eager = framework::framework_eager_description(config.device);
      !eager.empty())
    benchmark::AddCustomContext("fusebench_eager", eager);
  benchmark::AddCustomContext("compiler", FUSEBENCH_COMPILER);
  benchmark::AddCustomContext("compile_flags", FUSEBENCH_COMPILE_FLAGS);
  benchmark::AddCustomContext("cpu_model", cpu_model());
  benchmark::AddCustomContext("cpu_isa", isa_summary());
  benchmark::AddCustomContext("hardware_threads",
                              std::to_string(std::thread::hardware_concurrency()));
  benchmark::AddCustomContext("git_revision", fusebench_build_revision);
#ifdef FUSEBENCH_BENCHMARK_VERSION
  benchmark::AddCustomContext("benchmark_version", FUSEBENCH_BENCHMARK_VERSION);
#endif
  // tools/run names its run; the readers refuse a suite file that is not the run's own.
  if (const char* run_id = std::getenv("FUSEBENCH_RUN_ID"); run_id != nullptr && *run_id != '\0')
    benchmark::AddCustomContext("fusebench_run_id", run_id);
  if (!config.fusion_switches.empty())
    benchmark::AddCustomContext("fusion_switches", config.fusion_switches.string());
  if (!config.dump_dir.empty()) {
    std::filesystem::create_directories(config.dump_dir);
    benchmark::AddCustomContext("dump_dir", config.dump_dir.string());
    // Framework devices write each graph's Python as a runnable repro under <dump dir>/repro/.
    framework::set_repro_dir(config.dump_dir / "repro");
  }

  // A listing runs nothing, so it does not start a framework's worker (an import of torch takes
  // seconds; tools/run lists every suite on every device) unless only the worker can tell whether
  // the device exists (a torch.compile backend torch does not ship). A run checks the device first.
  const auto slash = config.device.find('/');
  const bool known_without_worker =
      slash == std::string::npos ||
      framework::builtin_torch_backend(config.device.substr(slash + 1));
  if (config.device != "cpu") {
    register_all_devices();
    if (!listing_only || !known_without_worker) {
      const std::string why = engine::make_device(config.device)->unavailable_reason();
      if (!why.empty())
        usage_error(fmt::format("--device={}: unavailable: {}", config.device, why));
    }
    if (!config.compared_devices.empty())
      usage_error(fmt::format("--compare-devices: compares with the cpu engine's run, not with {}",
                              config.device));
  }
  if (!listing_only && !config.compared_devices.empty()) {
    for (const auto& [name, why] : device_availability(config.compared_devices)) {
      if (!why.empty())
        usage_error(fmt::format("--compare-devices: {}: unavailable: {}", name, why));
    }
  }
  register_benchmarks(config);
  benchmark::AddCustomContext("fusebench_axes", registered_axes_json());
  bool written = true;
  std::size_t ran = 0;
  if (instance_times.empty()) {
    ran = benchmark::RunSpecifiedBenchmarks();
  } else {
    InstanceTimingReporter reporter(instance_times);
    ran = benchmark::RunSpecifiedBenchmarks(&reporter);
    written = !reporter.failed();
  }
  benchmark::Shutdown();
  // (a filter that matches nothing leaves an empty file, as Google Benchmark always has)
  if (ran > 0 && !listing_only && !results_file.empty() && !results_file_is_whole(results_file))
    written = false;
  return written ? 0 : 1;
}

}  // namespace fusebench::suite
