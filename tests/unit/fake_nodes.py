"""Nodes as directories, for the tests of what the job side does over SSH (``--workdir``,
detached jobs): a fake ``ssh`` on PATH for which every host is a directory of ``$NODES``, its
home, where the remote command runs with ``sh -c`` (as sshd runs it with the login shell). rsync
over it is real rsync; a host named in ``$FAIL_HOSTS`` refuses the connection as OpenSSH does, and
one named in ``$FAIL_FROM`` reaches no other host with its own ssh."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mpictl import programs, remote
from mpictl.inventory import Node

FAKE_SSH = r"""#!/bin/sh
# Every host is a directory of $NODES (its home); the command runs there with sh -c.
printf '%s\n' "$*" >> "$NODES/ssh.log"
while [ "$#" -gt 0 ]; do
  case "$1" in
    -o|-p|-i|-l|-F|-E) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
host=$1
shift
case " ${FAIL_HOSTS:-} " in
  *" $host "*) echo "ssh: connect to host $host port 22: Connection refused" >&2; exit 255 ;;
esac
case " ${FAIL_FROM:-} " in  # a node whose own ssh reaches no one (it sends nothing)
  *" ${HOME##*/} "*) echo "ssh: connect to host $host port 22: Network unreachable" >&2; exit 255 ;;
esac
[ -d "$NODES/$host" ] || { echo "ssh: Could not resolve hostname $host" >&2; exit 255; }
cd "$NODES/$host" && HOME="$NODES/$host" exec sh -c "$*"
"""


def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hosts: list[str]) -> Path:
    """``$NODES`` with an empty home per host and the fake ssh first on PATH; ``$NODES``."""
    base = tmp_path / "nodes"
    for name in hosts:
        (base / name).mkdir(parents=True)
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "ssh").write_text(FAKE_SSH)
    (bindir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("NODES", str(base))
    monkeypatch.delenv("FAIL_HOSTS", raising=False)
    monkeypatch.delenv("FAIL_FROM", raising=False)
    return base


class FakeHead(remote.HeadSSH):
    """The head reached through the fake ssh: HeadSSH's own argv (transport, -l USER, host) and
    rsync ``-e`` line, with the fake ssh in place of ssh and its options."""

    def transport(self, *, tty: bool = False, connect_timeout: int = 10) -> list[str]:
        return [str(shutil.which("ssh"))]


def node(name: str, **kw: Any) -> Node:
    """A node whose ssh host is its name (its directory of ``$NODES``)."""
    kw.setdefault("slots", 1)
    return Node(name=name, address=name, slots_source="mpi_slots", ssh_host=name, **kw)


def snapshot(directory: Path) -> dict[str, tuple[Any, ...]]:
    """Every entry under ``directory``: a link's target, a file's mode and content, a dir."""
    out: dict[str, tuple[Any, ...]] = {}
    for current, dirnames, filenames in os.walk(directory):
        base = Path(current)
        for name in dirnames + filenames:
            path = base / name
            rel = path.relative_to(directory).as_posix()
            if path.is_symlink():
                out[rel] = ("L", os.readlink(path))
            elif path.is_dir():
                out[rel] = ("D",)
            else:
                out[rel] = ("F", oct(path.stat().st_mode & 0o7777), path.read_bytes())
    return out


def run_program(name: str, spec: dict[str, Any], home: Path, cwd: Path | str = "/") -> Any:
    """The node program ``name`` as the roles and the job side run it, ``python3 - SPEC`` with
    its source on stdin, in the node ``home`` (``$HOME``); its JSON output, after exit 0."""
    proc = subprocess.run(
        [sys.executable, "-", json.dumps(spec)],
        input=programs.source(name),
        capture_output=True,
        text=True,
        env={**os.environ, "HOME": str(home)},
        cwd=cwd,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)
