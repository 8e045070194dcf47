"""fusebench's xla devices through JAX, the framework side (loaded by devices/bridge/fusebench_worker.py).

Targets: "cpu" (device xla, XLA:CPU) and "cuda" (device xla:cuda, XLA:CUDA through JAX's CUDA
plugin, jax-cuda13-plugin).

eager: graph_fn.eager, one jax.jit per op: each op node of the graph module is a module-level
jitted function (its static arguments baked in), called in node order, so each op's value is
rounded to its dtype once, at its output, as a JAX user's un-fused code runs (inside an op XLA may
keep its primitives wider); jit's cache keeps one executable per op and input shapes and dtypes.
fused: jax.jit(graph_fn), compiled once per graph and settings with the XLA options in
settings["xla"] (lower(...).compile(compiler_options=...)).
Evidence: the optimized HLO (metadata stripped before hashing: it carries source lines) and the
executable's fingerprint (on XLA:CUDA also the platform the inputs were placed on, the proof that
the graph ran on the GPU). XLA's machine code is not exposed to disassemble.
Compiles persist in $JAX_COMPILATION_CACHE_DIR when the device sets it (the bridge does).
"""

import hashlib
import os
import re
import sys
import warnings

import fusebench_arrays as arrays
import jax
import jax.monitoring
import ml_dtypes
import numpy as np

jax.config.update("jax_enable_x64", True)  # f64 / i64 graphs stay 64-bit, as fusebench's tensors are
if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
    # every executable into the persistent cache (the default keeps only compiles over 1 s, and
    # fusebench's graphs compile in milliseconds)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)

# jax.lib.__version__ is jaxlib's; read defensively, since jax has been deprecating jax.lib's names
_JAXLIB_VERSION = getattr(getattr(jax, "lib", None), "__version__", None)
VERSION = f"jax {jax.__version__}, jaxlib {_JAXLIB_VERSION}" if _JAXLIB_VERSION else jax.__version__
_DEVICE = None
_TARGET = "cpu"
# The persistent compilation cache's answers (JAX_COMPILATION_CACHE_DIR): jax records each lookup
# as a monitoring event. Those made while an eager graph runs (its ops' jits) are counted apart, so
# that the fused figures stay the fused graphs'.
_CACHE_EVENTS = {"/jax/compilation_cache/cache_hits": 0, "/jax/compilation_cache/cache_misses": 0}
_EAGER_CACHE_EVENTS = dict.fromkeys(_CACHE_EVENTS, 0)
# jax times each executable it builds (or loads from the persistent cache) as this event: during an
# eager graph, one per op whose jit met new input shapes or dtypes.
_BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_EAGER_COMPILES = {"count": 0, "seconds": 0.0}
_IN_EAGER = False


def _count_cache_event(event, **kwargs):
    if event in _CACHE_EVENTS:
        (_EAGER_CACHE_EVENTS if _IN_EAGER else _CACHE_EVENTS)[event] += 1


def _count_compile(event, duration_secs, **kwargs):
    if event == _BACKEND_COMPILE_EVENT and _IN_EAGER:
        _EAGER_COMPILES["count"] += 1
        _EAGER_COMPILES["seconds"] += duration_secs


if hasattr(jax.monitoring, "register_event_listener"):  # else no cache counts, but the device runs
    jax.monitoring.register_event_listener(_count_cache_event)
if hasattr(jax.monitoring, "register_event_duration_secs_listener"):  # else no eager compile counts
    jax.monitoring.register_event_duration_secs_listener(_count_compile)


def cache_stats():
    return {
        "cache_hits": _CACHE_EVENTS["/jax/compilation_cache/cache_hits"],
        "cache_misses": _CACHE_EVENTS["/jax/compilation_cache/cache_misses"],
        # the eager path's: its ops' executables built, and the persistent cache's answers for them
        "eager_op_compiles": _EAGER_COMPILES["count"],
        "eager_op_compile_s": round(_EAGER_COMPILES["seconds"], 3),
        "eager_cache_hits": _EAGER_CACHE_EVENTS["/jax/compilation_cache/cache_hits"],
        "eager_cache_misses": _EAGER_CACHE_EVENTS["/jax/compilation_cache/cache_misses"],
    }


def _cuda_plugins():
    """The JAX CUDA plugin distributions installed, as 'name version'."""
    import importlib.metadata

    found = []
    for name in ("jax-cuda13-plugin", "jax-cuda12-plugin"):
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def setup(target):
    global _DEVICE, _TARGET
    if target == "cpu":
        # XLA:CPU alone: otherwise, where JAX's CUDA plugin is installed, this worker would also
        # start a CUDA client, and take most of the GPU's memory from the GPU devices' workers.
        try:
            jax.config.update("jax_platforms", "cpu")
        except AttributeError:  # a jax without the option: XLA:CPU runs all the same
            pass
    try:
        _DEVICE = jax.devices(target)[0]
    except Exception as e:
        if target != "cuda":
            raise
        plugins = _cuda_plugins()
        if plugins:
            raise RuntimeError(
                f"jax has no usable 'cuda' platform (jax.devices('cuda') raised: {e}), although "
                f"{', '.join(plugins)} is installed: no NVIDIA GPU visible, or its driver does not "
                f"suit the plugin (check nvidia-smi, and that the plugin's version is jax's, {jax.__version__})"
            ) from None
        raise RuntimeError(
            f"jax has no 'cuda' platform (jax.devices('cuda') raised: {e}): install JAX's CUDA plugin "
            f"with `{sys.executable} -m pip install 'jax[cuda13]=={jax.__version__}'` on a machine with "
            "an NVIDIA GPU and its driver"
        ) from None
    _TARGET = target


