"""The Python side of fusebench's framework bridge: one long-lived worker process per framework.

The C++ device (devices/bridge/worker.cpp) starts `python fusebench_worker.py --backend NAME
--target TARGET` and talks JSON lines over the worker's stdin/stdout: one request, one reply.
With --serve SOCKET the worker is a server instead: it listens on that Unix socket and serves its
clients one after another, each connection a session of the same protocol. A run (tools/run) has
one per device for all its suites, so the framework is imported once, and a graph compiled by one
suite is there for the next; the server exits when the process $FUSEBENCH_WORKER_OWNER names is
gone (at once, wherever it is: a thread waits on that process), or on SIGTERM. A worker of one
process exits when that process ($FUSEBENCH_WORKER_PARENT) is gone. The C++ side starts either with
a parent-death signal that kills it if the thread that started it dies before its hello; the worker
disarms it first thing (that thread may end while the worker serves on) and watches instead.
Tensors never travel through the pipe: inputs are .npy files in shared memory (/dev/shm) that
the worker maps (numpy mmap, copy-on-write) and hands to the framework without a copy where
the framework accepts the mapping; outputs are written back as .npy next to them.

Requests:
  {"cmd": "run", "source": PATH, "fused": bool, "settings": {...}, "key": STR,
   "inputs": [{"name", "path"}...], "outputs": [PATH...],
   optional "repeat": N (runs; the outputs written are the last run's) and "hash": {"header",
   "chunk_bytes"} (each run's output 0 hashed as tensor_chunked_md5_hex, here)}
      -> {"ok": true, "run_ms", "compile_ms", "compiled", "evidence": {...}
          [, "digests": [one per run], "hash_s", "hash_threads"]
          [, "recovered": {"error", "moved", "to"}: a corrupt artifact in the framework's cache was
             moved aside (renamed, never deleted) and the graph compiled once more; or {"error",
             "action"}: the framework repaired it itself (backend.compile's state["recovered"])]}
  {"cmd": "time", the fields of "run" (no "repeat" or "hash"), "warmup": W, "calls": N}
      -> the reply of "run" (its outputs the last call's; "run_ms" the per-call time) and
         {"calls": N, "warmup": W, "call_ms": the batch's time over N, "batch_ms", "worker_ms": the
          warm-ups and the batch on the host clock, "clock": how the batch was timed}: W untimed
         calls, then N calls back to back timed as one batch (time_calls)
  {"cmd": "stats"} -> {"ok": true, "compiles", "compile_s"}
  {"cmd": "quit", "stats": PATH} -> {"ok": true}: the session ends (a server's, or the process);
      its compile counts are appended to PATH ($FUSEBENCH_WORKER_STATS when not given) first
Errors: {"ok": false, "error": last traceback line, "node": "<node>: <op> <dtype>[shape]" when the
failing line is one of the graph's statements, "traceback": full text}.

The backend module (devices/<framework>/<name>_backend.py) provides: VERSION, load(np array,
dtype name) -> framework tensor, save(tensor, path), to_host(tensor) -> contiguous numpy array
(bf16 as its uint16 bits), compile(fn, settings) ->
callable (fused), call(fn, args, settings) -> outputs (timed around), sync(outputs), and
evidence(compiled fn state) -> dict. Optional: timed_batch(state, inputs, settings, calls) ->
(nanoseconds of `calls` back-to-back calls, the clock's description, the last call's outputs), or None where the host clock
is the right one (torch on CUDA: an event pair around the batch); corrupt_cache_entry(error text) -> (the cache entry or
the whole cache directory to move aside, the error's telling line) when the error is the framework
loading a corrupt artifact from its on-disk cache, else None; cache_moved(path) after the move.
"""

import argparse
import concurrent.futures
import ctypes
import hashlib
import importlib
import importlib.util
import json
import linecache
import os
import select
import signal
import socket
import sys
import threading
import time
import traceback

import numpy as np

HASH_THREADS = os.cpu_count() or 1


def chunked_md5_hex(array, spec):
    """fusebench's tensor_chunked_md5_hex (common/src/hash.cpp) of a host array: the MD5 of the
    tensor's description followed by the MD5 of each fixed-size chunk of its bytes, the chunks hashed
    on every core (hashlib releases the GIL for large buffers)."""
    data = memoryview(array).cast("B")  # backend.to_host's arrays are contiguous
    size, chunk = len(data), int(spec["chunk_bytes"])
    parts = [data[i : i + chunk] for i in range(0, size, chunk)]
    with concurrent.futures.ThreadPoolExecutor(min(HASH_THREADS, max(len(parts), 1))) as pool:
        digests = list(pool.map(lambda part: hashlib.md5(part).digest(), parts))
    whole = hashlib.md5(spec["header"].encode())
    for d in digests:
        whole.update(d)
    return whole.hexdigest()


