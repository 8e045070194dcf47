"""A worker server (fusebench_worker.py --serve) exits promptly on SIGTERM, wherever it is, and takes
its socket and pidfile with it: tools/run stops the run's servers with SIGTERM and waits for them.

- idle, waiting in accept() between sessions;
- in a session, blocked in the framework's compile in a C call that ignores signals and released
  the GIL (stuck_backend.py), where a Python signal handler alone never runs.
The same when the process that owns the server (FUSEBENCH_WORKER_OWNER: tools/run) is killed by SIGKILL
and can stop nothing: idle, stuck in a framework call, or still importing its framework.
Needs no framework: the server runs a backend of this directory's."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import pytest

HERE = pathlib.Path(__file__).resolve().parent
BRIDGE = HERE.parent
PROMPT_S = 1.5  # tools/run waits 10 s; the old server took 2.6 s idle and forever in a stuck call


def start_server(tmp_path: pathlib.Path, backend: str, backend_dir: pathlib.Path):
    sock = tmp_path / "w.sock"
    pidfile = tmp_path / "w.pid"
    log = open(tmp_path / "w.log", "w")
    env = dict(os.environ, FUSEBENCH_WORKER_PIDFILE=str(pidfile))
    env.pop("FUSEBENCH_WORKER_OWNER", None)
    process = subprocess.Popen(
        [sys.executable, "-u", str(BRIDGE / "fusebench_worker.py"), "--backend", backend, "--backend-dir",
         str(backend_dir), "--target", "cpu", "--serve", str(sock)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, env=env,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not (sock.exists() and pidfile.exists()):
        assert process.poll() is None, (
            f"the worker server exited with {process.returncode}: {(tmp_path / 'w.log').read_text()}"
        )
        assert time.monotonic() < deadline, "the worker server did not listen within 30 s"
        time.sleep(0.02)
    return process, sock, pidfile


def stop_and_time(process) -> float:
    start = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return float("inf")
    return time.monotonic() - start


def check_stopped(process, seconds, sock, pidfile, where):
    assert seconds < PROMPT_S, f"the worker server took {seconds:.2f} s to exit on SIGTERM {where} (limit {PROMPT_S} s)"
    assert process.returncode == 0, f"the worker server exited with {process.returncode} on SIGTERM {where}"
    assert not sock.exists(), f"the worker server left its socket {sock} behind on SIGTERM {where}"
    assert not pidfile.exists(), f"the worker server left its pidfile {pidfile} behind on SIGTERM {where}"


def test_sigterm_while_idle(tmp_path):
    process, sock, pidfile = start_server(tmp_path, "stuck_backend", HERE)
    time.sleep(0.3)  # in accept()
    seconds = stop_and_time(process)
    check_stopped(process, seconds, sock, pidfile, "while idle in accept()")


def test_sigterm_while_stuck_in_a_framework_call(tmp_path):
    process, sock, pidfile = start_server(tmp_path, "stuck_backend", HERE)
    graph = tmp_path / "graph.py"
    graph.write_text("def graph_fn():\n    return ()\n")
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(str(sock))
    lines = client.makefile("r")
    hello = json.loads(lines.readline())
    assert hello.get("ready"), f"stuck_backend's worker is not ready: {hello}"
    request = {
        "cmd": "run",
        "source": str(graph),
        "fused": True,
        "key": "stuck",
        "settings": {},
        "inputs": [],
        "outputs": [],
    }
    client.sendall((json.dumps(request) + "\n").encode())
    time.sleep(1.0)  # into backend.compile's second mutex lock
    assert process.poll() is None, f"the worker server exited before SIGTERM: {(tmp_path / 'w.log').read_text()}"
    seconds = stop_and_time(process)
    client.close()
    check_stopped(process, seconds, sock, pidfile, "while stuck in a framework call")


def test_sigterm_with_torch_imported(tmp_path):
    """The real server, torch imported: the interpreter's shutdown is what took seconds."""
    try:
        import torch  # noqa: F401
    except ImportError as e:
        pytest.skip(f"torch is not importable from {sys.executable}: {e}")
    process, sock, pidfile = start_server(tmp_path, "torch_backend", BRIDGE.parent / "torch")
    time.sleep(0.3)
    seconds = stop_and_time(process)
    check_stopped(process, seconds, sock, pidfile, "with torch imported, idle")


# ---- the run that owns the server (FUSEBENCH_WORKER_OWNER) dies, by SIGKILL: nothing of it can stop the server
SLOW_IMPORT_BACKEND = "import time\ntime.sleep(600)\nVERSION = 'never'\n"


def start_owned_server(tmp_path: pathlib.Path, backend: str, backend_dir: pathlib.Path, wait_listening: bool):
    owner = subprocess.Popen(["sleep", "600"])
    sock, pidfile = tmp_path / "w.sock", tmp_path / "w.pid"
    log = open(tmp_path / "w.log", "w")
    env = dict(os.environ, FUSEBENCH_WORKER_PIDFILE=str(pidfile), FUSEBENCH_WORKER_OWNER=str(owner.pid))
    process = subprocess.Popen(
        [sys.executable, "-u", str(BRIDGE / "fusebench_worker.py"), "--backend", backend, "--backend-dir",
         str(backend_dir), "--target", "cpu", "--serve", str(sock)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, env=env,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while wait_listening and not (sock.exists() and pidfile.exists()):
        assert process.poll() is None, f"the worker server exited with {process.returncode}"
        assert time.monotonic() < deadline, "the worker server did not listen within 30 s"
        time.sleep(0.02)
    return owner, process, sock, pidfile


def kill_owner_and_time(owner, process) -> float:
    start = time.monotonic()
    owner.kill()
    owner.wait()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return float("inf")
    return time.monotonic() - start


@pytest.mark.parametrize("where", ["idle", "stuck in a framework call", "importing its framework"])
def test_a_server_exits_at_once_when_its_owner_is_killed(tmp_path, where):
    if where == "importing its framework":
        (tmp_path / "slow_import_backend.py").write_text(SLOW_IMPORT_BACKEND)
        owner, process, sock, pidfile = start_owned_server(tmp_path, "slow_import_backend", tmp_path, False)
        time.sleep(1.0)  # in the import
    else:
        owner, process, sock, pidfile = start_owned_server(tmp_path, "stuck_backend", HERE, True)
        if where == "stuck in a framework call":
            graph = tmp_path / "graph.py"
            graph.write_text("def graph_fn():\n    return ()\n")
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.connect(str(sock))
            assert json.loads(client.makefile("r").readline()).get("ready")
            request = {"cmd": "run", "source": str(graph), "fused": True, "key": "stuck", "settings": {}}
            client.sendall((json.dumps({**request, "inputs": [], "outputs": []}) + "\n").encode())
        time.sleep(1.0)
    assert process.poll() is None, f"the worker server exited early: {(tmp_path / 'w.log').read_text()}"
    seconds = kill_owner_and_time(owner, process)
    log = (tmp_path / "w.log").read_text()
    assert seconds < PROMPT_S, f"the server took {seconds:.2f} s to exit after its owner's SIGKILL ({where}): {log}"
    assert f"its run's process {owner.pid} is gone, exiting" in log, log
    assert not sock.exists() and not pidfile.exists(), f"socket or pidfile left behind ({where})"
