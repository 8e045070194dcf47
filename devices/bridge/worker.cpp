// The bridge's transport: the Python interpreter, the worker process (fork and exec, JSON lines over
// pipes) or a session with a run's worker server (a Unix socket), inputs staged as .npy files in
// shared memory, and the worker each device shares within a process.
#include "bridge.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "fusebench/engine/kernel_cache.hpp"
#include "fusebench/engine/recoveries.hpp"
#include "fusebench/error.hpp"
#include "fusebench/hash.hpp"
#include "fusebench/npy.hpp"

extern char** environ;

namespace fusebench::framework {

namespace fs = std::filesystem;

// A device name as it appears in file names: "torch:cuda/aot_eager" -> "torch-cuda-aot_eager".
std::string device_file_name(std::string device) {
  for (char& c : device) c = c == ':' || c == '/' ? '-' : c;
  return device;
}

// ---- the interpreter
fs::path python_executable() {
  if (const char* chosen = std::getenv("FUSEBENCH_PYTHON"); chosen != nullptr && *chosen != '\0') {
    std::error_code ec;
    if (!fs::is_regular_file(chosen, ec) || ::access(chosen, X_OK) != 0) {
      throw_input_error(
          "FUSEBENCH_PYTHON={}: not an executable file (name a Python interpreter, e.g. "
          "/path/to/venv/bin/python)",
          chosen);
    }
    return chosen;
  }
  return fs::path(FUSEBENCH_SOURCE_DIR) / ".venv" / "bin" / "python";
}

// ---- the worker process
namespace {
std::atomic<int> worker_serial{0};

std::string python_origin() {
  const char* chosen = std::getenv("FUSEBENCH_PYTHON");
  return chosen != nullptr && *chosen != '\0' ? fmt::format("FUSEBENCH_PYTHON={}", chosen)
                                              : "the project's .venv";
}

// How a worker process starts: its standard streams, and whether it leads a process group of its
// own (a run's server, which outlives the suite that starts it).
struct ChildStreams {
  int stdin_fd = -1, stdout_fd = -1;         // dup2'd onto 0 and 1 when set
  const char* stdin_path = nullptr;          // else opened read-only onto 0 when set
  const char* stderr_append_path = nullptr;  // opened for appending onto 2 when set
  bool own_process_group = false;
};

// fork and exec of args[0] with exactly these arguments and environment; 0 or the error number.
// The child dies with the thread that starts it (PR_SET_PDEATHSIG, SIGKILL) until the worker's
// Python disarms that and watches its parent or its run's owner itself (fusebench_worker.py): a
// suite killed while its worker starts, perhaps inside a FUSEBENCH_PYTHON wrapper that never
// reaches Python, leaves no worker behind. posix_spawn cannot set a parent-death signal; between
// fork and exec only async-signal-safe calls are made, on arrays built before the fork.
int spawn_process(pid_t& pid, const std::vector<std::string>& args,
                  const std::vector<std::string>& env_entries, const ChildStreams& streams) {
  std::vector<char*> argv, envp;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env_entries) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  int exec_error[2];  // the child's errno when exec fails; closed by a successful exec
  if (::pipe2(exec_error, O_CLOEXEC) != 0) return errno;
  const pid_t parent = ::getpid();
  pid = ::fork();
  if (pid < 0) {
    const int error = errno;
    ::close(exec_error[0]);
    ::close(exec_error[1]);
    return error;
  }
  if (pid == 0) {
    const auto fail = [&](int error) {
      (void)!::write(exec_error[1], &error, sizeof error);
      ::_exit(127);
    };
    if (streams.own_process_group && ::setpgid(0, 0) != 0) fail(errno);
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(errno);
    if (::getppid() != parent) ::_exit(127);  // the parent died before the signal was armed
    if (streams.stdin_fd >= 0 && ::dup2(streams.stdin_fd, STDIN_FILENO) < 0) fail(errno);
    if (streams.stdin_fd < 0 && streams.stdin_path != nullptr) {
      const int fd = ::open(streams.stdin_path, O_RDONLY);
      if (fd < 0 || ::dup2(fd, STDIN_FILENO) < 0) fail(errno);
    }
    if (streams.stdout_fd >= 0 && ::dup2(streams.stdout_fd, STDOUT_FILENO) < 0) fail(errno);
    if (streams.stderr_append_path != nullptr) {
      const int fd = ::open(streams.stderr_append_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd < 0 || ::dup2(fd, STDERR_FILENO) < 0) fail(errno);
    }
    ::execve(argv[0], argv.data(), envp.data());
    fail(errno);
  }
  if (streams.own_process_group) ::setpgid(pid, pid);  // also here: no window where it has none
  ::close(exec_error[1]);
  int error = 0;
  ssize_t n;
  while ((n = ::read(exec_error[0], &error, sizeof error)) < 0 && errno == EINTR) {
  }
  ::close(exec_error[0]);
  if (n == sizeof error) {
    ::waitpid(pid, nullptr, 0);
    pid = -1;
    return error;
  }
  return 0;
}

// A wait on the worker, bounded by seconds from an environment variable (InputError naming it when it is
// not a number of seconds).
std::chrono::milliseconds timeout_from(const char* variable, double default_seconds) {
  const char* text = std::getenv(variable);
  if (text == nullptr || *text == '\0')
    return std::chrono::milliseconds(static_cast<long long>(default_seconds * 1000));
  char* end = nullptr;
  errno = 0;
  const double seconds = std::strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !(seconds > 0) || seconds > 86400) {
    throw_input_error("{}={}: expected seconds, a number above 0 (at most 86400)", variable, text);
  }
  return std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
}

