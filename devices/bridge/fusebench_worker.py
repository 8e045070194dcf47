"""The Python side of fusebench's framework bridge: one long-lived worker process per framework.

The C++ device (devices/bridge/bridge.cpp) starts `python fusebench_worker.py --backend NAME
--target TARGET` and talks JSON lines over the worker's stdin/stdout: one request, one reply.
Tensors never travel through the pipe: inputs are .npy files in shared memory (/dev/shm) that
the worker maps (numpy mmap, copy-on-write) and hands to the framework without a copy where
the framework accepts the mapping; outputs are written back as .npy next to them.

Requests:
  {"cmd": "run", "source": PATH, "fused": bool, "settings": {...}, "key": STR,
   "inputs": [{"name", "path"}...], "outputs": [PATH...]}
      -> {"ok": true, "run_ms", "compile_ms", "compiled", "evidence": {...}}
  {"cmd": "stats"} -> {"ok": true, "compiles", "compile_s"}
  {"cmd": "quit"}
Errors: {"ok": false, "error": last traceback line, "node": "<node>: <op> <dtype>[shape]" when the
failing line is one of the graph's statements, "traceback": full text}.

The backend module (devices/<framework>/<name>_backend.py) provides: VERSION, load(np array,
dtype name) -> framework tensor, save(tensor) -> numpy array, compile(fn, settings) ->
callable (fused), call(fn, args, settings) -> outputs (timed around), sync(outputs), and
evidence(compiled fn state) -> dict.
"""

import argparse
import importlib
import importlib.util
import json
import linecache
import os
import sys
import time
import traceback


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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", required=True)
    parser.add_argument("--backend-dir", required=True)
    parser.add_argument("--target", default="cpu")
    parser.add_argument("--compile-backend", default="", help="torch.compile's backend (torch devices only)")
    args = parser.parse_args()

    # The protocol owns the real stdout; anything a framework prints goes to stderr.
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr

    def reply(obj):
        protocol.write(json.dumps(obj) + "\n")
        protocol.flush()

    sys.path.insert(0, args.backend_dir)
    failure = None
    try:
        backend = importlib.import_module(args.backend)
    except Exception as e:  # the framework is missing or broken
        failure = {"error": f"{type(e).__name__}: {e}"}
    else:
        try:
            if args.compile_backend:
                backend.setup(args.target, args.compile_backend)
            else:
                backend.setup(args.target)
        except Exception as e:  # imported, but its device (e.g. a CUDA GPU) is not here
            failure = {"target_error": f"{type(e).__name__}: {e}"}
    if failure:  # say so, then wait for quit
        reply({"ready": False, "python": sys.executable, **failure})
        for line in sys.stdin:
            if json.loads(line).get("cmd") == "quit":
                break
        return
    reply(
        {"ready": True, "python": sys.executable, "version": backend.VERSION, "python_version": sys.version.split()[0]}
    )

    modules = {}  # source path -> module
    loaded = {}  # input path -> (file signature, framework tensor)
    compiled = {}  # key -> compiled callable (one compile per distinct graph and settings)
    compiles, compile_s = 0, 0.0

    for line in sys.stdin:
        request = json.loads(line)
        cmd = request.get("cmd")
        if cmd == "quit":
            break
        if cmd == "stats":
            reply({"ok": True, "compiles": compiles, "compile_s": compile_s})
            continue
        source = os.path.abspath(request.get("source", ""))
        try:
            if source not in modules:
                spec = importlib.util.spec_from_file_location(f"fusebench_graph_{len(modules)}", source)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                modules[source] = module
            fn = modules[source].graph_fn
            settings = request.get("settings", {})
            inputs = []
            for entry in request["inputs"]:
                # An input file the C++ side did not rewrite (same inode and time) is the tensor
                # already loaded: no copy, and its pages are already touched.
                info = os.stat(entry["path"])
                signature = (info.st_ino, info.st_mtime_ns, info.st_size)
                cached = loaded.get(entry["path"])
                if cached is None or cached[0] != signature:
                    cached = loaded[entry["path"]] = (signature, backend.load(entry["path"]))
                inputs.append(cached[1])
            compile_ms, was_compiled, evidence = 0.0, False, {}
            if request["fused"]:
                key = request["key"]
                if key not in compiled:
                    # Compiling and the first call, timed together: torch.compile compiles lazily, in
                    # the first call; the xla backend compiles ahead of it, in backend.compile.
                    start = time.perf_counter()
                    state = backend.compile(fn, settings, inputs)
                    outputs = backend.call(state, inputs, settings)
                    backend.sync(outputs)
                    elapsed = time.perf_counter() - start
                    compile_ms = elapsed * 1e3
                    compiles += 1
                    compile_s += elapsed
                    was_compiled = True
                    state["evidence"] = backend.evidence(state, inputs)
                    compiled[key] = state
                state = compiled[key]
                evidence = state["evidence"]
            else:
                state = backend.eager(fn, settings)
            start = time.perf_counter()
            outputs = backend.call(state, inputs, settings)
            backend.sync(outputs)
            run_ms = (time.perf_counter() - start) * 1e3
            for out, path in zip(outputs, request["outputs"]):
                backend.save(out, path)
            reply(
                {"ok": True, "run_ms": run_ms, "compile_ms": compile_ms, "compiled": was_compiled, "evidence": evidence}
            )
        except Exception as e:
            last = traceback.format_exception_only(type(e), e)[-1].strip()
            reply(
                {
                    "ok": False,
                    "error": last,
                    "node": _node_of(e.__traceback__, source),
                    "traceback": traceback.format_exc(),
                }
            )
    if compiles:
        print(f"fusebench {args.backend} worker: {compiles} graphs compiled in {compile_s:.2f} s", file=sys.stderr)
    stats_path = os.environ.get("FUSEBENCH_WORKER_STATS")
    if stats_path:
        # one line per worker process: tools/run sums them into run.json and the report's run line
        entry = {"backend": args.backend, "compiles": compiles, "compile_s": round(compile_s, 3)}
        if hasattr(backend, "cache_stats"):
            entry.update(backend.cache_stats())
        with open(stats_path, "a") as f:
            f.write(json.dumps(entry) + "\n")


if __name__ == "__main__":
    main()
