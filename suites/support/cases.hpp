// Registering a suite's cases: the axes of a case are named once, and from them come its benchmark
// name ("C1/dtype:f16/scalar:0.7/...", axes in the order given) and a structured record of them in
// the JSON (the context entry "fusebench_axes": benchmark name -> {axis: value}), which the report
// reads instead of parsing names back. A case's exception becomes SkipWithError with its message, so
// the JSON carries error_message and the suite goes on with its other cases.
#pragma once

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fusebench::suite {

class Axes {
 public:
  Axes() = default;
  // An axis and its value as the name shows it (fmt's "{}": 0.7 -> "0.7", a string as it is).
  template <class T>
  Axes& add(std::string axis, const T& value) {
    axes_.emplace_back(std::move(axis), fmt::format("{}", value));
    return *this;
  }
  // "family/axis:value/..." (a family alone when there are no axes).
  std::string name(std::string_view family) const;
  const std::vector<std::pair<std::string, std::string>>& items() const { return axes_; }

 private:
  std::vector<std::pair<std::string, std::string>> axes_;
};

// "AxBxC" for a shape's extents, the form every suite's shape axis takes.
template <class Extents>
std::string shape_text(const Extents& shape) {
  return fmt::format("{}", fmt::join(shape, "x"));
}

// The case's body; it receives the state and the benchmark's name (evidence files are named from it).
using CaseBody = std::function<void(benchmark::State&, const std::string& name)>;

// Registers family/axes as one benchmark running `body`, an exception turned into SkipWithError, and
// records its axes for the context. Returns Google Benchmark's handle for the caller's settings
// (Unit, Iterations, UseManualTime, ...).
benchmark::internal::Benchmark* register_case(std::string_view family, const Axes& axes,
                                              CaseBody body);

// Every case registered so far: {"<benchmark name>": {axis: value}} as JSON text. run_suite records
// it as the context entry "fusebench_axes" once the suite has registered its cases.
std::string registered_axes_json();

}  // namespace fusebench::suite
