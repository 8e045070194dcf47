"""A framework backend for the worker's own tests (test_worker_time.py): numpy arrays, graph_fn called
as it is, every call and synchronisation appended to settings["log"] so that a test can count them.
settings["call_s"]: each call sleeps that long (a call of known length). settings["scribble_on_inputs"]: the
compiled callable writes into its first input. settings["own_clock_ns"]:
the backend times batches itself (timed_batch), reporting that many nanoseconds per call, as a
backend with a device clock (CUDA events) reports the device's time, not the host's."""

import time

import numpy as np

VERSION = "counting 0"


def setup(target):
    pass


def load(path):
    return np.load(path)


def to_host(value):
    return np.ascontiguousarray(value)


def save(value, path):
    np.save(path, to_host(value))


_log_path = None  # the last call's settings["log"]: sync(outputs) is given no settings


def _log(what):
    with open(_log_path, "a") as f:
        f.write(what + "\n")


def eager(fn, settings):
    return {"fn": fn}


def compile(fn, settings, inputs):
    # settings["scribble_on_inputs"]: the compiled callable adds 1 to its first input's first element after
    # each call (a fuser that reuses an input's buffer), which the worker must find
    return {"fn": fn, "scribbles": settings.get("scribble_on_inputs", False)}


def call(state, inputs, settings):
    global _log_path
    _log_path = settings["log"]
    _log("call")
    if settings.get("call_s"):
        time.sleep(settings["call_s"])
    outputs = state["fn"](*inputs)
    if state.get("scribbles"):
        inputs[0].reshape(-1)[0] += 1
    return outputs


def sync(outputs):
    _log("sync")


def timed_batch(state, inputs, settings, calls):
    if not settings.get("own_clock_ns"):
        return None
    for _ in range(calls):
        outputs = call(state, inputs, settings)
    _log("own clock")
    return calls * settings["own_clock_ns"], "the backend's own clock", outputs


def evidence(state, inputs):
    return {}
