#include "fusebench/engine/kernel_cache.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "fusebench/error.hpp"
#include "fusebench/hash.hpp"
#include "fusebench/npy.hpp"

namespace fusebench::engine {

namespace fs = std::filesystem;

namespace {
std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text;
}

class FileLock {
 public:
  explicit FileLock(const fs::path& path)
      : fd_(::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644)) {
    if (fd_ < 0)
      throw_input_error("kernel cache: cannot open lock {}: {}", path.string(),
                        std::strerror(errno));
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR)
        throw_input_error("kernel cache: cannot lock {}: {}", path.string(), std::strerror(errno));
    }
  }
  ~FileLock() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

bool artifact_valid(const fs::path& library, const fs::path& digest_file, std::string* sha) {
  std::error_code error;
  if (!fs::is_regular_file(library, error) || !fs::is_regular_file(digest_file, error))
    return false;
  const std::string recorded = read_text(digest_file);
  const std::string actual = sha256_file_hex(library);
  if (sha) *sha = actual;
  return !recorded.empty() && recorded == actual;
}
}  // namespace

KernelCache::KernelCache(fs::path dir) : dir_(std::move(dir)) {}

fs::path KernelCache::default_dir() {
  if (const char* env = std::getenv("FUSEBENCH_KERNEL_CACHE"); env && *env) return env;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return fs::path(xdg) / "fusebench" / "kernels";
  if (const char* home = std::getenv("HOME"); home && *home)
    return fs::path(home) / ".cache" / "fusebench" / "kernels";
  return fs::temp_directory_path() / "fusebench-kernels";
}

std::string KernelCache::key_for(const std::string& source, const std::string& command,
                                 const std::string& identity) {
  return sha256_hex(fmt::format("fusebench-kernel-cache-v{}\n{}\n{}\n{}", kKernelCacheFormatVersion,
                                identity, command, source));
}

CachedArtifact KernelCache::get_or_build(
    const std::string& source, const std::string& command, const std::string& identity,
    const std::function<void(const fs::path&, const fs::path&, const fs::path&)>& build,
    const std::string& source_extension, const std::string& artifact_extension) {
  CachedArtifact a;
  a.key = key_for(source, command, identity);
  const fs::path sub = dir_ / a.key.substr(0, 2);
  fs::create_directories(sub);
  a.source = sub / (a.key + source_extension);
  a.library = sub / (a.key + artifact_extension);
  a.log = sub / (a.key + ".log");
  const fs::path digest_file = sub / (a.key + ".sha256");
  if (artifact_valid(a.library, digest_file, &a.sha256)) {
    a.hit = true;
    return a;
  }
  FileLock lock(sub / (a.key + ".lock"));
  // Another process may have built it while we waited for the lock.
  if (artifact_valid(a.library, digest_file, &a.sha256)) {
    a.hit = true;
    return a;
  }
  // Build in a private temporary directory under the final names: the compiler records the source
  // file's name in the artifact, so a name with a PID in it would make every build differ.
  const fs::path work = sub / fmt::format("{}.tmp{}", a.key, ::getpid());
  fs::create_directories(work);
  const fs::path tmp_source = work / a.source.filename();
  const fs::path tmp_library = work / a.library.filename();
  const fs::path tmp_log = work / a.log.filename();
  write_file_atomically(tmp_source, source);
  const auto start = std::chrono::steady_clock::now();
  try {
    build(tmp_source, tmp_library, tmp_log);
  } catch (...) {
    std::error_code ignored;
    fs::rename(tmp_log, a.log, ignored);
    fs::remove_all(work, ignored);
    throw;
  }
  a.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  fs::rename(tmp_source, a.source);
  std::error_code ignored;
  fs::rename(tmp_log, a.log, ignored);
  fs::rename(tmp_library, a.library);
  fs::remove_all(work, ignored);
  a.sha256 = sha256_file_hex(a.library);
  write_file_atomically(digest_file, a.sha256);
  return a;
}

std::vector<KernelCache::Entry> KernelCache::list() const {
  std::vector<Entry> out;
  std::error_code error;
  if (!fs::is_directory(dir_, error)) return out;
  for (const auto& sub : fs::directory_iterator(dir_)) {
    if (!sub.is_directory()) continue;
    for (const auto& file : fs::directory_iterator(sub.path())) {
      if (file.path().extension() != ".so" && file.path().extension() != ".cubin") continue;
      Entry e;
      e.key = file.path().stem().string();
      e.bytes = file.file_size();
      e.valid =
          artifact_valid(file.path(), fs::path(file.path()).replace_extension(".sha256"), nullptr);
      out.push_back(e);
    }
  }
  std::sort(out.begin(), out.end(), [](const Entry& x, const Entry& y) { return x.key < y.key; });
  return out;
}

std::size_t KernelCache::clear() {
  const std::size_t count = list().size();
  std::error_code error;
  for (const auto& sub : fs::directory_iterator(dir_, error)) {
    if (sub.is_directory() && sub.path().filename().string().size() == 2)
      fs::remove_all(sub.path());
  }
  return count;
}

}  // namespace fusebench::engine
