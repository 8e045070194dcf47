#include "fusebench/engine/kernel_cache.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string_view>
#include <thread>

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

// ---- names the cache writes

constexpr std::array kOwnExtensions = {".cpp", ".cu", ".so", ".cubin", ".log", ".sha256", ".lock"};

bool lower_hex(std::string_view text, std::size_t length) {
  return text.size() == length && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}
bool digits(std::string_view text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}
bool is_shard_name(std::string_view name) { return lower_hex(name, 2); }

enum class NameKind { foreign, kernel_file, library, temporary };

// What a name inside the shard folder `shard` is to the cache: <key>.<ext> (the library: .so or
// .cubin), write_file_atomically's <key>.<ext>.tmp.<pid>, or the build directory <key>.tmp<pid>.
NameKind classify(std::string_view shard, std::string_view name, bool is_directory) {
  if (name.size() < 64 || !lower_hex(name.substr(0, 64), 64) || name.substr(0, 2) != shard)
    return NameKind::foreign;
  const std::string_view rest = name.substr(64);
  if (is_directory)
    return rest.starts_with(".tmp") && digits(rest.substr(4)) ? NameKind::temporary
                                                              : NameKind::foreign;
  for (std::string_view ext : kOwnExtensions) {
    if (rest == ext)
      return ext == ".so" || ext == ".cubin" ? NameKind::library : NameKind::kernel_file;
    if (rest.starts_with(ext) && rest.substr(ext.size()).starts_with(".tmp.") &&
        digits(rest.substr(ext.size() + 5)))
      return NameKind::temporary;
  }
  return NameKind::foreign;
}

bool real_directory(const fs::directory_entry& entry) {
  std::error_code error;
  return entry.symlink_status(error).type() == fs::file_type::directory;
}

// The cache's shard folders (two lowercase hex digits, not links), in name order.
std::vector<fs::path> shards(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code error;
  if (!fs::is_directory(dir, error)) return out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (real_directory(entry) && is_shard_name(entry.path().filename().string()))
      out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// ---- the use lock

std::string program_of(int pid) {
  std::ifstream in(fmt::format("/proc/{}/cmdline", pid), std::ios::binary);
  std::vector<std::string> argv;
  for (std::string arg; std::getline(in, arg, '\0');) argv.push_back(arg);
  if (argv.empty()) return {};
  std::string name = fs::path(argv[0]).filename().string();
  // an interpreter: its script (python3 holder.py), or `-c` / `-m module`
  if ((name.starts_with("python") || name == "bash" || name == "sh") && argv.size() > 1) {
    const bool flag = argv[1] == "-c" || argv[1] == "-m";
    name += " " + (flag && argv.size() > 2 && argv[1] == "-m" ? argv[1] + " " + argv[2]
                   : flag                                     ? argv[1]
                          : fs::path(argv[1]).filename().string());
  }
  return name;
}

void flock_or_throw(int fd, int operation, const fs::path& path) {
  while (::flock(fd, operation) != 0) {
    if (errno != EINTR)
      throw_input_error("kernel cache: cannot lock {}: {}", path.string(), std::strerror(errno));
  }
}

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

FileLock::FileLock(const fs::path& path)
    : fd_(::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644)) {
  if (fd_ < 0)
    throw_input_error("kernel cache: cannot open lock {}: {}", path.string(), std::strerror(errno));
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno != EINTR) {
      const int error = errno;
      ::close(fd_);  // the destructor does not run for a constructor that throws
      throw_input_error("kernel cache: cannot lock {}: {}", path.string(), std::strerror(error));
    }
  }
}

FileLock::~FileLock() {
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
}

