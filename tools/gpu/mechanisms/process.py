"""The run's clock and its guards: a budget counted from the start of the process, a hard limit on
one variant (SIGALRM), environment variables set for a while, progress lines on stderr."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

T_START = time.monotonic()


class Budget:
    """Wall-clock budget counted from the script's start (imports included)."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def used(self) -> float:
        return time.monotonic() - T_START

    def remaining(self) -> float:
        return self.seconds - self.used()

    def spent(self) -> bool:
        return self.remaining() <= 0


class VariantTimeout(Exception):
    pass


@contextlib.contextmanager
def hard_timeout(seconds: float):
    """Raise VariantTimeout in the main thread after `seconds` (SIGALRM; a no-op where absent)."""
    if not hasattr(signal, "SIGALRM") or seconds <= 0:
        yield
        return

    def handler(signum, frame):
        raise VariantTimeout(f"variant ran past its hard limit of {seconds:.0f} s")

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@contextlib.contextmanager
def env_vars(values: dict):
    old = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _progress(msg: str):
    print(f"[{time.monotonic() - T_START:7.1f}s] {msg}", file=sys.stderr, flush=True)