HOST_CLOCK = "time.perf_counter_ns around the batch, synchronised once after its last call"


def time_calls(backend, state, inputs, settings, warmup, calls):
    """`warmup` calls, then `calls` calls back to back timed as one batch: the framework's own
    steady state, without a request's round trip between calls. The batch is timed by the
    backend's timed_batch where it has one (CUDA events) and returns a time, else on the host
    clock with one synchronisation after the last call (its queued work done). Returns the last
    call's outputs and the figures of the "time" reply."""
    if not isinstance(calls, int) or isinstance(calls, bool) or calls < 1:
        raise ValueError(f"time: 'calls' must be a positive integer, got {calls!r}")
    if not isinstance(warmup, int) or isinstance(warmup, bool) or warmup < 0:
        raise ValueError(f"time: 'warmup' must be a non-negative integer, got {warmup!r}")
    begin = time.perf_counter_ns()
    outputs = None
    for _ in range(warmup):
        outputs = backend.call(state, inputs, settings)
    if outputs is not None:
        backend.sync(outputs)
    timed = getattr(backend, "timed_batch", None)
    measured = timed(state, inputs, settings, calls) if timed else None
    if measured is not None:
        batch_ns, clock, outputs = measured
    else:
        start = time.perf_counter_ns()
        for _ in range(calls):
            outputs = backend.call(state, inputs, settings)
        backend.sync(outputs)
        batch_ns, clock = time.perf_counter_ns() - start, HOST_CLOCK
    worker_ns = time.perf_counter_ns() - begin
    figures = {
        "calls": calls,
        "warmup": warmup,
        "call_ms": batch_ns / calls * 1e-6,
        "batch_ms": batch_ns * 1e-6,
        "worker_ms": worker_ns * 1e-6,
        "clock": clock,
    }
    return outputs, figures


def _node_of(tb, source_path):
    """The graph node whose statement raised: the comment at the end of the deepest line of the
    generated source in the traceback."""
    node = None
    for frame, lineno in traceback.walk_tb(tb):
        if os.path.abspath(frame.f_code.co_filename) == source_path:
            line = linecache.getline(source_path, lineno)
            if "# node " in line:
                node = line.split("# node ", 1)[1].strip()
    return node


def _open_backend(args):
    """(backend module, None) or (None, the hello's failure fields)."""
    sys.path.insert(0, args.backend_dir)
    try:
        backend = importlib.import_module(args.backend)
    except Exception as e:  # the framework is missing or broken
        return None, {"error": f"{type(e).__name__}: {e}"}
    try:
        if args.compile_backend:
            backend.setup(args.target, args.compile_backend)
        else:
            backend.setup(args.target)
    except Exception as e:  # imported, but its device (e.g. a CUDA GPU) is not here
        return None, {"target_error": f"{type(e).__name__}: {e}"}
    return backend, None


