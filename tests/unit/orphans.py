"""Detached jobs started by a test outlive the shell that started them, as they do on a head.

Their processes are orphans: on a head, PID 1 (systemd, the sandbox's catatonit) reaps them when
they end. A test machine's PID 1 may not reap (a container's plain process), and an unreaped
zombie still answers ``kill -0``, so ``state`` would say running and ``tail --pid`` would never
stop. :class:`Reaper` makes the test process the subreaper of what it starts (Linux
``PR_SET_CHILD_SUBREAPER``) and reaps exactly the processes of the jobs' sessions (the pids in
``pid`` files under the test's home), never a child that ``subprocess`` waits for; on exit it
kills whatever of those sessions still runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36


def _prctl(value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def processes() -> list[tuple[int, str, int, int]]:
    """(pid, state, ppid, session) of every process."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        out.append((int(entry), fields[0], int(fields[1]), int(fields[3])))
    return out


def session_of(pid: int) -> int | None:
    for p, _, _, sid in processes():
        if p == pid:
            return sid
    return None


def alive(pid: int) -> bool:
    """Running, not a zombie."""
    return any(p == pid and state != "Z" for p, state, _, _ in processes())


class Reaper:
    def __init__(self, home: Path) -> None:
        self.home = home
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sessions(self) -> set[int]:
        out = set()
        for path in self.home.rglob("pid"):
            try:
                out.add(int(path.read_text().strip()))
            except (OSError, ValueError):
                continue
        return out

    def _reap(self) -> None:
        me, sessions = os.getpid(), self.sessions()
        for pid, state, ppid, sid in processes():
            if state == "Z" and ppid == me and sid in sessions:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)

    def _loop(self) -> None:
        while not self._stop.wait(0.02):
            self._reap()

    def __enter__(self) -> Reaper:
        _prctl(1)
        self._thread.start()
        return self

    def kill_all(self) -> None:
        sessions = self.sessions()
        for pid, state, _, sid in processes():
            if sid in sessions and state != "Z":
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def __exit__(self, *exc: object) -> None:
        try:
            self.kill_all()
            deadline = time.monotonic() + 5
            sessions = self.sessions()
            while time.monotonic() < deadline:
                self._reap()
                if not any(sid in sessions for _, _, _, sid in processes()):
                    break
                time.sleep(0.05)
        finally:
            self._stop.set()
            self._thread.join(timeout=5)
            _prctl(0)
