"""One mpictl operation at a time per node: advisory locks on the controller, keyed on the nodes.

A key is what names a node wherever it is described: ``host:port`` in the one spelling of
:func:`mpictl.hostnames.endpoint` (``Cluster.endpoints``), so a directory inventory, the file
inside it and a copy of it lock the same nodes, and a grown inventory and the old one exclude
each other on the nodes they share. The sandbox adds ``sandbox:<name>`` for its podman network.

Each key is one file ``<state>/locks/node-<sha256 of the key>.lock``, held with ``flock``; the
keys are taken in sorted order, none of them waits: on the first one another process holds, the
ones already taken are let go and :class:`LockError` names the node and the holder (its
operation, pid, start time and inventory, which the holder writes into the file). A state dir
that cannot hold the files is one :class:`UsageError` line naming it (``paths.unusable``).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from mpictl import paths
from mpictl.errors import LockError
from mpictl.inputs import shown


def locks_dir() -> Path:
    return paths.state_dir() / "locks"


def lock_path(key: str) -> Path:
    """The lock file of one node key (the key hashed: no user text in the file name)."""
    digest = hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return locks_dir() / f"node-{digest}.lock"


def _open(path: Path) -> int:
    """The lock file's descriptor; a state dir that cannot hold it is one line naming it
    (:func:`mpictl.paths.unusable`)."""
    paths.ensure_dir(path.parent, "locks")
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise paths.unusable(path, "locks", exc) from None


@contextmanager
def _one(key: str, operation: str, details: str) -> Iterator[Path]:
    path = lock_path(key)
    fd = _open(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 400, 0).decode(errors="replace")
            other, _, when = text.partition("\t")
            raise LockError(
                f"another mpictl {shown(other.strip() or 'operation', limit=40)} is running on "
                f"node {shown(key)}{' ' + shown(when.strip()) if when.strip() else ''}; wait for "
                "it to finish"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{operation}\t{details}".encode(errors="replace"), 0)
        yield path
    finally:
        os.close(fd)  # closing the descriptor lets the lock go


@contextmanager
def hold(
    keys: Iterable[str], operation: str = "provision", *, source: object = ""
) -> Iterator[list[Path]]:
    """Hold the lock of every key in ``keys`` (sorted, each once) for ``operation``; LockError
    at once, with nothing held, if another process holds one of them. ``source`` (the inventory)
    is named to whoever finds the lock taken."""
    if isinstance(keys, (str, Path)):
        raise TypeError("lock.hold takes node keys (Cluster.endpoints), not one string or path")
    wanted = sorted(set(keys))
    since = time.strftime("%Y-%m-%d %H:%M:%S")
    where = f", inventory {source}" if source else ""
    details = f"(pid {os.getpid()}, since {since}{where})"
    with ExitStack() as stack:
        yield [stack.enter_context(_one(key, operation, details)) for key in wanted]
