// The bridge from fusebench's graphs to Python frameworks (PyTorch, JAX), shared by the torch and
// xla devices.
//
// Mechanism: a worker process (devices/bridge/fusebench_worker.py) per framework, started with
// the project's .venv Python or $FUSEBENCH_PYTHON, speaking JSON lines over pipes. Tensors go
// through .npy files in shared memory that the worker memory-maps (no copy on the Python side
// where the framework accepts the mapping). Why a process and not embedded CPython: any Python a
// team names (its own torch build, another Python version) works without relinking fusebench; a
// framework's threads, signal handlers and crashes stay out of the benchmark process; and a fresh
// worker with a fresh cache directory is exactly the cold restart task A asks for. Within a run
// (tools/run sets $FUSEBENCH_WORKER_DIR) the shared worker is a session with one worker server
// per device, so that every suite of the run finds the framework imported and the graphs earlier
// suites compiled.
//
// Each graph becomes the framework's Python code (graph_fn), written as a runnable repro script:
// into the worker's scratch directory, and into <repro dir>/<device>/ when the process set one
// (set_repro_dir: a suite given a dump directory sets <dump dir>/repro).
//
// Files: worker.cpp (the interpreter, the process or server session, staged inputs), python_module.cpp
// (a graph as Python), framework_device.cpp (the device, its knob policy, the repro scripts).
#pragma once

#include <sys/types.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fusebench/engine/executor.hpp"

namespace fusebench::framework {

// A Python exception in the framework, or a worker that died: the message names the device, the
// path (eager/fused), the graph node whose statement raised (when known) and the exception's last
// traceback line.
class FrameworkError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What a framework device is, for the generic bridge device (framework_device.cpp).
struct FrameworkSpec {
  std::string device;       // "torch", "torch:cuda", "xla", "xla:cuda"
  std::string framework;    // "torch", "jax" (the Python package to name in messages)
  std::string backend;      // Python module of the framework side, e.g. "torch_backend"
  std::string backend_dir;  // absolute directory holding it
  std::string target;       // the framework's device: "cpu", "cuda"
  std::string
      compile_backend;  // torch.compile's backend ("inductor", "aot_eager", a team's own); "" for JAX
  std::string pip_install;  // what to install, e.g. "torch==2.15.0"
  std::string cache_env;  // the framework's compile-cache variable ("" when it keeps none on disk)
  // Variables the worker gets unless the environment already sets them (xla:cuda: no memory
  // preallocation, so that several workers share one GPU).
  std::map<std::string, std::string> worker_env_defaults;
  std::string preamble;    // imports and helpers at the top of every graph module
  std::string repro_main;  // the repro script's `if __name__ == "__main__":` block
  // One statement's right-hand side for node n with operand expressions args.
  std::string (*emit_op)(const engine::Node& n, const std::vector<std::string>& args,
                         const engine::EngineOptions& options);
  // Empty when realisable, else why not (names the knob).
  std::function<std::string(const engine::EngineOptions& options, bool fused)> unsupported_knobs;
  // The framework settings the knobs map to (sent to the worker, printed in the repro).
  std::function<nlohmann::json(const engine::EngineOptions& options, bool fused)> settings;
  // Empty when the framework runs this dtype, else why not.
  std::string (*dtype_unsupported)(DType dtype);
  bool disassemble = false;  // the compiled artifact is a host .so whose machine code we can count
  // The statement after an op that ends the compiled graph there (the fusion switch `split`: its
  // value is materialised and its consumers are compiled apart); empty where the framework has none.
  std::string split_statement;
  // Where the framework has no such statement (JAX: nothing breaks a jax.jit), the fused module
  // cuts graph_fn into stages instead, one after each split op, listed as `graph_fn.stages`: the
  // backend compiles each stage apart and runs them in turn (the values a later stage reads cross
  // between them as arrays of their dtypes).
  bool split_into_stages = false;
  // The fusion switch `rounding=on` at an op: the right-hand side that computes `expression` (of
  // the operand variables `operands`) with every value it produces rounded to its dtype, as the
  // eager path stores each; null where the framework realises no per-op rounding.
  std::string (*rounded_op)(const std::string& expression,
                            const std::vector<std::string>& operands) = nullptr;
  // The eager path's function for one op: the right-hand side of a module-level definition that
  // computes `expression` (without fusion switches) of the operand variables `operands` (XLA: a
  // jax.jit of its own). Where set, the module also defines `graph_fn.eager`, the graph calling
  // these in node order, and the backend's eager runs that; null where eager runs graph_fn.
  std::string (*eager_op_function)(const std::string& expression,
                                   const std::vector<std::string>& operands) = nullptr;
  // What the eager path is, in words, for the suites' JSON context (`fusebench_eager`) and so the
  // report's run line; empty: not stated.
  std::string eager_description;
  // The framework's compile options offered as attribution switches, and the settings section
  // (settings[compiler_section]) an EngineOptions::compiler_options entry is set in.
  std::vector<engine::CompilerSwitch> compiler_switches;
  std::string compiler_section;
};

// spec.settings(options, fused) with options.compiler_options set in settings[compiler_section]
// (a value that reads as JSON, such as false or 0, is sent as that JSON value, else as text).
nlohmann::json framework_settings(const FrameworkSpec& spec, const engine::EngineOptions& options,
                                  bool fused);

// A device name as it appears in file names: "torch:cuda/aot_eager" -> "torch-cuda-aot_eager".
std::string device_file_name(std::string device);

// The Python interpreter: $FUSEBENCH_PYTHON (InputError when it is not an executable file), else
// the project's .venv.
std::filesystem::path python_executable();

class WaitClock;  // worker.cpp: a bounded wait on a worker (its start, an answer)

// One worker process, or a session with a run's worker server. Thread-safe (one request at a
// time).
class Worker {
 public:
  // env: variables set (or overridden) for the worker, e.g. TORCHINDUCTOR_CACHE_DIR.
  // `serverable`: with $FUSEBENCH_WORKER_DIR set (tools/run sets it), a session with the server
  // for this device, interpreter and env there, started by the first process that needs it; it
  // keeps the framework imported and its compiled graphs for every suite of the run. Otherwise
  // (and for a cold cache, which must be a fresh process) a process of this Worker's own.
  Worker(const FrameworkSpec& spec, std::map<std::string, std::string> env,
         bool serverable = false);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Empty when the framework imported; otherwise why not, with the install command.
  const std::string& unavailable_reason() const { return unavailable_; }
  const std::string& framework_version() const { return version_; }
  const std::filesystem::path& scratch() const { return scratch_; }
  // One request, one reply (FrameworkError when the worker died: it names how, when known, and
  // for a server the last lines of its log). A worker that `serverable` made (the shared one) is
  // restarted once, on the request after its death; a second death in this process is final, and
  // every later request fails naming it.
  nlohmann::json request(const nlohmann::json& message);
  std::mutex& mutex() { return mutex_; }
  // Writes input slot k's .npy in shared memory unless it already holds exactly these bytes (a
  // benchmark passes the same inputs run after run: then nothing is copied, and the worker reuses
  // the tensor it mapped, its pages already touched). Returns the file.
  std::filesystem::path stage_input(std::size_t k, const Tensor& tensor);