std::vector<CacheLockHolder> flock_holders(const fs::path& lock_file) {
  std::vector<CacheLockHolder> out;
  struct stat st {};
  if (::stat(lock_file.c_str(), &st) != 0) return out;
  // /proc/locks: "1: FLOCK  ADVISORY  READ 3726 fe:00:10953108 0 EOF"; a waiter's: "1: -> FLOCK ..."
  const std::string device_inode =
      fmt::format("{:02x}:{:02x}:{}", major(st.st_dev), minor(st.st_dev), st.st_ino);
  std::ifstream locks("/proc/locks");
  for (std::string line; std::getline(locks, line);) {
    std::istringstream fields(line);
    std::string number, kind, advisory, mode, where;
    int pid = 0;
    if (!(fields >> number >> kind) || kind != "FLOCK") continue;  // "->": a waiter
    if (!(fields >> advisory >> mode >> pid >> where) || where != device_inode) continue;
    if (pid == ::getpid() || pid <= 0) continue;
    if (std::none_of(out.begin(), out.end(), [&](const auto& h) { return h.pid == pid; }))
      out.push_back({pid, program_of(pid)});
  }
  return out;
}

std::string describe_holders(const std::vector<CacheLockHolder>& holders,
                             const fs::path& lock_file) {
  if (holders.empty())
    return fmt::format("another process (none listed in /proc/locks for {})", lock_file.string());
  std::vector<std::string> named;
  for (const auto& h : holders)
    named.push_back(h.command.empty() ? fmt::format("pid {}", h.pid)
                                      : fmt::format("pid {} ({})", h.pid, h.command));
  return fmt::format("{}", fmt::join(named, ", "));
}

