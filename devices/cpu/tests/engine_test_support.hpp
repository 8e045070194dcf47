// Shared fixtures of the engine tests: a private kernel cache per test binary and small graphs.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

#include "cpu_device.hpp"
#include "eager_executor.hpp"
#include "fusebench/engine/executor.hpp"
#include "fusebench/rng.hpp"
#include "fused_executor.hpp"
#include "gemm.hpp"

namespace fusebench::testsupport {

inline std::filesystem::path test_cache_dir() {
  static const auto dir = [] {
    auto d = std::filesystem::temp_directory_path() /
             fmt::format("fusebench-engine-test-cache-{}", ::getpid());
    std::filesystem::remove_all(d);
    return d;
  }();
  return dir;
}

// An empty folder of this process's under the temporary directory (removed first, if a test before
// left it).
inline std::filesystem::path fresh_dir(const std::string& tag) {
  const auto dir =
      std::filesystem::temp_directory_path() / fmt::format("fusebench-{}-{}", tag, ::getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

inline engine::RunResult run_fused(const engine::Graph& g, const engine::Inputs& in,
                                   engine::EngineOptions o = {}) {
  return cpu::FusedExecutor(o, test_cache_dir()).run(g, in);
}
inline engine::RunResult run_eager(const engine::Graph& g, const engine::Inputs& in,
                                   engine::EngineOptions o = {}) {
  return cpu::EagerExecutor(o).run(g, in);
}

// mul -> add -> gelu -> mul over four operands of one shape.
struct ElementwiseChain {
  engine::Graph graph;
  engine::Inputs inputs;
  ElementwiseChain(DType dtype, Shape shape, std::uint64_t seed = 1) {
    std::vector<engine::NodeId> x;
    for (int i = 0; i < 4; ++i) {
      const std::string name = fmt::format("x{}", i);
      x.push_back(graph.input(name, shape, dtype));
      inputs[name] = random_uniform(dtype, shape, -2, 2, seed, std::uint64_t(i));
    }
    const auto m = graph.mul(x[0], x[1]);
    const auto a = graph.add(m, x[2]);
    const auto g = graph.gelu(a);
    graph.mark_output(graph.mul(g, x[3]));
  }
};

}  // namespace fusebench::testsupport
