#include "bridge.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/file.h>
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
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "framework_devices.hpp"
#include "fusebench/engine/kernel_cache.hpp"
#include "fusebench/error.hpp"
#include "fusebench/hash.hpp"
#include "fusebench/npy.hpp"
#include "jit_compiler.hpp"

extern char** environ;

namespace fusebench::framework {

namespace fs = std::filesystem;

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

// A device name as it appears in file names: "torch:cuda/aot_eager" -> "torch-cuda-aot_eager".
std::string device_file_name(std::string device) {
  for (char& c : device) c = c == ':' || c == '/' ? '-' : c;
  return device;
}

std::string python_origin() {
  const char* chosen = std::getenv("FUSEBENCH_PYTHON");
  return chosen != nullptr && *chosen != '\0' ? fmt::format("FUSEBENCH_PYTHON={}", chosen)
                                              : "the project's .venv";
}

// posix_spawn of args[0] with exactly these arguments and environment; 0 or the error number.
int spawn_process(pid_t& pid, const std::vector<std::string>& args,
                  const std::vector<std::string>& env_entries,
                  const posix_spawn_file_actions_t* actions) {
  std::vector<char*> argv, envp;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env_entries) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  return posix_spawn(&pid, argv[0], actions, nullptr, argv.data(), envp.data());
}
}  // namespace

