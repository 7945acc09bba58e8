"""One mpictl operation at a time per inventory (an advisory lock on the controller)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mpictl import paths
from mpictl.errors import LockError


def lock_path(inventory: Path, name: str = "provision") -> Path:
    key = hashlib.sha256(str(Path(inventory).resolve()).encode()).hexdigest()[:16]
    return paths.state_dir() / "locks" / f"{name}-{key}.lock"


@contextmanager
def hold(inventory: Path, name: str = "provision") -> Iterator[Path]:
    """Hold the ``name`` lock of ``inventory``; LockError at once if another process holds it."""
    path = lock_path(inventory, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            raise LockError(
                f"another mpictl {name} is running on {inventory} ({holder}); wait for it to finish"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}, since {time.strftime('%H:%M:%S')}".encode(), 0)
        yield path
    finally:
        os.close(fd)