std::string seconds_text(std::chrono::milliseconds duration) {
  return fmt::format("{:g} s", double(duration.count()) / 1000);
}

// The last `lines` lines of a log file, or why there are none.
std::string log_tail(const fs::path& path, std::size_t lines) {
  std::ifstream log(path);
  if (!log) return fmt::format("(cannot read {})", path.string());
  std::vector<std::string> kept;
  for (std::string line; std::getline(log, line);) {
    kept.push_back(std::move(line));
    if (kept.size() > lines) kept.erase(kept.begin());
  }
  if (kept.empty()) return "(empty)";
  return fmt::format("{}", fmt::join(kept, "\n"));
}
}  // namespace

Worker::Worker(const FrameworkSpec& spec, std::map<std::string, std::string> env, bool serverable)
    : device_(spec.device),
      framework_(spec.framework),
      pip_install_(spec.pip_install),
      restartable_(serverable) {
  python_ = python_executable();
  if (!fs::exists(python_)) {
    unavailable_ = fmt::format("no Python at {} (run tools/bootstrap, or set FUSEBENCH_PYTHON)",
                               python_.string());
    return;
  }
  scratch_ = fs::path("/dev/shm").string().empty() || !fs::is_directory("/dev/shm")
                 ? fs::temp_directory_path()
                 : fs::path("/dev/shm");
  scratch_ /=
      fmt::format("fusebench-{}-{}-{}", ::getpid(), device_file_name(spec.device), worker_serial++);
  fs::create_directories(scratch_);

  const std::string worker_script =
      (fs::path(FUSEBENCH_BRIDGE_DIR) / "fusebench_worker.py").string();
  args_ = {python_.string(), "-u",       worker_script, "--backend", spec.backend, "--backend-dir",
           spec.backend_dir, "--target", spec.target};
  if (!spec.compile_backend.empty())
    args_.insert(args_.end(), {"--compile-backend", spec.compile_backend});
  std::map<std::string, std::string> environment;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const auto eq = entry.find('=');
    if (eq != std::string::npos) environment[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const auto& [k, v] : spec.worker_env_defaults) environment.try_emplace(k, v);
  for (auto& [k, v] : env) environment[k] = v;
  environment.erase("PYTHONHOME");  // a named interpreter finds its own standard library
  for (auto& [k, v] : environment) env_entries_.push_back(k + "=" + v);

  const char* server_dir = std::getenv("FUSEBENCH_WORKER_DIR");
  if (serverable && server_dir != nullptr && *server_dir != '\0') {
    server_dir_ = server_dir;
    // The server's identity: its command line and the variables this Worker sets; the rest of its
    // environment is the run's, from the process that started it.
    identity_ = fmt::format("{}", fmt::join(args_, "\n"));
    for (const auto& [k, v] : env) identity_ += fmt::format("\n{}={}", k, v);
  }
  start();
}

