// fusebench-cache: list, verify or clear the kernel cache and the framework devices' compile caches.
// Usage: fusebench-cache [--dir DIR] [list|verify|clear [--wait SECONDS]|dir]
//
// The framework caches are where the framework devices keep them (devices/bridge/worker.cpp,
// default_cache_dir): $TORCHINDUCTOR_CACHE_DIR (torch's Inductor) and $JAX_COMPILATION_CACHE_DIR
// (xla's JAX persistent cache) when set, else <kernel cache>-torch, -torch-cuda, -jax, -jax-cuda
// beside the default kernel cache. With --dir, every cache is taken from DIR alone (DIR-torch ...):
// what the environment names is not touched, so `--dir` never reaches past the directory given.
//
// clear and verify take the cache's use lock exclusively (kernel_cache.hpp): a run holds it shared,
// so they refuse (exit 75, EX_TEMPFAIL) naming its holders rather than work under a run.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "fusebench/engine/kernel_cache.hpp"
#include "fusebench/error.hpp"

namespace {
namespace fs = std::filesystem;

constexpr int kExitInUse = 75;  // EX_TEMPFAIL: a run holds the cache; try again later

struct FrameworkCache {
  std::string device;  // the device that uses it: torch, torch:cuda, xla, xla:cuda
  std::string what;    // "Inductor", "JAX persistent"
  fs::path dir;
  bool inductor = false;
};

// The directories the framework devices use, each once (one variable may name it for both targets).
// `only_beside_kernels` (--dir given): all beside `kernels`, whatever the environment says.
std::vector<FrameworkCache> framework_caches(const fs::path& kernels, bool only_beside_kernels) {
  struct Kind {
    const char* device;
    const char* what;
    const char* env;
    const char* suffix;
    bool inductor;
  };
  constexpr std::array kinds = {
      Kind{"torch", "Inductor", "TORCHINDUCTOR_CACHE_DIR", "-torch", true},
      Kind{"torch:cuda", "Inductor", "TORCHINDUCTOR_CACHE_DIR", "-torch-cuda", true},
      Kind{"xla", "JAX persistent", "JAX_COMPILATION_CACHE_DIR", "-jax", false},
      Kind{"xla:cuda", "JAX persistent", "JAX_COMPILATION_CACHE_DIR", "-jax-cuda", false}};
  std::vector<FrameworkCache> out;
  for (const Kind& k : kinds) {
    const char* set = only_beside_kernels ? nullptr : std::getenv(k.env);
    const fs::path dir =
        set != nullptr && *set != '\0' ? fs::path(set) : fs::path(kernels.string() + k.suffix);
    bool seen = false;
    for (auto& c : out) {
      if (c.dir == dir) {
        c.device += ", " + std::string(k.device);
        seen = true;
      }
    }
    if (!seen) out.push_back({k.device, k.what, dir, k.inductor});
  }
  return out;
}

struct Usage {
  std::size_t entries = 0, bytes = 0, libraries = 0;
};

// A framework cache's entries: Inductor's files (its .so libraries counted apart), JAX's cached
// executables (the <key>-cache files, not their -atime companions).
Usage usage(const FrameworkCache& cache) {
  Usage u;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(cache.dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    u.bytes += it->file_size(ec);
    const std::string name = it->path().filename().string();
    if (cache.inductor) {
      ++u.entries;
      if (it->path().extension() == ".so") ++u.libraries;
    } else if (!name.ends_with("-atime")) {
      ++u.entries;
    }
  }
  return u;
}

// Why a cached file is corrupt, or empty: an Inductor .so must start with the ELF magic; a JAX
// entry must not be empty.
std::string corruption(const FrameworkCache& cache, const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::array<char, 4> magic{};
  in.read(magic.data(), magic.size());
  if (cache.inductor) {
    if (file.extension() != ".so") return {};
    if (in.gcount() < 4 || magic != std::array<char, 4>{'\x7f', 'E', 'L', 'F'})
      return "does not start with the ELF magic (\\x7fELF): not a loadable library";
    return {};
  }
  if (file.filename().string().ends_with("-atime")) return {};
  return in.gcount() == 0 ? "is empty" : "";
}

// "left 1 file that is not a cache entry: DIR/ab/notes.txt"
std::string describe_left(const std::vector<fs::path>& left) {
  std::size_t folders = 0;
  for (const auto& p : left) {
    std::error_code ec;
    if (fs::is_directory(fs::symlink_status(p, ec))) ++folders;
  }
  const std::size_t n = left.size();
  const std::string noun = folders == 0   ? (n == 1 ? "file" : "files")
                           : folders == n ? (n == 1 ? "folder" : "folders")
                                          : "entries";
  std::string listed;
  for (std::size_t i = 0; i < n && i < 10; ++i) listed += (i ? ", " : "") + left[i].string();
  if (n > 10) listed += fmt::format(" and {} more", n - 10);
  return fmt::format("left {} {} that {} not {}: {}", n, noun, n == 1 ? "is" : "are",
                     n == 1 ? "a cache entry" : "cache entries", listed);
}

// The use lock, exclusively, for `command`; null, after saying why, when runs hold it.
std::unique_ptr<fusebench::engine::ExclusiveCacheLock> exclusive(const fs::path& dir,
                                                                 const std::string& command,
                                                                 double wait_seconds) {
  auto lock = std::make_unique<fusebench::engine::ExclusiveCacheLock>(
      dir, std::chrono::milliseconds(std::llround(wait_seconds * 1000)));
  if (lock->acquired()) return lock;
  fmt::print(stderr,
             "fusebench-cache {}: refused: the kernel cache {} is in use by {}{} (a run holds {}); "
             "nothing was {}. Run it again when the run has ended, or pass --wait SECONDS to "
             "wait for it.\n",
             command, dir.string(),
             fusebench::engine::describe_holders(lock->holders(), lock->path()),
             wait_seconds > 0 ? fmt::format(", still after waiting {} s", wait_seconds) : "",
             lock->path().string(), command == "clear" ? "removed" : "checked");
  return nullptr;
}

int run(bool list, bool verify, bool clear, const fs::path& dir, bool dir_given,
        double wait_seconds) {
  fusebench::engine::KernelCache cache(dir);
  const auto frameworks = framework_caches(dir, dir_given);
  if (dir_given) {
    std::vector<std::string> unused;
    for (const char* env :
         {"FUSEBENCH_KERNEL_CACHE", "TORCHINDUCTOR_CACHE_DIR", "JAX_COMPILATION_CACHE_DIR"}) {
      if (const char* set = std::getenv(env);
          set != nullptr && *set != '\0' && fs::path(set) != dir)
        unused.push_back(fmt::format("{}={}", env, set));
    }
    if (!unused.empty())
      fmt::print(stderr,
                 "fusebench-cache: --dir {0}: every cache is taken from it ({0}-torch, {0}-jax "
                 "...); not used: {1}\n",
                 dir.string(), fmt::join(unused, ", "));
  }
  if (list) {
    const auto entries = cache.list();
    for (const auto& e : entries)
      fmt::print("{}  {:>9} bytes  {}\n", e.key, e.bytes, e.valid ? "ok" : "CORRUPT");
    fmt::print("{} kernels in {}\n", entries.size(), cache.dir().string());
    // the folder of files the kernels share (the precompiled prelude, one per compiler and flags)
    const fs::path shared = dir / fusebench::engine::kKernelCacheSharedFolder;
    if (std::error_code ec; fs::is_directory(shared, ec)) {
      std::size_t bytes = 0, headers = 0;
      for (auto it = fs::recursive_directory_iterator(shared, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (!it->is_regular_file(ec)) continue;
        bytes += it->file_size(ec);
        if (it->path().extension() == ".gch") ++headers;
      }
      fmt::print("{} precompiled kernel preludes, {} bytes in {}\n", headers, bytes,
                 shared.string());
    }
    for (const auto& f : frameworks) {
      std::error_code ec;
      if (!fs::is_directory(f.dir, ec)) {
        fmt::print("{} cache ({}): none at {}\n", f.what, f.device, f.dir.string());
        continue;
      }
      const Usage u = usage(f);
      fmt::print("{} cache ({}): {} entries{}, {} bytes in {}\n", f.what, f.device, u.entries,
                 f.inductor ? fmt::format(" ({} .so libraries)", u.libraries) : "", u.bytes,
                 f.dir.string());
    }
  } else if (verify) {
    const auto lock = exclusive(dir, "verify", wait_seconds);
    if (!lock) return kExitInUse;
    std::size_t corrupt = 0;
    const auto entries = cache.list();
    for (const auto& e : entries) {
      if (e.valid) continue;
      ++corrupt;
      fmt::print("CORRUPT kernel {} in {}: its library is missing or its SHA-256 differs\n", e.key,
                 cache.dir().string());
    }
    fmt::print("{} kernels checked in {}\n", entries.size(), cache.dir().string());
    if (const auto temporaries = cache.temporaries(); !temporaries.empty()) {
      std::vector<std::string> names;
      for (const auto& t : temporaries) names.push_back(t.string());
      fmt::print("{} temporaries of interrupted builds, not kernels (clear removes them): {}\n",
                 temporaries.size(), fmt::join(names, ", "));
    }
    for (const auto& f : frameworks) {
      std::error_code ec;
      if (!fs::is_directory(f.dir, ec)) continue;
      std::size_t checked = 0;
      for (auto it = fs::recursive_directory_iterator(f.dir, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (!it->is_regular_file(ec)) continue;
        if (f.inductor && it->path().extension() != ".so") continue;
        ++checked;
        if (const std::string why = corruption(f, it->path()); !why.empty()) {
          ++corrupt;
          fmt::print("CORRUPT {} cache ({}) file {}: {}\n", f.what, f.device, it->path().string(),
                     why);
        }
      }
      fmt::print("{} cache ({}): {} {} checked in {}\n", f.what, f.device, checked,
                 f.inductor ? ".so libraries" : "files", f.dir.string());
    }
    if (corrupt > 0) {
      fmt::print("{} corrupt (fusebench-cache clear removes every cache)\n", corrupt);
      return 1;
    }
  } else if (clear) {
    const auto lock = exclusive(dir, "clear", wait_seconds);
    if (!lock) return kExitInUse;
    std::vector<fs::path> left;
    fmt::print("removed {} kernels from {}\n", cache.clear(&left), cache.dir().string());
    if (!left.empty()) fmt::print("{}\n", describe_left(left));
    for (const auto& f : frameworks) {
      std::error_code ec;
      if (!fs::is_directory(f.dir, ec)) continue;
      const Usage u = usage(f);
      fs::remove_all(f.dir, ec);
      if (ec) {
        fmt::print(stderr, "fusebench-cache: cannot remove the {} cache ({}) {}: {}\n", f.what,
                   f.device, f.dir.string(), ec.message());
        return 1;
      }
      fmt::print("removed the {} cache ({}): {} entries, {} bytes in {}\n", f.what, f.device,
                 u.entries, u.bytes, f.dir.string());
    }
  } else {
    fmt::print("{}\n", cache.dir().string());
  }
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "List, verify or clear fusebench's kernel cache ($FUSEBENCH_KERNEL_CACHE, else "
      "~/.cache/fusebench/kernels) and the framework devices' compile caches (Inductor's: "
      "$TORCHINDUCTOR_CACHE_DIR, else <kernel cache>-torch[-cuda]; JAX's: "
      "$JAX_COMPILATION_CACHE_DIR, else <kernel cache>-jax[-cuda]). Exit 0; 1 when verify finds a "
      "corrupt entry or a cache cannot be removed; 2 on bad input; 75 when a run holds the cache "
      "(clear and verify refuse, naming its processes, and change nothing)."};
  std::string dir = fusebench::engine::KernelCache::default_dir().string();
  auto* dir_option = app.add_option(
      "--dir", dir,
      "kernel cache directory; with it, the framework caches are DIR-torch, DIR-torch-cuda, "
      "DIR-jax, DIR-jax-cuda, and FUSEBENCH_KERNEL_CACHE, TORCHINDUCTOR_CACHE_DIR and "
      "JAX_COMPILATION_CACHE_DIR are not used");
  double wait_seconds = 0;
  auto* list = app.add_subcommand(
      "list",
      "one line per kernel: key, size, whether its artifact checks out; then each framework "
      "cache's size and entry count");
  auto* verify = app.add_subcommand(
      "verify",
      "check every kernel, every Inductor .so (ELF magic) and every JAX entry (not empty); exit 1 "
      "naming each corrupt one. Temporaries of interrupted builds are named, not counted corrupt");
  auto* clear = app.add_subcommand(
      "clear",
      "remove the kernel cache's own entries (<key[0:2]>/<key>.{cpp,cu,so,cubin,log,sha256,lock} "
      "and their temporaries), naming whatever else it leaves in DIR, and the framework caches");
  for (auto* sub : {verify, clear}) {
    sub->add_option("--wait", wait_seconds,
                    "wait up to SECONDS for runs using the cache to end (default 0: refuse at "
                    "once, exit 75, naming the processes that hold it)")
        ->check(CLI::NonNegativeNumber);
  }
  auto* print_dir = app.add_subcommand("dir", "print the cache directory");
  // `clear --dir DIR` as well as `--dir DIR clear`
  for (auto* sub : {list, verify, clear, print_dir}) sub->fallthrough();
  app.require_subcommand(1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  try {
    return run(list->parsed(), verify->parsed(), clear->parsed(), dir, dir_option->count() > 0,
               wait_seconds);
  } catch (const fusebench::InputError& e) {
    fmt::print(stderr, "fusebench-cache: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "fusebench-cache: {}\n", e.what());
    return 1;
  }
}
