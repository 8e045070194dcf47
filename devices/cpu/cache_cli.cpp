// fusebench-cache: list, verify or clear the kernel cache and the framework devices' compile caches.
// Usage: fusebench-cache [list|verify|clear|dir] [--dir DIR]
//
// The framework caches are where the framework devices keep them (devices/bridge/worker.cpp,
// default_cache_dir): $TORCHINDUCTOR_CACHE_DIR (torch's Inductor) and $JAX_COMPILATION_CACHE_DIR
// (xla's JAX persistent cache) when set, else <kernel cache>-torch, -torch-cuda, -jax, -jax-cuda
// beside the default kernel cache.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fusebench/engine/kernel_cache.hpp"

namespace {
namespace fs = std::filesystem;

struct FrameworkCache {
  std::string device;  // the device that uses it: torch, torch:cuda, xla, xla:cuda
  std::string what;    // "Inductor", "JAX persistent"
  fs::path dir;
  bool inductor = false;
};

// The directories the framework devices use, each once (one variable may name it for both targets).
std::vector<FrameworkCache> framework_caches() {
  const fs::path kernels = fusebench::engine::KernelCache::default_dir();
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
    const char* set = std::getenv(k.env);
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
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "List, verify or clear fusebench's kernel cache ($FUSEBENCH_KERNEL_CACHE, else "
      "~/.cache/fusebench/kernels) and the framework devices' compile caches (Inductor's: "
      "$TORCHINDUCTOR_CACHE_DIR, else <kernel cache>-torch[-cuda]; JAX's: "
      "$JAX_COMPILATION_CACHE_DIR, else <kernel cache>-jax[-cuda])."};
  std::string dir = fusebench::engine::KernelCache::default_dir().string();
  app.add_option("--dir", dir, "kernel cache directory");
  auto* list = app.add_subcommand(
      "list",
      "one line per kernel: key, size, whether its artifact checks out; then each framework "
      "cache's size and entry count");
  auto* verify = app.add_subcommand(
      "verify",
      "check every kernel, every Inductor .so (ELF magic) and every JAX entry (not empty); exit 1 "
      "naming each corrupt one");
  auto* clear = app.add_subcommand("clear", "remove every cached kernel and the framework caches");
  app.add_subcommand("dir", "print the cache directory");
  app.require_subcommand(1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  fusebench::engine::KernelCache cache(dir);
  if (list->parsed()) {
    const auto entries = cache.list();
    for (const auto& e : entries)
      fmt::print("{}  {:>9} bytes  {}\n", e.key, e.bytes, e.valid ? "ok" : "CORRUPT");
    fmt::print("{} kernels in {}\n", entries.size(), cache.dir().string());
    for (const auto& f : framework_caches()) {
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
  } else if (verify->parsed()) {
    std::size_t corrupt = 0;
    const auto entries = cache.list();
    for (const auto& e : entries) {
      if (e.valid) continue;
      ++corrupt;
      fmt::print("CORRUPT kernel {} in {}: its library is missing or its SHA-256 differs\n", e.key,
                 cache.dir().string());
    }
    fmt::print("{} kernels checked in {}\n", entries.size(), cache.dir().string());
    for (const auto& f : framework_caches()) {
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
  } else if (clear->parsed()) {
    fmt::print("removed {} kernels from {}\n", cache.clear(), cache.dir().string());
    for (const auto& f : framework_caches()) {
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