// What a worker is waited for, and for how long: its start (the framework's import: torch takes ten seconds
// here, more on a cold disk) or a request's answer (a compile, or task A's repeated runs: minutes at the full
// profile). Every quarter of the time a line says the wait goes on (a run otherwise looks hung).
struct WaitKind {
  const char* variable;
  double default_seconds;
  const char* still;  // "is still starting", "has not answered"
  const char* hint;   // what may need more time
};
constexpr WaitKind kWorkerStart{"FUSEBENCH_WORKER_START_TIMEOUT", 120, "is still starting",
                                "a slow framework import may need more"};
constexpr WaitKind kWorkerAnswer{"FUSEBENCH_WORKER_REQUEST_TIMEOUT", 7200, "has not answered",
                                 "a larger graph or more repeated runs may need more"};

class WaitClock {
 public:
  WaitClock(std::string device, std::string command, const WaitKind& kind = kWorkerStart)
      : device_(std::move(device)),
        command_(std::move(command)),
        kind_(kind),
        timeout_(timeout_from(kind.variable, kind.default_seconds)),
        started_(std::chrono::steady_clock::now()),
        next_report_(started_ + timeout_ / 4) {}

  bool expired() const { return std::chrono::steady_clock::now() >= started_ + timeout_; }
  // How long the next poll may block: until the next progress line or the deadline, 250 ms at most.
  int poll_ms() const {
    const auto now = std::chrono::steady_clock::now();
    const auto until = std::min(next_report_, started_ + timeout_) - now;
    return int(std::clamp<long long>(
        std::chrono::duration_cast<std::chrono::milliseconds>(until).count(), 1, 250));
  }
  void report_progress(const std::string& what) {
    const auto now = std::chrono::steady_clock::now();
    if (now < next_report_) return;
    next_report_ += timeout_ / 4;
    fmt::print(stderr, "fusebench: {}: {} {} after {:.3g} s ({}); it is given {} ({})\n", device_,
               what, kind_.still, double(elapsed().count()) / 1000, command_,
               seconds_text(timeout_), kind_.variable);
    std::fflush(stderr);
  }
  std::string timeout_text() const {
    return fmt::format("{} ({}; {})", seconds_text(timeout_), kind_.variable, kind_.hint);
  }
  const std::string& command() const { return command_; }

 private:
  std::chrono::milliseconds elapsed() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 started_);
  }
  std::string device_, command_;
  WaitKind kind_;
  std::chrono::milliseconds timeout_;
  std::chrono::steady_clock::time_point started_, next_report_;
};

