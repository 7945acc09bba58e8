"""The harness of the bad-input modules (``tests/unit/test_bad_input*.py``): mpictl run as a
careless or hostile user runs it, with no cluster at all.

- The inventory's nodes point at 127.0.0.1:1 and 127.0.0.2:1 (loopback, a closed port), and a
  cluster key exists, so a command that gets past its checks goes on to contact the head.
- ``ssh``, ``scp``, ``rsync``, ``podman``, ``ansible-playbook``, ``sbatch`` and ``srun`` on PATH are
  shims that log their argv and fail; a Python audit hook records every process mpictl starts
  (any way: ``subprocess``, ``os.exec*``, ``os.posix_spawn``, ``os.system``) and every path it
  opens for writing, creates, renames, removes or links.
- HOME, the XDG dirs, TMPDIR, the state and cache dirs and the current directory are fresh
  folders under the test's ``tmp_path``.

:func:`refused` asserts the contract of bad input: exit 2, one or two lines on stderr (the
first ``mpictl: error: ...``), no traceback, no process started and no shim called, no
ansible-runner run (``<state>/runs`` stays empty), nothing written outside the test's folders.
:func:`Hostile.call` returns what happened, for the control cases that prove the spies see a
command that does get through.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import sys
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mpictl import cli

SHIMS = ("ssh", "scp", "sftp", "rsync", "podman", "ansible-playbook", "sbatch", "srun", "iperf3")
NODES = {"node1": "127.0.0.1", "node2": "127.0.0.2"}

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PATH_EVENTS = {  # audit event -> indexes of its path arguments that are written
    "os.mkdir": (0,),
    "os.rename": (0, 1),
    "os.remove": (0,),
    "os.rmdir": (0,),
    "os.symlink": (1,),
    "os.link": (1,),
    "os.truncate": (0,),
    "os.chmod": (0,),
    "os.chown": (0,),
    "os.utime": (0,),
    "shutil.rmtree": (0,),
    "shutil.copyfile": (1,),
    "shutil.move": (1,),
}
_SPAWN_EVENTS = (
    "subprocess.Popen",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.system",
    "os.fork",
    "os.forkpty",
)


class _Audit:
    """One audit hook for the whole test session (hooks cannot be removed); it records only
    while a :class:`Hostile` call is active."""

    def __init__(self) -> None:
        self.active = False
        self.spawned: list[tuple[str, Any]] = []
        self.written: list[str] = []
        sys.addaudithook(self.hook)

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.active:
            return
        if event in _SPAWN_EVENTS:
            self.spawned.append((event, args[:2] if event != "os.system" else args))
        elif event == "open":
            path, mode, flags = (tuple(args) + (None, None))[:3]
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                mode is None and isinstance(flags, int) and flags & _WRITE_FLAGS
            )
            if writes:
                self._write(path)
        elif event in _PATH_EVENTS:
            for index in _PATH_EVENTS[event]:
                if index < len(args):
                    self._write(args[index])

    def _write(self, path: Any) -> None:
        if isinstance(path, int) or path is None:
            return  # a file descriptor: its opening was recorded
        text = os.fsdecode(path) if isinstance(path, (bytes, os.PathLike)) else str(path)
        if text.endswith(".pyc") or "__pycache__" in text:
            return
        self.written.append(os.path.abspath(text))


_AUDIT: _Audit | None = None


def _audit() -> _Audit:
    global _AUDIT
    if _AUDIT is None:
        _AUDIT = _Audit()
    return _AUDIT


@dataclass
class Outcome:
    argv: list[str]
    code: int | None
    out: str
    err: str
    spawned: list[tuple[str, Any]]
    written: list[str]
    shim_calls: list[str]
    runs: list[str]
    outside: list[str] = field(default_factory=list)  # written paths outside the test's dirs
    traceback: str = ""

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]

    def describe(self) -> str:
        return (
            f"argv={self.argv!r}\ncode={self.code}\nstdout={self.out[-600:]!r}\n"
            f"stderr={self.err[-1500:]!r}\nspawned={self.spawned!r}\nshims={self.shim_calls!r}\n"
            f"runs={self.runs!r}\noutside={self.outside!r}\n{self.traceback}"
        )


class Hostile:
    """A controller with no cluster: see the module's docstring."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = tmp_path
        self.home = tmp_path / "home"
        self.state = tmp_path / "state"
        self.cache = tmp_path / "cache"
        self.tmp = tmp_path / "tmp"
        self.cwd = tmp_path / "cwd"
        self.shims = tmp_path / "shims"
        self.shim_log = tmp_path / "shims.log"
        for d in (self.home, self.state, self.cache, self.tmp, self.cwd, self.shims):
            d.mkdir(parents=True, exist_ok=True)
        for var, path in {
            "HOME": self.home,
            "XDG_CONFIG_HOME": self.home / ".config",
            "XDG_STATE_HOME": self.home / ".local/state",
            "XDG_CACHE_HOME": self.home / ".cache",
            "XDG_DATA_HOME": self.home / ".local/share",
            "TMPDIR": self.tmp,
            "MPICTL_STATE_DIR": self.state,
            "MPICTL_CACHE_DIR": self.cache,
        }.items():
            monkeypatch.setenv(var, str(path))
        monkeypatch.delenv("MPICTL_DEBUG", raising=False)
        monkeypatch.setattr(tempfile, "tempdir", str(self.tmp))
        monkeypatch.setattr(sys, "dont_write_bytecode", True)
        for name in SHIMS:
            shim = self.shims / name
            shim.write_text(f'#!/bin/sh\necho "{name} $*" >> "{self.shim_log}"\nexit 255\n')
            shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
        monkeypatch.setenv("PATH", f"{self.shims}{os.pathsep}{os.environ.get('PATH', '')}")
        monkeypatch.chdir(self.cwd)
        key = self.state / "cluster_ssh" / "id_ed25519"
        key.parent.mkdir(parents=True)
        key.write_text("not a key\n")
        key.chmod(0o600)
        key.with_suffix(".pub").write_text("ssh-ed25519 AAAA mpictl\n")
        self.inventory = self.write_inventory()
        # Importing Ansible runs `ldconfig -p` once (ctypes' find_library): not the command's.
        from mpictl.inventory import load_inventory

        load_inventory(self.inventory)
        _audit()

    def write_inventory(self, extra_host_vars: str = "", name: str = "hosts.yml") -> Path:
        """Two nodes on loopback port 1, one slot each; ``extra_host_vars`` is added (YAML flow
        mapping entries, e.g. ``"mpi_user: x"``) to node1's variables."""
        path = self.root / name
        lines = ["mpi_nodes:", "  hosts:"]
        for i, (node, address) in enumerate(NODES.items()):
            extra = f", {extra_host_vars}" if extra_host_vars and i == 0 else ""
            lines.append(
                f"    {node}: {{ansible_host: {address}, ansible_port: 1, mpi_slots: 1{extra}}}"
            )
        path.write_text("\n".join(lines) + "\n")
        return path

    def call(self, *argv: str) -> Outcome:
        """``mpictl ARGV`` in this process, with everything it did recorded."""
        audit = _audit()
        audit.spawned, audit.written = [], []
        out, err = io.StringIO(), io.StringIO()
        code: int | None = None
        trace = ""
        audit.active = True
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = cli.main(list(argv))
        except BaseException:  # noqa: BLE001 - whatever escaped main() is the finding
            trace = traceback.format_exc()
        finally:
            audit.active = False
        shims = self.shim_log.read_text().splitlines() if self.shim_log.exists() else []
        runs_dir = self.state / "runs"
        runs = sorted(p.name for p in runs_dir.iterdir()) if runs_dir.is_dir() else []
        roots = [str(self.root.resolve()), "/dev/null", "/dev/tty"]
        outside = [
            p
            for p in audit.written
            if not any(
                os.path.realpath(p) == r or os.path.realpath(p).startswith(r + os.sep)
                for r in roots
            )
        ]
        return Outcome(
            argv=list(argv),
            code=code,
            out=out.getvalue(),
            err=err.getvalue(),
            spawned=list(audit.spawned),
            written=list(audit.written),
            shim_calls=shims,
            runs=runs,
            outside=outside,
            traceback=trace,
        )

    def refused(self, *argv: str, says: tuple[str, ...] = ()) -> Outcome:
        """``mpictl ARGV`` is refused as bad input, before any process or node; ``says``: text
        the first line holds."""
        got = self.call(*argv)
        why = got.describe()
        assert not got.traceback, why
        assert "Traceback" not in got.err, why
        assert got.code == 2, why
        assert 1 <= len(got.err_lines) <= 2, why
        assert got.err_lines[0].startswith("mpictl: error: "), why
        assert got.spawned == [], why
        assert got.shim_calls == [], why
        assert got.runs == [], why
        assert got.outside == [], why
        for text in says:
            assert text in got.err_lines[0], why
        return got


