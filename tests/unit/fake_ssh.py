"""A fake ``ssh`` on PATH for the tests of ``mpictl init``'s host check.

It logs its arguments, then acts by the host after ``--``: ``ready.example`` and
``nosudo.example`` run the command they were given (``sh -s``, the real probe on stdin) locally,
with a fake ``sudo`` (passwordless or not), ``id`` (uid 1000, user deploy) and ``nvidia-smi`` (two
GPUs) first on PATH; ``newkey``, ``changed`` and ``denied.example`` print what OpenSSH prints for
an unknown host key, a changed host key and a refused login, and exit 255; anything else is a
closed port.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SSH = r"""#!/bin/sh
printf '%s\n' "$*" >> "$FAKE_SSH_LOG"
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do shift; done
shift
host=$1
shift
case "$host" in
ready.example) FAKE_SUDO=ok PATH="$FAKE_NODE_BIN:$PATH" exec "$@" ;;
nosudo.example) FAKE_SUDO=no PATH="$FAKE_NODE_BIN:$PATH" exec "$@" ;;
newkey.example)
    printf 'No ED25519 host key is known for %s and you have requested strict checking.\r\n' \
        "$host" >&2
    printf 'Host key verification failed.\r\n' >&2
    exit 255 ;;
changed.example)
    printf '@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\r\n' >&2
    printf '@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\r\n' >&2
    printf 'Host key verification failed.\r\n' >&2
    exit 255 ;;
denied.example)
    printf 'deploy@%s: Permission denied (publickey).\r\n' "$host" >&2
    exit 255 ;;
*)
    printf 'ssh: connect to host %s port 22: Connection refused\r\n' "$host" >&2
    exit 255 ;;
esac
"""

NODE_BIN = {
    "sudo": '#!/bin/sh\n[ "$FAKE_SUDO" = ok ] && [ "$1" = -n ] && exit 0\nexit 1\n',
    "id": '#!/bin/sh\ncase "$1" in -u) echo 1000 ;; -un) echo deploy ;; *) echo uid=1000 ;; esac\n',
    "nvidia-smi": "#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-0)'\n"
    "echo 'GPU 1: NVIDIA H200 (UUID: GPU-1)'\n",
}


def _script(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put the fake ssh first on PATH; returns the log of its command lines."""
    bin_dir, node_bin = tmp_path / "fake-bin", tmp_path / "fake-node-bin"
    bin_dir.mkdir()
    node_bin.mkdir()
    _script(bin_dir / "ssh", SSH)
    for name, text in NODE_BIN.items():
        _script(node_bin / name, text)
    log = tmp_path / "ssh.log"
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SSH_LOG", str(log))
    monkeypatch.setenv("FAKE_NODE_BIN", str(node_bin))
    return log


def os_pretty_name() -> str:
    """PRETTY_NAME of this machine's /etc/os-release, as the probe reads it."""
    try:
        lines = Path("/etc/os-release").read_text().splitlines()
    except OSError:
        return ""
    for line in lines:
        if line.startswith("PRETTY_NAME="):
            return line.partition("=")[2].strip().strip("\"'")
    return ""