void Worker::start() {
  WaitClock clock(device_, fmt::format("{}", fmt::join(args_, " ")));
  pid_t starting = -1;  // the process whose hello this waits for (its own process group)
  if (!server_dir_.empty()) {
    socket_fd_ = connect_to_server(server_dir_, identity_, args_, env_entries_, clock);
    session_ = true;
    to_worker_ = ::fdopen(::dup(socket_fd_), "w");
    from_worker_ = ::fdopen(::dup(socket_fd_), "r");
  } else {
    int in_pipe[2], out_pipe[2];
    if (::pipe2(in_pipe, O_CLOEXEC) != 0 || ::pipe2(out_pipe, O_CLOEXEC) != 0) {
      throw FrameworkError(fmt::format("{}: cannot create pipes for the Python worker: {}", device_,
                                       std::strerror(errno)));
    }
    // the worker watches this process and exits when it is gone (fusebench_worker.py)
    std::vector<std::string> env_entries = env_entries_;
    env_entries.push_back(fmt::format("FUSEBENCH_WORKER_PARENT={}", ::getpid()));
    ChildStreams streams;
    streams.stdin_fd = in_pipe[0];
    streams.stdout_fd = out_pipe[1];
    streams.own_process_group = true;  // killed as a whole when it does not start: a wrapper too
    const int spawned = spawn_process(pid_, args_, env_entries, streams);
    ::close(in_pipe[0]);
    ::close(out_pipe[1]);
    if (spawned != 0) {
      ::close(in_pipe[1]);
      ::close(out_pipe[0]);
      pid_ = -1;
      throw InputError(fmt::format("{}: cannot start {} ({}): {}", device_, python_.string(),
                                   python_origin(), std::strerror(spawned)));
    }
    starting = pid_;
    to_worker_ = ::fdopen(in_pipe[1], "w");
    from_worker_ = ::fdopen(out_pipe[0], "r");
  }

  // The hello: a line, or the end of the stream (read_reply says which), within the start timeout.
  // A server that listens has imported its framework, but it serves one session at a time.
  for (;;) {
    pollfd ready{::fileno(from_worker_), POLLIN, 0};
    const int polled = ::poll(&ready, 1, clock.poll_ms());
    if (polled > 0 || (polled < 0 && errno != EINTR)) break;
    if (clock.expired()) {
      if (starting > 0) {
        ::kill(-starting, SIGKILL);
        ::waitpid(starting, nullptr, 0);
        pid_ = -1;
      }
      close_connection();
      session_ = false;
      throw FrameworkError(
          fmt::format("{}: the Python worker `{}` ({}) did not say hello within {}{}", device_,
                      clock.command(), python_origin(), clock.timeout_text(),
                      starting > 0 ? "; killed it"
                                   : fmt::format("; its server's log {}", server_log_.string())));
    }
    clock.report_progress(starting > 0 ? "the Python worker"
                                       : "the session with the worker server");
  }

  nlohmann::json hello;
  try {
    hello = read_reply();
  } catch (const FrameworkError& e) {
    throw InputError(fmt::format("{}: {} ({}) did not start fusebench's worker: {}", device_,
                                 python_.string(), python_origin(), e.what()));
  }
  unavailable_.clear();
  if (!hello.value("ready", false) && hello.contains("target_error")) {
    unavailable_ = fmt::format("{} imports, but cannot run device {} here: {}", framework_, device_,
                               hello["target_error"].get<std::string>());
  } else if (!hello.value("ready", false)) {
    unavailable_ = fmt::format(
        "{} cannot be imported by {} ({}: {}): install it with `{} -m pip install {}` "
        "(tools/bootstrap "
        "installs the pinned version into .venv)",
        framework_, python_.string(), python_origin(), hello.value("error", std::string("?")),
        python_.string(), pip_install_);
  } else {
    version_ = hello.value("version", std::string());
  }
}

