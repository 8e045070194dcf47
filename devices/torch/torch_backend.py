"""fusebench's torch device, the framework side (loaded by devices/bridge/fusebench_worker.py).

eager: the generated graph_fn called as it is, op by op with PyTorch's own ops.
fused: torch.compile(graph_fn, fullgraph=True, dynamic=False) (Inductor, default mode), compiled
once per graph and settings; the Inductor knobs in settings["inductor"] are applied with
torch._inductor.config.patch around the compiling call.
Evidence of a compiled graph: Inductor's wrapper module, each C++ kernel's source, the exact g++
command line that built it, the .so and hashes of all three (and of the .so's .text section,
which does not carry the debug paths that -g1 embeds).
"""

import hashlib
import os
import subprocess

import torch
import torch._inductor.config
import torch._inductor.cpp_builder as cpp_builder
from torch._inductor.codecache import PyCodeCache

import fusebench_arrays as arrays

VERSION = torch.__version__
DEVICE = "cpu"

# Every command line Inductor builds, so a kernel's evidence can name the one that compiled it.
_command_lines = []
_get_command_line = cpp_builder.CppBuilder.get_command_line


def _recording_get_command_line(self):
    command = _get_command_line(self)
    _command_lines.append(command)
    return command


cpp_builder.CppBuilder.get_command_line = _recording_get_command_line


def setup(target):
    global DEVICE
    if target == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("torch.cuda.is_available() is False: no CUDA GPU (or no CUDA-enabled torch build)")
    DEVICE = target


def load(path):
    array, dtype = arrays.load(path)
    tensor = torch.from_numpy(array)
    if dtype == "bf16":
        tensor = tensor.view(torch.bfloat16)
    return tensor if DEVICE == "cpu" else tensor.to(DEVICE)


def save(tensor, path):
    tensor = tensor.detach().contiguous().cpu()
    if tensor.dtype == torch.bfloat16:
        arrays.save(tensor.view(torch.int16).numpy(), path, bf16=True)
    else:
        arrays.save(tensor.numpy(), path)


def _threads(settings):
    n = settings.get("threads")
    if n and torch.get_num_threads() != n:
        torch.set_num_threads(n)


def eager(fn, settings):
    return {"fn": fn, "inductor": {}}


def compile(fn, settings, inputs):
    _threads(settings)
    return {"fn": torch.compile(fn, fullgraph=True, dynamic=False), "inductor": settings.get("inductor", {}),
            "modules_before": set(id(m) for m in PyCodeCache.modules), "counters_before": _counters()}


def call(state, inputs, settings):
    _threads(settings)
    if state["inductor"]:
        with torch._inductor.config.patch(state["inductor"]):
            return state["fn"](*inputs)
    return state["fn"](*inputs)


def sync(outputs):
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def _counters():
    from torch._dynamo.utils import counters
    return {f"{group}.{name}": value for group in ("inductor", "aot_autograd") for name, value in counters[group].items()}


def _sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _text_section_sha256(so_path):
    """SHA-256 of the .so's .text section alone (objcopy), the machine code without debug info."""
    out = so_path + ".text.bin"
    try:
        subprocess.run(["objcopy", "-O", "binary", "--only-section=.text", so_path, out], check=True,
                       capture_output=True)
        return _sha256_file(out)
    except (OSError, subprocess.CalledProcessError):
        return ""
    finally:
        if os.path.exists(out):
            os.remove(out)


def evidence(state, inputs):
    counters = _counters()
    before = state["counters_before"]
    new = [m for m in PyCodeCache.modules if id(m) not in state["modules_before"]]
    kernels = []
    for module in new:
        for name, value in sorted(vars(module).items()):
            library = getattr(getattr(value, "__self__", None), "__file__", None)
            if not (name.startswith(("cpp_fused", "triton_")) and library):
                continue
            source = library[:-3] + ".cpp" if library.endswith(".so") else ""
            stem = os.path.basename(library).split(".")[0]
            command = next((c for c in reversed(_command_lines) if stem in c), "")
            cache_dir = os.environ.get("TORCHINDUCTOR_CACHE_DIR", "")
            kernel = {"name": name, "library": library, "library_sha256": _sha256_file(library),
                      "text_sha256": _text_section_sha256(library), "command_line": command,
                      # the same command with the cache directory factored out, comparable across caches
                      "command_line_normalized": command.replace(cache_dir, "$TORCHINDUCTOR_CACHE_DIR") if cache_dir else command}
            if source and os.path.exists(source):
                kernel["source"] = source
                kernel["source_sha256"] = _sha256_file(source)
            kernels.append(kernel)
    return {
        # the compiled artifact: every kernel's .so; its source: every kernel's C++ and the g++
        # command that built it (the cache directory factored out)
        "artifact_sha256": hashlib.sha256("".join(k["library_sha256"] for k in kernels).encode()).hexdigest(),
        "source_sha256": hashlib.sha256("".join(k.get("source_sha256", "") + k["command_line_normalized"]
                                                for k in kernels).encode()).hexdigest(),
        "artifact_path": kernels[0]["library"] if kernels else "",
        "framework": "torch " + VERSION,
        "compiler": "torch.compile(fullgraph=True, dynamic=False), Inductor",
        "inductor_config": state["inductor"],
        "wrapper_modules": [m.__file__ for m in new],
        "kernels": kernels,
        "counters": {k: v - before.get(k, 0) for k, v in counters.items() if v != before.get(k, 0)},
        "cache_dir": os.environ.get("TORCHINDUCTOR_CACHE_DIR", ""),
    }
