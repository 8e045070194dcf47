"""Runs a command as a child of tools/run that cannot outlive it: the command leads a process group of
its own (tools/run stops the whole group: a suite and whatever it started in it) and the kernel kills it
the moment tools/run dies, SIGKILL included (PR_SET_PDEATHSIG), so that nothing of a dead run competes
with the next run's timings. A signal handler in tools/run cannot do this: a SIGKILLed shell runs none.

Usage: python -S tools/lifeline.py PARENT_PID COMMAND [ARG...]
PARENT_PID is tools/run's pid ($$): when it is already gone (it died between the fork and the arming of
the signal) the command does not start (exit 125). Exit 126/127 when COMMAND cannot be executed."""

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[0].isdigit():
        print("lifeline: usage: lifeline.py PARENT_PID COMMAND [ARG...]", file=sys.stderr)
        return 2
    parent = int(argv[0])
    os.setpgid(0, 0)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        print(f"lifeline: prctl(PR_SET_PDEATHSIG): {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        return 125
    if os.getppid() != parent:
        print(f"lifeline: the run (pid {parent}) is gone; {argv[1]} not started", file=sys.stderr)
        return 125
    # a background job of a non-interactive shell starts with SIGINT and SIGQUIT ignored
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)
    try:
        os.execvp(argv[1], argv[1:])
    except OSError as e:
        print(f"lifeline: cannot execute {argv[1]}: {e.strerror}", file=sys.stderr)
        return 127 if isinstance(e, FileNotFoundError) else 126


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
