#include "support/cases.hpp"

#include <exception>
#include <map>
#include <mutex>

#include <nlohmann/json.hpp>

#include "fusebench/engine/recoveries.hpp"

namespace fusebench::suite {
namespace {
// Registration happens once, on the main thread, before the benchmarks run; the lock keeps a later
// caller honest.
std::mutex registry_mutex;
nlohmann::ordered_json& registry() {
  static nlohmann::ordered_json cases = nlohmann::ordered_json::object();
  return cases;
}

// Per case: the recoveries its runs needed (engine/recoveries.hpp).
std::map<std::string, std::map<std::string, int>>& case_recoveries() {
  static std::map<std::string, std::map<std::string, int>> recoveries;
  return recoveries;
}

nlohmann::ordered_json axes_object(const Axes& axes) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const auto& [axis, value] : axes.items()) out[axis] = value;
  return out;
}
}  // namespace

std::string Axes::name(std::string_view family) const {
  std::string out(family);
  for (const auto& [axis, value] : axes_) out += fmt::format("/{}:{}", axis, value);
  return out;
}

benchmark::internal::Benchmark* register_case(std::string_view family, const Axes& axes,
                                              CaseBody body) {
  const std::string name = axes.name(family);
  {
    std::lock_guard lock(registry_mutex);
    nlohmann::ordered_json record = axes_object(axes);
    record["family"] = std::string(family);
    registry()[name] = std::move(record);
  }
  return benchmark::RegisterBenchmark(
      name.c_str(), [name, body = std::move(body)](benchmark::State& state) {
        (void)engine::take_recoveries();  // an earlier case's, reported there
        try {
          body(state, name);
          // A fault the device repaired while this case ran is part of its result; Google
          // Benchmark calls the body more than once (iteration estimates) and reports the last.
          std::lock_guard lock(registry_mutex);
          auto& repaired = case_recoveries()[name];
          for (const auto& [counter, count] : engine::take_recoveries()) repaired[counter] += count;
          for (const auto& [counter, count] : repaired) state.counters[counter] = double(count);
        } catch (const std::exception& e) {
          state.SkipWithError(
              e.what());  // e.g. "n/a on <device>: ..." for a knob the device cannot realise
        }
      });
}

std::string registered_axes_json() {
  std::lock_guard lock(registry_mutex);
  return registry().dump();
}

}  // namespace fusebench::suite
