"""fusebench's xla device through JAX, the framework side (loaded by devices/bridge/fusebench_worker.py).

eager: graph_fn under jax.disable_jit(): every primitive dispatched on its own (library functions
that are themselves @jax.jit, e.g. jax.nn.standardize, would otherwise run fused).
fused: jax.jit(graph_fn), compiled once per graph and settings with the XLA options in
settings["xla"] (lower(...).compile(compiler_options=...)).
Evidence: the optimized HLO (metadata stripped before hashing: it carries source lines) and the
executable's fingerprint. XLA:CPU's machine code is not exposed to disassemble.
Compiles persist in $JAX_COMPILATION_CACHE_DIR when the device sets it (the bridge does).
"""

import hashlib
import os
import re

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

VERSION = "jax " + jax.__version__ + ", jaxlib " + jax.lib.__version__ if hasattr(jax, "lib") else jax.__version__
_DEVICE = None
# The persistent compilation cache's answers (JAX_COMPILATION_CACHE_DIR): jax records each lookup
# as a monitoring event.
_CACHE_EVENTS = {"/jax/compilation_cache/cache_hits": 0, "/jax/compilation_cache/cache_misses": 0}


def _count_cache_event(event, **kwargs):
    if event in _CACHE_EVENTS:
        _CACHE_EVENTS[event] += 1


jax.monitoring.register_event_listener(_count_cache_event)


def cache_stats():
    return {
        "cache_hits": _CACHE_EVENTS["/jax/compilation_cache/cache_hits"],
        "cache_misses": _CACHE_EVENTS["/jax/compilation_cache/cache_misses"],
    }


def setup(target):
    global _DEVICE
    _DEVICE = jax.devices(target)[0]


def load(path):
    array, dtype = arrays.load(path)
    if dtype == "bf16":
        array = array.view(ml_dtypes.bfloat16)
    return jax.device_put(array, _DEVICE)


def save(value, path):
    array = np.asarray(value)
    if array.dtype == ml_dtypes.bfloat16:
        arrays.save(array.view(np.uint16), path, bf16=True)
    else:
        arrays.save(array, path)


class _Eager:
    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args):
        with jax.disable_jit():
            return self.fn(*args)


def eager(fn, settings):
    return {"fn": _Eager(fn)}


def compile(fn, settings, inputs):
    options = settings.get("xla", {})
    lowered = jax.jit(fn).lower(*inputs)
    compiled = lowered.compile(compiler_options=options) if options else lowered.compile()
    return {"fn": compiled, "options": options}


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


def evidence(state, inputs):
    compiled = state["fn"]
    hlo = compiled.as_text()
    stripped = strip_metadata(hlo)
    fingerprint = ""
    try:
        fp = compiled.runtime_executable().fingerprint
        if isinstance(fp, (bytes, bytearray)):
            fingerprint = fp.decode() if fp.isascii() and fp.decode().isprintable() else fp.hex()
        else:
            fingerprint = str(fp)
    except Exception as e:  # not every jaxlib exposes it
        fingerprint = f"unavailable: {type(e).__name__}"
    return {
        "artifact_sha256": fingerprint,
        "source_sha256": hashlib.sha256(stripped.encode()).hexdigest(),
        "framework": VERSION,
        "compiler": "jax.jit, XLA:CPU" if _DEVICE.platform == "cpu" else f"jax.jit, XLA:{_DEVICE.platform}",
        "xla_options": state["options"],
        "optimized_hlo": stripped,
        "hlo_sha256": hashlib.sha256(stripped.encode()).hexdigest(),
        "fingerprint": fingerprint,
        "fusions": len(re.findall(r"\bfusion\(", stripped)),
    }
