"""fusebench's torch device, the framework side (loaded by devices/bridge/fusebench_worker.py).

eager: the generated graph_fn called as it is, op by op with PyTorch's own ops.
fused: torch.compile(graph_fn, backend=BACKEND, fullgraph=True, dynamic=False), compiled once per
graph and settings. BACKEND is "inductor" (default mode) or any backend torch._dynamo knows:
its built-ins (aot_eager: AOTAutograd with no code generation, the unfused control), an
entry point of the `torch_dynamo_backends` group (how torchair's `npu` backend registers), or
one registered by a module named in $FUSEBENCH_TORCH_BACKEND_MODULES (comma-separated module
names or .py paths, imported before the name is looked up). The Inductor knobs in
settings["inductor"] are applied with torch._inductor.config.patch around the compiling call.
Evidence of a compiled graph: Inductor's wrapper module, each C++ kernel's source, the exact g++
command line that built it, the .so and hashes of all three (and of the .so's .text section,
which does not carry the debug paths that -g1 embeds). On CUDA, each Triton kernel's Python
source, the configs it launched with (block sizes, warps, stages), its cubin's hash and what its
PTX holds (fma.rn, div.full / div.rn, rsqrt.approx).
"""

import glob
import hashlib
import os
import re
import subprocess

import fusebench_arrays as arrays
import torch
import torch._inductor.config
import torch._inductor.cpp_builder as cpp_builder
from torch._inductor.codecache import PyCodeCache

VERSION = torch.__version__
DEVICE = "cpu"
BACKEND = "inductor"

# Every command line Inductor builds, so a kernel's evidence can name the one that compiled it.
_command_lines = []
_get_command_line = cpp_builder.CppBuilder.get_command_line


def _recording_get_command_line(self):
    command = _get_command_line(self)
    _command_lines.append(command)
    return command


cpp_builder.CppBuilder.get_command_line = _recording_get_command_line


_imported = set()


def import_backend_modules():
    """Imports what $FUSEBENCH_TORCH_BACKEND_MODULES names, so that the backends they register with
    torch._dynamo exist in this process."""
    import importlib
    import importlib.util

    for entry in filter(None, (e.strip() for e in os.environ.get("FUSEBENCH_TORCH_BACKEND_MODULES", "").split(","))):
        if entry in _imported:
            continue  # a module registers its backends once (torch._dynamo refuses a duplicate name)
        _imported.add(entry)
        if entry.endswith(".py"):
            spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(entry))[0], entry)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            importlib.import_module(entry)


def setup(target, backend="inductor"):
    global DEVICE, BACKEND
    import torch._dynamo  # binds the name torch in this function: before its first use

    if target == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("torch.cuda.is_available() is False: no CUDA GPU (or no CUDA-enabled torch build)")
    import_backend_modules()

    known = torch._dynamo.list_backends(exclude_tags=())
    if backend not in known:
        raise RuntimeError(
            f"torch.compile backend '{backend}' is not registered with torch._dynamo (known: "
            f"{', '.join(known)}; a team's own registers through the torch_dynamo_backends entry "
            "point or a module named in FUSEBENCH_TORCH_BACKEND_MODULES)"
        )
    DEVICE, BACKEND = target, backend


def load(path):
    array, dtype = arrays.load(path)
    tensor = torch.from_numpy(array)
    if dtype == "bf16":
        tensor = tensor.view(torch.bfloat16)
    return tensor if DEVICE == "cpu" else tensor.to(DEVICE)


def to_host(tensor):
    """The tensor's bytes as a contiguous numpy array on the host (bf16 as its 16-bit pattern)."""
    tensor = tensor.detach().contiguous().cpu()
    return tensor.view(torch.int16).numpy() if tensor.dtype == torch.bfloat16 else tensor.numpy()


def save(tensor, path):
    arrays.save(to_host(tensor), path, bf16=tensor.dtype == torch.bfloat16)


def _threads(settings):
    n = settings.get("threads")
    if n and torch.get_num_threads() != n:
        torch.set_num_threads(n)


def eager(fn, settings):
    return {"fn": fn, "inductor": {}}


def compile(fn, settings, inputs):
    _threads(settings)
    return {
        # a fusion switch's graph break (settings["graph_breaks"]) splits the graph where it says
        "fn": torch.compile(
            fn,
            backend=settings.get("backend", BACKEND),
            fullgraph=not settings.get("graph_breaks"),
            dynamic=False,
        ),
        "inductor": settings.get("inductor", {}),
        "backend": settings.get("backend", BACKEND),
        "fullgraph": not settings.get("graph_breaks"),
        "modules_before": set(id(m) for m in PyCodeCache.modules),
        "counters_before": _counters(),
    }


def call(state, inputs, settings):
    _threads(settings)
    if state["inductor"]:
        with torch._inductor.config.patch(state["inductor"]):
            return state["fn"](*inputs)
    return state["fn"](*inputs)