Worker::Worker(const FrameworkSpec& spec, std::map<std::string, std::string> env, bool serverable)
    : device_(spec.device) {
  const fs::path python = python_executable();
  if (!fs::exists(python)) {
    unavailable_ = fmt::format("no Python at {} (run tools/bootstrap, or set FUSEBENCH_PYTHON)",
                               python.string());
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
  std::vector<std::string> args = {python.string(),  "-u",         worker_script,
                                   "--backend",      spec.backend, "--backend-dir",
                                   spec.backend_dir, "--target",   spec.target};
  if (!spec.compile_backend.empty())
    args.insert(args.end(), {"--compile-backend", spec.compile_backend});
  std::map<std::string, std::string> environment;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const auto eq = entry.find('=');
    if (eq != std::string::npos) environment[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const auto& [k, v] : spec.worker_env_defaults) environment.try_emplace(k, v);
  for (auto& [k, v] : env) environment[k] = v;
  environment.erase("PYTHONHOME");  // a named interpreter finds its own standard library
  std::vector<std::string> env_entries;
  for (auto& [k, v] : environment) env_entries.push_back(k + "=" + v);

  const char* server_dir = std::getenv("FUSEBENCH_WORKER_DIR");
  if (serverable && server_dir != nullptr && *server_dir != '\0') {
    // The server's identity: its command line and the variables this Worker sets; the rest of its
    // environment is the run's, from the process that started it.
    std::string identity = fmt::format("{}", fmt::join(args, "\n"));
    for (const auto& [k, v] : env) identity += fmt::format("\n{}={}", k, v);
    socket_fd_ = connect_to_server(server_dir, identity, args, env_entries);
    session_ = true;
    to_worker_ = ::fdopen(::dup(socket_fd_), "w");
    from_worker_ = ::fdopen(::dup(socket_fd_), "r");
  } else {
    int in_pipe[2], out_pipe[2];
    if (::pipe2(in_pipe, O_CLOEXEC) != 0 || ::pipe2(out_pipe, O_CLOEXEC) != 0) {
      throw FrameworkError(fmt::format("{}: cannot create pipes for the Python worker: {}", device_,
                                       std::strerror(errno)));
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in_pipe[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
    const int spawned = spawn_process(pid_, args, env_entries, &actions);
    posix_spawn_file_actions_destroy(&actions);
    ::close(in_pipe[0]);
    ::close(out_pipe[1]);
    if (spawned != 0) {
      ::close(in_pipe[1]);
      ::close(out_pipe[0]);
      pid_ = -1;
      throw InputError(fmt::format("{}: cannot start {} ({}): {}", device_, python.string(),
                                   python_origin(), std::strerror(spawned)));
    }
    to_worker_ = ::fdopen(in_pipe[1], "w");
    from_worker_ = ::fdopen(out_pipe[0], "r");
  }

  nlohmann::json hello;
  try {
    hello = read_reply();
  } catch (const FrameworkError& e) {
    throw InputError(fmt::format("{}: {} ({}) did not start fusebench's worker: {}", device_,
                                 python.string(), python_origin(), e.what()));
  }
  if (!hello.value("ready", false) && hello.contains("target_error")) {
    unavailable_ = fmt::format("{} imports, but cannot run device {} here: {}", spec.framework,
                               spec.device, hello["target_error"].get<std::string>());
  } else if (!hello.value("ready", false)) {
    unavailable_ = fmt::format(
        "{} cannot be imported by {} ({}: {}): install it with `{} -m pip install {}` "
        "(tools/bootstrap "
        "installs the pinned version into .venv)",
        spec.framework, python.string(), python_origin(), hello.value("error", std::string("?")),
        python.string(), spec.pip_install);
  } else {
    version_ = hello.value("version", std::string());
  }
}

int Worker::connect_to_server(const fs::path& server_dir, const std::string& identity,
                              std::vector<std::string> args, std::vector<std::string> env_entries) {
  const std::string stem =
      fmt::format("{}-{}", device_file_name(device_), sha256_hex(identity).substr(0, 12));
  const fs::path socket_path = server_dir / (stem + ".sock");
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
  // One process starts the server; the others wait on the lock and then find it listening.
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
  ::flock(lock, LOCK_EX);
  if (const int fd = try_connect(); fd >= 0) return fd;

  args.insert(args.end(), {"--serve", socket_path.string()});
  env_entries.push_back(
      fmt::format("FUSEBENCH_WORKER_PIDFILE={}", (server_dir / (stem + ".pid")).string()));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  // Its stderr outlives the process that starts it (perhaps a listing whose stderr is parsed):
  // a log beside the socket, which tools/run relays to its own stderr after each suite.
  const fs::path log_path = server_dir / (stem + ".log");
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  pid_t server = -1;
  const int spawned = spawn_process(server, args, env_entries, &actions);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    throw InputError(fmt::format("{}: cannot start the worker server {} ({}): {}", device_, args[0],
                                 python_origin(), std::strerror(spawned)));
  }
  // It listens once the framework is imported: seconds (torch about ten here).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  for (;;) {
    if (const int fd = try_connect(); fd >= 0) return fd;
    int status = 0;
    if (::waitpid(server, &status, WNOHANG) == server) {
      std::ifstream log(log_path);
      std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
      if (text.size() > 2000) text = "..." + text.substr(text.size() - 2000);
      throw InputError(fmt::format(
          "{}: the worker server ({} {}) exited with status {} before it listened on {}; {}: {}",
          device_, args[0], python_origin(),
          WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), socket_path.string(),
          log_path.string(), text));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(server, SIGTERM);
      throw FrameworkError(fmt::format("{}: the worker server did not listen on {} within 5 min",
                                       device_, socket_path.string()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Worker::~Worker() {
  if (to_worker_ != nullptr) {
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
    std::fclose(to_worker_);
  }
  if (from_worker_ != nullptr) std::fclose(from_worker_);
  if (socket_fd_ >= 0) ::close(socket_fd_);
  if (pid_ > 0) {
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
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

std::string Worker::describe_exit() {
  if (session_)
    return fmt::format("the run's worker server closed the session (its log is in {})",
                       std::getenv("FUSEBENCH_WORKER_DIR"));
  int status = 0;
  if (pid_ > 0 && ::waitpid(pid_, &status, 0) == pid_) {
    pid_ = -1;
    if (WIFEXITED(status))
      return fmt::format("the Python worker exited with status {} (its stderr is above)",
                         WEXITSTATUS(status));
    if (WIFSIGNALED(status))
      return fmt::format("the Python worker was killed by signal {}", WTERMSIG(status));
  }
  return "the Python worker closed its pipe";
}

nlohmann::json Worker::read_reply() {
  char* line = nullptr;
  std::size_t capacity = 0;
  const ssize_t length = ::getline(&line, &capacity, from_worker_);
  std::string text = length > 0 ? std::string(line, std::size_t(length)) : std::string();
  std::free(line);
  if (length <= 0) throw FrameworkError(describe_exit());
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    throw FrameworkError(
        fmt::format("the Python worker wrote a line that is not JSON: {}", text.substr(0, 200)));
  }
}

nlohmann::json Worker::request(const nlohmann::json& message) {
  if (!unavailable_.empty())
    throw InputError(fmt::format("device {} is unavailable: {}", device_, unavailable_));
  if (to_worker_ == nullptr || (!session_ && pid_ <= 0))
    throw FrameworkError(fmt::format("{}: the Python worker is gone", device_));
  if (!send_line(message.dump() + "\n")) {
    throw FrameworkError(fmt::format("{}: {}", device_, describe_exit()));
  }
  try {
    return read_reply();
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

// ---- graph -> Python
namespace {
std::string identifier(const std::string& name, std::set<std::string>& used) {
  static const std::set<std::string> reserved = {
      "False", "None",     "True",  "and",    "as",   "assert",   "async",  "await",    "break",
      "class", "continue", "def",   "del",    "elif", "else",     "except", "finally",  "for",
      "from",  "global",   "if",    "import", "in",   "is",       "lambda", "nonlocal", "not",
      "or",    "pass",     "raise", "return", "try",  "while",    "with",   "yield",    "torch",
      "F",     "jax",      "jnp",   "np",     "lax",  "graph_fn", "INPUTS", "SETTINGS"};
  std::string id;
  for (char c : name) id += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (id.empty() || std::isdigit(static_cast<unsigned char>(id[0]))) id = "t_" + id;
  if (reserved.count(id)) id += "_";
  std::string unique = id;
  for (int k = 2; used.count(unique); ++k) unique = fmt::format("{}_{}", id, k);
  used.insert(unique);
  return unique;
}
}  // namespace

nlohmann::json framework_settings(const FrameworkSpec& spec, const engine::EngineOptions& options,
                                  bool fused) {
  nlohmann::json settings = spec.settings(options, fused);
  if (!fused || options.compiler_options.empty()) return settings;
  if (spec.compiler_section.empty()) {
    throw_input_error("device {}: compiler options {} given, but it takes none", spec.device,
                      options.describe());
  }
  for (const auto& [name, value] : options.compiler_options) {
    const nlohmann::json parsed = nlohmann::json::parse(value, nullptr, false);
    settings[spec.compiler_section][name] = parsed.is_discarded() ? nlohmann::json(value) : parsed;
  }
  return settings;
}

namespace {
// The fused module's stages where the framework splits by cutting graph_fn (split_into_stages):
// one function per stage, each taking the values it reads (graph inputs and earlier stages'
// values, in node order) and returning those a later stage or the graph's outputs read.
std::string emit_stages(const engine::Graph& graph, const std::vector<std::string>& var,
                        const std::vector<std::string>& statements,
                        const std::vector<std::size_t>& cuts) {
  const auto& nodes = graph.nodes();
  std::vector<std::size_t> bounds = {0};
  bounds.insert(bounds.end(), cuts.begin(), cuts.end());
  bounds.push_back(nodes.size());
  // last_read[v]: the last node index that reads v (an output is read after every node)
  std::vector<std::size_t> last_read(nodes.size(), 0);
  for (const engine::Node& n : nodes) {
    for (engine::NodeId in : n.inputs) last_read[std::size_t(in)] = std::size_t(n.id);
  }
  for (engine::NodeId o : graph.outputs()) last_read[std::size_t(o)] = nodes.size();
  std::string text;
  std::vector<std::string> stage_names;
  for (std::size_t k = 0; k + 1 < bounds.size(); ++k) {
    const std::size_t begin = bounds[k], end = bounds[k + 1];
    std::vector<std::string> takes, gives;
    for (std::size_t v = 0; v < nodes.size(); ++v) {
      const bool input = nodes[v].kind == engine::OpKind::Input;
      // defined before this stage (an input before the first: the first takes every input, in
      // graph_fn's order) and read in it or later
      if ((input || v < begin) && last_read[v] >= begin) takes.push_back(var[v]);
      // defined here or before, and read after this stage
      if ((v < end || input) && last_read[v] >= end) gives.push_back(var[v]);
    }
    if (k + 1 == bounds.size() - 1) {
      gives.clear();
      for (engine::NodeId o : graph.outputs()) gives.push_back(var[std::size_t(o)]);
    }
    const std::string name = fmt::format("_stage_{}", k);
    stage_names.push_back(name);
    text += fmt::format("\n\ndef {}({}):\n", name, fmt::join(takes, ", "));
    for (std::size_t v = begin; v < end; ++v) {
      if (!statements[v].empty()) text += statements[v] + "\n";
    }
    text += fmt::format("    return ({},)\n", fmt::join(gives, ", "));
  }
  text += fmt::format(
      "\n\n# fusion switch split: each stage a jax.jit of its own, run in turn\n"
      "graph_fn.stages = [{}]\n",
      fmt::join(stage_names, ", "));
  return text;
}
}  // namespace

std::string emit_python_module(const engine::Graph& graph, const FrameworkSpec& spec,
                               const engine::EngineOptions& options, bool fused) {
  std::set<std::string> used;
  std::vector<std::string> var(graph.nodes().size());
  std::vector<std::string> params, input_specs, body;
  std::vector<std::string> statements(graph.nodes().size());  // by node, for the stages
  std::vector<std::size_t> cuts;  // node indices a stage starts at (split_into_stages)
  for (const engine::Node& n : graph.nodes()) {
    var[std::size_t(n.id)] = identifier(n.name, used);
    if (n.kind == engine::OpKind::Input) {
      params.push_back(var[std::size_t(n.id)]);
      input_specs.push_back(fmt::format("    ({:?}, {:?}, [{}]),", n.name, dtype_name(n.dtype),
                                        fmt::join(n.shape, ", ")));
      continue;
    }
    std::vector<std::string> args;
    for (engine::NodeId in : n.inputs) args.push_back(var[std::size_t(in)]);
    const auto knobs = options.per_op.find(n.name);
    const bool switched = fused && knobs != options.per_op.end();
    std::string expression = spec.emit_op(n, args, options);
    if (switched && knobs->second.emulate_per_op_rounding.value_or(false) &&
        spec.rounded_op != nullptr) {
      std::vector<std::string> operands;  // each variable once, in order
      for (const std::string& a : args) {
        if (std::find(operands.begin(), operands.end(), a) == operands.end()) operands.push_back(a);
      }
      expression = spec.rounded_op(expression, operands);
    }
    std::string statement =
        fmt::format("    {} = {}  # node {}: {} {}{}{}", var[std::size_t(n.id)], expression, n.name,
                    engine::op_name(n.kind), dtype_name(n.dtype), shape_string(n.shape),
                    switched ? fmt::format(" (fusion switch: {})", knobs->second.describe()) : "");
    body.push_back(statement);
    statements[std::size_t(n.id)] = std::move(statement);
    if (switched && knobs->second.split_after) {
      if (spec.split_into_stages) {
        if (std::size_t(n.id) + 1 < graph.nodes().size()) cuts.push_back(std::size_t(n.id) + 1);
      } else {
        body.push_back(
            fmt::format("    {}  # fusion switch: split after {}", spec.split_statement, n.name));
      }
    }
  }
  std::vector<std::string> outs;
  for (engine::NodeId o : graph.outputs()) outs.push_back(var[std::size_t(o)]);
  const std::string stages = cuts.empty() ? "" : emit_stages(graph, var, statements, cuts);
  const nlohmann::json settings = framework_settings(spec, options, fused);
  return fmt::format(
      "# fusebench graph on device {device} ({path}); generated by devices/bridge, runnable as a "
      "repro:\n"
      "#   python THIS_FILE [DIR]   (DIR: one <input>.npy per graph input; default: uniform(-1, 1) "
      "inputs)\n"
      "# It runs the graph eagerly and fused and prints how many output elements differ.\n"
      "# fusebench knobs: {knobs}\n"
      "{preamble}\n\n"
      "def graph_fn({params}):\n{body}\n    return ({outs},)\n{stages}\n\n"
      "INPUTS = [  # name, dtype, shape\n{inputs}\n]\n"
      "SETTINGS = json.loads({settings:?})  # the framework settings fusebench's knobs map to\n\n"
      "{main}",
      fmt::arg("device", spec.device), fmt::arg("path", fused ? "fused" : "eager"),
      fmt::arg("knobs", options.describe()), fmt::arg("preamble", spec.preamble),
      fmt::arg("params", fmt::join(params, ", ")), fmt::arg("body", fmt::join(body, "\n")),
      fmt::arg("outs", fmt::join(outs, ", ")), fmt::arg("stages", stages),
      fmt::arg("inputs", fmt::join(input_specs, "\n")), fmt::arg("settings", settings.dump()),
      fmt::arg("main", spec.repro_main));
}

// ---- the device
namespace {

class FrameworkExecutor final : public engine::Executor {
 public:
  FrameworkExecutor(FrameworkSpec spec, engine::EngineOptions options, bool fused,
                    std::shared_ptr<Worker> worker)
      : spec_(std::move(spec)), options_(options), fused_(fused), worker_(std::move(worker)) {}

  std::string name() const override { return fused_ ? "fused" : "eager"; }

  engine::RunResult run(const engine::Graph& graph, const engine::Inputs& inputs,
                        const engine::RunOptions& run) override {
    engine::check_inputs(graph, inputs);
    for (const engine::Node& n : graph.nodes()) {
      if (auto why = spec_.dtype_unsupported(n.dtype); !why.empty()) {
        throw_input_error("device {} cannot run node {} ({}) on {}{}: {}", spec_.device, n.name,
                          engine::op_name(n.kind), dtype_name(n.dtype), shape_string(n.shape), why);
      }
    }
    if (!worker_->unavailable_reason().empty()) {
      throw InputError(
          fmt::format("device {} is unavailable: {}", spec_.device, worker_->unavailable_reason()));
    }
    const std::string module = emit_python_module(graph, spec_, options_, fused_);
    const std::string digest = sha256_hex(std::string_view(module));
    const std::string file =
        fmt::format("graph_{}_{}.py", fused_ ? "fused" : "eager", digest.substr(0, 16));
    std::lock_guard lock(worker_->mutex());
    // Content-addressed and the same in every process: the framework records the source's path
    // (XLA puts it in the HLO's metadata, which its executable fingerprint covers), so a path
    // naming the process would make every process's executable look different.
    const fs::path source =
        fs::temp_directory_path() / "fusebench-graphs" / device_file_name(spec_.device) / file;
    if (!fs::exists(source)) {
      fs::create_directories(source.parent_path());
      write_file_atomically(source, module);
    }
    fs::path repro;  // kept after the run (the scratch directory goes with the worker)
    if (!repro_dir().empty()) {
      repro = repro_dir() / device_file_name(spec_.device) / file;
      if (!fs::exists(repro)) {
        fs::create_directories(repro.parent_path());
        write_file_atomically(repro, module);
      }
    }

    engine::RunResult result;
    nlohmann::json in = nlohmann::json::array(), out = nlohmann::json::array();
    double bytes = 0;
    int k = 0;
    for (engine::NodeId id : graph.inputs()) {
      const engine::Node& n = graph.node(id);
      const Tensor& t = inputs.at(n.name);
      const fs::path path = worker_->stage_input(std::size_t(k++), t);
      in.push_back({{"name", n.name}, {"path", path.string()}});
      result.values[id] = t;
      bytes += double(t.nbytes());
    }
    for (std::size_t o = 0; o < graph.outputs().size(); ++o)
      out.push_back((worker_->scratch() / fmt::format("out{}.npy", o)).string());
    const nlohmann::json settings = framework_settings(spec_, options_, fused_);
    nlohmann::json request = {{"cmd", "run"},    {"source", source.string()},
                              {"fused", fused_}, {"settings", settings},
                              {"key", digest},   {"inputs", in},
                              {"outputs", out}};
    if (extra_request_.is_object()) request.update(extra_request_);
    const nlohmann::json reply = worker_->request(request);
    last_reply_ = reply;
    if (!reply.value("ok", false)) {
      const std::string node = reply.contains("node") && reply["node"].is_string()
                                   ? reply["node"].get<std::string>()
                                   : "";
      throw FrameworkError(fmt::format(
          "device {} ({}, {}): {}{} [repro: {}]", spec_.device, fused_ ? "fused" : "eager",
          worker_->framework_version(), node.empty() ? "" : "node " + node + ": ",
          reply.value("error", std::string("unknown error")), source.string()));
    }
    for (std::size_t o = 0; o < graph.outputs().size(); ++o) {
      Tensor t = read_npy(out[o].get<std::string>());
      bytes += double(t.nbytes());
      result.values[graph.outputs()[o]] = t;
      result.outputs.push_back(std::move(t));
    }

    engine::KernelTrace trace;
    trace.name = fused_ ? fmt::format("{} fused graph_{}", spec_.device, digest.substr(0, 16))
                        : fmt::format("{} eager graph_{}", spec_.device, digest.substr(0, 16));
    trace.kind = "graph";  // the framework's whole graph, however it splits it into kernels
    for (const engine::Node& n : graph.nodes()) {
      if (n.kind != engine::OpKind::Input)
        trace.ops.push_back(fmt::format("{}={}", n.name, engine::op_name(n.kind)));
    }
    trace.lowering = {options_.describe(), "framework settings: " + settings.dump(),
                      worker_->framework_version()};
    trace.cache_key = digest;
    trace.source_path = repro.empty() ? source.string() : repro.string();
    const nlohmann::json& evidence = reply["evidence"];
    trace.evidence = evidence;
    trace.artifact_sha256 = evidence.value("artifact_sha256", std::string());
    trace.source_sha256 = evidence.value("source_sha256", fused_ ? std::string() : digest);
    trace.artifact_path = evidence.value("artifact_path", std::string());
    trace.compile_ms = reply.value("compile_ms", 0.0);
    trace.cache_hit = fused_ && !reply.value("compiled", false);
    trace.run_ms = reply.value("run_ms", 0.0);
    trace.bytes_moved = bytes;
    result.trace.push_back(std::move(trace));
    if (!run.dump_dir.empty()) engine::dump_run(graph, result, name(), run);
    return result;
  }

  // The runs happen in the worker, in batches; each run's output 0 is hashed there, where it is
  // (a GPU's output is copied to the worker's host memory, never through the shared-memory files),
  // and only the digests come back, with the last run's outputs.
  engine::HashedRuns run_hashed(const engine::Graph& graph, const engine::Inputs& inputs, int runs,
                                const std::function<void(int)>& progress) override {
    constexpr int kRunsPerRequest = 50;  // progress between requests
    const engine::Node& output = graph.node(graph.outputs().at(0));
    const std::string header =
        fmt::format("{}{}", dtype_name(output.dtype), shape_string(output.shape));
    engine::HashedRuns hashed;
    const auto start = std::chrono::steady_clock::now();
    int threads = 0;
    for (int done = 0; done < runs;) {
      const int batch = std::min(runs - done, kRunsPerRequest);
      extra_request_ = {{"repeat", batch},
                        {"hash", {{"header", header}, {"chunk_bytes", kMd5ChunkBytes}}}};
      engine::RunResult result;
      try {
        result = run(graph, inputs, {});
      } catch (...) {
        extra_request_ = nullptr;
        throw;
      }
      extra_request_ = nullptr;
      const auto digests = last_reply_.value("digests", nlohmann::json::array());
      if (int(digests.size()) != batch) {
        throw FrameworkError(
            fmt::format("device {}: asked for {} hashed runs, the worker hashed {}", spec_.device,
                        batch, digests.size()));
      }
      for (const auto& d : digests) hashed.output_md5.push_back(d.get<std::string>());
      hashed.hash_seconds += last_reply_.value("hash_s", 0.0);
      threads = last_reply_.value("hash_threads", 0);
      hashed.last_output = result.outputs.at(0);
      done += batch;
      progress(done);
    }
    if (runs > 0 && hashed.last_output.describe() != header) {
      // the digest names the declared output; an output of another dtype or shape would hash apart
      throw FrameworkError(fmt::format("device {}: output 0 is {}, the graph declares {}",
                                       spec_.device, hashed.last_output.describe(), header));
    }
    hashed.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    hashed.hashed_where = fmt::format(
        "in the {} worker, where the output is: each run's output 0 copied to that process's "
        "host memory and hashed there (md5 of {} MiB chunk md5s on {} threads); only digests "
        "come to fusebench",
        spec_.framework, kMd5ChunkBytes >> 20, threads);
    return hashed;
  }

 private:
  FrameworkSpec spec_;
  engine::EngineOptions options_;
  bool fused_;
  std::shared_ptr<Worker> worker_;
  nlohmann::json extra_request_;  // run_hashed's fields for the next request
  nlohmann::json last_reply_;
};

// Mnemonic counts of an Inductor C++ kernel: its `kernel` entry point and the OpenMP regions GCC
// outlines from it (kernel._omp_fn.N), not the Python binding around them.
std::map<std::string, int> kernel_instructions(const fs::path& library) {
  return cpu::instruction_histogram(library, [](const std::string& symbol) {
    return symbol == "kernel" || symbol.rfind("kernel.", 0) == 0 ||
           symbol.rfind("kernel._omp", 0) == 0;
  });
}

class FrameworkDevice final : public engine::Device {
 public:
  explicit FrameworkDevice(FrameworkSpec spec) : spec_(std::move(spec)) {}
  std::string name() const override { return spec_.device; }
  std::string unavailable_reason() const override {
    try {
      return shared_worker(spec_)->unavailable_reason();
    } catch (const std::exception& e) {
      return e.what();
    }
  }
  std::unique_ptr<engine::Executor> eager(const engine::EngineOptions& options) const override {
    options.validate();
    return std::make_unique<FrameworkExecutor>(spec_, options, false, shared_worker(spec_));
  }
  std::unique_ptr<engine::Executor> fused(const engine::EngineOptions& options) const override {
    options.validate();
    return std::make_unique<FrameworkExecutor>(spec_, options, true, shared_worker(spec_));
  }
  // The engine's per-op switches have no framework counterpart here: a framework's own switches
  // are its compile options (devices/README.md).
  std::string unsupported_knobs(const engine::EngineOptions& options, bool fused) const override {
    for (const auto& [option, value] : options.compiler_options) {
      const bool offered =
          std::any_of(spec_.compiler_switches.begin(), spec_.compiler_switches.end(),
                      [&](const engine::CompilerSwitch& c) { return c.name == option; });
      if (!fused || !offered) {
        return fmt::format("compiler option {}={}: {} {}", option, value, name(),
                           !fused ? "compiles nothing on its eager path"
                           : spec_.compiler_switches.empty()
                               ? "offers no compile option"
                               : fmt::format("offers {}", compiler_switch_names()));
      }
    }
    // per op: a split where the framework breaks or cuts its graph, per-op rounding where it
    // rounds an op's values (xla: lax.reduce_precision), fused only
    const bool can_split = !spec_.split_statement.empty() || spec_.split_into_stages;
    const bool can_round = spec_.rounded_op != nullptr;
    for (const auto& [op, knobs] : options.per_op) {
      engine::OpKnobs other = knobs;
      other.split_after = false;
      const bool rounding = other.emulate_per_op_rounding.value_or(false);
      other.emulate_per_op_rounding.reset();
      if (!fused || !other.empty() || (knobs.split_after && !can_split) ||
          (rounding && !can_round)) {
        return fmt::format("per-op switch {} at {}: {} realises {}", knobs.describe(), op, name(),
                           !fused || (!can_split && !can_round) ? "no per-op switch"
                           : !can_round ? "only a split (a graph break) per op"
                           : !can_split ? "only per-op rounding per op"
                                        : "only per-op rounding and a split per op");
      }
    }
    return spec_.unsupported_knobs(options, fused);
  }
  std::vector<engine::CompilerSwitch> compiler_switches() const override {
    return spec_.compiler_switches;
  }
  std::string compiler_switch_names() const {
    std::vector<std::string> names;
    for (const auto& c : spec_.compiler_switches) names.push_back(c.name);
    return fmt::format("only {}", fmt::join(names, ", "));
  }
  // A fresh worker process whose framework cache is `cache_dir`, emptied: nothing compiled in this
  // process or on disk survives.
  std::unique_ptr<engine::Executor> fused_cold(const engine::EngineOptions& options,
                                               const fs::path& cache_dir) const override {
    options.validate();
    fs::remove_all(cache_dir);
    fs::create_directories(cache_dir);
    std::map<std::string, std::string> env;
    if (!spec_.cache_env.empty()) env[spec_.cache_env] = fs::absolute(cache_dir).string();
    return std::make_unique<FrameworkExecutor>(spec_, options, true,
                                               std::make_shared<Worker>(spec_, env));
  }
  std::map<std::string, int> instruction_histogram(
      const engine::KernelTrace& kernel) const override {
    if (!spec_.disassemble || kernel.artifact_path.empty()) return {};
    return kernel_instructions(kernel.artifact_path);
  }

 private:
  FrameworkSpec spec_;
};
}  // namespace

namespace {
std::filesystem::path& repro_dir_setting() {
  static std::filesystem::path dir;
  return dir;
}
}  // namespace

void set_repro_dir(const std::filesystem::path& dir) {
  repro_dir_setting() = dir.empty() ? dir : std::filesystem::absolute(dir);
}
const std::filesystem::path& repro_dir() { return repro_dir_setting(); }

std::unique_ptr<engine::Device> make_framework_device(FrameworkSpec spec) {
  return std::make_unique<FrameworkDevice>(std::move(spec));
}

void register_framework_devices() {
  engine::register_device("torch", [] { return make_framework_device(torch_spec("cpu")); });
  engine::register_device("torch:cuda", [] { return make_framework_device(torch_spec("cuda")); });
  // torch[:cuda]/BACKEND: torch.compile with any backend registered with torch._dynamo; the
  // worker checks the name when it starts (an unknown one makes the device unavailable).
  engine::register_device_family("torch", [](const std::string& backend) {
    return make_framework_device(torch_spec("cpu", backend));
  });
  engine::register_device_family("torch:cuda", [](const std::string& backend) {
    return make_framework_device(torch_spec("cuda", backend));
  });
  engine::register_device("xla", [] { return make_framework_device(xla_spec("cpu")); });
  engine::register_device("xla:cuda", [] { return make_framework_device(xla_spec("cuda")); });
}

}  // namespace fusebench::framework
