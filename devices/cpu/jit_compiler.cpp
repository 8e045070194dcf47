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
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string_view>

#include "cpp_renderer.hpp"
#include "fusebench/error.hpp"
#include "fusebench/hash.hpp"
#include "fusebench/npy.hpp"

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

// ---- the precompiled prelude

// The comment lines before kernel_prelude() and the text after it, when `source` is made so: g++
// uses a precompiled header only through an #include before the first token.
struct PreludeSplit {
  std::string_view before, after;
};
std::optional<PreludeSplit> split_at_prelude(std::string_view source) {
  const std::string& prelude = kernel_prelude();
  std::size_t pos = 0;
  while (pos < source.size()) {
    if (source.substr(pos).starts_with(prelude))
      return PreludeSplit{source.substr(0, pos), source.substr(pos + prelude.size())};
    const std::size_t end = source.find('\n', pos);
    if (end == std::string_view::npos) break;
    std::string_view line = source.substr(pos, end - pos);
    line.remove_prefix(std::min(line.find_first_not_of(" \t"), line.size()));
    if (!line.empty() && !line.starts_with("//")) break;
    pos = end + 1;
  }
  return std::nullopt;
}

constexpr const char* kPreludeHeader = "prelude.hpp";
constexpr const char* kPreludeLock = "prelude.lock";

std::mutex& prelude_mutex() {
  static std::mutex m;
  return m;
}
// Precompiled-prelude folders this process gave up on (said once on stderr): their kernels
// compile the whole source, rather than each paying for a build that fails again.
std::set<fs::path>& prelude_given_up() {
  static std::set<fs::path> folders;
  return folders;
}

// A .gch that g++ refused or could not read: removed (the next process builds it anew), and this
// process compiles without it.
void discard_precompiled_prelude(const fs::path& header, const std::string& why) {
  std::lock_guard guard(prelude_mutex());
  const fs::path folder = header.parent_path();
  if (!prelude_given_up().insert(folder).second) return;
  fmt::print(stderr,
             "fusebench JIT: the precompiled kernel prelude {}.gch was not usable, removed; this "
             "process compiles kernels without it. The compiler said: {}\n",
             header.string(), why);
  try {
    engine::FileLock lock(folder / kPreludeLock);
    std::error_code ignored;
    fs::remove(fs::path(header).concat(".gch"), ignored);
  } catch (const std::exception&) {
    // the cache cleared under us: nothing left to remove
  }
}
}  // namespace

std::string JitCompiler::default_compiler() {
  if (const char* env = std::getenv("FUSEBENCH_JIT_CXX"); env && *env) return env;
  return FUSEBENCH_DEFAULT_JIT_CXX;
}

bool JitCompiler::default_precompiled_prelude() {
  const char* env = std::getenv("FUSEBENCH_JIT_PCH");
  return env == nullptr || std::string_view(env) != "0";
}

JitCompiler::JitCompiler(bool fma_contraction, std::string compiler, bool precompiled_prelude)
    : compiler_(std::move(compiler)),
      fma_(fma_contraction),
      precompiled_prelude_(precompiled_prelude) {}

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

std::vector<std::string> JitCompiler::flags() const {
  std::vector<std::string> out;
  for (const std::string& a : arguments("{src}", "{out}")) {
    if (a != "-shared" && a != "-o" && a != "{src}" && a != "{out}") out.push_back(a);
  }
  return out;
}

fs::path JitCompiler::precompiled_prelude(const fs::path& cache_dir) const {
  const std::vector<std::string> args = flags();
  const std::string hash = sha256_hex(fmt::format("fusebench-jit-pch-v1\n{}\n{}\n{}", identity(),
                                                  fmt::join(args, " "), kernel_prelude()));
  const fs::path folder = fs::absolute(cache_dir) / engine::kKernelCacheSharedFolder / hash;
  const fs::path header = folder / kPreludeHeader;
  const fs::path gch = fs::path(header).concat(".gch");
  // one builder per process; the file lock orders processes
  std::lock_guard guard(prelude_mutex());
  if (prelude_given_up().contains(folder)) return {};
  std::error_code error;
  if (fs::is_regular_file(gch, error)) return header;
  try {
    fs::create_directories(folder);
    engine::FileLock lock(folder / kPreludeLock);
    if (fs::is_regular_file(gch, error)) return header;  // another process built it meanwhile
    if (!fs::is_regular_file(header, error)) write_file_atomically(header, kernel_prelude());
    // Built under a temporary name and renamed: a killed build never leaves a partial .gch that
    // kernels would try to use.
    const std::string partial = fmt::format("{}.gch.tmp.{}", kPreludeHeader, ::getpid());
    std::vector<std::string> argv = args;
    argv.insert(argv.end(), {"-x", "c++-header", kPreludeHeader, "-o", partial});
    const Output result = run_command(argv, folder / "prelude.log", folder);
    if (result.status != 0) {
      fs::remove(folder / partial, error);
      throw engine::CompileError(
          fmt::format("exit {}: {}\n{}", result.status, fmt::join(argv, " "), result.text));
    }
    fs::rename(folder / partial, gch);
    return header;
  } catch (const std::exception& e) {
    prelude_given_up().insert(folder);
    fmt::print(stderr,
               "fusebench JIT: cannot precompile the kernel prelude in {}; kernels are compiled "
               "without it: {}\n",
               folder.string(), e.what());
    return {};
  }
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
        const fs::path log_path = fs::absolute(log);
        const auto split = precompiled_prelude_ ? split_at_prelude(source) : std::nullopt;
        const fs::path header = split ? precompiled_prelude(cache.dir()) : fs::path();
        std::string first_try;  // the output of a build with the precompiled prelude that failed
        if (!header.empty()) {
          // The same text with the prelude #included (one translation unit), under the same file
          // name in a subfolder: the name is recorded in the library, which stays byte-identical
          // to the whole source's.
          const fs::path folder = src.parent_path() / "with-precompiled-prelude";
          fs::create_directories(folder);
          write_file_atomically(
              folder / src.filename(),
              fmt::format("{}#include \"{}\"\n{}", split->before, header.string(), split->after));
          auto argv = arguments(src.filename(), fs::path("..") / out.filename());
          // -Winvalid-pch: a .gch that g++ refuses says why in the build log; -H: the log names
          // the precompiled header used ("! <path>.gch"), the evidence that it was.
          argv.insert(argv.begin() + 1, {"-Winvalid-pch", "-H"});
          const Output result = run_command(argv, log_path, folder);
          if (result.text.find("PCH") != std::string::npos ||
              result.text.find("-Winvalid-pch") != std::string::npos)
            discard_precompiled_prelude(header, result.text);
          if (result.status == 0) return;
          first_try = fmt::format("with the precompiled prelude {} (exit {}):\n{}\n",
                                  header.string(), result.status, result.text);
        }
        // Relative names, run in the build directory: nothing of the path reaches the artifact.
        const auto argv = arguments(src.filename(), out.filename());
        const Output result = run_command(argv, log_path, src.parent_path());
        if (!first_try.empty())
          std::ofstream(log_path) << first_try << "compiled again, the whole source:\n"
                                  << result.text;
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
