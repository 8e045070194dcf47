// The CPU JIT: compiles emitted C++ with the system compiler into a shared object (through the
// kernel cache), loads it, and disassembles it on request for the op trace's evidence.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <string>

#include "fusebench/engine/kernel_cache.hpp"

namespace fusebench::cpu {

using KernelFunction = void (*)(const void* args);

class JitCompiler {
 public:
  // The compiler: $FUSEBENCH_JIT_CXX, else the compiler this project was built with.
  explicit JitCompiler(bool fma_contraction, std::string compiler = default_compiler());
  static std::string default_compiler();

  // The exact command, with {src} and {out} standing for the paths (part of the cache key).
  std::string command_template() const;
  // `<compiler> --version`, computed once per compiler; CompileError if it cannot run.
  const std::string& identity() const;

  // Compiles (or finds in the cache) and loads the kernel.
  engine::CachedArtifact build(engine::KernelCache& cache, const std::string& source) const;
  KernelFunction load(const engine::CachedArtifact& artifact) const;

 private:
  std::vector<std::string> arguments(const std::filesystem::path& src,
                                     const std::filesystem::path& out) const;
  std::string compiler_;
  bool fma_;
};

// Instruction mnemonics of the kernel code in a shared object (objdump), with counts.
std::map<std::string, int> instruction_histogram(const std::filesystem::path& library);
// The same for any shared object: the instructions of the symbols counts_symbol accepts.
std::map<std::string, int> instruction_histogram(
    const std::filesystem::path& library,
    const std::function<bool(const std::string&)>& counts_symbol);
std::string disassembly(const std::filesystem::path& library);

}  // namespace fusebench::cpu
