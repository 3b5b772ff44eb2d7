"""A driver's heartbeat: while a command runs episodes, a thread of its own rewrites `heartbeat.json` (its pid, host
and the time) in the folder of the sweep and of every run it drives, every few seconds. A driver killed outright
(SIGKILL, a lost head node) leaves its runs `running` in run.json and sweep.json; its heartbeat, stale or naming a
process that no longer exists on this host, tells `srag runs` and `srag sweep --resume` that it is gone
("interrupted"), not running. A driver that ends on its own takes its heartbeats away.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Literal

from pipelines.engine.store._run_folder import atomic_write

HEARTBEAT = "heartbeat.json"
EVERY_S = 5.0
# Past this, a heartbeat's driver is taken as gone: many beats missed, a margin for a loaded machine and for clocks
# that differ between the driver's host and the reader's (a shared filesystem on a cluster).
STALE_S = 60.0
DriverState = Literal["alive", "gone", "unknown"]


class Heartbeat:
    """Beats in each folder given (`add`) until it is taken away (`remove`) or the heartbeat is closed."""

    def __init__(self, every_s: float = EVERY_S):
        self.every_s = every_s
        self.folders: set[Path] = set()
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)
        self.thread.start()

    def add(self, folder: Path) -> None:
        with self.lock:
            self.folders.add(folder)
        beat(folder, self.every_s)

    def remove(self, folder: Path) -> None:
        """Stop beating in `folder`, and take its heartbeat away: this driver no longer drives it."""
        with self.lock:
            self.folders.discard(folder)
            (folder / HEARTBEAT).unlink(missing_ok=True)

    def close(self) -> None:
        """Stop, taking away the heartbeat of every folder still beaten (a driver that stops on its own has
        recorded how its runs ended; only one killed outright leaves a heartbeat to go stale)."""
        self.stopped.set()
        self.thread.join(timeout=5)
        with self.lock:
            for folder in self.folders:
                (folder / HEARTBEAT).unlink(missing_ok=True)
            self.folders = set()

    def _loop(self) -> None:
        while not self.stopped.wait(self.every_s):
            with self.lock:
                folders = list(self.folders)
            for folder in folders:
                with self.lock:  # not after `remove` took it away
                    if folder not in self.folders:
                        continue
                    try:
                        beat(folder, self.every_s)
                    except OSError:  # a folder moved away, a full disk: the reader sees a stale heartbeat
                        pass


def beat(folder: Path, every_s: float = EVERY_S) -> None:
    atomic_write(folder / HEARTBEAT, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "at": time.time(),
                                                 "every_s": every_s}))


def driver_state(folder: Path, stale_s: float = STALE_S) -> DriverState:
    """Whether the driver of the sweep or run in `folder` is alive: its heartbeat is recent and, on this host, its
    process exists; gone: the heartbeat is stale or its process is gone; unknown: no heartbeat (a folder from
    before heartbeats)."""
    try:
        data = json.loads((folder / HEARTBEAT).read_text(encoding="utf-8"))
        pid, host, at = int(data["pid"]), str(data["host"]), float(data["at"])
    except (OSError, ValueError, KeyError, TypeError):
        return "unknown"
    if host == socket.gethostname() and not _exists(pid):
        return "gone"
    return "gone" if time.time() - at > stale_s else "alive"


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True
