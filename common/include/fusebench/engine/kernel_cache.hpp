// The on-disk, content-addressed kernel cache (after TorchInductor's codecache):
//   key  = sha256(cache format version | compiler identity | exact compiler command | source)
//   file = <dir>/<key[0:2]>/<key>.{cpp,so,log,sha256}
// Artifacts are written to a temporary file and renamed; a per-key file lock keeps two processes
// from building the same kernel at once; the artifact's SHA-256 is recorded beside it and checked
// on every hit, so a corrupt or truncated artifact is detected and rebuilt.
// Directory: $FUSEBENCH_KERNEL_CACHE, else $XDG_CACHE_HOME/fusebench/kernels, else
// ~/.cache/fusebench/kernels.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace fusebench::engine {

inline constexpr int kKernelCacheFormatVersion = 1;

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
  std::size_t clear();  // removes every entry; returns how many

 private:
  std::filesystem::path dir_;
};

}  // namespace fusebench::engine