int Worker::connect_to_server(const fs::path& server_dir, const std::string& identity,
                              std::vector<std::string> args, std::vector<std::string> env_entries,
                              WaitClock& clock) {
  const std::string stem =
      fmt::format("{}-{}", device_file_name(device_), sha256_hex(identity).substr(0, 12));
  const fs::path socket_path = server_dir / (stem + ".sock");
  server_log_ = server_dir / (stem + ".log");
  server_pidfile_ = server_dir / (stem + ".pid");
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (socket_path.string().size() >= sizeof(address.sun_path)) {
    throw_input_error("FUSEBENCH_WORKER_DIR={}: too long for a Unix socket's path ({} of {} bytes)",
                      server_dir.string(), socket_path.string().size(),
                      sizeof(address.sun_path) - 1);
  }
  std::strcpy(address.sun_path, socket_path.c_str());
  auto try_connect = [&]() {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0)
      return fd;
    if (fd >= 0) ::close(fd);
    return -1;
  };
  // One process starts the server; the others wait on the lock (as long as a start may take) and
  // then find it listening.
  const fs::path lock_path = server_dir / (stem + ".lock");
  const int lock = ::open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  if (lock < 0) {
    throw_input_error("FUSEBENCH_WORKER_DIR={}: cannot create {}: {}", server_dir.string(),
                      lock_path.string(), std::strerror(errno));
  }
  struct Unlock {
    int fd;
    ~Unlock() { ::close(fd); }  // closing the descriptor releases the lock
  } unlock{lock};
  while (::flock(lock, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      throw FrameworkError(
          fmt::format("{}: cannot lock {}: {}", device_, lock_path.string(), std::strerror(errno)));
    }
    if (clock.expired()) {
      throw FrameworkError(fmt::format(
          "{}: another process of this run held {} (starting the worker server `{}`) for more "
          "than {}; its log {}",
          device_, lock_path.string(), clock.command(), clock.timeout_text(),
          server_log_.string()));
    }
    clock.report_progress("the worker server (started by another process of this run)");
    std::this_thread::sleep_for(std::chrono::milliseconds(clock.poll_ms()));
  }
  if (const int fd = try_connect(); fd >= 0) return fd;

  args.insert(args.end(), {"--serve", socket_path.string()});
  env_entries.push_back(fmt::format("FUSEBENCH_WORKER_PIDFILE={}", server_pidfile_.string()));
  // Its stderr outlives the process that starts it (perhaps a listing whose stderr is parsed):
  // a log beside the socket, which tools/run relays to its own stderr after each suite.
  const fs::path log_path = server_dir / (stem + ".log");
  ChildStreams streams;
  streams.stdin_path = "/dev/null";
  streams.stderr_append_path = log_path.c_str();
  streams.own_process_group = true;  // it outlives this suite; tools/run stops its group at the end
  pid_t server = -1;
  const int spawned = spawn_process(server, args, env_entries, streams);
  if (spawned != 0) {
    throw InputError(fmt::format("{}: cannot start the worker server {} ({}): {}", device_, args[0],
                                 python_origin(), std::strerror(spawned)));
  }
  server_pid_ = server;
  {
    // The server writes its pidfile once it listens; written here too, so that tools/run can stop
    // one that never gets there (a FUSEBENCH_PYTHON wrapper that hangs before Python).
    std::ofstream pidfile(server_pidfile_);
    pidfile << server << "\n";
  }
  // It listens once the framework is imported: seconds (torch about ten here).
  for (;;) {
    if (const int fd = try_connect(); fd >= 0) return fd;
    int status = 0;
    if (::waitpid(server, &status, WNOHANG) == server) {
      server_pid_ = -1;
      std::ifstream log(log_path);
      std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
      if (text.size() > 2000) text = "..." + text.substr(text.size() - 2000);
      throw InputError(fmt::format(
          "{}: the worker server ({} {}) exited with status {} before it listened on {}; {}: {}",
          device_, args[0], python_origin(),
          WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), socket_path.string(),
          log_path.string(), text));
    }
    if (clock.expired()) {
      ::kill(-server, SIGKILL);
      ::waitpid(server, nullptr, 0);
      server_pid_ = -1;
      std::error_code ec;
      fs::remove(server_pidfile_, ec);
      throw FrameworkError(fmt::format(
          "{}: the worker server `{}` ({}) did not listen on {} within {}; killed it; its log {}: "
          "{}",
          device_, clock.command(), python_origin(), socket_path.string(), clock.timeout_text(),
          log_path.string(), log_tail(log_path, 10)));
    }
    clock.report_progress("the worker server");
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(clock.poll_ms(), 20)));
  }
}

Worker::~Worker() {
  if (to_worker_ != nullptr && death_.empty()) {
    // The session's compile counts go to this process's $FUSEBENCH_WORKER_STATS (a server has
    // the environment of the process that started it); the reply comes once they are written.
    nlohmann::json quit = {{"cmd", "quit"}};
    if (const char* stats = std::getenv("FUSEBENCH_WORKER_STATS"); stats != nullptr && *stats)
      quit["stats"] = stats;
    if (send_line(quit.dump() + "\n") && from_worker_ != nullptr) {
      char* line = nullptr;
      std::size_t capacity = 0;
      (void)::getline(&line, &capacity, from_worker_);
      std::free(line);
    }
  }
  close_connection();
  std::error_code ec;
  if (!scratch_.empty()) fs::remove_all(scratch_, ec);
}

bool Worker::send_line(const std::string& text) {
  if (!session_) return std::fputs(text.c_str(), to_worker_) >= 0 && std::fflush(to_worker_) == 0;
  // a server that went away must not kill this process with SIGPIPE
  for (std::size_t sent = 0; sent < text.size();) {
    const ssize_t n = ::send(socket_fd_, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += std::size_t(n);
  }
  return true;
}

void Worker::close_connection() {
  if (to_worker_ != nullptr) std::fclose(to_worker_);
  if (from_worker_ != nullptr) std::fclose(from_worker_);
  to_worker_ = from_worker_ = nullptr;
  if (socket_fd_ >= 0) ::close(socket_fd_);
  socket_fd_ = -1;
  if (pid_ > 0) {
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  pid_ = -1;
}

namespace {
// The worker's stream ended: it died (or closed the session).
class WorkerGone : public FrameworkError {
 public:
  using FrameworkError::FrameworkError;
};

std::string exit_status_text(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status),
                       strsignal(WTERMSIG(status)));
  return fmt::format("ended with wait status {}", status);
}

// Whether process `pid` still runs (a zombie does not).
bool process_running(pid_t pid) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string text;
  if (!stat || !std::getline(stat, text)) return ::kill(pid, 0) == 0;
  const auto paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] != 'Z';
}
}  // namespace

