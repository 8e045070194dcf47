"""A framework backend for the worker's own tests (test_worker_sigterm.py): it imports nothing, and
its compile() blocks for good in a C call that has released the GIL and that no signal interrupts
(a second lock of a non-recursive pthread mutex through ctypes), as a framework's compile can sit in
its thread pool's wait."""

import ctypes

VERSION = "stuck 0"


def setup(target):
    pass


def load(path):
    raise NotImplementedError("stuck_backend takes no inputs")


def compile(fn, settings, inputs):
    mutex = ctypes.create_string_buffer(64)  # all zeros: PTHREAD_MUTEX_INITIALIZER on glibc
    libc = ctypes.CDLL(None)
    libc.pthread_mutex_lock(mutex)
    libc.pthread_mutex_lock(mutex)  # never returns; ctypes released the GIL around the call
    raise AssertionError("a second pthread_mutex_lock returned")
