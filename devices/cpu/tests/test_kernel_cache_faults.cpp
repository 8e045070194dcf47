// The kernel cache under faults: its files removed while a kernel is built or before it is loaded
// (a cache cleared under a run), and its use lock held by a process that looked a kernel up.
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <fstream>
#include <functional>

#include <gtest/gtest.h>

#include "engine_test_support.hpp"
#include "fusebench/engine/kernel_cache.hpp"
#include "jit_compiler.hpp"

namespace fusebench {
namespace {
namespace fs = std::filesystem;

using testsupport::fresh_dir;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

void write(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

TEST(KernelCacheFaults, ACacheClearedDuringACompileIsNamedAsSuch) {
  const auto dir = fresh_dir("cleared-compiling");
  engine::KernelCache cache(dir);
  // the compiler cannot write its output: its directory went with the cache
  const std::string during = error_of([&] {
    cache.get_or_build("int a;", "cc", "cc 1",
                       [&](const fs::path& source, const fs::path&, const fs::path&) {
                         fs::remove_all(source.parent_path().parent_path());
                         throw engine::CompileError("cc: cannot open output file: No such file");
                       });
  });
  EXPECT_NE(during.find(fmt::format("kernel cache {}", dir.string())), std::string::npos) << during;
  EXPECT_NE(during.find("the cache was cleared or changed under this run"), std::string::npos)
      << during;
  EXPECT_NE(during.find("cannot open output file"), std::string::npos) << during;
  // compiled, then the cache cleared before the artifact is moved into place
  const std::string after = error_of([&] {
    cache.get_or_build("int b;", "cc", "cc 1",
                       [&](const fs::path& source, const fs::path& library, const fs::path& log) {
                         write(library,
                               "\x7f"
                               "ELF");
                         write(log, "");
                         fs::remove_all(source.parent_path().parent_path());
                       });
  });
  EXPECT_NE(after.find("the cache was cleared or changed under this run"), std::string::npos)
      << after;
  // a compiler's own failure stays a compile error, not a vanished cache
  const std::string own = error_of([&] {
    cache.get_or_build("int c;", "cc", "cc 1",
                       [&](const fs::path&, const fs::path&, const fs::path&) {
                         throw engine::CompileError("cc: error: expected ';'");
                       });
  });
  EXPECT_EQ(own, "cc: error: expected ';'");
  fs::remove_all(dir);
}

TEST(KernelCacheFaults, ALibraryGoneBeforeItsLoadNamesTheCache) {
  const auto dir = fresh_dir("cleared-loading");
  engine::CachedArtifact artifact;
  artifact.key = std::string(64, 'a');
  artifact.library = dir / "aa" / (artifact.key + ".so");
  const std::string error = error_of([&] { cpu::JitCompiler(false).load(artifact); });
  EXPECT_NE(error.find(fmt::format("the kernel cache {} was cleared or changed under this run",
                                   dir.string())),
            std::string::npos)
      << error;
}

TEST(KernelCacheFaults, AProcessThatLookedAKernelUpHoldsTheUseLockUntilItExits) {
  const auto dir = fresh_dir("use-lock");
  engine::KernelCache cache(dir);
  cache.get_or_build("int d;", "cc", "cc 1",
                     [](const fs::path&, const fs::path& library, const fs::path&) {
                       write(library,
                             "\x7f"
                             "ELF");
                     });
  // Another process (a fork: flock conflicts between processes) asks for it exclusively.
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    engine::ExclusiveCacheLock lock(dir, std::chrono::milliseconds(200));
    const std::string answer =
        lock.acquired() ? "acquired" : engine::describe_holders(lock.holders(), lock.path());
    (void)!::write(pipe_fds[1], answer.data(), answer.size());
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  std::string answer;
  char buffer[512];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0;) answer.append(buffer, n);
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_EQ(answer, fmt::format("pid {} (engine_tests)", ::getpid()));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fusebench