class Worker:
    """What outlives a session: the framework, the graphs' modules and their compiled callables
    (one compile per distinct graph and settings, keyed by the C++ side's content digest)."""

    def __init__(self, args):
        self.args = args
        self.backend, self.failure = _open_backend(args)
        self.modules = {}  # source path -> module
        self.compiled = {}  # key -> compiled state

    def _compile(self, fn, settings, inputs):
        """The compiled state and the seconds of compiling and the first call, timed together:
        torch.compile compiles lazily, in the first call; the xla backend compiles ahead of it,
        in backend.compile."""
        start = time.perf_counter()
        state = self.backend.compile(fn, settings, inputs)
        outputs = self.backend.call(state, inputs, settings)
        self.backend.sync(outputs)
        return state, time.perf_counter() - start

    def _move_corrupt_artifact(self, error):
        """When `error` is the framework loading a corrupt artifact from its on-disk cache
        (backend.corrupt_cache_entry names the entry, or the whole cache when it cannot tell which):
        renames that to <path>.corrupt-<UTC time>, never deletes it, and returns
        {"error", "moved", "to"}; None for any other error."""
        finder = getattr(self.backend, "corrupt_cache_entry", None)
        if finder is None:
            return None
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        found = finder(text)
        if not found:
            return None
        entry, sign = found
        if not os.path.exists(entry):
            return None
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        moved_to = f"{entry}.corrupt-{stamp}-{os.getpid()}"
        os.rename(entry, moved_to)
        if hasattr(self.backend, "cache_moved"):
            self.backend.cache_moved(entry)
        print(
            f"fusebench {self.args.backend} worker: a corrupt compiled artifact ({sign}): moved "
            f"{entry} aside to {moved_to}; compiling the graph once more",
            file=sys.stderr,
            flush=True,
        )
        return {"error": sign, "moved": entry, "to": moved_to}

    def hello(self):
        if self.failure:
            return {"ready": False, "python": sys.executable, **self.failure}
        return {
            "ready": True,
            "python": sys.executable,
            "version": self.backend.VERSION,
            "python_version": sys.version.split()[0],
        }

    def session(self, lines, reply):
        """One client's requests until quit or the end of its input."""
        reply(self.hello())
        if self.failure:  # said so; wait for quit
            for line in lines:
                request = json.loads(line)
                if request.get("cmd") == "quit":
                    reply({"ok": True})
                    break
            return
        backend = self.backend
        loaded = {}  # input path -> (file signature, framework tensor, its bytes as loaded): this client's files
        compiles, compile_s = 0, 0.0
        cache_before = backend.cache_stats() if hasattr(backend, "cache_stats") else {}
        stats_path = os.environ.get("FUSEBENCH_WORKER_STATS")
        for line in lines:
            request = json.loads(line)
            cmd = request.get("cmd")
            if cmd == "quit":
                stats_path = request.get("stats") or stats_path
                break
            if cmd == "stats":
                reply({"ok": True, "compiles": compiles, "compile_s": compile_s})
                continue
            source = os.path.abspath(request.get("source", ""))
            recovered = None  # the corrupt cache entry this request moved aside
            try:
                if source not in self.modules:
                    spec = importlib.util.spec_from_file_location(f"fusebench_graph_{len(self.modules)}", source)
                    module = importlib.util.module_from_spec(spec)
                    spec.loader.exec_module(module)
                    self.modules[source] = module
                fn = self.modules[source].graph_fn
                settings = request.get("settings", {})
                inputs = []
                for entry in request["inputs"]:
                    # An input file the C++ side did not rewrite (same inode and time) is the tensor
                    # already loaded, its pages already touched. A copy of its bytes, taken once as it
                    # is loaded, is kept beside it to find a callable that writes into its inputs.
                    info = os.stat(entry["path"])
                    signature = (info.st_ino, info.st_mtime_ns, info.st_size)
                    cached = loaded.get(entry["path"])
                    if cached is None or cached[0] != signature:
                        tensor = backend.load(entry["path"])
                        as_loaded = np.array(backend.to_host(tensor), copy=True)
                        cached = loaded[entry["path"]] = (signature, tensor, as_loaded)
                    inputs.append(cached[1])
                compile_ms, was_compiled, evidence = 0.0, False, {}
                if request["fused"]:
                    key = request["key"]
                    if key not in self.compiled:
                        try:
                            state, elapsed = self._compile(fn, settings, inputs)
                        except Exception as first:
                            # A corrupt artifact in the framework's on-disk cache fails every
                            # compile of this graph from then on: moved aside, compiled once more.
                            recovered = self._move_corrupt_artifact(first)
                            if recovered is None:
                                raise
                            state, elapsed = self._compile(fn, settings, inputs)
                        if isinstance(state, dict) and state.get("recovered"):
                            # the framework repaired an unreadable cache entry itself (JAX)
                            recovered = state["recovered"]
                            print(
                                f"fusebench {self.args.backend} worker: a corrupt compiled artifact "
                                f"({recovered['error']}): {recovered['action']}",
                                file=sys.stderr,
                                flush=True,
                            )
                        compile_ms = elapsed * 1e3
                        compiles += 1
                        compile_s += elapsed
                        was_compiled = True
                        state["evidence"] = backend.evidence(state, inputs)
                        self.compiled[key] = state
                    state = self.compiled[key]
                    evidence = state["evidence"]
                else:
                    state = backend.eager(fn, settings)
                timing = {}
                if cmd == "time":
                    if "repeat" in request or "hash" in request:
                        raise ValueError("time: 'repeat' and 'hash' belong to run requests, not to time")
                    outputs, timing = time_calls(
                        backend, state, inputs, settings, request.get("warmup", 0), request.get("calls")
                    )
                    run_ms = timing["call_ms"]
                # Task A: `repeat` runs, each one's output 0 hashed here, where it is (only the
                # last run's outputs travel back)
                digests, hash_s = [], 0.0
                for _ in range(0 if cmd == "time" else int(request.get("repeat", 1))):
                    start = time.perf_counter()
                    outputs = backend.call(state, inputs, settings)
                    backend.sync(outputs)
                    run_ms = (time.perf_counter() - start) * 1e3
                    if "hash" in request:
                        start = time.perf_counter()
                        digests.append(chunked_md5_hex(backend.to_host(outputs[0]), request["hash"]))
                        hash_s += time.perf_counter() - start
                written = _written_inputs(backend, request["inputs"], loaded)
                if written:
                    # the next request loads the file again; this one's results rest on other data
                    for entry in request["inputs"]:
                        loaded.pop(entry["path"], None)
                    what = (
                        "fused (" + str(settings.get("backend", self.args.backend)) + ")"
                        if request["fused"]
                        else "eager"
                    )
                    raise ValueError(
                        f"the {what} callable wrote into its inputs: {'; '.join(written)}; its results would rest on "
                        "other data than the reference's and eager's, so they are not returned"
                    )
                for out, path in zip(outputs, request["outputs"]):
                    backend.save(out, path)
                answer = {
                    "ok": True,
                    "run_ms": run_ms,
                    "compile_ms": compile_ms,
                    "compiled": was_compiled,
                    "evidence": evidence,
                    **timing,
                }
                if "hash" in request:
                    answer.update(digests=digests, hash_s=hash_s, hash_threads=HASH_THREADS)
                if recovered:
                    answer["recovered"] = recovered
                reply(answer)
            except Exception as e:
                last = traceback.format_exception_only(type(e), e)[-1].strip()
                if recovered:  # the recompile failed too: a real error, and what came before it
                    last = (
                        f"{last} (the second failure: the first, {recovered['error']}, moved "
                        f"{recovered['moved']} aside to {recovered['to']} and the graph was compiled again)"
                    )
                reply(
                    {
                        "ok": False,
                        "error": last,
                        "node": _node_of(e.__traceback__, source),
                        "traceback": traceback.format_exc(),
                    }
                )
        if compiles:
            print(
                f"fusebench {self.args.backend} worker: {compiles} graphs compiled in {compile_s:.2f} s",
                file=sys.stderr,
            )
        if stats_path:
            # one line per session: tools/run sums a suite's into run.json and the report's run line
            entry = {"backend": self.args.backend, "compiles": compiles, "compile_s": round(compile_s, 3)}
            if cache_before:
                entry.update({k: v - cache_before.get(k, 0) for k, v in backend.cache_stats().items()})
            with open(stats_path, "a") as f:
                f.write(json.dumps(entry) + "\n")
        reply({"ok": True})


