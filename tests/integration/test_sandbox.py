"""The sandbox on real podman: up, SSH in, nodes see each other, idempotent up, repair, down.

Runs its own sandbox (``mpictl-itsb``, 10.89.40.0/24, ports 2201-2203) with state in a temporary
directory, so it never touches a developer's sandbox or the provisioned one of test_provision.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mpictl import sandbox
from tests.integration.nodes import ROOT, clone_sandbox_inventory

pytestmark = pytest.mark.integration

NAME = "mpictl-itsb"
SUBNET = "10.89.40.0/24"
PORT_BASE = 2201
NODES = ["node1", "node2", "node3"]


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=check)


def containers() -> dict[str, dict]:
    out = podman("ps", "-a", "--filter", f"label=io.mpictl.sandbox={NAME}", "--format", "json")
    return {c["Names"][0]: c for c in json.loads(out.stdout or "[]") or []}


def remove_container(name: str) -> None:
    runtime = containers()[name]["Labels"].get("io.mpictl.runtime")
    podman(*(["--runtime", "runc"] if runtime == "runc" else []), "rm", "-f", "-t", "1", name)


@pytest.fixture(scope="module")
def sbx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    base = tmp_path_factory.mktemp("sandbox-it")
    inventory = clone_sandbox_inventory(base / "inv", NAME, SUBNET, PORT_BASE)
    old = os.environ.get("MPICTL_STATE_DIR")
    os.environ["MPICTL_STATE_DIR"] = str(base / "state")
    sandbox.down(inventory)  # leftovers of an interrupted earlier run
    try:
        yield inventory
    finally:
        sandbox.down(inventory)
        if old is None:
            os.environ.pop("MPICTL_STATE_DIR", None)
        else:
            os.environ["MPICTL_STATE_DIR"] = old


def ssh(inventory: Path, port: int, command: str, known_hosts: Path | None = None) -> str:
    spec = sandbox.read_sandbox(inventory)
    argv = [
        "ssh", "-F", "/dev/null",
        "-i", str(spec.key_path()),
        "-o", "IdentitiesOnly=yes",
        "-o", "BatchMode=yes",
        "-o", "StrictHostKeyChecking=yes",
        "-o", f"UserKnownHostsFile={known_hosts or spec.known_hosts_path()}",
        "-o", "ConnectTimeout=10",
        "-p", str(port),
        "root@127.0.0.1", command,
    ]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_up_creates_running_nodes(sbx: Path) -> None:
    nodes = sandbox.up(sbx)
    assert [(n.name, n.state, n.action) for n in nodes] == [
        (name, "running", "created") for name in NODES
    ]
    assert [n.ssh_port for n in nodes] == [PORT_BASE, PORT_BASE + 1, PORT_BASE + 2]
    assert sorted(containers()) == [f"{NAME}-{name}" for name in NODES]
    spec = sandbox.read_sandbox(sbx)
    assert oct(spec.key_path().stat().st_mode & 0o777) == "0o600"
    pinned = spec.known_hosts_path().read_text().splitlines()
    for port in (PORT_BASE, PORT_BASE + 1, PORT_BASE + 2):
        assert any(line.startswith(f"[127.0.0.1]:{port} ssh-ed25519 ") for line in pinned)
    # every node has host keys of its own
    keys = [line.split()[2] for line in pinned if " ssh-ed25519 " in line]
    assert len(set(keys)) == len(NODES)


def test_ssh_from_controller_with_pinned_host_keys(sbx: Path, tmp_path: Path) -> None:
    for index, name in enumerate(NODES):
        assert ssh(sbx, PORT_BASE + index, "hostname").strip() == name
        assert ssh(sbx, PORT_BASE + index, "id -u").strip() == "0"
    # the pinning is what lets ssh in: an empty known_hosts file is refused
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with pytest.raises(AssertionError, match="Host key verification failed"):
        ssh(sbx, PORT_BASE, "true", known_hosts=empty)


def test_nodes_reach_each_other_by_name(sbx: Path) -> None:
    probe = (
        "import socket, sys\n"
        "for host in sys.argv[1:]:\n"
        "    s = socket.create_connection((host, 22), timeout=5)\n"
        "    print(host, socket.gethostbyname(host), s.recv(64).decode().split('-')[0])\n"
    )
    for index, name in enumerate(NODES):
        others = [n for n in NODES if n != name]
        out = ssh(sbx, PORT_BASE + index, f'python3 -c "{probe}" {" ".join(others)}')
        seen = {line.split()[0]: line.split()[1:] for line in out.splitlines()}
        assert seen == {other: [f"10.89.40.{11 + NODES.index(other)}", "SSH"] for other in others}


def test_ansible_reaches_nodes_with_inventory_connection_vars(sbx: Path) -> None:
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
    proc = subprocess.run(
        ["ansible", "-i", str(sbx), "mpi_nodes", "-m", "ansible.builtin.ping"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ok = [line.split()[0] for line in proc.stdout.splitlines() if "| SUCCESS" in line]
    assert sorted(ok) == NODES


def test_second_up_is_fast_and_changes_nothing(sbx: Path) -> None:
    before = {name: c["Id"] for name, c in containers().items()}
    pinned = sandbox.read_sandbox(sbx).known_hosts_path().read_text()
    started = time.monotonic()
    nodes = sandbox.up(sbx)
    elapsed = time.monotonic() - started
    assert [(n.state, n.action) for n in nodes] == [("running", "unchanged")] * len(NODES)
    assert {name: c["Id"] for name, c in containers().items()} == before
    assert sandbox.read_sandbox(sbx).known_hosts_path().read_text() == pinned
    assert elapsed < 30, f"warm up took {elapsed:.1f} s"


def test_up_repairs_a_missing_node(sbx: Path) -> None:
    remove_container(f"{NAME}-node2")
    assert [n.state for n in sandbox.status(sbx)] == ["running", "missing", "running"]
    nodes = sandbox.up(sbx)
    assert [n.action for n in nodes] == ["unchanged", "created", "unchanged"]
    assert ssh(sbx, PORT_BASE + 1, "hostname").strip() == "node2"


def test_a_node_added_and_removed_leaves_the_others_running(sbx: Path, tmp_path: Path) -> None:
    # issue 26: each node's config label held one --add-host per other node, so a 4th node in
    # the inventory recreated node1-3 empty
    grown = sandbox.clone_inventory(tmp_path / "inv4", NAME, SUBNET, PORT_BASE, 4)
    before = {name: c["Id"] for name, c in containers().items()}
    nodes = sandbox.up(grown)
    assert [(n.name, n.action) for n in nodes] == [
        ("node1", "hosts updated"), ("node2", "hosts updated"), ("node3", "hosts updated"),
        ("node4", "created"),
    ]  # fmt: skip
    after = {name: c["Id"] for name, c in containers().items()}
    assert {n: after[n] for n in before} == before
    assert ssh(sbx, PORT_BASE, "getent hosts node4").split() == ["10.89.40.14", "node4"]
    assert ssh(grown, PORT_BASE + 3, "getent hosts node2").split() == ["10.89.40.12", "node2"]
    # back to three: node4 goes, the others stay and forget it
    nodes = sandbox.up(sbx)
    assert [(n.name, n.action) for n in nodes] == [
        ("node1", "hosts updated"), ("node2", "hosts updated"), ("node3", "hosts updated"),
        ("node4", "removed"),
    ]  # fmt: skip
    assert {name: c["Id"] for name, c in containers().items()} == before
    assert "node4" not in ssh(sbx, PORT_BASE, "cat /etc/hosts")
    assert [n.action for n in sandbox.up(sbx)] == ["unchanged"] * 3


def test_down_removes_exactly_the_sandbox(sbx: Path) -> None:
    spec = sandbox.read_sandbox(sbx)
    image = sandbox.image_tag()
    removed = sandbox.down(sbx)
    assert sorted(removed) == sorted(
        [f"container {NAME}-{name}" for name in NODES] + [f"network {NAME}"]
    )
    assert containers() == {}
    names = podman("ps", "-a", "--format", "{{.Names}}").stdout.split()
    assert not any(n.startswith(f"{NAME}-") for n in names)
    assert NAME not in podman("network", "ls", "--format", "{{.Name}}").stdout.split()
    assert [n.state for n in sandbox.status(sbx)] == ["missing"] * len(NODES)
    # the image and the controller key stay for the next up
    assert podman("image", "exists", image, check=False).returncode == 0
    assert spec.key_path().exists()
    assert sandbox.down(sbx) == []
