"""Helpers of the integration tests: sandbox inventory copies and commands on sandbox nodes."""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from mpictl import paths
from mpictl.inventory import Cluster, Node, load_inventory

ROOT = Path(__file__).resolve().parents[2]


def clone_sandbox_inventory(dst: Path, name: str, subnet: str, port_base: int) -> Path:
    """A copy of inventories/sandbox that describes an independent sandbox."""
    from mpictl.sandbox import clone_inventory

    return clone_inventory(dst, name, subnet, port_base)


def ssh_base(node: Node, user: str | None = None, key: str | None = None) -> list[str]:
    """ssh argv reaching ``node`` the way Ansible does (pinned host keys, BatchMode)."""
    return [
        "ssh",
        "-p",
        str(node.ssh_port),
        "-i",
        key or str(node.ssh_key),
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=10",
        *shlex.split(node.ssh_common_args),
        f"{user or node.ssh_user}@{node.ssh_host}",
    ]


def ssh(
    node: Node, command: str, user: str | None = None, key: str | None = None, timeout: int = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ssh_base(node, user, key), command],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def cluster_key() -> Path:
    """The MPI user's cluster key on the controller (created by the ssh_mesh role)."""
    return paths.state_dir() / "cluster_ssh" / "id_ed25519"


def ssh_mpi(node: Node, command: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """Run ``command`` on ``node`` as the MPI user, over SSH with the cluster key."""
    return ssh(node, command, user="mpi", key=str(cluster_key()), timeout=timeout)


def load(inventory: Path) -> Cluster:
    return load_inventory(inventory)


def run_cli(
    *args: str,
    mpictl: Sequence[str] = (sys.executable, "-m", "mpictl"),
    env: Mapping[str, str] | None = None,
    cwd: Path = ROOT,
    timeout: float = 900,
) -> subprocess.CompletedProcess[str]:
    """``mpictl ARGS`` as a user types it (``mpictl``: how to start it), output captured."""
    return subprocess.run(
        [*mpictl, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=None if env is None else dict(env),
        stdin=subprocess.DEVNULL,
    )