def _written_inputs(backend, entries, loaded) -> list[str]:
    """The inputs whose bytes differ from those loaded from their files: 'x (N of M bytes)' each."""
    written = []
    for entry in entries:
        _, tensor, as_loaded = loaded[entry["path"]]
        now = np.ascontiguousarray(backend.to_host(tensor))
        if now.shape != as_loaded.shape or now.dtype != as_loaded.dtype:
            written.append(
                f"{entry['name']} (now {now.dtype}{list(now.shape)}, loaded {as_loaded.dtype}{list(as_loaded.shape)})"
            )
            continue
        changed = int(np.count_nonzero(now.view(np.uint8) != as_loaded.view(np.uint8)))
        if changed:
            written.append(f"{entry['name']} ({changed} of {as_loaded.nbytes} bytes)")
    return written


def _owner_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _disarm_parent_death_signal():
    """The C++ side armed PR_SET_PDEATHSIG (SIGKILL) for the start: from here the worker watches a
    process instead (_exit_when_gone), since the thread that started it may end before it does."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, 0, 0, 0, 0)  # PR_SET_PDEATHSIG = 1, no signal
    except (OSError, AttributeError):  # not Linux: nothing was armed
        pass


def _exit_when_gone(pid, on_exit):
    """Calls on_exit() (which must not return) as soon as process `pid` is gone: a thread waits on
    the process's pidfd, or polls it every 0.2 s where pidfds do not exist."""

    def watch():
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            on_exit()
        except (OSError, AttributeError):
            while _owner_alive(pid):
                time.sleep(0.2)
            on_exit()
        else:
            select.select([fd], [], [])
            on_exit()

    threading.Thread(target=watch, name=f"fusebench-watch-{pid}", daemon=True).start()


