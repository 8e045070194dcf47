"""The offline device runner: on a lent accelerator machine with no network, unpacks the bundle that
tools/device-bundle wrote, configures and builds fusebench against it, then runs a plan of steps,
most valuable first, inside a budget of seconds. It writes as it goes, so a run cut short keeps every
finished step:
  OUT/device-run.log   every command and its output
  OUT/summary.json     each step's status, seconds and reason; the machine; rewritten after each step
  OUT/results.tar.gz   the results directory in the layout tools/run writes (suite JSON, run.json,
                       small evidence files), so the report, compare and gate read it, and device/
                       in it: the logs, the machine, the summary, the scripts' JSON
The budget is checked between steps: a step starts only with at least its `min_s` left, and runs
at most until the budget's end (less a reserve for packing). Standard library only: it runs under the
device image's Python.

Usage (there): python3 tools/device-run --bundle device-bundle --out "$OUT" --budget 540
Rehearsal (here, CI): tools/device-rehearsal, which runs `--plan rehearsal` with the network off and
the bundled packages hidden."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import io
import json
import os
import pathlib
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
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools.run_manifest import ENTRIES, INSTANCES, write_run_manifest  # noqa: E402

# Seconds kept back at the budget's end for writing summary.json and packing results.tar.gz.
PACK_RESERVE_S = 10
# Files larger than this stay out of results.tar.gz (the device tool brings back at most 16 MiB a
# file); each one left out is named in summary.json.
LARGEST_PACKED_FILE = 2 * 1024 * 1024
ARCH_TRIPLET = "x86_64-linux-gnu"


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


class Runner:
    """Runs a plan's steps in order within `budget_s`, recording each one's outcome and packing
    the results after each step."""

    def __init__(self, out: pathlib.Path, work: pathlib.Path, budget_s: float, clock=time.monotonic):
        self.out = out
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
        when named); returns (exit status or None when it timed out, the output's last 4 KiB)."""
        self.log_file.write(f"$ {shlex.join(argv)}\n")
        tail = io.StringIO()
        log_copy = None
        if log_name:
            (self.extras / "logs").mkdir(exist_ok=True)
            log_copy = open(self.extras / "logs" / log_name, "a")
        proc = subprocess.Popen(
            argv,
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
        finished_before = self.finished_earlier() if resume else set()
        done_ok: set[str] = set()
        try:
            self.run_steps(plan, only, finished_before, done_ok)
        finally:
            stop_worker_servers(workers)
        self.say("plan done")
        self.print_table()
        passing = ("ok",) if strict else ("ok", "skipped")
        return 0 if all(s["status"] in passing for s in self.steps) else 1

    def finished_earlier(self) -> set[str]:
        """The measurement steps an earlier call on this machine finished (setup steps always run:
        they set this process's environment, and repeat in seconds)."""
        summary = self.extras / "summary.json"
        if not summary.exists():
            return set()
        earlier = json.loads(summary.read_text())
        self.steps = [s for s in earlier["steps"] if s["status"] == "ok" and s["step"] not in SETUP_STEPS]
        return {s["step"] for s in self.steps}

    def run_steps(self, plan: list[Step], only: set[str] | None, finished_before: set[str], done_ok: set[str]) -> None:
        for step in plan:
            if only is not None and step.name not in only:
                continue
            if step.name in finished_before:
                done_ok.add(step.name)
                self.say(f"{step.name}: finished by an earlier call, kept")
                continue
            record = {"step": step.name, "what": step.what, "started_s": round(self.elapsed(), 1)}
            missing = [n for n in step.needs if n not in done_ok]
            left = self.remaining() - PACK_RESERVE_S
            if missing:
                outcome = Outcome("skipped", f"needs {', '.join(missing)}, which did not succeed")
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
        return Outcome("ok", facts={"packages": count, "prefix": str(usr)})

    return action


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
            self.available = {}
            suite = self.binary("data_movement")
            proc = subprocess.run(
                [str(suite), "--list-devices"], env=runner.env, capture_output=True, text=True, timeout=timeout
            )
            for name in proc.stdout.split():
                self.available[name] = ""
            for line in proc.stderr.splitlines():
                if ": " in line:
                    name, why = line.split(": ", 1)
                    self.available.setdefault(name.strip(), why.strip())
            runner.facts["devices"] = self.available
        base = device.split("/")[0]
        if base not in self.available:
            return f"the suites know no device '{base}'"
        return self.available[base]

    def binary(self, suite: str) -> pathlib.Path:
        return self.settings.build_dir / "bin" / f"bench_{suite}"

    def step(
        self, suite: str, device: str, profile: str, filt: str = "", shared_worker: bool = True
    ) -> Callable[[Runner, float], Outcome]:
        """One suite on one device. With `shared_worker` False the suite starts a framework worker of
        its own (it runs beside other suites in a parallel batch)."""

        def action(runner: Runner, timeout: float) -> Outcome:
            t0 = time.monotonic()
            why = self.availability(runner, device, timeout)
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
            consume=False,
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


def gpu_plan(settings: Settings) -> list[Step]:
    """Most valuable evidence first (issue 37), what no lent machine has run yet before what one
    has: the GPU tests; the engine on the GPU against the GPU's own copy, beside Inductor's and
    XLA's; task A at the plan's size on cuda; the claims' suites on cuda and xla:cuda; task E's
    GPT-2 124M for 1000 steps; Inductor's mechanisms and the claims' suites on torch:cuda; task B at
    the plan's 1000 sets; task A at the plan's size on torch:cuda (the bridge moves each run's
    128 MiB output: about 0.4 s a run there, so a long step of its own). Timed steps run alone;
    precision steps run in batches."""
    suites = settings.suite_runs = SuiteRuns(settings)
    built = ("build",)
    plan = setup_steps(settings)
    plan.append(Step("gpu-tests", "ctest -L 'gpu|cuda': every gpu test must run, none skip", ctest_step(settings, "gpu|cuda", True), 150, 30, built))  # fmt: skip
    # Engine speed, alone on the machine: the cold-compile benchmark (a fresh worker per round) is
    # left to the end, the rest is the quick profile.
    for device in ("cuda", "torch:cuda", "xla:cuda"):
        plan.append(Step(f"engine@{device}", f"engine speed against the GPU's copy bandwidth on {device} (quick)",
                         suites.step("engine_throughput", device, "quick", "-CompileCold"), 150, 30, built))  # fmt: skip
    plan.append(Step("A-plan-size@cuda", "task A at [8, 2048, 4096] f16, 1000 runs a round, on cuda",
                     suites.step("fusion_determinism", "cuda", "full", "^A/dtype:f16/threads:2/"), 300, 120, built))  # fmt: skip
    plan.append(Step("cuda-and-xla-claims", "the claims' suites on cuda and xla:cuda",
                     parallel({f"{s}@{d}": suites.step(s, d, "quick", shared_worker=False)
                               for d in ("cuda", "xla:cuda") for s in CLAIM_SUITES}), 200, 60, built))  # fmt: skip
    plan.append(Step("E-gpt2-124m", "task E on torch:cuda: gpt2-124m, 1000 steps, eager seeds and compiled (gpu_alignment.py)",
                     python_step(["suites/training_alignment/gpu_alignment.py", "--config",
                                  "suites/training_alignment/configs/gpt2-124m.json", "--budget-s", "{budget}",
                                  "--out", "{extras}/gpu_alignment.json"], "gpu_alignment.log"), 600, 150, built))  # fmt: skip
    mechanisms = python_step(["tools/gpu/inductor_mechanisms.py", "--device", "cuda", "--budget-s", "{budget}",
                              "--out", "{extras}/inductor_mechanisms.json"], "inductor_mechanisms.log")  # fmt: skip
    torch_claims = {f"{s}@torch:cuda": suites.step(s, "torch:cuda", "quick", shared_worker=False) for s in CLAIM_SUITES}
    plan.append(Step("torch-cuda-claims", "Inductor -> Triton: its mechanisms (rsqrt, division, FMA, scalars, reduction blocking, strict numerics) and the claims' suites on torch:cuda",
                     parallel({"inductor-mechanisms": mechanisms, **torch_claims}), 240, 60, built))  # fmt: skip
    plan.append(Step("B-1000-sets@cuda", "task B with the plan's 1000 sets on cuda (full profile)",
                     suites.step("accumulated_error", "cuda", "full"), 400, 90, built))  # fmt: skip
    plan.append(Step("A-plan-size@torch:cuda", "task A at [8, 2048, 4096] f16, 1000 runs a round, on torch:cuda",
                     suites.step("fusion_determinism", "torch:cuda", "full", "^A/dtype:f16/threads:2/"), 600, 480, built))  # fmt: skip
    plan.append(Step("engine-cold@torch:cuda", "Inductor's cold compile and cache hit on the GPU",
                     suites.step("engine_throughput", "torch:cuda", "quick", "CompileCold|CacheHit"), 120, 60, built))  # fmt: skip
    return plan


def rehearsal_plan(settings: Settings) -> list[Step]:
    """What CI proves offline: the bundle unpacks, configures and builds the toolkit and a suite
    through the Python wrapper, and the suite runs on the cpu device."""
    suites = settings.suite_runs = SuiteRuns(settings)
    plan = setup_steps(settings)
    plan.append(Step("data_movement@cpu", "one suite case on the cpu device",
                     suites.step("data_movement", "cpu", "quick", "^D/subgraph:transpose/dtype:f16/"), 300, 10, ("build",)))  # fmt: skip
    return plan


PLANS = {"gpu": gpu_plan, "rehearsal": rehearsal_plan}


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
    parser.add_argument("--revision", help="the commit the tree was copied from, where the copy has no .git")
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
    )
    plan = PLANS[args.plan](settings)
    if args.list:
        for step in plan:
            print(f"{step.name:<32} {step.timeout_s:>5.0f} s  {step.what}")
        return 0
    only = set(args.only.split(",")) if args.only else None
    if only:
        unknown = only - {s.name for s in plan}
        if unknown:
            parser.error(
                f"--only {args.only}: no step named {', '.join(sorted(unknown))} in plan {args.plan} (see --list)"
            )
    work = (args.work or settings.build_dir / "device-run").resolve()
    runner = Runner(args.out.resolve(), work, args.budget)
    if args.revision:
        runner.env["FUSEBENCH_REVISION"] = args.revision
    if settings.suite_runs:
        install_manifest(runner, settings.suite_runs, "quick" if args.plan == "rehearsal" else "mixed")
    return runner.run_plan(plan, only, resume=args.resume, strict=args.strict)


if __name__ == "__main__":
    sys.exit(main())
