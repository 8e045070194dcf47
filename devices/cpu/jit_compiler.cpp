#include "jit_compiler.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <regex>
#include <sstream>

#include "fusebench/error.hpp"

extern char** environ;

namespace fusebench::cpu {

namespace fs = std::filesystem;

namespace {
struct Output {
  int status;
  std::string text;
};

// Runs argv (in directory `cwd` when given) with stdout and stderr into `log`; returns status and
// output.
Output run_command(const std::vector<std::string>& argv, const fs::path& log,
                   const fs::path& cwd = {}) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> raw;
  for (const auto& a : argv) raw.push_back(const_cast<char*>(a.c_str()));
  raw.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, raw[0], &actions, nullptr, raw.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0)
    return {127, fmt::format("cannot run '{}': {}", argv[0], std::strerror(spawned))};
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), text};
}

fs::path scratch_log(const std::string& tag) {
  return fs::temp_directory_path() / fmt::format("fusebench-{}-{}.log", tag, ::getpid());
}

std::mutex& load_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, KernelFunction>& loaded() {
  static std::map<std::string, KernelFunction> handles;
  return handles;
}
}  // namespace

std::string JitCompiler::default_compiler() {
  if (const char* env = std::getenv("FUSEBENCH_JIT_CXX"); env && *env) return env;
  return FUSEBENCH_DEFAULT_JIT_CXX;
}

JitCompiler::JitCompiler(bool fma_contraction, std::string compiler)
    : compiler_(std::move(compiler)), fma_(fma_contraction) {}

std::vector<std::string> JitCompiler::arguments(const fs::path& src, const fs::path& out) const {
  return {compiler_,
          "-std=c++20",
          "-O3",
          "-march=native",
          "-mprefer-vector-width=512",
          "-fPIC",
          "-shared",
          "-fno-math-errno",
          "-frandom-seed=fusebench",
          fma_ ? "-ffp-contract=fast" : "-ffp-contract=off",
          "-o",
          out.string(),
          src.string()};
}

std::string JitCompiler::command_template() const {
  return fmt::format("{}", fmt::join(arguments("{src}", "{out}"), " "));
}

const std::string& JitCompiler::identity() const {
  static std::mutex m;
  static std::map<std::string, std::string> identities;
  std::lock_guard lock(m);
  auto it = identities.find(compiler_);
  if (it != identities.end()) return it->second;
  const auto log = scratch_log("identity");
  const Output out = run_command({compiler_, "--version"}, log);
  std::error_code ignored;
  fs::remove(log, ignored);
  if (out.status != 0) {
    throw engine::CompileError(
        fmt::format("JIT compiler '{}' cannot run (exit {}): {}", compiler_, out.status, out.text));
  }
  return identities.emplace(compiler_, out.text).first->second;
}

engine::CachedArtifact JitCompiler::build(engine::KernelCache& cache,
                                          const std::string& source) const {
  return cache.get_or_build(
      source, command_template(), identity(),
      [&](const fs::path& src, const fs::path& out, const fs::path& log) {
        // Relative names, run in the build directory: nothing of the path reaches the artifact.
        const auto argv = arguments(src.filename(), out.filename());
        const Output result = run_command(argv, fs::absolute(log), src.parent_path());
        if (result.status != 0) {
          throw engine::CompileError(fmt::format("JIT compilation failed (exit {}): {}\n{}",
                                                 result.status, fmt::join(argv, " "), result.text));
        }
      });
}

KernelFunction JitCompiler::load(const engine::CachedArtifact& artifact) const {
  std::lock_guard lock(load_mutex());
  auto it = loaded().find(artifact.key);
  if (it != loaded().end()) return it->second;
  void* handle = ::dlopen(artifact.library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const std::string why = ::dlerror();
    std::error_code error;
    if (!fs::exists(artifact.library, error)) {
      const fs::path dir = artifact.library.parent_path().parent_path();
      throw engine::CompileError(fmt::format(
          "cannot load kernel {}: the file is gone: the kernel cache {} was cleared or changed "
          "under this run (fusebench-cache clear refuses while a run holds {}; something else "
          "removed it). dlopen: {}",
          artifact.library.string(), dir.string(), (dir / engine::kKernelCacheUseLock).string(),
          why));
    }
    throw engine::CompileError(
        fmt::format("cannot load kernel {}: {}", artifact.library.string(), why));
  }
  auto* fn = reinterpret_cast<KernelFunction>(::dlsym(handle, "fusebench_kernel"));
  if (fn == nullptr)
    throw engine::CompileError(
        fmt::format("kernel {} has no fusebench_kernel symbol", artifact.library.string()));
  loaded()[artifact.key] = fn;
  return fn;
}

std::string disassembly(const fs::path& library) {
  const auto log = scratch_log("objdump");
  const Output out =
      run_command({"objdump", "-d", "--no-show-raw-insn", "-C", library.string()}, log);
  std::error_code ignored;
  fs::remove(log, ignored);
  if (out.status != 0)
    throw engine::CompileError(fmt::format("objdump failed on {}: {}", library.string(), out.text));
  return out.text;
}

std::map<std::string, int> instruction_histogram(
    const fs::path& library, const std::function<bool(const std::string&)>& counts_symbol) {
  std::map<std::string, int> counts;
  std::istringstream lines(disassembly(library));
  std::string line;
  bool in_kernel = false;
  static const std::regex kSymbol(R"(^[0-9a-f]+ <(.*)>:$)");
  static const std::regex kInstruction(R"(^\s+[0-9a-f]+:\s+([a-z][a-z0-9.]*))");
  std::smatch m;
  while (std::getline(lines, line)) {
    if (std::regex_match(line, m, kSymbol)) {
      in_kernel = counts_symbol(m[1].str());
      continue;
    }
    if (in_kernel && std::regex_search(line, m, kInstruction)) ++counts[m[1].str()];
  }
  return counts;
}

std::map<std::string, int> instruction_histogram(const fs::path& library) {
  // the kernel's own code: its entry point and the functions of its anonymous namespace
  return instruction_histogram(library, [](const std::string& symbol) {
    return symbol.find("fusebench_kernel") != std::string::npos ||
           symbol.find("anonymous namespace") != std::string::npos;
  });
}

}  // namespace fusebench::cpu