std::string Worker::describe_exit() {
  if (session_) {
    std::string how;
    if (server_pid_ > 0) {
      // this process started it: its exit status is ours to read (its socket closes a moment
      // before the process is reapable)
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      int status = 0;
      for (;;) {
        if (::waitpid(server_pid_, &status, WNOHANG) == server_pid_) {
          how = fmt::format("(pid {}) {}", server_pid_, exit_status_text(status));
          server_pid_ = -1;
          break;
        }
        if (std::chrono::steady_clock::now() > deadline) {
          how = fmt::format("(pid {}) closed the session and still runs", server_pid_);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    } else {
      pid_t pid = -1;
      std::ifstream pidfile(server_pidfile_);
      if (pidfile >> pid && pid > 0) {
        how = process_running(pid)
                  ? fmt::format("(pid {}) closed the session and still runs", pid)
                  : fmt::format(
                        "(pid {}) is gone (another process started it; its exit status is "
                        "that process's)",
                        pid);
      } else {
        how = "is gone (no pidfile names it)";
      }
    }
    return fmt::format(
        "the run's worker server {} during this request; the last lines of its log {}:\n{}", how,
        server_log_.string(), log_tail(server_log_, 20));
  }
  int status = 0;
  if (pid_ > 0 && ::waitpid(pid_, &status, 0) == pid_) {
    pid_ = -1;
    if (WIFEXITED(status))
      return fmt::format("the Python worker exited with status {} (its stderr is above)",
                         WEXITSTATUS(status));
    if (WIFSIGNALED(status))
      return fmt::format("the Python worker was killed by signal {} ({})", WTERMSIG(status),
                         strsignal(WTERMSIG(status)));
  }
  return "the Python worker closed its pipe";
}

std::string Worker::stop_unanswering_worker(const std::string& timeout_text) {
  // Its own process group: the worker and whatever it started (a wrapper's children too).
  pid_t stopped = pid_;
  if (session_ && stopped <= 0) {
    stopped = server_pid_;
    std::ifstream pidfile(server_pidfile_);
    if (stopped <= 0 && !(pidfile >> stopped)) stopped = -1;
  }
  if (stopped > 0) {
    ::kill(-stopped, SIGKILL);
    ::kill(stopped, SIGKILL);
    if (stopped == pid_ || stopped == server_pid_) ::waitpid(stopped, nullptr, 0);
    if (stopped == pid_) pid_ = -1;
    if (stopped == server_pid_) server_pid_ = -1;
  }
  return fmt::format("the Python worker{} gave no answer within {}; {}", session_ ? " server" : "",
                     timeout_text,
                     stopped > 0 ? fmt::format("killed it (pid {})", stopped)
                                 : std::string("no process of it was found to stop"));
}

nlohmann::json Worker::read_reply() {
  // The answer within FUSEBENCH_WORKER_REQUEST_TIMEOUT: a framework call that hangs (a deadlock, a compile
  // that never ends) fails its case, naming the wait, and the worker is stopped (restarted for the next one).
  WaitClock clock(device_, fmt::format("{}", fmt::join(args_, " ")), kWorkerAnswer);
  for (;;) {
    pollfd ready{::fileno(from_worker_), POLLIN, 0};
    const int polled = ::poll(&ready, 1, clock.poll_ms());
    if (polled > 0 || (polled < 0 && errno != EINTR)) break;
    if (clock.expired()) throw WorkerGone(stop_unanswering_worker(clock.timeout_text()));
    clock.report_progress("the Python worker");
  }
  char* line = nullptr;
  std::size_t capacity = 0;
  const ssize_t length = ::getline(&line, &capacity, from_worker_);
  std::string text = length > 0 ? std::string(line, std::size_t(length)) : std::string();
  std::free(line);
  if (length <= 0) throw WorkerGone(describe_exit());
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    throw FrameworkError(
        fmt::format("the Python worker wrote a line that is not JSON: {}", text.substr(0, 200)));
  }
}

void Worker::revive() {
  if (!restartable_)
    throw FrameworkError(fmt::format("{}: the Python worker is gone: {}", device_, death_));
  if (restarts_ >= 1) {
    throw FrameworkError(fmt::format(
        "{}: the Python worker died again after its restart and is not restarted a second time "
        "in this process; its second death: {}",
        device_, death_));
  }
  ++restarts_;
  const std::string first_line = death_.substr(0, death_.find('\n'));
  fmt::print(stderr, "fusebench: {}: restarting the Python worker once; it died: {}\n", device_,
             first_line);
  close_connection();
  session_ = false;
  try {
    start();
  } catch (const std::exception& e) {
    death_ = fmt::format("its restart failed: {} (it had died: {})", e.what(), first_line);
    throw FrameworkError(fmt::format("{}: the Python worker died and {}", device_, death_));
  }
  death_.clear();
  engine::record_recovery("worker_restarted");
}

nlohmann::json Worker::request(const nlohmann::json& message) {
  if (!death_.empty()) revive();
  if (!unavailable_.empty())
    throw InputError(fmt::format("device {} is unavailable: {}", device_, unavailable_));
  if (to_worker_ == nullptr || (!session_ && pid_ <= 0))
    throw FrameworkError(fmt::format("{}: the Python worker is gone", device_));
  const auto died = [&](std::string how) {
    death_ = std::move(how);
    const std::string next = !restartable_    ? ""
                             : restarts_ == 0 ? "; it is restarted once, for the next request"
                                              : "; it had been restarted once already in this "
                                                "process, and is not restarted again";
    return FrameworkError(fmt::format("{}: {}{}", device_, death_, next));
  };
  if (!send_line(message.dump() + "\n")) throw died(describe_exit());
  try {
    return read_reply();
  } catch (const WorkerGone& e) {
    throw died(e.what());
  } catch (const FrameworkError& e) {
    throw FrameworkError(fmt::format("{}: {}", device_, e.what()));
  }
}

fs::path Worker::stage_input(std::size_t k, const Tensor& tensor) {
  const fs::path path = scratch_ / fmt::format("in{}.npy", k);
  const Tensor t = tensor.contiguous();
  if (k < staged_.size() && staged_[k].defined() && staged_[k].dtype() == t.dtype() &&
      staged_[k].shape() == t.shape() &&
      std::memcmp(staged_[k].raw_data(), t.raw_data(), t.nbytes()) == 0) {
    return path;
  }
  write_npy(path, t);
  if (staged_.size() <= k) staged_.resize(k + 1);
  Tensor copy = Tensor::uninitialized(t.dtype(), t.shape());
  std::memcpy(copy.raw_data(), t.raw_data(), t.nbytes());
  staged_[k] = std::move(copy);
  return path;
}

std::string default_cache_dir(const FrameworkSpec& spec) {
  if (spec.cache_env.empty()) return {};
  if (const char* set = std::getenv(spec.cache_env.c_str()); set != nullptr && *set != '\0')
    return set;
  return engine::KernelCache::default_dir().string() + "-" + spec.framework +
         (spec.target == "cpu" ? "" : "-" + spec.target);
}

std::shared_ptr<Worker> shared_worker(const FrameworkSpec& spec) {
  // A worker starts in seconds (its framework's import): devices asked for at once (the
  // availability listing) start theirs side by side, so the map's lock is not held while one starts.
  struct Slot {
    std::mutex starting;
    std::shared_ptr<Worker> worker;
  };
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<Slot>> slots;
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard lock(mutex);
    auto& entry = slots[spec.device];
    if (!entry) entry = std::make_shared<Slot>();
    slot = entry;
  }
  std::lock_guard lock(slot->starting);
  if (!slot->worker) {
    std::map<std::string, std::string> env;
    if (const auto dir = default_cache_dir(spec); !dir.empty()) env[spec.cache_env] = dir;
    slot->worker = std::make_shared<Worker>(spec, env, true);
  }
  return slot->worker;
}

}  // namespace fusebench::framework