def load(path):
    array, dtype = arrays.load(path)
    if dtype == "bf16":
        array = array.view(ml_dtypes.bfloat16)
    return jax.device_put(array, _DEVICE)


def to_host(value):
    """The array's bytes as a contiguous numpy array on the host (bf16 as its 16-bit pattern)."""
    array = np.ascontiguousarray(np.asarray(value))
    return array.view(np.uint16) if array.dtype == ml_dtypes.bfloat16 else array


def save(value, path):
    arrays.save(to_host(value), path, bf16=np.asarray(value).dtype == ml_dtypes.bfloat16)


class _Eager:
    """graph_fn.eager: one jax.jit per op, its compiles counted as the eager path's."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args):
        global _IN_EAGER
        _IN_EAGER = True
        try:
            return self.fn(*args)
        finally:
            _IN_EAGER = False


def eager(fn, settings):
    per_op = getattr(fn, "eager", None)
    if per_op is None:
        raise ValueError(
            "xla eager: the graph module defines no graph_fn.eager (one jax.jit per op); it was not "
            "emitted by this fusebench's xla device (devices/xla/xla_device.cpp)"
        )
    return {"fn": _Eager(per_op)}


class _Stages:
    """graph_fn cut into stages by the fusion switch split: each stage compiled apart, run in turn."""

    def __init__(self, compiled):
        self.compiled = compiled

    def __call__(self, *args):
        for stage in self.compiled:
            args = stage(*args)
        return args


# What JAX warns when an entry of its persistent cache cannot be read (a corrupt or truncated file):
# it compiles the graph anew and overwrites the entry itself, so the case goes on; the run says so.
_UNREADABLE_CACHE_ENTRY = "Error reading persistent compilation cache entry"


def compile(fn, settings, inputs):
    options = settings.get("xla", {})
    compiled = []
    args = inputs
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # graph_fn.stages: a split after an op (the emitted module says where); else graph_fn whole
        for stage in getattr(fn, "stages", [fn]):
            lowered = jax.jit(stage).lower(*args)
            compiled.append(lowered.compile(compiler_options=options) if options else lowered.compile())
            if len(compiled) < len(getattr(fn, "stages", [fn])):
                args = compiled[-1](*args)  # the next stage is lowered for these values
    unreadable = []
    for w in caught:
        if str(w.message).startswith(_UNREADABLE_CACHE_ENTRY):
            unreadable.append(str(w.message))
        else:  # every other warning as it would have been shown
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    state = {"fn": compiled[0] if len(compiled) == 1 else _Stages(compiled), "stages": compiled, "options": options}
    if unreadable:
        state["recovered"] = {
            "error": unreadable[0][:500],
            "action": f"JAX compiled the graph anew and overwrote the entry ({len(unreadable)} unreadable)",
        }
    return state


def call(state, inputs, settings):
    return state["fn"](*inputs)


def sync(outputs):
    for out in outputs:
        out.block_until_ready()


_METADATA = re.compile(r",?\s*metadata=\{[^}]*\}")


def strip_metadata(hlo):
    """The optimized HLO without source metadata (file names, lines, op names of the Python code)."""
    kept, in_table = [], False
    for line in _METADATA.sub("", hlo).splitlines():
        if line.strip() in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            in_table = True  # a table of the Python source's files and lines, up to a blank line
        elif in_table and not line.strip():
            in_table = False
        elif not in_table:
            kept.append(line)
    return "\n".join(kept)


def _fingerprint(compiled):
    try:
        fp = compiled.runtime_executable().fingerprint
        if fp is None:
            return "unavailable: XLA returned no fingerprint"
        if isinstance(fp, (bytes, bytearray)):
            return fp.decode() if fp.isascii() and fp.decode().isprintable() else fp.hex()
        return str(fp)
    except Exception as e:  # not every jaxlib exposes it
        return f"unavailable: {type(e).__name__}"


def evidence(state, inputs):
    stages = state.get("stages") or [state["fn"]]
    # a split's stages: their optimised HLO one after another, and a fingerprint of theirs
    stripped = "\n".join(strip_metadata(c.as_text()) for c in stages)
    fingerprints = [_fingerprint(c) for c in stages]
    fingerprint = fingerprints[0] if len(stages) == 1 else hashlib.sha256("\n".join(fingerprints).encode()).hexdigest()
    found = {
        "artifact_sha256": fingerprint,
        "source_sha256": hashlib.sha256(stripped.encode()).hexdigest(),
        "framework": VERSION,
        # the target, not _DEVICE.platform: JAX calls a CUDA device's platform "gpu"
        "compiler": f"jax.jit, XLA:{_TARGET.upper()}",
        "xla_options": state["options"],
        "optimized_hlo": stripped,
        "hlo_sha256": hashlib.sha256(stripped.encode()).hexdigest(),
        "fingerprint": fingerprint,
        "fusions": len(re.findall(r"\bfusion\(", stripped)),
    }
    if len(stages) > 1:
        found["stages"] = len(stages)
    if _TARGET != "cpu":  # (XLA:CPU's evidence stays as it was)
        found["device"] = str(_DEVICE)
        found["device_kind"] = _DEVICE.device_kind
        found["input_platforms"] = sorted({d.platform for x in inputs for d in x.devices()})
    return found
