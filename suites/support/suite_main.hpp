// What every suite binary shares: the profile flag, the system context recorded in the JSON, and
// main(). A suite registers its benchmarks at run time, after the profile is known, because the
// profile decides shapes and run counts.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fusebench::suite {

enum class Profile { Quick, Full };

struct SuiteConfig {
  Profile profile = Profile::Quick;
  std::string device = "cpu";
  std::filesystem::path dump_dir;  // empty: no dumps
  // a fusion switch list applied to the fused path (task B; docs/fusion-switches.md)
  std::filesystem::path fusion_switches;
  // framework devices whose fused path the engine's speed is compared with in the same run
  // (bench_engine_throughput on cpu; --compare-devices, which tools/run sets to the run's devices)
  std::vector<std::string> compared_devices;
  bool quick() const { return profile == Profile::Quick; }
  const char* profile_name() const { return quick() ? "quick" : "full"; }
};

// Registers every device this build has (devices/all_devices.hpp: cpu, the framework devices, cuda
// where built), idempotent. A registered device may still be unavailable here (unavailable_reason()).
void register_all_devices();
// (name, why it cannot run here; empty: it can), in the order of `names`, the devices asked at once
std::vector<std::pair<std::string, std::string>> device_availability(
    const std::vector<std::string>& names);

// "error: <message>" on stderr and exit status 2: bad input named, nothing run.
[[noreturn]] void usage_error(std::string_view message);

// Defined by each suite.
void register_benchmarks(const SuiteConfig& config);

// MemoryCopy/bytes:N/threads:T: memcpy of N bytes split over T threads, the bandwidth yardstick a
// suite measures in its own run. bytes_per_second counts traffic, 2 N per copy (N read, N
// written), the unit in which every other benchmark of the suite reports the bytes it reads and
// writes; T is the number of threads the measured kernels use.
void register_memory_copy(std::int64_t bytes, int threads);

// glibc's heap, set to keep what is freed: no trimming of the heap's top, no mmap below 32 MiB.
// By default glibc hands memory back and moves its thresholds as a process allocates, so eager
// execution (a fresh output per op) ran at a speed that depended on what else the process had
// allocated: task E's eager steps ran slower interleaved with fused steps than alone, and eager
// training runs slower than with this setting, which a framework's caching allocator gives its
// eager mode. Fused runs did not move.
// Called by run_suite and by binaries with their own entry points.
void keep_freed_heap_memory();

// Parses --profile=quick|full, --device=NAME (any registered device; an unavailable one is an
// error with its reason), --list-devices (prints the available devices and exits), --dump-dir=DIR
// --instance-times=FILE (each instance's wall time, for tools/run's run.json) and
// --fusion-switches=FILE (task B only; any other suite refuses it with exit 2) and
// --compare-devices=NAME,... (bench_engine_throughput on cpu only), removing them from argv;
// records the context and runs the benchmarks. A listing (--benchmark_list_tests) starts no
// framework worker; a run starts only those of the devices it names.
int run_suite(int argc, char** argv, const char* suite_name);

}  // namespace fusebench::suite

#define FUSEBENCH_SUITE_MAIN(suite_name) \
  int main(int argc, char** argv) { return ::fusebench::suite::run_suite(argc, argv, suite_name); }
