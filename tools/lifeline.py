"""Runs a command as a child of a runner (tools/run, tools/device_run.py) that cannot outlive it: the
command's process group dies the moment the runner dies, SIGKILL included, so that nothing of a dead run
competes with the next run's timings or holds the machine. A signal handler in the runner cannot do this:
a SIGKILLed process runs none.

Usage: python -S tools/lifeline.py [--group] PARENT_PID COMMAND [ARG...]
PARENT_PID is the runner's pid: when it is already gone (it died before lifeline could watch it) the
command does not start (exit 125). Exit 126/127 when COMMAND cannot be executed.

Without --group the command leads a process group of its own (the runner stops the whole group: a suite
and whatever it started in it) and the kernel kills it when the runner dies (PR_SET_PDEATHSIG): what it
started lives on unless it watches the runner itself (tools/run's suites and worker servers do).
With --group lifeline stays as the group's leader and runs COMMAND as its child in the group; it watches
the runner through a pidfd and kills the whole group when the runner dies, so that what the command
started (a shell's sleep, ctest's tests, pip's compilers) dies too. Otherwise it exits with the
command's status, or dies of the signal that killed the command. It ignores SIGTERM, SIGINT and SIGHUP:
the runner sends those to the group, where the command gets them once."""

import ctypes
import os
import select
import signal
import sys

PR_SET_PDEATHSIG = 1
# a runner's stop signals: for the command, never for the lifeline that guards its group
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def lead(parent: int, command: list[str]) -> int:
    """The command itself leads the group, with the parent-death signal."""
    os.setpgid(0, 0)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        print(f"lifeline: prctl(PR_SET_PDEATHSIG): {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        return 125
    if os.getppid() != parent:
        print(f"lifeline: the run (pid {parent}) is gone; {command[0]} not started", file=sys.stderr)
        return 125
    return execute(command)


def execute(command: list[str]) -> int:
    # a background job of a non-interactive shell starts with SIGINT and SIGQUIT ignored
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)
    try:
        os.execvp(command[0], command)
    except OSError as e:
        print(f"lifeline: cannot execute {command[0]}: {e.strerror}", file=sys.stderr)
        return 127 if isinstance(e, FileNotFoundError) else 126


def guard_group(parent: int, command: list[str]) -> int:
    """lifeline leads the group, the command runs in it, and the group dies with the parent."""
    if os.getpgrp() != os.getpid():  # a session leader (Popen's start_new_session) leads its group already
        os.setpgid(0, 0)
    try:
        parent_exit = os.pidfd_open(parent)
    except OSError as e:
        print(f"lifeline: cannot watch the run (pid {parent}): {e.strerror}; {command[0]} not started", file=sys.stderr)
        return 125
    if os.getppid() != parent:  # gone before it was watched: its pid may be another process's now
        print(f"lifeline: the run (pid {parent}) is gone; {command[0]} not started", file=sys.stderr)
        return 125
    # Blocked across the fork, so that a stop signal reaches the command (with its own disposition,
    # restored before the exec) and never lifeline, which ignores them, even between fork and exec.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    child = os.fork()
    if child == 0:
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        os._exit(execute(command))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    command_exit = os.pidfd_open(child)
    ready, _, _ = select.select([parent_exit, command_exit], [], [])
    if parent_exit in ready:
        os.killpg(0, signal.SIGKILL)  # lifeline included: nothing of the group is left
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # killed by a signal: so is lifeline, for the runner to read the same status
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


def main(argv: list[str]) -> int:
    group = argv[:1] == ["--group"]
    if group:
        argv = argv[1:]
    if len(argv) < 2 or not argv[0].isdigit():
        print("lifeline: usage: lifeline.py [--group] PARENT_PID COMMAND [ARG...]", file=sys.stderr)
        return 2
    parent, command = int(argv[0]), argv[1:]
    return guard_group(parent, command) if group else lead(parent, command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
