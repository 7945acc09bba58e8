"""Helpers of the integration tests: sandbox inventory copies and commands on sandbox nodes."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import yaml

from mpictl import paths
from mpictl.inventory import Cluster, Node, load_inventory

ROOT = Path(__file__).resolve().parents[2]


def clone_sandbox_inventory(dst: Path, name: str, subnet: str, port_base: int) -> Path:
    """A copy of inventories/sandbox that describes an independent sandbox.

    Hosts keep their names; ``sandbox_name``, ``sandbox_subnet``, ``ansible_port`` (port_base,
    port_base+1, ...) and ``sandbox_ip`` (.11, .12, ... of ``subnet``) are replaced.
    """
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(ROOT / "inventories" / "sandbox", dst)
    group_vars = dst / "group_vars" / "all.yml"
    text = group_vars.read_text()
    text = re.sub(r"(?m)^sandbox_name:.*$", f"sandbox_name: {name}", text)
    text = re.sub(r"(?m)^sandbox_subnet:.*$", f"sandbox_subnet: {subnet}", text)
    group_vars.write_text(text)
    hosts_file = dst / "hosts.yml"
    data = yaml.safe_load(hosts_file.read_text())
    prefix = subnet.rsplit(".", 1)[0]
    hosts = data["all"]["children"]["mpi_nodes"]["hosts"]
    for index, host in enumerate(hosts):
        hosts[host]["ansible_port"] = port_base + index
        hosts[host]["sandbox_ip"] = f"{prefix}.{11 + index}"
    hosts_file.write_text(yaml.safe_dump(data, sort_keys=False))
    return dst


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
