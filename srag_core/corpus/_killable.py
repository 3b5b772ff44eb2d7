"""Run one function in a forked child process that is killed at a wall-clock deadline.

Why a fork: a backtracking regex cannot be stopped from another thread, and the `regex` module's own `timeout`
counts the CPU time of the whole process (C `clock()`), which runs fast when other episodes' threads are busy and
slow when the machine is loaded. A forked child sees the parent's memory (the corpus text, the compiled pattern)
without copying it, so only the small result crosses the pipe. Forking a process of a few hundred MB costs tens of
milliseconds, so callers try the cheap in-process path first and come here only for calls that turned out slow.

The child runs only the given function and leaves with `os._exit`: no atexit handlers, no flushing of the parent's
buffers, no use of locks other threads may have held at the fork.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import time
from typing import Any, Callable

CAN_FORK = hasattr(os, "fork")


class Killed(Exception):
    """The child was still running at the deadline and has been killed."""


def run_until(fn: Callable[[], Any], deadline: float) -> Any:
    """`fn()` computed in a forked child; its return value, or its exception re-raised here. Raises `Killed` when
    `time.monotonic()` passes `deadline` first. The waiting thread sleeps in `select`, so other threads run."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read_fd)
        try:
            payload = pickle.dumps((True, fn()))
        except BaseException as e:  # noqa: BLE001 - everything goes back to the parent
            payload = pickle.dumps((False, _picklable(e)))
        _write_all(write_fd, payload)
        os._exit(0)
    os.close(write_fd)
    try:
        data = _read_until(read_fd, deadline)
    finally:
        os.close(read_fd)
        if data is None:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    if data is None:
        raise Killed()
    ok, value = pickle.loads(data)
    if ok:
        return value
    raise value


def _read_until(fd: int, deadline: float) -> bytes | None:
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            return None
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _picklable(e: BaseException) -> BaseException:
    try:
        pickle.dumps(e)
        return e
    except Exception:  # noqa: BLE001
        return RuntimeError(f"{type(e).__name__}: {e}")