def as_unprivileged(nodeid: str) -> None:
    """Run the test ``nodeid`` again as user ``nobody`` (``setpriv``) and assert that it passed:
    for the cases about permissions, which root never meets (CI runs as root)."""
    import shutil
    import subprocess

    assert os.geteuid() == 0
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is needed to run the permission cases as root"
    root = Path(__file__).resolve().parents[2]
    base = Path(tempfile.mkdtemp(prefix="mpictl-nobody-", dir="/tmp"))
    try:
        base.chmod(0o777)
        proc = subprocess.run(
            [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable]
            + ["-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={base}/t", nodeid],
            cwd=root,
            env={**os.environ, "HOME": str(base), "TMPDIR": str(base)},
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert proc.returncode == 0 and " passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr


def watch_opens(monkeypatch: pytest.MonkeyPatch, forbidden: Path) -> list[str]:
    """Record every path opened (``os.open``, ``io.open``, ``open``) from now on; opening
    ``forbidden`` fails at once (a 200 GiB file must never be read)."""
    import builtins
    import io as io_module

    opened: list[str] = []

    def spy(real: Any) -> Any:
        def open_(path: Any, *args: Any, **kwargs: Any) -> Any:
            opened.append(os.fsdecode(path) if isinstance(path, (str, bytes, Path)) else "")
            if opened[-1] == str(forbidden):
                raise RuntimeError(f"{forbidden} was opened")
            return real(path, *args, **kwargs)

        return open_

    for module, name in ((os, "open"), (io_module, "open"), (builtins, "open")):
        monkeypatch.setattr(module, name, spy(getattr(module, name)))
    return opened
