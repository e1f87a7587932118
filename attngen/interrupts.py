"""Stopping a build cleanly: signals in the command, and build workers that never outlive it.

The command (`signals_interrupt`): SIGINT, SIGTERM and SIGHUP raise `Interrupted` in the main thread, so
whatever is under way unwinds (temporary files and folders are deleted by their own handlers) and the
command prints one line. `builder` then stops its workers.

A build worker (`init_worker`, `run_job`):
- ignores SIGINT: Ctrl-C reaches the whole process group, and the parent decides what stops;
- on SIGTERM or SIGHUP raises `Interrupted` inside a job (so the job's own clean-up runs, and nothing is
  stored after it) and then exits; between jobs it exits at once;
- asks the kernel for SIGTERM when its parent dies (`prctl(PR_SET_PDEATHSIG)` on Linux), and elsewhere
  watches its parent id from a thread, so a parent killed with SIGKILL leaves no worker behind.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")

#: The signals that end a command; SIGHUP is absent on Windows.
STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
#: prctl option: the signal this process gets when the thread that created it exits (linux/prctl.h).
PR_SET_PDEATHSIG = 1
#: How often a worker without prctl checks that its parent is alive, in seconds.
PARENT_POLL_SECONDS = 0.5


class Interrupted(BaseException):
    """A stop signal arrived. A BaseException, like KeyboardInterrupt: `except Exception` lets it pass."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.signal_name = signal.Signals(signum).name
        super().__init__(f"interrupted by {self.signal_name}")

    @property
    def exit_code(self) -> int:
        """The shell's convention: 128 + the signal number (130 for SIGINT, 143 for SIGTERM)."""
        return 128 + self.signum


def _raise_interrupted(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted(signum)


@contextmanager
def signals_interrupt() -> Iterator[None]:
    """Within the block, SIGINT, SIGTERM and SIGHUP raise Interrupted (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _raise_interrupted) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# ---- the worker side ------------------------------------------------------------------------------


class _WorkerState:
    """Whether this worker is inside a job: a stop signal raises there, and exits at once elsewhere."""

    busy = False


def _worker_signal(signum: int, _frame: FrameType | None) -> None:
    if _WorkerState.busy:
        raise Interrupted(signum)
    os._exit(128 + signum)


def init_worker(parent_pid: int) -> None:
    """ProcessPoolExecutor initializer of a build worker: the signal plan above."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in STOP_SIGNALS:
        if sig != signal.SIGINT:
            signal.signal(sig, _worker_signal)
    if not _ask_for_parent_death_signal():
        threading.Thread(target=_watch_parent, args=(parent_pid,), name="attngen-parent-watch", daemon=True).start()
    if os.getppid() != parent_pid:  # the parent died before the request above took effect
        os._exit(128 + signal.SIGTERM)


def _ask_for_parent_death_signal() -> bool:
    """SIGTERM when the parent dies, where the kernel offers it (Linux); False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(PARENT_POLL_SECONDS)
    os.kill(os.getpid(), signal.SIGTERM)


def run_job(fn: Callable[..., T], *args: Any) -> T:
    """Run one job in a worker; a stop signal during it unwinds the job, then ends the worker."""
    _WorkerState.busy = True
    try:
        return fn(*args)
    except Interrupted as stop:
        os._exit(stop.exit_code)
    finally:
        _WorkerState.busy = False