def sync(outputs):
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def timed_batch(state, inputs, settings, calls):
    """On CUDA: `calls` back-to-back calls between a pair of CUDA events on the current stream,
    synchronised once on the second (the GPU's time for the batch, not the host's launch loop).
    None on the CPU, where the worker's host clock times the batch."""
    if DEVICE != "cuda":
        return None
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        outputs = call(state, inputs, settings)
    end.record()
    end.synchronize()
    return round(start.elapsed_time(end) * 1e6), "torch.cuda.Event pair around the batch, synchronised once", outputs


def _counters():
    from torch._dynamo.utils import counters

    return {
        f"{group}.{name}": value for group in ("inductor", "aot_autograd") for name, value in counters[group].items()
    }


def cache_stats():
    """The worker's compiles served by Inductor's FX graph cache (TORCHINDUCTOR_CACHE_DIR, shared by
    every suite and run on this machine) and those it had to compile."""
    from torch._dynamo.utils import counters

    return {
        "cache_hits": counters["inductor"]["fxgraph_cache_hit"],
        "cache_misses": counters["inductor"]["fxgraph_cache_miss"],
    }


def _inductor_cache_dir():
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        return os.environ["TORCHINDUCTOR_CACHE_DIR"]
    from torch._inductor.runtime.cache_dir_utils import cache_dir as inductor_cache_dir

    return inductor_cache_dir()


# What the dynamic loader says of a file that is not a loadable library (a .so truncated or
# overwritten in Inductor's cache): the error the worker recovers from by moving the entry aside.
_CORRUPT_LIBRARY = (
    "invalid ELF header",
    "file too short",
    "ELF load command",
    "wrong ELF class",
    "only ET_DYN and ET_EXEC can be loaded",
    "ELF file's phentsize not the expected size",
    "unexpected PLT reloc type",
)


def corrupt_cache_entry(error_text):
    """(the cache entry to move aside, the loader's line) when the error is a corrupt library in
    Inductor's cache: the directory under TORCHINDUCTOR_CACHE_DIR that holds the library the loader
    names (Inductor keeps each artifact in <cache>/<2 characters of its key>/), or the whole cache
    when the line names no file there. None for any other error."""
    cache = os.path.realpath(_inductor_cache_dir())
    for line in error_text.splitlines():
        if not any(sign in line for sign in _CORRUPT_LIBRARY):
            continue
        sign = line.strip()[:500]
        for path in re.findall(r"(/[^\s:'\"]+)", line):
            real = os.path.realpath(path)
            if real.startswith(cache + os.sep):
                return os.path.join(cache, os.path.relpath(real, cache).split(os.sep)[0]), sign
        return cache, sign
    return None


_CODE_LIMIT = 20000  # characters of a kernel's C++ kept in its evidence


def _sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _text_section_sha256(so_path):
    """SHA-256 of the .so's .text section alone (objcopy), the machine code without debug info."""
    out = so_path + ".text.bin"
    try:
        subprocess.run(
            ["objcopy", "-O", "binary", "--only-section=.text", so_path, out], check=True, capture_output=True
        )
        return _sha256_file(out)
    except (OSError, subprocess.CalledProcessError):
        return ""
    finally:
        if os.path.exists(out):
            os.remove(out)


def _sha256_bytes(data):
    return hashlib.sha256(data).hexdigest()


def _triton_cache_dir():
    if os.environ.get("TRITON_CACHE_DIR"):
        return os.environ["TRITON_CACHE_DIR"]
    from torch._inductor.runtime.cache_dir_utils import triton_cache_dir

    return triton_cache_dir(torch.cuda.current_device())


def _embedded_triton_source(name, wrapper_text):
    """A kernel's source as Inductor's wrapper module embeds it:
    name = async_compile.triton('name', '''...''', device_str='cuda')."""
    match = re.search(
        rf"{re.escape(name)}\s*=\s*async_compile\.triton\(.*?(?:'''|\"\"\")(.*?)(?:'''|\"\"\")", wrapper_text, re.S
    )
    return match.group(1) if match else None


