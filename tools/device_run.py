"""The offline device runner: on a lent accelerator machine with no network, unpacks the bundle that
tools/device-bundle wrote, configures and builds fusebench against it, then runs a plan of steps,
most valuable first, inside a budget of seconds. It writes as it goes, so a run cut short keeps every
finished step:
  OUT/device-run.log   every command and its output
  OUT/summary.json     each step's status, seconds and reason; the machine; the run's id; rewritten
                       after each step
  OUT/results.tar.gz   the results directory in the layout tools/run writes (suite JSON, run.json,
                       small evidence files), so the report, compare and gate read it, and device/
                       in it: the logs, the machine, the summary, the scripts' JSON
The budget is checked between steps: a measurement step starts only when its estimate (GPU seconds,
`estimate_s`) fits what is left, the next one that fits goes ahead of one that does not, and a step
runs at most until the budget's end (less a reserve for packing). The plan resumes across loans:
`--state` (results/device-plan/state.json, committed; tools/device_plan.py writes it from what came
back) names the steps done, which are skipped. Standard library only: it runs under the device
image's Python.

Each call is a run with an id of its own (UTC time, "-device-" and a random part), which every command
it starts gets as FUSEBENCH_RUN_ID, as tools/run gives its suites their run's: the suites write it into
their results' context and run.json and summary.json record it, so the readers can tell that a file is
this run's. A fresh call starts an empty results directory (an earlier call's went back in its OUT); a
call with --resume continues the earlier call's run, its id and results.

Usage (there): python3 tools/device_run.py --bundle device-bundle --out "$OUT" --budget 520 \
                 --state results/device-plan/state.json
Rehearsals (here, CI): tools/device-rehearsal --plan runs the GPU plan on this CPU with stand-ins
(`--stand-in`); tools/device-rehearsal --bundle ... runs `--plan rehearsal`, a cold build from the
bundle with the network off and the bundled packages hidden."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.util
import io
import json
import os
import pathlib
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable

ROOT = pathlib.Path(__file__).resolve().parent.parent


def import_repository_packages(*names: str) -> None:
    """Run as a script (python3 tools/device_run.py, the device machine's command), Python puts tools/
    on the path, not the repository: its packages are then imported from their folders, under their
    own names, so that `tools.run_manifest` and what it imports resolve as in the checkout."""
    for name in names:
        spec = importlib.util.spec_from_file_location(name, ROOT / name / "__init__.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)


if not __package__:
    import_repository_packages("tools", "reports")

from tools.run_manifest import ENTRIES, INSTANCES, write_run_manifest  # noqa: E402

# Seconds kept back at the budget's end for writing summary.json and packing results.tar.gz.
PACK_RESERVE_S = 10
# Files larger than this stay out of results.tar.gz (the device tool brings back at most 16 MiB a
# file); each one left out is named in summary.json.
LARGEST_PACKED_FILE = 2 * 1024 * 1024
ARCH_TRIPLET = "x86_64-linux-gnu"
# Each command's process group dies with this runner, SIGKILL included (lifeline.py --group)
LIFELINE = ROOT / "tools" / "lifeline.py"


class BudgetSpent(Exception):
    pass


@dataclasses.dataclass
class Outcome:
    status: str  # ok | failed | timed_out | skipped
    reason: str = ""
    facts: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Step:
    name: str
    what: str
    action: Callable[[Runner, float], Outcome]
    timeout_s: float
    min_s: float = 5
    needs: tuple[str, ...] = ()
    # the step's expected seconds on the lent GPU machine (a measurement step starts only when this
    # fits the budget left); 0 for setup steps, which always run
    estimate_s: float = 0
    # the priority (1 first) and the unit this step is of its task (a seed, a device)
    priority: int = 0


class Runner:
    """Runs a plan's steps in order within `budget_s`, recording each one's outcome and packing
    the results after each step."""

    def __init__(
        self,
        out: pathlib.Path,
        work: pathlib.Path,
        budget_s: float,
        clock=time.monotonic,
        done_elsewhere: dict[str, str] | None = None,
        measured_elsewhere: dict[str, float] | None = None,
    ):
        self.out = out
        # step -> where it was done (an earlier loan, from the plan's state file): skipped here
        self.done_elsewhere = done_elsewhere or {}
        # step -> the seconds an earlier loan ran it before it was cut or failed: a floor on its time
        self.measured_elsewhere = measured_elsewhere or {}
        self.work = work
        self.budget_s = budget_s
        self.clock = clock
        self.started = clock()
        self.results = work / "results"
        # what is not a suite's result (logs, the machine, the summary, the scripts' JSON): beside
        # the suites' files, where the report does not read it as one
        self.extras = self.results / "device"
        self.env = dict(os.environ)
        self.steps: list[dict] = []
        self.facts: dict = {}
        # set by run_plan: a new run's, or the resumed run's; None for a resumed run that named none
        self.run_id: str | None = None
        self.left_out: list[str] = []
        # writes run.json from what the suites appended so far (set by a plan that runs suites)
        self.manifest: Callable[[Runner], None] | None = None
        out.mkdir(parents=True, exist_ok=True)
        self.extras.mkdir(parents=True, exist_ok=True)
        self.log_file = open(out / "device-run.log", "a", buffering=1)
        self.lock = threading.Lock()

    def append(self, name: str, text: str) -> None:
        """Appends to a file of the results directory (parallel steps share .entries.tsv)."""
        with self.lock, (self.results / name).open("a") as f:
            f.write(text)

    # ---- time
    def elapsed(self) -> float:
        return self.clock() - self.started

    def remaining(self) -> float:
        return self.budget_s - self.elapsed()

    def say(self, message: str) -> None:
        line = f"device-run [{self.elapsed():5.0f}/{self.budget_s:.0f} s] {message}"
        print(line, flush=True)
        self.log_file.write(line + "\n")

    # ---- commands
    def command(
        self,
        argv: list[str],
        timeout_s: float,
        log_name: str | None = None,
        cwd: pathlib.Path | None = None,
        env: dict | None = None,
        echo: bool = True,
    ) -> tuple[int | None, str]:
        """Runs argv in its own process group, its output to the log (and to results/logs/<log_name>
        when named); returns (exit status or None when it timed out, the output's last 4 KiB). The
        group's leader is lifeline.py, which kills the group when this process dies: a runner killed
        with SIGKILL (the device tool's limit, a scheduler) runs no handler, and neither the command
        nor what it started (ctest's tests, pip's compilers) may go on holding the machine."""
        self.log_file.write(f"$ {shlex.join(argv)}\n")
        tail = io.StringIO()
        log_copy = None
        if log_name:
            (self.extras / "logs").mkdir(exist_ok=True)
            log_copy = open(self.extras / "logs" / log_name, "a")
        proc = subprocess.Popen(
            [sys.executable, "-S", str(LIFELINE), "--group", str(os.getpid()), *argv],
            cwd=cwd or ROOT,
            env=env or self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            text=True,
            errors="replace",
        )

        def relay() -> None:  # on its own thread, so that the wait below can time out
            for line in proc.stdout:
                self.log_file.write(line)
                tail.write(line)
                if log_copy:
                    log_copy.write(line)
                if echo:
                    sys.stdout.write(line)
                    sys.stdout.flush()

        reader = threading.Thread(target=relay, daemon=True)
        reader.start()
        timed_out = False
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            self.stop_group(proc)
        reader.join(10)
        if log_copy:
            log_copy.close()
        text = tail.getvalue()
        return (None if timed_out else proc.returncode), text[-4096:]

    def stop_group(self, proc: subprocess.Popen) -> None:
        for sig, wait_s in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(wait_s)
                return
            except subprocess.TimeoutExpired:
                continue

    # ---- the plan
    def run_plan(
        self, plan: list[Step], only: set[str] | None = None, resume: bool = False, strict: bool = False
    ) -> int:
        self.say(f"plan of {len(plan)} steps, budget {self.budget_s:.0f} s, results in {self.results}")
        # One worker server per framework device for the whole plan, as in tools/run
        workers = self.work / "workers"
        workers.mkdir(parents=True, exist_ok=True)
        self.env["FUSEBENCH_WORKER_DIR"] = str(workers)
        self.env["FUSEBENCH_WORKER_OWNER"] = str(os.getpid())
        self.env.setdefault("FUSEBENCH_KERNEL_CACHE", str(self.work / "kernel-cache"))
        # JAX takes 75 % of the GPU's memory at start by default; torch's workers share the card
        self.env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        finished_before = self.start_run(resume)
        self.say(f"run {self.run_id or '(resumed, unnamed)'}")
        done_ok: set[str] = set()
        try:
            self.run_steps(plan, only, finished_before, done_ok)
        finally:
            stop_worker_servers(workers)
        self.say("plan done")
        self.print_table()
        passing = ("ok",) if strict else ("ok", "skipped")
        return 0 if all(s["status"] in passing for s in self.steps) else 1

    def start_run(self, resume: bool) -> set[str]:
        """Names the run and gives its id to every command (FUSEBENCH_RUN_ID); returns the measurement
        steps an earlier call on this machine finished when resuming (setup steps always run: they set
        this process's environment, and repeat in seconds). A fresh call empties the results directory:
        a file of another run there would be listed in this run's run.json under this run's id."""
        summary = self.extras / "summary.json"
        finished: set[str] = set()
        if resume and summary.exists():
            earlier = json.loads(summary.read_text())
            self.steps = [s for s in earlier["steps"] if s["status"] == "ok" and s["step"] not in SETUP_STEPS]
            finished = {s["step"] for s in self.steps}
            self.run_id = earlier.get("run_id")  # absent: its files name no run, nor will this call's
        else:
            shutil.rmtree(self.results, ignore_errors=True)
            self.extras.mkdir(parents=True)
            self.run_id = new_run_id()
        if self.run_id:
            self.env["FUSEBENCH_RUN_ID"] = self.run_id
        else:
            self.env.pop("FUSEBENCH_RUN_ID", None)
        return finished

    def run_steps(self, plan: list[Step], only: set[str] | None, finished_before: set[str], done_ok: set[str]) -> None:
        for step in plan:
            if only is not None and step.name not in only:
                continue
            if step.name in finished_before:
                done_ok.add(step.name)
                self.say(f"{step.name}: finished by an earlier call, kept")
                continue
            if step.name in self.done_elsewhere:
                self.say(f"{step.name}: done in {self.done_elsewhere[step.name]} (the plan's state), not run again")
                continue
            record = {"step": step.name, "what": step.what, "started_s": round(self.elapsed(), 1)}
            if step.estimate_s:
                record["estimate_s"] = step.estimate_s
            missing = [n for n in step.needs if n not in done_ok]
            left = self.remaining() - PACK_RESERVE_S
            if missing:
                outcome = Outcome("skipped", f"needs {', '.join(missing)}, which did not succeed")
            elif self.expected_s(step) > left:
                measured = self.measured_elsewhere.get(step.name, 0)
                basis = "an earlier loan ran it that long" if measured > step.estimate_s else "its estimate"
                outcome = Outcome(
                    "skipped",
                    f"budget: {max(left, 0):.0f} s left, the step takes about {self.expected_s(step):.0f} s ({basis})",
                )
            elif left < step.min_s:
                outcome = Outcome(
                    "skipped", f"budget: {max(left, 0):.0f} s left, the step needs at least {step.min_s:.0f} s"
                )
            else:
                timeout = min(step.timeout_s, left)
                self.say(f"{step.name}: {step.what} (at most {timeout:.0f} s)")
                t0 = self.clock()
                try:
                    outcome = step.action(self, timeout)
                except Exception as e:  # a broken step must not stop the plan
                    outcome = Outcome("failed", f"{type(e).__name__}: {e}")
                record["seconds"] = round(self.clock() - t0, 1)
            record["status"] = outcome.status
            if outcome.reason:
                record["reason"] = outcome.reason
            if outcome.facts:
                record["facts"] = outcome.facts
            self.steps.append(record)
            if outcome.status == "ok":
                done_ok.add(step.name)
            self.say(f"{step.name}: {outcome.status}{': ' + outcome.reason if outcome.reason else ''}")
            self.pack()

    def expected_s(self, step: Step) -> float:
        if not step.estimate_s:  # a setup step: always started
            return 0
        return max(step.estimate_s, self.measured_elsewhere.get(step.name, 0))

    def print_table(self) -> None:
        print("\nstep                          status     seconds  reason")
        for s in self.steps:
            print(f"{s['step']:<30}{s['status']:<11}{s.get('seconds', 0):>7}  {s.get('reason', '')[:90]}")

    # ---- output
    def pack(self) -> None:
        with self.lock:
            self.pack_locked()

    def pack_locked(self) -> None:
        summary = {
            "run_id": self.run_id,
            "revision": self.env.get("FUSEBENCH_REVISION", "unknown"),
            "budget_s": self.budget_s,
            "elapsed_s": round(self.elapsed(), 1),
            "written": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "machine": self.facts,
            "steps": self.steps,
            "left_out_of_results": self.left_out,
        }
        write_atomically(self.out / "summary.json", json.dumps(summary, indent=1) + "\n")
        write_atomically(self.extras / "summary.json", json.dumps(summary, indent=1) + "\n")
        if self.manifest:
            try:
                self.manifest(self)
            except Exception as e:  # the results stay; run.json can be written again from them here
                self.say(f"run.json not written: {type(e).__name__}: {e}")
        tmp = self.out / ".results.tar.gz.tmp"
        left_out = []
        with tarfile.open(tmp, "w:gz") as tar:
            for path in sorted(self.results.rglob("*")):
                if path.is_dir() or path.is_symlink():
                    continue
                if path.stat().st_size > LARGEST_PACKED_FILE:
                    left_out.append(f"{path.relative_to(self.results)} ({path.stat().st_size} bytes)")
                    continue
                tar.add(path, arcname=str(pathlib.Path("results") / path.relative_to(self.results)))
        os.replace(tmp, self.out / "results.tar.gz")
        self.left_out = left_out


def new_run_id() -> str:
    """A run's id that sorts by time as tools/run's (its directory's name, the UTC start) and that no
    other call shares: two calls in one second differ in the random part."""
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-device-{secrets.token_hex(4)}"


def stop_worker_servers(workers: pathlib.Path) -> None:
    pids = []
    for pidfile in workers.glob("*.pid"):
        try:
            pids.append(int(pidfile.read_text().strip()))
        except (OSError, ValueError):
            continue
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def write_atomically(path: pathlib.Path, text: str) -> None:
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# ---- unpacking Debian packages without dpkg (an `ar` archive holding data.tar.*)
def extract_deb(deb: pathlib.Path, prefix: pathlib.Path) -> None:
    data = deb.read_bytes()
    if not data.startswith(b"!<arch>\n"):
        raise ValueError(f"{deb}: not a Debian package (no ar header)")
    offset = 8
    while offset + 60 <= len(data):
        header = data[offset : offset + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        body = data[offset + 60 : offset + 60 + size]
        offset += 60 + size + (size & 1)
        if not name.startswith("data.tar"):
            continue
        if name.endswith(".zst"):  # Python's tarfile has no zstd before 3.14: dpkg-deb does it
            subprocess.run(["dpkg-deb", "-x", str(deb), str(prefix)], check=True)
            return
        with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as tar:
            kwargs = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}
            tar.extractall(prefix, **kwargs)
        return
    raise ValueError(f"{deb}: no data.tar member")


# ---- the steps
@dataclasses.dataclass
class Settings:
    bundle: pathlib.Path
    build_dir: pathlib.Path
    python: str
    jobs: int
    cuda: str  # ON | OFF | AUTO
    cuda_architectures: str
    targets: list[str]
    suite_runs: SuiteRuns | None = None  # set by a plan that runs suites
    stand_in: bool = False  # the GPU plan on this machine: CPU-side devices, one small case a suite
    estimate_scale: float = 1.0  # a stand-in's estimate is a share of the GPU step's


def unpack_step(settings: Settings) -> Callable[[Runner, float], Outcome]:
    def action(runner: Runner, timeout: float) -> Outcome:
        manifest = settings.bundle / "MANIFEST"
        if not manifest.is_file():
            return Outcome("failed", f"{manifest}: no bundle here (write it with tools/device-bundle and carry it)")
        prefix = runner.work / "prefix"
        shutil.rmtree(prefix, ignore_errors=True)
        prefix.mkdir(parents=True)
        import hashlib

        count = 0
        for line in manifest.read_text().splitlines():
            if line.startswith("#") or not line.strip():
                continue
            package, version, sha256, rel = line.split(" ", 3)
            deb = settings.bundle / rel
            got = hashlib.sha256(deb.read_bytes()).hexdigest()
            if got != sha256:
                return Outcome("failed", f"{deb}: SHA-256 {got} is not the manifest's {sha256} ({package} {version})")
            extract_deb(deb, prefix)
            count += 1
        revision, problem = checked_tree(settings.bundle, ROOT)
        if problem:
            return Outcome("failed", problem)
        runner.env["FUSEBENCH_REVISION"] = revision  # cmake/write_revision.cmake stamps the binaries with it
        runner.facts["revision"] = revision
        provenance = runner.extras / "provenance"  # the stamp and the uncommitted difference come back
        provenance.mkdir(parents=True, exist_ok=True)
        for name in ("REVISION", "TREE.sha256", "tree.diff"):
            if (settings.bundle / name).is_file():
                shutil.copy(settings.bundle / name, provenance / name)
        usr = prefix / "usr"
        lib = usr / "lib" / ARCH_TRIPLET
        env = runner.env
        env["FUSEBENCH_DEVICE_PREFIX"] = str(usr)
        env["CMAKE_PREFIX_PATH"] = os.pathsep.join(filter(None, [str(usr), env.get("CMAKE_PREFIX_PATH")]))
        env["CPATH"] = os.pathsep.join(
            filter(None, [str(usr / "include"), str(usr / "include" / ARCH_TRIPLET), env.get("CPATH")])
        )
        env["LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(lib), env.get("LIBRARY_PATH")]))
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(lib), env.get("LD_LIBRARY_PATH")]))
        env["OPENSSL_ROOT_DIR"] = str(usr)
        # Debian's CMake package files may predate CMake 4's policy floor
        env.setdefault("CMAKE_POLICY_VERSION_MINIMUM", "3.5")
        return Outcome("ok", facts={"packages": count, "prefix": str(usr), "revision": revision})

    return action


def checked_tree(bundle: pathlib.Path, root: pathlib.Path) -> tuple[str, str]:
    """The revision the bundle was stamped with (tools/device-bundle: the commit, and the SHA-256 of
    the uncommitted difference when there was one) and, when a file of the copy here is not the
    one stamped (missing or other content), why the stamp cannot name this tree."""
    stamp, listing = bundle / "REVISION", bundle / "TREE.sha256"
    if not stamp.is_file() or not listing.is_file():
        return "", f"{bundle}: no REVISION or TREE.sha256 (write the bundle again with tools/device-bundle)"
    revision = stamp.read_text().strip()
    import hashlib

    wrong = []
    for line in listing.read_text().splitlines():
        digest, _, rel = line.partition("  ")
        path = root / rel
        if not path.is_file():
            wrong.append(f"{rel} (missing)")
        elif hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            wrong.append(f"{rel} (differs)")
    if wrong:
        return revision, (
            f"the tree here is not the one stamped {revision}: {len(wrong)} file(s) differ, e.g. "
            f"{', '.join(wrong[:3])} (stamp the bundle again: tools/device-bundle --stamp)"
        )
    return revision, ""


def environment_step(settings: Settings) -> Callable[[Runner, float], Outcome]:
    """The Python wrapper (a script that execs the chosen interpreter: a symlink would lose its
    virtual environment), the CUDA libraries' unversioned names, task E's text, and the facts
    about the machine."""

    def action(runner: Runner, timeout: float) -> Outcome:
        env = runner.env
        facts = runner.facts
        python = os.path.abspath(shutil.which(settings.python) or settings.python)
        if not os.access(python, os.X_OK):
            return Outcome("failed", f"--python {settings.python}: no such interpreter")
        wrapper_dir = runner.work / "python" / "bin"
        wrapper_dir.mkdir(parents=True, exist_ok=True)
        wrapper = wrapper_dir / "python"
        write_atomically(wrapper, f'#!/bin/sh\nexec {shlex.quote(python)} "$@"\n')
        wrapper.chmod(0o755)
        (wrapper_dir / "python3").unlink(missing_ok=True)
        (wrapper_dir / "python3").symlink_to("python")
        env["FUSEBENCH_PYTHON"] = str(wrapper)
        # tools the interpreter's environment carries (cmake, ninja from PyPI) after the system's
        env["PATH"] = os.pathsep.join([env.get("PATH", ""), str(pathlib.Path(python).parent)])
        facts["python"] = python
        code = (
            "import json, platform, importlib\n"
            "v = {'python': platform.python_version()}\n"
            "for m in ('torch', 'triton', 'jax', 'jaxlib', 'numpy', 'ml_dtypes'):\n"
            "    try: v[m] = importlib.import_module(m).__version__\n"
            "    except Exception as e: v[m] = f'absent ({type(e).__name__})'\n"
            "try:\n"
            "    import torch; v['torch_cuda'] = torch.version.cuda; v['cuda_available'] = torch.cuda.is_available()\n"
            "    v['gpu'] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None\n"
            "except Exception as e: v['cuda_available'] = f'{type(e).__name__}: {e}'\n"
            "print(json.dumps(v))\n"
        )
        status, text = runner.command([str(wrapper), "-c", code], min(timeout, 120))
        if status == 0:
            facts["versions"] = json.loads(text.strip().splitlines()[-1])
        if shutil.which("nvidia-smi"):
            status, text = runner.command(
                [
                    "nvidia-smi",
                    "--query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem",
                    "--format=csv,noheader",
                ],
                30,
            )
            if status == 0:
                facts["nvidia_smi"] = text.strip()
        for tool in ("cmake", "ninja", "g++", "nvcc"):
            path = shutil.which(tool, path=env["PATH"])
            if path:
                status, text = runner.command([path, "--version"], 30)
                facts[tool] = (text.strip().splitlines() or [""])[0 if tool != "nvcc" else -1]
            else:
                facts[tool] = "not found"
        facts["cpus"] = os.cpu_count()
        facts["kernel"] = os.uname().release
        (runner.extras / "machine.json").write_text(json.dumps(facts, indent=1) + "\n")
        cuda_libraries(runner)
        fortunes = data_files(runner)
        return Outcome("ok", facts={"cuda_libraries": facts.get("cuda_libraries"), "fortunes": fortunes})

    return action


CUDA_LIBRARIES = ("cudart", "nvrtc", "cublas", "cublasLt")


def cuda_libraries(runner: Runner) -> None:
    """FindCUDAToolkit looks for unversioned names (libcublas.so); a toolkit of runtime packages
    (the frameworks' nvidia-* wheels, say) has only libcublas.so.13. Links with unversioned names,
    in a directory of our own, point CMake at them; the loader is pointed at the real ones."""
    env = runner.env
    nvcc = shutil.which("nvcc", path=env.get("PATH"))
    roots = []
    if nvcc:
        roots.append(pathlib.Path(nvcc).resolve().parent.parent)
    roots += [pathlib.Path("/usr/local/cuda"), pathlib.Path("/usr/lib") / ARCH_TRIPLET]
    python_dir = pathlib.Path(runner.facts.get("python", "/nonexistent")).resolve().parent.parent
    roots += sorted(python_dir.glob("lib/python3*/site-packages/nvidia"))
    shim = runner.work / "cuda-shim" / "lib"
    shim.mkdir(parents=True, exist_ok=True)
    found = {}
    for name in CUDA_LIBRARIES:
        for root in roots:
            candidates = sorted(root.rglob(f"lib{name}.so*")) if root.is_dir() else []
            candidates = [c for c in candidates if c.name == f"lib{name}.so" or c.name.startswith(f"lib{name}.so.")]
            if candidates:
                target = candidates[0] if candidates[0].name == f"lib{name}.so" else candidates[-1]
                link = shim / f"lib{name}.so"
                link.unlink(missing_ok=True)
                link.symlink_to(target.resolve())
                found[name] = str(target)
                break
    lib_dirs = sorted({str(pathlib.Path(p).resolve().parent) for p in found.values()})
    env["CMAKE_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(shim), env.get("CMAKE_LIBRARY_PATH")]))
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [env.get("LD_LIBRARY_PATH"), *lib_dirs]))
    runner.facts["cuda_libraries"] = found
    runner.facts["cuda_library_shim"] = str(shim)


FORTUNES = pathlib.Path("/usr/share/games/fortunes")


def data_files(runner: Runner) -> str:
    """Task E's configurations name Debian's fortunes at their installed path: where that path is
    missing, it becomes a link to the bundle's copy (the device machine is ours for the call)."""
    bundled = pathlib.Path(runner.env.get("FUSEBENCH_DEVICE_PREFIX", "/nonexistent")) / "share" / "games" / "fortunes"
    if (FORTUNES / "literature").is_file():
        return f"{FORTUNES} (the machine's)"
    if not bundled.is_dir():
        return "absent: neither the machine nor the bundle has Debian's fortunes"
    try:
        FORTUNES.parent.mkdir(parents=True, exist_ok=True)
        if FORTUNES.is_symlink() or FORTUNES.exists():
            if FORTUNES.is_symlink():
                FORTUNES.unlink()
            else:
                shutil.rmtree(FORTUNES)
        FORTUNES.symlink_to(bundled)
    except OSError as e:
        return f"absent: cannot link {FORTUNES} to the bundle's copy ({e})"
    return f"{FORTUNES} -> {bundled} (the bundle's)"


def configure_step(settings: Settings) -> Callable[[Runner, float], Outcome]:
    def action(runner: Runner, timeout: float) -> Outcome:
        wrapper = runner.env["FUSEBENCH_PYTHON"]
        argv = [
            "cmake", "-S", str(ROOT), "-B", str(settings.build_dir), "-G", "Ninja",
            "-DCMAKE_BUILD_TYPE=Release", f"-DFUSEBENCH_CUDA={settings.cuda}",
            f"-DPython3_EXECUTABLE={wrapper}", f"-DCMAKE_CUDA_ARCHITECTURES={settings.cuda_architectures}",
        ]  # fmt: skip
        status, text = runner.command(argv, timeout, log_name="configure.log", echo=False)
        if status is None:
            return Outcome("timed_out", f"configure ran past {timeout:.0f} s")
        if status != 0:
            return Outcome("failed", f"cmake configure exit {status}: {last_error(text)}")
        return Outcome("ok")

    return action


def build_step(settings: Settings) -> Callable[[Runner, float], Outcome]:
    def action(runner: Runner, timeout: float) -> Outcome:
        argv = ["cmake", "--build", str(settings.build_dir), "-j", str(settings.jobs)]
        for target in settings.targets:
            argv += ["--target", target]
        status, text = runner.command(argv, timeout, log_name="build.log", echo=False)
        if status is None:
            return Outcome("timed_out", f"the build ran past {timeout:.0f} s")
        if status != 0:
            return Outcome("failed", f"build exit {status}: {last_error(text)}")
        return Outcome("ok")

    return action


def last_error(text: str) -> str:
    lines = [line for line in text.splitlines() if "rror" in line or "FAILED" in line]
    return (lines[-1] if lines else (text.strip().splitlines() or [""])[-1])[:300]


def ctest_step(settings: Settings, labels: str, forbid_skips: bool) -> Callable[[Runner, float], Outcome]:
    def action(runner: Runner, timeout: float) -> Outcome:
        argv = ["ctest", "--test-dir", str(settings.build_dir), "-L", labels, "-j", "4", "--output-on-failure",
                "--timeout", str(int(max(timeout - 5, 10))), "--output-junit", str(runner.extras / "gpu-tests.junit.xml")]  # fmt: skip
        status, text = runner.command(argv, timeout, log_name="gpu-tests.log")
        log = (runner.extras / "logs" / "gpu-tests.log").read_text(errors="replace")
        skipped = [line.strip() for line in log.splitlines() if "***Skipped" in line or "***Not Run" in line]
        summary = [line.strip() for line in log.splitlines() if "tests passed" in line]
        facts = {"summary": summary[-1] if summary else "", "skipped": skipped}
        if status is None:
            return Outcome("timed_out", f"ctest ran past {timeout:.0f} s", facts)
        if status != 0:
            return Outcome("failed", f"ctest exit {status}: {facts['summary']}", facts)
        if forbid_skips and skipped:
            return Outcome("failed", f"{len(skipped)} test(s) skipped on a GPU machine: {skipped[0]}", facts)
        if not summary:
            return Outcome("failed", f"ctest -L '{labels}' ran no test", facts)
        return Outcome("ok", facts=facts)

    return action


def file_device(device: str) -> str:
    return device.replace(":", "-").replace("/", "-")


class SuiteRuns:
    """Suites run as tools/run runs them (the same arguments, file names and run.json lines), so
    that the results directory reads like a tools/run directory."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.devices: list[str] = []
        self.available: dict[str, str] | None = None  # device -> "" or why it cannot run
        self.lock = threading.Lock()

    def availability(self, runner: Runner, device: str, timeout: float) -> str:
        with self.lock:
            return self.availability_locked(runner, device, timeout)

    def availability_locked(self, runner: Runner, device: str, timeout: float) -> str:
        if self.available is None:
            suite = self.binary("data_movement")
            proc = subprocess.run(
                [str(suite), "--list-devices"], env=runner.env, capture_output=True, text=True, timeout=timeout
            )
            available = {name: "" for name in proc.stdout.split()}
            for line in proc.stderr.splitlines():
                if ": " in line:
                    name, why = line.split(": ", 1)
                    available.setdefault(name.strip(), why.strip())
            self.available = available
            runner.facts["devices"] = self.available
        base = device.split("/")[0]
        if base not in self.available:
            return f"the suites know no device '{base}'"
        return self.available[base]

    def binary(self, suite: str) -> pathlib.Path:
        return self.settings.build_dir / "bin" / f"bench_{suite}"

    def step(
        self,
        suite: str,
        device: str,
        profile: str,
        filt: str = "",
        shared_worker: bool = True,
        timing: list[str] | None = None,
    ) -> Callable[[Runner, float], Outcome]:
        """One suite on one device. With `shared_worker` False the suite starts a framework worker of
        its own (it runs beside other suites in a parallel batch)."""

        override = timing

        def action(runner: Runner, timeout: float) -> Outcome:
            t0 = time.monotonic()
            try:
                why = self.availability(runner, device, timeout)
            except subprocess.TimeoutExpired:  # the listing is asked again by the next step
                return Outcome("timed_out", f"listing the devices ran past the step's {timeout:.0f} s")
            timeout -= time.monotonic() - t0
            if why:
                runner.append(ENTRIES, f"{suite}\t{device}\tskipped\t0\t{why}\n")
                return Outcome("skipped", f"{device} cannot run here: {why}")
            if device not in self.devices:
                self.devices.append(device)
            name = f"bench_{suite}"
            tag = f"{suite}@{file_device(device)}"
            out_json = runner.results / f"{tag}.json"
            # the full profile's cases here are A, B and E, whose verdicts read precision, not
            # timing: one repetition (tools/run's full profile repeats each timing five times)
            timing = ["--benchmark_min_time=0.2"] if profile == "quick" else ["--benchmark_min_time=1"]
            if device.split(":")[0].split("/")[0] in ("torch", "xla") and profile == "quick":
                timing = ["--benchmark_min_time=0.05"]
            timing = override if override is not None else timing
            env = dict(runner.env)
            stats = runner.work / f"worker-stats-{tag}.jsonl"
            stats.unlink(missing_ok=True)
            env["FUSEBENCH_WORKER_STATS"] = str(stats)
            if not shared_worker:
                env.pop("FUSEBENCH_WORKER_DIR", None)
            argv = [str(self.binary(suite)), f"--profile={profile}", f"--device={device}",
                    f"--dump-dir={runner.results / 'dumps' / file_device(device) / name}",
                    f"--benchmark_out={out_json}.tmp", "--benchmark_out_format=json",
                    f"--instance-times={out_json}.times", *timing]  # fmt: skip
            if filt:
                argv.append(f"--benchmark_filter={filt}")
            t0 = time.monotonic()
            status, text = runner.command(argv, max(timeout, 1), log_name=f"{tag}.log", env=env)
            seconds = int(time.monotonic() - t0)
            times = pathlib.Path(f"{out_json}.times")
            if times.exists():
                runner.append(
                    INSTANCES, "".join(f"{suite}\t{device}\t{line}\n" for line in times.read_text().splitlines())
                )
                times.unlink()
            tmp = pathlib.Path(f"{out_json}.tmp")
            if status is None or status != 0:
                reason = (
                    f"timed out after {seconds} s (device budget)"
                    if status is None
                    else f"exit {status}: {last_error(text)}"
                )
                if tmp.exists():  # kept for the evidence, never under the final name
                    tmp.rename(runner.extras / f"{out_json.name}.partial")
                runner.append(ENTRIES, f"{suite}\t{device}\tskipped\t{seconds}\t{reason}\n")
                return Outcome("timed_out" if status is None else "failed", reason)
            if not tmp.exists() or tmp.stat().st_size == 0:
                tmp.unlink(missing_ok=True)
                runner.append(ENTRIES, f"{suite}\t{device}\tskipped\t{seconds}\tthe suite wrote no results\n")
                return Outcome("failed", "the suite wrote no results")
            tmp.rename(out_json)
            worker_stats = (
                "[" + ",".join(x for x in stats.read_text().splitlines() if x.strip()) + "]" if stats.exists() else "[]"
            )
            runner.append(ENTRIES, f"{suite}\t{device}\tran\t{seconds}\t\t{worker_stats}\n")
            return Outcome("ok", facts={"file": out_json.name, "seconds": seconds})

        return action


def parallel(parts: dict[str, Callable[[Runner, float], Outcome]]) -> Callable[[Runner, float], Outcome]:
    """Runs several actions at once, each within the step's time: for precision suites, whose
    verdicts do not read their timings (the timings of a batch are not comparable with a suite's
    alone: the run's summary says which steps ran in a batch)."""

    def action(runner: Runner, timeout: float) -> Outcome:
        outcomes: dict[str, Outcome] = {}

        def one(name: str, part) -> None:
            try:
                outcomes[name] = part(runner, timeout)
            except Exception as e:
                outcomes[name] = Outcome("failed", f"{type(e).__name__}: {e}")

        threads = [threading.Thread(target=one, args=item) for item in parts.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        facts = {name: o.status + (f": {o.reason}" if o.reason else "") for name, o in outcomes.items()}
        bad = [n for n, o in outcomes.items() if o.status in ("failed", "timed_out")]
        if all(o.status == "skipped" for o in outcomes.values()):
            return Outcome("skipped", "every part was skipped", facts)
        if len(bad) == len(outcomes):
            return Outcome("failed", f"every part failed or timed out: {', '.join(bad)}", facts)
        return Outcome(
            "ok", f"{len(bad)} of {len(outcomes)} parts failed or timed out: {', '.join(bad)}" if bad else "", facts
        )

    return action


def install_manifest(runner: Runner, suites: SuiteRuns, profile: str) -> None:
    """run.json beside the suites' JSON, rewritten after every step (the .tsv lines it is made
    from stay, so a later call on the same machine adds to them)."""

    def write(runner: Runner) -> None:
        if not suites.devices and not (runner.results / ENTRIES).exists():
            return
        unavailable = {d: why for d, why in (suites.available or {}).items() if why}
        write_run_manifest(
            runner.results, profile, None, int(runner.elapsed()), suites.devices,
            {"engine": "--benchmark_min_time=0.2", "framework": "--benchmark_min_time=0.05"},
            unavailable=unavailable, extra={"device_run": {"budget_s": runner.budget_s, "machine": runner.facts}},
            consume=False, run_id=runner.run_id,
        )  # fmt: skip

    runner.manifest = write


def python_step(script: list[str], log_name: str) -> Callable[[Runner, float], Outcome]:
    def action(runner: Runner, timeout: float) -> Outcome:
        argv = [runner.env["FUSEBENCH_PYTHON"], *[a.replace("{extras}", str(runner.extras)) for a in script]]
        argv = [a.replace("{budget}", str(int(max(timeout - 15, 10)))) for a in argv]
        status, text = runner.command(argv, timeout, log_name=log_name)
        if status is None:
            return Outcome("timed_out", f"ran past {timeout:.0f} s")
        if status != 0:
            return Outcome("failed", f"exit {status}: {last_error(text)}")
        return Outcome("ok")

    return action


SETUP_STEPS = ("unpack", "environment", "configure", "build")


def setup_steps(settings: Settings) -> list[Step]:
    return [
        Step("unpack", "unpack the bundle's Debian packages into a prefix", unpack_step(settings), 120, 5),
        Step("environment", "Python wrapper, CUDA library names, task E's text, machine facts", environment_step(settings), 180, 5, ("unpack",)),
        Step("configure", "cmake against the prefix (no network)", configure_step(settings), 180, 20, ("environment",)),
        Step("build", f"build on {settings.jobs} cores", build_step(settings), 900, 15, ("configure",)),
    ]  # fmt: skip


GPU_PLAN_SUITES = [
    f"bench_{s}"
    for s in ("engine_throughput", "fusion_determinism", "scalar_lowering", "reduction_order", "approximations",
              "data_movement", "accumulated_error", "training_alignment", "cuda_codegen", "precision_toolkit")
]  # fmt: skip
CLAIM_SUITES = ("scalar_lowering", "reduction_order", "approximations", "data_movement", "accumulated_error")
# C1, C2, C3 and D: the claims' suites without task B (B has steps of its own at the plan's sets)
C_AND_D_SUITES = ("scalar_lowering", "reduction_order", "approximations", "data_movement")
# Where the rehearsal on this machine stands in for the GPU devices.
STAND_IN_DEVICES = {"cuda": "cpu", "torch:cuda": "torch", "xla:cuda": "xla"}
# E's units: one training run each, in the order of the band (gpu_alignment.py's own order)
E_UNITS = (("eager", 1), ("compiled", 1), ("eager", 2), ("compiled", 2), ("eager", 3))
# The cases each stand-in runs on this CPU: one small case of the suite, timed briefly; the
# rehearsal proves the plan's mechanics (order, budget, units, state, combine), not GPU times.
STAND_IN_FILTERS = {
    "fusion_determinism": "^A/dtype:f16/threads:2/",
    "accumulated_error": "^B/chain:mul_add_gelu_mul/dtype:f16/dist:uniform/",
    "engine_throughput": "^Chain/path:fused/[^/]*/[^/]*/(real_time|device:)",
    "scalar_lowering": "^C1/",
    "reduction_order": "^C2/",
    "approximations": "^C3/",
    "data_movement": "^D/subgraph:transpose/dtype:f16/",
}
E_CONFIG = "suites/training_alignment/configs/gpt2-124m.json"


def alignment_unit(mode: str, seed: int, stand_in: bool) -> Callable[[Runner, float], Outcome]:
    """One of E's training runs (gpu_alignment.py with one seed in one mode), its JSON under
    device/gpu_alignment/, then device/gpu_alignment.json rewritten from every unit finished so far
    (the file the report reads)."""
    unit = f"{mode}-{seed}"
    script = ["suites/training_alignment/gpu_alignment.py", "--budget-s", "{budget}",
              "--seeds", str(seed) if mode == "eager" else "", "--compiled-seeds", str(seed) if mode == "compiled" else "",
              "--out", f"{{extras}}/gpu_alignment/{unit}.json"]  # fmt: skip
    if stand_in:  # the tiny model for two steps on the CPU (a CPU compile of it is not rehearsed)
        script += ["--config", "suites/training_alignment/configs/tiny.json", "--device", "cpu", "--steps", "2"]
    else:
        script += ["--config", E_CONFIG]
    run = python_step(script, f"gpu_alignment-{unit}.log")

    def action(runner: Runner, timeout: float) -> Outcome:
        if stand_in and (mode, seed) != E_UNITS[0]:  # the units differ only in their arguments
            return Outcome("skipped", "stand-in: E/eager-1 alone is rehearsed (a CPU compile of E takes minutes)")
        (runner.extras / "gpu_alignment").mkdir(parents=True, exist_ok=True)
        outcome = run(runner, timeout)
        merge_alignment(runner.extras / "gpu_alignment", runner.extras / "gpu_alignment.json")
        return outcome

    return action


def merge_alignment(units: pathlib.Path, out: pathlib.Path) -> int:
    """E's unit files as one gpu_alignment.json: every finished run, in the band's order. Returns how
    many runs it holds; writes nothing when there are none."""
    order = {f"{m}-{s}": i for i, (m, s) in enumerate(E_UNITS)}
    merged: dict | None = None
    runs = []
    for path in sorted(units.glob("*.json"), key=lambda p: (order.get(p.stem, len(order)), p.stem)):
        data = json.loads(path.read_text())
        if merged is None:
            merged = {k: v for k, v in data.items() if k not in ("runs", "not_run", "seeds", "compiled_seeds")}
        runs += data.get("runs", [])
    if merged is None or not runs:
        return 0
    merged["runs"] = runs
    merged["seeds"] = sorted({r["seed"] for r in runs if r["mode"] == "eager"})
    merged["compiled_seeds"] = sorted({r["seed"] for r in runs if r["mode"] == "compiled"})
    merged["not_run"] = [
        {"seed": s, "mode": m, "reason": "not run yet (the device plan's state names the loans still to come)"}
        for m, s in E_UNITS
        if not any(r["seed"] == s and r["mode"] == m for r in runs)
    ]
    write_atomically(out, json.dumps(merged) + "\n")
    return len(runs)


def fusebench_python(runner: Runner, timeout: float) -> tuple[dict | None, Outcome | None]:
    """(the environment that imports the fusebench package, the step's outcome where there is none):
    the package installed from python/ with the image's build tools (no network) into the run's work
    folder, once a run (the judge steps share it; a call that resumes installs it again, from the
    tree it runs). An install that the budget cuts is timed out, to be resumed, not failed."""
    target = runner.work / "fusebench-python"
    if runner.facts.get("fusebench_python") != str(target):
        status, text = runner.command(
            [runner.env["FUSEBENCH_PYTHON"], "-m", "pip", "install", "--no-index", "--no-build-isolation", "--no-deps",
             "--upgrade", "--target", str(target), str(ROOT / "python")], timeout, log_name="judge-install.log",
            echo=False)  # fmt: skip
        if status is None:
            return None, Outcome("timed_out", f"pip install ./python offline ran past {timeout:.0f} s")
        if status != 0:
            return None, Outcome("failed", f"pip install ./python offline: exit {status}: {last_error(text)}")
        runner.facts["fusebench_python"] = str(target)
    return dict(runner.env, PYTHONPATH=os.pathsep.join(filter(None, [str(target), runner.env.get("PYTHONPATH")]))), None


@dataclasses.dataclass(frozen=True)
class Judged:
    """One `python -m fusebench judge` of the device plan: a factory of tools/gpu/judge_models.py
    (FACTORY_cuda on the GPU, FACTORY_cpu standing in) and the judgment's size."""

    factory: str
    dtype: str
    sets: int
    speed_rounds: int
    stand_in_sets: int = 4


def judge_step(stand_in: bool, judged: Judged) -> Callable[[Runner, float], Outcome]:
    """`python -m fusebench judge` on a model of tools/gpu/judge_models.py on the GPU, with Inductor;
    judgment.json, .md and .html under results/device/judge-FACTORY@DEVICE. On the GPU the
    judgment must say it ran there (its environment's device), else the step fails."""

    def action(runner: Runner, timeout: float) -> Outcome:
        t0 = time.monotonic()
        env, not_installed = fusebench_python(runner, timeout)
        if env is None:
            return not_installed
        device = "cpu" if stand_in else "cuda"
        out = runner.extras / f"judge-{judged.factory}@{device}"
        argv = [runner.env["FUSEBENCH_PYTHON"], "-m", "fusebench", "judge",
                f"{ROOT / 'tools/gpu/judge_models.py'}:{judged.factory}_{device}", "--backend", "inductor",
                "--dtype", judged.dtype, "--sets", str(judged.stand_in_sets if stand_in else judged.sets),
                "--speed-rounds", "0" if stand_in else str(judged.speed_rounds), "--out", str(out)]  # fmt: skip
        status, text = runner.command(argv, max(timeout - (time.monotonic() - t0), 1), log_name="judge.log", env=env)
        if status is None:
            return Outcome("timed_out", f"judge ran past {timeout:.0f} s")
        if status not in (0, 1, 3):  # the verdicts; 2 bad input, 4 a failure in the model or judge
            return Outcome("failed", f"judge exit {status}: {last_error(text)}")
        verdict = {0: "SUPPORTED", 1: "CONTRADICTED", 3: "INCONCLUSIVE"}[status]
        try:
            judgment = json.loads((out / "judgment.json").read_text())
        except (OSError, ValueError) as e:
            return Outcome("failed", f"judge exit {status} ({verdict}) but {out}/judgment.json unreadable: {e}")
        ran_on = str(judgment.get("environment", {}).get("device", "not recorded"))
        if not ran_on.startswith(device):
            return Outcome("failed", f"judgment.json says the judgment ran on {ran_on}, not on {device}")
        return Outcome(
            "ok", facts={"verdict": verdict, "device": ran_on, "judgment": str(out.relative_to(runner.results))}
        )

    return action


def gpu_plan(settings: Settings) -> list[Step]:
    """Issue 46's priority: E (GPT-2 124M, eager against torch.compile, a seed band) one training run a
    unit; A at [8, 2048, 4096] x 1,000 runs x 2 cold compiles on cuda, then torch:cuda; B at the
    plan's 1,000 sets on torch:cuda and cuda; engine speed on the three GPU devices; C1-C3 and D on
    cuda and xla:cuda; fusebench.judge on a transformers model; then what an earlier loan ran
    (Inductor's mechanisms and the claims on torch:cuda, Inductor's cold compile). The GPU tests go
    right after the build: they say whether what follows can be read.

    Estimates are GPU seconds for fitting a call's budget, from the first run on an H200
    (results/reference/h200-2026-12-04) where it ran the step, else from the work's size, marked
    unmeasured; tools/device_plan.py replaces them with the seconds a loan measured. With
    settings.stand_in each GPU device is replaced by its CPU-side device and each suite by one small
    case, for the rehearsal here."""
    stand_in = settings.stand_in
    suites = settings.suite_runs = SuiteRuns(settings)
    built = ("build",)

    def on(device: str) -> str:
        return STAND_IN_DEVICES[device] if stand_in else device

    def suite(name: str, device: str, profile: str, filt: str = "", shared_worker: bool = True):
        if stand_in:
            return suites.step(name, on(device), "quick", STAND_IN_FILTERS[name], shared_worker,
                               timing=["--benchmark_min_time=0.01"])  # fmt: skip
        return suites.step(name, device, profile, filt, shared_worker)

    setup = stand_in_setup(settings) if stand_in else setup_steps(settings)
    # E needs no build: its units go before configure and build, so that a loan with E left spends
    # no time building (a build cut by the budget keeps its objects for the next call on the machine)
    plan = [s for s in setup if s.name in ("unpack", "environment")]
    environment = ("environment",)
    # E: unmeasured on a GPU (GPT-2 124M, 8 x 1,024 tokens a step, 1,000 steps and 20 evaluations;
    # a compiled run also compiles forward and backward)
    for mode, seed in E_UNITS:  # needs no build: PyTorch alone
        plan.append(Step(f"E/{mode}-{seed}", f"task E, GPT-2 124M, 1,000 steps on torch:cuda: the {mode} run of seed {seed}",
                         alignment_unit(mode, seed, stand_in), 420, 30, environment,
                         estimate_s=150 if mode == "compiled" else 110, priority=1))  # fmt: skip
    # issue 48's GPU judgment, a small one: it needs no build either (pip builds the package's own
    # extension, about a minute, then the judgment takes seconds), so it goes before configure with
    # E; it proves the judge's GPU path (the model's device, the CPU's statistics, CUDA events), and
    # the GPT-2 judgment further on reuses its install
    plan.append(Step("judge-mlp@cuda", "fusebench.judge on a small MLP (f32, 8 input sets, Inductor) on the GPU",
                     judge_step(stand_in, Judged("mlp", "f32", 8, 5)), 420, 30, environment, estimate_s=100,
                     priority=1))  # fmt: skip
    plan += [s for s in setup if s.name not in ("unpack", "environment")]
    plan.append(Step("gpu-tests", "ctest -L 'gpu|cuda': every gpu test must run, none skip",
                     ctest_step(settings, "gpu|cuda", True) if not stand_in else stand_in_tests(settings),
                     150, 20, built, estimate_s=30, priority=1))  # fmt: skip
    # A: the first run took about 90 s a round on cuda and 0.39 s a run on torch:cuda (202 s for
    # 521 runs); two rounds of 1,000 runs and a control run
    a_filter = "^A/dtype:f16/threads:2/"
    plan.append(Step("A@cuda", "task A at [8, 2048, 4096] f16, 1,000 runs a round, two cold compiles, on cuda",
                     suite("fusion_determinism", "cuda", "full", a_filter), 420, 60, built, estimate_s=240, priority=2))  # fmt: skip
    plan.append(Step("A@torch:cuda", "task A at [8, 2048, 4096] f16, 1,000 runs a round, two cold compiles, on torch:cuda",
                     suite("fusion_determinism", "torch:cuda", "full", a_filter), 600, 60, built, estimate_s=900, priority=2))  # fmt: skip
    # B on torch:cuda: the first run's quick profile (100 sets) took 126 s, 83 s of it compiling;
    # 1,000 sets: the same compiles and ten times the rest. On cuda: unmeasured.
    for device, estimate in (("torch:cuda", 510), ("cuda", 200)):
        plan.append(Step(f"B@{device}", f"task B with the plan's 1,000 sets on {device} (full profile)",
                         suite("accumulated_error", device, "full"), 540, 60, built, estimate_s=estimate, priority=3))  # fmt: skip
    # engine: the first run's 111, 34 and 25 s, with the GPU copy and larger sizes now
    for device, estimate in (("cuda", 120), ("torch:cuda", 60), ("xla:cuda", 45)):
        plan.append(Step(f"engine@{device}", f"engine speed against the GPU's copy bandwidth on {device} (quick)",
                         suite("engine_throughput", device, "quick", "-CompileCold"), 200, 30, built,
                         estimate_s=estimate, priority=4))  # fmt: skip
    for device in ("cuda", "xla:cuda"):  # the five claims' suites at once on torch:cuda took 165 s
        plan.append(Step(f"claims@{device}", f"C1, C2, C3 and D on {device}, the four suites at once",
                         parallel({f"{s}@{on(device)}": suite(s, device, "quick", shared_worker=False) for s in C_AND_D_SUITES}),
                         300, 60, built, estimate_s=150, priority=5))  # fmt: skip
    plan.append(Step("judge@cuda", "fusebench.judge on a transformers GPT-2 (bf16, 32 input sets) on the GPU",
                     judge_step(stand_in, Judged("gpt2", "bf16", 32, 15)), 300, 60, environment, estimate_s=150,
                     priority=6))  # fmt: skip
    if not stand_in:
        mechanisms = python_step(["tools/gpu/inductor_mechanisms.py", "--device", "cuda", "--budget-s", "{budget}",
                                  "--out", "{extras}/inductor_mechanisms.json"], "inductor_mechanisms.log")  # fmt: skip
        torch_claims = {
            f"{s}@torch:cuda": suites.step(s, "torch:cuda", "quick", shared_worker=False) for s in CLAIM_SUITES
        }
        plan.append(Step("torch-cuda-claims", "Inductor -> Triton: its mechanisms and the claims' suites on torch:cuda",
                         parallel({"inductor-mechanisms": mechanisms, **torch_claims}), 300, 60, built,
                         estimate_s=180, priority=7))  # fmt: skip
        plan.append(Step("engine-cold@torch:cuda", "Inductor's cold compile and cache hit on the GPU",
                         suites.step("engine_throughput", "torch:cuda", "quick", "CompileCold|CacheHit"), 200, 60, built,
                         estimate_s=90, priority=7))  # fmt: skip
    if stand_in:  # a stand-in is one small case: its share of the GPU step's time and minimum
        for step in plan:
            step.estimate_s = round(step.estimate_s * settings.estimate_scale, 1)
            step.min_s = min(step.min_s, max(step.estimate_s, 1))
    return plan


def stand_in_setup(settings: Settings) -> list[Step]:
    """The rehearsal's setup: this machine's build stands in for the device's cold one."""

    def built(runner: Runner, timeout: float) -> Outcome:
        missing = [f"bench_{s}" for s in STAND_IN_FILTERS if not (settings.build_dir / "bin" / f"bench_{s}").is_file()]
        if missing:
            return Outcome("failed", f"{settings.build_dir}/bin lacks {', '.join(missing)} (tools/build release)")
        return Outcome("ok", facts={"build": f"{settings.build_dir} (this machine's build, standing in)"})

    return [
        Step("environment", "Python wrapper and machine facts", environment_step(settings), 180, 5),
        Step("build", "this machine's build stands in for the device's", built, 10, 1, ("environment",)),
    ]


def stand_in_tests(settings: Settings) -> Callable[[Runner, float], Outcome]:
    """On a machine without a GPU the gpu tests skip by design: the stand-in lists them, so that a
    test the plan names and the build lacks is found here."""

    def action(runner: Runner, timeout: float) -> Outcome:
        status, text = runner.command(["ctest", "--test-dir", str(settings.build_dir), "-N", "-L", "gpu|cuda"],
                                      timeout, log_name="gpu-tests.log", echo=False)  # fmt: skip
        listed = [line for line in text.splitlines() if "Total Tests:" in line]
        if status != 0 or not listed or listed[-1].split()[-1] == "0":
            return Outcome("failed", f"ctest -N -L 'gpu|cuda' lists no test: {last_error(text)}")
        return Outcome("ok", facts={"listed": listed[-1].strip()})

    return action


def rehearsal_plan(settings: Settings) -> list[Step]:
    """What CI proves offline: the bundle unpacks, configures and builds the toolkit and a suite
    through the Python wrapper, and the suite runs on the cpu device."""
    suites = settings.suite_runs = SuiteRuns(settings)
    plan = setup_steps(settings)
    plan.append(Step("data_movement@cpu", "one suite case on the cpu device",
                     suites.step("data_movement", "cpu", "quick", "^D/subgraph:transpose/dtype:f16/"), 300, 10, ("build",)))  # fmt: skip
    return plan


PLANS = {"gpu": gpu_plan, "rehearsal": rehearsal_plan}


def stand_in_revision() -> str:
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if head.returncode != 0:
        return "unknown"
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=ROOT).returncode != 0
    return head.stdout.strip() + ("-dirty" if dirty else "")


def measured_steps(state: pathlib.Path) -> dict[str, float]:
    """The seconds the plan's state records for steps not done (cut or failed in an earlier loan)."""
    steps = json.loads(state.read_text())["steps"]
    return {n: float(s["seconds"]) for n, s in steps.items() if s.get("status") != "done" and "seconds" in s}


def done_steps(state: pathlib.Path) -> dict[str, str]:
    """The steps the plan's state file says are done, each with where (loan and commit)."""
    try:
        data = json.loads(state.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"--state {state}: cannot be read ({e})") from e
    if not isinstance(data.get("steps"), dict):
        raise ValueError(f"--state {state}: no 'steps' object (tools/device_plan.py writes it)")
    return {
        name: f"{s.get('loan', '?')} (commit {s.get('revision', '?')})"
        for name, s in data["steps"].items()
        if s.get("status") == "done"
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/device-run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=pathlib.Path, default=ROOT / "device-bundle")
    parser.add_argument(
        "--out", type=pathlib.Path, default=pathlib.Path(os.environ.get("OUT", ROOT / "results-device"))
    )
    parser.add_argument("--budget", type=float, required=True, help="seconds for the whole plan, setup included")
    parser.add_argument("--plan", choices=sorted(PLANS), default="gpu")
    parser.add_argument("--only", help="comma-separated step names (the setup steps they need are not implied)")
    parser.add_argument("--build-dir", type=pathlib.Path, default=ROOT / "build" / "release")
    parser.add_argument(
        "--work", type=pathlib.Path, help="unpacked prefix, wrapper and results (default: BUILD_DIR/device-run)"
    )
    parser.add_argument(
        "--python", default="python3", help="the interpreter with torch and jax (default: python3 on PATH)"
    )
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument(
        "--cuda", choices=["ON", "OFF", "AUTO"], default=None, help="FUSEBENCH_CUDA (gpu plan: ON; rehearsal: AUTO)"
    )
    parser.add_argument("--cuda-architectures", default="90", help="CMAKE_CUDA_ARCHITECTURES (the H200 is 90)")
    parser.add_argument("--target", action="append", default=None, help="build only these targets (repeatable)")
    parser.add_argument("--strict", action="store_true", help="exit 1 unless every step succeeded (a rehearsal)")
    parser.add_argument("--resume", action="store_true", help="keep the steps an earlier call on this machine finished")
    parser.add_argument(
        "--estimate-scale", type=float, default=0.1, help="--stand-in: each step's estimate times this (0.1)"
    )
    parser.add_argument(
        "--state",
        type=pathlib.Path,
        help="the device plan's state (results/device-plan/state.json): its done steps are skipped",
    )
    parser.add_argument(
        "--stand-in",
        action="store_true",
        help="gpu plan: run on this machine's build, the CPU-side "
        "devices standing in for the GPU's, one small case a suite (tools/device-rehearsal --plan)",
    )
    parser.add_argument("--list", action="store_true", help="print the plan's steps and run nothing")
    args = parser.parse_args(argv)
    if args.budget <= PACK_RESERVE_S:
        parser.error(f"--budget {args.budget:g}: must be more than the {PACK_RESERVE_S} s kept for packing")
    targets = args.target
    if targets is None and args.plan == "rehearsal":
        targets = ["fusebench_toolkit", "bench_data_movement"]
    if targets is None and args.plan == "gpu":  # what the plan runs: the suites and the GPU tests
        targets = [*GPU_PLAN_SUITES, "cuda_gpu_tests", "cuda_codegen_tests", "framework_gpu_tests"]
    settings = Settings(
        bundle=args.bundle.resolve(),
        build_dir=args.build_dir.resolve(),
        python=args.python,
        jobs=args.jobs,
        cuda=args.cuda or ("ON" if args.plan == "gpu" else "AUTO"),
        cuda_architectures=args.cuda_architectures,
        targets=targets or [],
        stand_in=args.stand_in,
        estimate_scale=args.estimate_scale,
    )
    if args.stand_in and args.plan != "gpu":
        parser.error("--stand-in rehearses the gpu plan")
    plan = PLANS[args.plan](settings)
    if args.list:
        for step in plan:
            estimate = f"~{step.estimate_s:.0f} s" if step.estimate_s else "setup"
            print(f"{step.priority or '-':>2} {step.name:<24} {estimate:>7}  {step.what}")
        return 0
    only = set(args.only.split(",")) if args.only else None
    if only:
        unknown = only - {s.name for s in plan}
        if unknown:
            parser.error(
                f"--only {args.only}: no step named {', '.join(sorted(unknown))} in plan {args.plan} (see --list)"
            )
    work = (args.work or settings.build_dir / "device-run").resolve()
    try:
        done = done_steps(args.state) if args.state else {}
    except ValueError as e:
        parser.error(str(e))
    measured = measured_steps(args.state) if args.state else {}
    runner = Runner(args.out.resolve(), work, args.budget, done_elsewhere=done, measured_elsewhere=measured)
    if args.stand_in:  # no bundle: the revision is this checkout's, as the build stamped it
        runner.env["FUSEBENCH_REVISION"] = stand_in_revision()
        runner.facts["stand_in"] = True
    if settings.suite_runs:
        install_manifest(runner, settings.suite_runs, "quick" if args.plan == "rehearsal" else "mixed")
    return runner.run_plan(plan, only, resume=args.resume, strict=args.strict)


if __name__ == "__main__":
    sys.exit(main())