class _Shutdown:
    """The server's exit on SIGTERM, prompt wherever the server is: its socket and pidfile removed,
    then os._exit, never the interpreter's shutdown (joining a framework's threads and pools takes
    seconds). The signal is seen twice, whichever comes first: by the Python handler (the main
    thread, between bytecodes, also when accept/recv or a wait is interrupted) and by a thread
    reading the signal wakeup fd (when the main thread sits in a framework call that ignores EINTR
    and has released the GIL)."""

    def __init__(self, socket_path, pidfile):
        self.socket_path = socket_path
        self.pidfile = pidfile
        self.socket_inode = None  # the inode of the socket file this server made
        self.lock = threading.Lock()

    def cleanup(self):
        """Removes the pidfile and socket when they are still this server's."""
        try:
            if self.pidfile:
                with open(self.pidfile) as f:
                    mine = f.read().strip() == str(os.getpid())
                if mine:
                    os.unlink(self.pidfile)
        except OSError:
            pass
        try:
            if self.socket_inode is not None and os.stat(self.socket_path).st_ino == self.socket_inode:
                os.unlink(self.socket_path)
        except OSError:
            pass

    def exit(self, *_, why="SIGTERM"):
        if not self.lock.acquire(blocking=False):
            return  # the other path is exiting already
        try:
            print(f"fusebench worker server {os.getpid()}: {why}, exiting", file=sys.stderr, flush=True)
        except Exception:
            pass
        self.cleanup()
        os._exit(0)

    def install(self):
        signal.signal(signal.SIGTERM, self.exit)
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)

        def watch():
            while True:
                data = os.read(read_fd, 64)
                if not data or signal.SIGTERM in data:
                    self.exit()

        threading.Thread(target=watch, name="fusebench-sigterm", daemon=True).start()


def serve(worker, socket_path, shutdown, owner):
    """Sessions one after another on a Unix socket, until SIGTERM or the owner's exit."""
    pidfile = shutdown.pidfile
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # bound under a temporary name and renamed, so that a client never connects to a half-made server
    bound = f"{socket_path}.{os.getpid()}"
    listener.bind(bound)
    listener.listen(8)
    shutdown.socket_inode = os.stat(bound).st_ino
    os.replace(bound, socket_path)
    if pidfile:  # what tools/run stops at its end
        with open(pidfile, "w") as f:
            f.write(f"{os.getpid()}\n")
    listener.settimeout(2.0)
    try:
        while True:
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                if owner and not _owner_alive(owner):
                    return
                continue
            connection.settimeout(None)
            with connection, connection.makefile("r") as lines, connection.makefile("w", buffering=1) as out:

                def reply(obj):
                    out.write(json.dumps(obj) + "\n")
                    out.flush()

                try:
                    worker.session(lines, reply)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client went away mid-session; the next one is served
    finally:
        shutdown.cleanup()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", required=True)
    parser.add_argument("--backend-dir", required=True)
    parser.add_argument("--target", default="cpu")
    parser.add_argument("--compile-backend", default="", help="torch.compile's backend (torch devices only)")
    parser.add_argument("--serve", default="", help="a Unix socket to serve sessions on")
    args = parser.parse_args()

    # The protocol owns the real stdout (or the socket); anything a framework prints goes to stderr.
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr

    _disarm_parent_death_signal()
    if args.serve:
        # from before the framework's import (seconds): SIGTERM, and the run's end, stop it at once
        owner = int(os.environ.get("FUSEBENCH_WORKER_OWNER", "0") or 0)
        shutdown = _Shutdown(args.serve, os.environ.get("FUSEBENCH_WORKER_PIDFILE"))
        shutdown.install()
        if owner:
            _exit_when_gone(owner, lambda: shutdown.exit(why=f"its run's process {owner} is gone"))
        protocol.close()
        serve(Worker(args), args.serve, shutdown, owner)
        return
    parent = int(os.environ.get("FUSEBENCH_WORKER_PARENT", "0") or 0)
    if parent:
        _exit_when_gone(parent, lambda: os._exit(0))
    worker = Worker(args)

    def reply(obj):
        protocol.write(json.dumps(obj) + "\n")
        protocol.flush()

    worker.session(sys.stdin, reply)


if __name__ == "__main__":
    main()