def _triton_kernel(name, kernel_object, wrapper_text):
    """A Triton kernel of Inductor's wrapper module: its Python source (from the wrapper module),
    the configs it launched with (block sizes, warps, stages), and, from Triton's cache directory
    of each launcher's compiled binary, the cubin's hash and what its PTX holds. A cubin carries no
    cache paths, so its hash is the machine code's."""
    kernel = {"name": name, "kind": "triton"}
    source = getattr(getattr(kernel_object, "fn", None), "src", None) or _embedded_triton_source(name, wrapper_text)
    if source is not None:
        kernel["source_sha256"] = _sha256_bytes(source.encode())
        kernel["code"] = source[:_CODE_LIMIT]
    cubins, ptx, configs, located = [], [], [], []
    cache = None
    for launcher in list(getattr(kernel_object, "launchers", None) or []):
        config = getattr(launcher, "config", None)
        if config is not None:
            configs.append(
                {
                    "kwargs": {k: v for k, v in (getattr(config, "kwargs", {}) or {}).items() if isinstance(v, int)},
                    "num_warps": getattr(config, "num_warps", None),
                    "num_stages": getattr(config, "num_stages", None),
                }
            )
        cache_hash = getattr(launcher, "cache_hash", None)
        if not cache_hash:
            continue
        cache = cache or _triton_cache_dir()
        directory = os.path.join(cache, cache_hash)
        for cubin in sorted(glob.glob(os.path.join(directory, "*.cubin"))):
            with open(cubin, "rb") as f:
                cubins.append(f.read())
            located.append(cubin)
        for path in sorted(glob.glob(os.path.join(directory, "*.ptx"))):
            with open(path, errors="replace") as f:
                ptx.append(f.read())
    kernel["configs"] = configs
    kernel["cubins"] = located
    if cubins:
        kernel["library_sha256"] = _sha256_bytes(b"".join(cubins))
        kernel["text_sha256"] = kernel["library_sha256"]
        kernel["cache_dir_mentions"] = 0
    if ptx:
        text = "\n".join(ptx)
        # what the PTX says about the mechanisms: fused multiply-adds, approximate and IEEE
        # division and square roots, flushed subnormals
        kernel["ptx_counts"] = {
            op: text.count(op)
            for op in ("fma.rn", "div.full", "div.rn", "div.approx", "rsqrt.approx", "sqrt.rn", "sqrt.approx", ".ftz")
        }
    kernel["command_line_normalized"] = ""
    return kernel


def evidence(state, inputs):
    counters = _counters()
    before = state["counters_before"]
    new = [m for m in PyCodeCache.modules if id(m) not in state["modules_before"]]
    kernels = []
    for module in new:
        wrapper_text = ""
        if DEVICE == "cuda" and getattr(module, "__file__", None):
            with open(module.__file__, errors="replace") as f:
                wrapper_text = f.read()
        for name, value in sorted(vars(module).items()):
            if DEVICE == "cuda" and name.startswith("triton_"):
                try:
                    kernels.append(_triton_kernel(name, value, wrapper_text))
                except Exception as e:  # evidence must not stop a measurement; say what broke
                    kernels.append({"name": name, "kind": "triton", "error": f"{type(e).__name__}: {e}"[:300]})
                continue
            library = getattr(getattr(value, "__self__", None), "__file__", None)
            if not (name.startswith(("cpp_fused", "triton_")) and library):
                continue
            source = library[:-3] + ".cpp" if library.endswith(".so") else ""
            stem = os.path.basename(library).split(".")[0]
            command = next((c for c in reversed(_command_lines) if stem in c), "")
            cache_dir = os.environ.get("TORCHINDUCTOR_CACHE_DIR", "")
            if not cache_dir:
                from torch._inductor.runtime.cache_dir_utils import cache_dir as inductor_cache_dir

                cache_dir = inductor_cache_dir()
            with open(library, "rb") as f:
                # -g1's debug sections name the kernel's path inside the cache directory: why two
                # cold compiles give .so files that differ while their .text is the same
                mentions = f.read().count(cache_dir.encode()) if cache_dir else 0
            kernel = {
                "name": name,
                "library": library,
                "library_sha256": _sha256_file(library),
                "cache_dir_mentions": mentions,
                "text_sha256": _text_section_sha256(library),
                "command_line": command,
                # the same command with the cache directory factored out, comparable across caches
                "command_line_normalized": command.replace(cache_dir, "$TORCHINDUCTOR_CACHE_DIR")
                if cache_dir
                else command,
            }
            if source and os.path.exists(source):
                kernel["source"] = source
                kernel["source_sha256"] = _sha256_file(source)
                with open(source, encoding="utf-8", errors="replace") as f:
                    kernel["code"] = f.read(_CODE_LIMIT)  # the evidence a report quotes (C1: the constant)
            kernels.append(kernel)
    found = {
        # the compiled artifact: every kernel's .so; its source: every kernel's C++ and the g++
        # command that built it (the cache directory factored out)
        "artifact_sha256": hashlib.sha256("".join(k.get("library_sha256", "") for k in kernels).encode()).hexdigest(),
        "source_sha256": hashlib.sha256(
            "".join(k.get("source_sha256", "") + k["command_line_normalized"] for k in kernels).encode()
        ).hexdigest(),
        "artifact_path": kernels[0].get("library", "") if kernels else "",
        "framework": "torch " + VERSION,
        "compiler": f"torch.compile(backend={state['backend']!r}, fullgraph={state['fullgraph']}, dynamic=False)",
        "backend": state["backend"],
        "inductor_config": state["inductor"],
        "wrapper_modules": [m.__file__ for m in new],
        "kernels": kernels,
        "counters": {k: v - before.get(k, 0) for k, v in counters.items() if v != before.get(k, 0)},
        "cache_dir": os.environ.get("TORCHINDUCTOR_CACHE_DIR", ""),
    }
    # Where the compiled graph's inputs were, so its kernels ran there (the CPU's evidence stays as it was).
    if DEVICE != "cpu":
        found["device"] = str(inputs[0].device) if inputs else DEVICE
    return found
