// The CPU JIT: compiles emitted C++ with the system compiler into a shared object (through the
// kernel cache), loads it, and disassembles it on request for the op trace's evidence.
//
// Parsing the kernel prelude (kernel_prelude(): <cmath>, the float formats, the scalar math) is
// most of a kernel's compile time, so the compiler is handed the kernel with the prelude replaced
// by an #include of a header whose precompiled form (g++'s .gch) lies in the kernel cache's shared
// folder, <cache>/pch/<sha256 of compiler identity, flags, prelude>/. The cached source, its key
// and the library are those of the whole, self-contained text: the library is byte-identical.
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
  // `precompiled_prelude`: compile through the precompiled prelude (off: every kernel parses it).
  explicit JitCompiler(bool fma_contraction, std::string compiler = default_compiler(),
                       bool precompiled_prelude = default_precompiled_prelude());
  static std::string default_compiler();
  // On unless $FUSEBENCH_JIT_PCH is 0.
  static bool default_precompiled_prelude();

  // The exact command, with {src} and {out} standing for the paths (part of the cache key).
  std::string command_template() const;
  // `<compiler> --version`, computed once per compiler; CompileError if it cannot run.
  const std::string& identity() const;

  // Compiles (or finds in the cache) and loads the kernel.
  engine::CachedArtifact build(engine::KernelCache& cache, const std::string& source) const;
  KernelFunction load(const engine::CachedArtifact& artifact) const;

 private:
  // The compiler and the flags every kernel and the precompiled prelude are compiled with.
  std::vector<std::string> flags() const;
  std::vector<std::string> arguments(const std::filesystem::path& src,
                                     const std::filesystem::path& out) const;
  // The prelude header in `cache_dir`, its .gch built if absent; empty when it cannot be built.
  std::filesystem::path precompiled_prelude(const std::filesystem::path& cache_dir) const;
  std::string compiler_;
  bool fma_;
  bool precompiled_prelude_;
};

// Instruction mnemonics of the kernel code in a shared object (objdump), with counts.
std::map<std::string, int> instruction_histogram(const std::filesystem::path& library);
// The same for any shared object: the instructions of the symbols counts_symbol accepts.
std::map<std::string, int> instruction_histogram(
    const std::filesystem::path& library,
    const std::function<bool(const std::string&)>& counts_symbol);
std::string disassembly(const std::filesystem::path& library);

}  // namespace fusebench::cpu
