// The on-disk, content-addressed kernel cache (after TorchInductor's codecache):
//   key  = sha256(cache format version | compiler identity | exact compiler command | source)
//   file = <dir>/<key[0:2]>/<key>.{cpp,so,log,sha256}
// Artifacts are written to a temporary file and renamed; a per-key file lock keeps two processes
// from building the same kernel at once; the artifact's SHA-256 is recorded beside it and checked
// on every hit, so a corrupt or truncated artifact is detected and rebuilt.
// Directory: $FUSEBENCH_KERNEL_CACHE, else $XDG_CACHE_HOME/fusebench/kernels, else
// ~/.cache/fusebench/kernels.
//
// The use lock, <dir>/.fusebench-cache.lock: a process that looks a kernel up holds a shared flock
// on it until it exits (the kernels it loaded stay mapped, their paths in its traces); whoever
// clears or verifies the cache (fusebench-cache) takes it exclusively, so neither happens under a
// run. Its holders are read from /proc/locks, so a killed holder leaves no stale record.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace fusebench::engine {

inline constexpr int kKernelCacheFormatVersion = 1;
inline constexpr const char* kKernelCacheUseLock = ".fusebench-cache.lock";
// Files that many kernels share, built once per compiler and flags (the CPU JIT's precompiled
// prelude): <dir>/pch/<hash>/. clear() removes the folder; list() and verification leave it out.
inline constexpr const char* kKernelCacheSharedFolder = "pch";

// An exclusive flock on `path` (created if absent) for this object's lifetime; waits for it.
class FileLock {
 public:
  explicit FileLock(const std::filesystem::path& path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

struct CachedArtifact {
  std::string key;
  std::filesystem::path source, library, log;
  std::string sha256;  // of the library
  double compile_ms = 0;
  bool hit = false;
};

// Raised when the compiler fails; what() carries its command line and output.
class CompileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class KernelCache {
 public:
  explicit KernelCache(std::filesystem::path dir = default_dir());
  static std::filesystem::path default_dir();
  const std::filesystem::path& dir() const { return dir_; }

  static std::string key_for(const std::string& source, const std::string& command,
                             const std::string& compiler_identity);

  // The artifact for this source and compiler; `build(source_path, library_path, log_path)` makes
  // it when it is absent or corrupt (the paths are temporary names, renamed on success). The file
  // name extensions default to a C++ source and a shared object (the CUDA device: ".cu", ".cubin").
  CachedArtifact get_or_build(
      const std::string& source, const std::string& command, const std::string& compiler_identity,
      const std::function<void(const std::filesystem::path&, const std::filesystem::path&,
                               const std::filesystem::path&)>& build,
      const std::string& source_extension = ".cpp", const std::string& artifact_extension = ".so");

  struct Entry {
    std::string key;
    std::uintmax_t bytes = 0;
    bool valid = false;  // library present and its SHA-256 matches
  };
  std::vector<Entry> list() const;
  // Removes the files and build directories the cache writes (<key[0:2]>/<key>.<ext>, their
  // temporaries, the shared folder) and the shard folders it empties; returns how many kernels it removed. Anything
  // else in the directory is left, and listed in `not_cache_entries` when given. The use lock is
  // not taken here: fusebench-cache takes it, and an executor clearing its own cold-start
  // directory already holds it shared.
  std::size_t clear(std::vector<std::filesystem::path>* not_cache_entries = nullptr);
  // The temporaries of builds under way or interrupted: build directories <key>.tmp<pid> and
  // files <key>.<ext>.tmp.<pid>. Not kernels: list() and verification leave them out.
  std::vector<std::filesystem::path> temporaries() const;

  // Takes the shared use lock on `dir` for the rest of the process (once per directory); waits,
  // saying so on stderr, while fusebench-cache holds it exclusively.
  static void hold_for_use(const std::filesystem::path& dir);

 private:
  std::filesystem::path dir_;
};

struct CacheLockHolder {
  int pid = 0;
  std::string command;  // its program's name (an interpreter's: with its script's)
};

// The use lock taken exclusively (fusebench-cache clear, verify), released on destruction. It
// polls for up to `wait`; when users still hold it then, acquired() is false and holders() names
// them. A directory that does not exist has no users: acquired, and nothing is created.
class ExclusiveCacheLock {
 public:
  ExclusiveCacheLock(const std::filesystem::path& dir, std::chrono::milliseconds wait);
  ~ExclusiveCacheLock();
  ExclusiveCacheLock(const ExclusiveCacheLock&) = delete;
  ExclusiveCacheLock& operator=(const ExclusiveCacheLock&) = delete;
  bool acquired() const { return acquired_; }
  const std::filesystem::path& path() const { return path_; }
  const std::vector<CacheLockHolder>& holders() const { return holders_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  bool acquired_ = false;
  std::vector<CacheLockHolder> holders_;
};

// The processes holding a flock on `lock_file` (from /proc/locks; waiters excluded), this one
// excluded.
std::vector<CacheLockHolder> flock_holders(const std::filesystem::path& lock_file);
// "pid 1234 (bench_scalar_lowering), pid 99 (python3 holder.py)"; a fallback sentence when none
// could be named.
std::string describe_holders(const std::vector<CacheLockHolder>& holders,
                             const std::filesystem::path& lock_file);

}  // namespace fusebench::engine