 private:
  // Starts the process or the session with the server, and reads its hello.
  void start();
  // Closes this end of a dead worker's pipes or socket.
  void close_connection();
  // After a death: the restart (once), or a FrameworkError naming the deaths.
  void revive();
  // The worker's next line, within FUSEBENCH_WORKER_REQUEST_TIMEOUT (WorkerGone after it).
  nlohmann::json read_reply();
  std::string describe_exit();
  // A worker that did not answer in time: its process group killed; says what was stopped.
  std::string stop_unanswering_worker(const std::string& timeout_text);

  // A session with the run's server for these arguments and environment: the connected socket.
  // The wait is bounded by `clock` (FUSEBENCH_WORKER_START_TIMEOUT).
  int connect_to_server(const std::filesystem::path& server_dir, const std::string& identity,
                        std::vector<std::string> args, std::vector<std::string> env_entries,
                        WaitClock& clock);
  // A request line to the worker; false when it is gone.
  bool send_line(const std::string& text);

  std::string device_, framework_, pip_install_;
  std::filesystem::path python_;
  std::vector<std::string> args_, env_entries_;  // the worker's command line and environment
  std::filesystem::path server_dir_;             // $FUSEBENCH_WORKER_DIR for a server session
  std::string identity_;                         // the server's, for its file names
  std::filesystem::path server_log_, server_pidfile_;
  pid_t server_pid_ = -1;  // the server, when this process started it (its exit status is ours)
  bool restartable_ = false;
  int restarts_ = 0;
  std::string death_;     // how the worker died; empty while it lives
  pid_t pid_ = -1;        // this Worker's own process (-1 in a server session)
  bool session_ = false;  // a session with a run's worker server
  int socket_fd_ = -1;    // that session's socket
  std::FILE* to_worker_ = nullptr;
  std::FILE* from_worker_ = nullptr;
  std::string unavailable_, version_;
  std::filesystem::path scratch_;
  std::vector<Tensor> staged_;  // what each input slot's file holds
  std::mutex mutex_;
};

// The worker every default executor of a device shares within this process (so each graph is
// compiled once per run; the framework's on-disk cache, <kernel cache>-torchinductor by default,
// is shared across runs). Started on first use.
std::shared_ptr<Worker> shared_worker(const FrameworkSpec& spec);

// The graph as a Python module defining graph_fn (plus INPUTS, SETTINGS and the repro main).
std::string emit_python_module(const engine::Graph& graph, const FrameworkSpec& spec,
                               const engine::EngineOptions& options, bool fused);

// The device: eager and fused executors over a worker. `cold_cache_dir` unset: the shared worker.
std::unique_ptr<engine::Device> make_framework_device(FrameworkSpec spec);

// Where every framework device of this process keeps each graph's runnable repro script; empty
// (the default): nowhere but the worker's scratch directory.
void set_repro_dir(const std::filesystem::path& dir);
const std::filesystem::path& repro_dir();

}  // namespace fusebench::framework
