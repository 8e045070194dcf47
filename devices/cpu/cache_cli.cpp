// fusebench-cache: list or clear the kernel cache. Usage: fusebench-cache [list|clear|dir] [--dir DIR]
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "fusebench/engine/kernel_cache.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "List or clear fusebench's kernel cache ($FUSEBENCH_KERNEL_CACHE, else "
      "~/.cache/fusebench/kernels)."};
  std::string dir = fusebench::engine::KernelCache::default_dir().string();
  app.add_option("--dir", dir, "cache directory");
  auto* list =
      app.add_subcommand("list", "one line per kernel: key, size, whether its artifact checks out");
  auto* clear = app.add_subcommand("clear", "remove every cached kernel");
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
  } else if (clear->parsed()) {
    fmt::print("removed {} kernels from {}\n", cache.clear(), cache.dir().string());
  } else {
    fmt::print("{}\n", cache.dir().string());
  }
  return 0;
}