ExclusiveCacheLock::ExclusiveCacheLock(const fs::path& dir, std::chrono::milliseconds wait)
    : path_(dir / kKernelCacheUseLock) {
  std::error_code error;
  if (!fs::is_directory(dir, error)) {
    acquired_ = true;
    return;
  }
  fd_ = ::open(path_.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw_input_error("kernel cache: cannot open its use lock {}: {}", path_.string(),
                      std::strerror(errno));
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (true) {
    if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) {
      acquired_ = true;
      return;
    }
    if (errno != EWOULDBLOCK && errno != EINTR) {
      const int error = errno;
      ::close(fd_);  // the destructor does not run for a constructor that throws
      throw_input_error("kernel cache: cannot lock {}: {}", path_.string(), std::strerror(error));
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  holders_ = flock_holders(path_);
}

ExclusiveCacheLock::~ExclusiveCacheLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

void KernelCache::hold_for_use(const fs::path& dir) {
  static std::mutex mutex;
  static std::map<fs::path, int> held;  // descriptors kept open: the lock lasts until exit
  std::lock_guard guard(mutex);
  fs::create_directories(dir);
  const fs::path canonical = fs::weakly_canonical(dir);
  if (held.contains(canonical)) return;
  const fs::path path = canonical / kKernelCacheUseLock;
  const int fd = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (fd < 0)
    throw_input_error("kernel cache: cannot open its use lock {}: {}", path.string(),
                      std::strerror(errno));
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0) {
    fmt::print(stderr, "kernel cache {}: waiting for {} to finish with it (fusebench-cache)\n",
               canonical.string(), describe_holders(flock_holders(path), path));
    flock_or_throw(fd, LOCK_SH, path);
  }
  held.emplace(canonical, fd);
}

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

namespace {
// Why a build failed when its files went away under it: the cache was cleared or changed while
// this process used it.
[[noreturn]] void throw_vanished(const fs::path& dir, const std::string& key,
                                 const std::string& what) {
  throw CompileError(fmt::format(
      "kernel cache {}: kernel {}'s files vanished while it was being built: the cache was "
      "cleared or changed under this run (fusebench-cache clear refuses while a run holds {}; "
      "something else removed them). Underlying error: {}",
      dir.string(), key, (dir / kKernelCacheUseLock).string(), what));
}
}  // namespace

CachedArtifact KernelCache::get_or_build(
    const std::string& source, const std::string& command, const std::string& identity,
    const std::function<void(const fs::path&, const fs::path&, const fs::path&)>& build,
    const std::string& source_extension, const std::string& artifact_extension) {
  hold_for_use(dir_);
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
  // Build in a private temporary directory under the final names: the compiler records the source
  // file's name in the artifact, so a name with a PID in it would make every build differ.
  const fs::path work = sub / fmt::format("{}.tmp{}", a.key, ::getpid());
  bool work_created = false;
  try {
    FileLock lock(sub / (a.key + ".lock"));
    // Another process may have built it while we waited for the lock.
    if (artifact_valid(a.library, digest_file, &a.sha256)) {
      a.hit = true;
      return a;
    }
    fs::create_directories(work);
    work_created = true;
    const fs::path tmp_source = work / a.source.filename();
    const fs::path tmp_library = work / a.library.filename();
    const fs::path tmp_log = work / a.log.filename();
    write_file_atomically(tmp_source, source);
    const auto start = std::chrono::steady_clock::now();
    try {
      build(tmp_source, tmp_library, tmp_log);
    } catch (...) {
      std::error_code ignored;
      // a compiler that could not write its output because its directory was removed
      const bool vanished = !fs::is_directory(work, ignored);
      fs::rename(tmp_log, a.log, ignored);
      fs::remove_all(work, ignored);
      if (vanished) {
        try {
          throw;
        } catch (const std::exception& e) {
          throw_vanished(dir_, a.key, e.what());
        }
      }
      throw;
    }
    a.compile_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    // The digest goes in before the library, so that a library in place always has its digest
    // beside it (verify never sees a finished library without one).
    a.sha256 = sha256_file_hex(tmp_library);
    fs::rename(tmp_source, a.source);
    std::error_code ignored;
    fs::rename(tmp_log, a.log, ignored);
    write_file_atomically(digest_file, a.sha256);
    fs::rename(tmp_library, a.library);
    fs::remove_all(work, ignored);
  } catch (const CompileError&) {
    throw;  // the compiler's own failure, or already explained
  } catch (const std::exception& e) {
    std::error_code error;
    if (!fs::is_directory(sub, error) || (work_created && !fs::is_directory(work, error)))
      throw_vanished(dir_, a.key, e.what());
    throw;
  }
  return a;
}

std::vector<KernelCache::Entry> KernelCache::list() const {
  std::vector<Entry> out;
  for (const fs::path& sub : shards(dir_)) {
    const std::string shard = sub.filename().string();
    for (const auto& file : fs::directory_iterator(sub)) {
      if (real_directory(file) ||
          classify(shard, file.path().filename().string(), false) != NameKind::library)
        continue;
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

std::vector<fs::path> KernelCache::temporaries() const {
  std::vector<fs::path> out;
  for (const fs::path& sub : shards(dir_)) {
    const std::string shard = sub.filename().string();
    for (const auto& entry : fs::directory_iterator(sub)) {
      if (classify(shard, entry.path().filename().string(), real_directory(entry)) ==
          NameKind::temporary)
        out.push_back(entry.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::size_t KernelCache::clear(std::vector<fs::path>* not_cache_entries) {
  std::size_t kernels = 0;
  std::vector<fs::path> left;
  std::error_code error;
  if (!fs::is_directory(dir_, error)) return 0;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    const std::string name = entry.path().filename().string();
    if (name == kKernelCacheUseLock) continue;  // others may be waiting on this very file
    if (name == kKernelCacheSharedFolder && real_directory(entry)) {
      fs::remove_all(entry.path());
      continue;
    }
    if (!real_directory(entry) || !is_shard_name(name)) {
      left.push_back(entry.path());
      continue;
    }
    bool emptied = true;
    for (const auto& file : fs::directory_iterator(entry.path())) {
      const NameKind kind = classify(name, file.path().filename().string(), real_directory(file));
      if (kind == NameKind::foreign) {
        left.push_back(file.path());
        emptied = false;
        continue;
      }
      fs::remove_all(file.path());
      if (kind == NameKind::library) ++kernels;
    }
    if (emptied) fs::remove(entry.path());
  }
  std::sort(left.begin(), left.end());
  if (not_cache_entries) *not_cache_entries = std::move(left);
  return kernels;
}

}  // namespace fusebench::engine
