"""A bad name or address in the inventory never reaches a shell: hostfile and run refuse it with
one line on stderr and exit 2 before any process starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from mpictl import cli
from mpictl.inventory import load_inventory
from tests.unit.jobside import forbid_processes

BAD = {
    "name": '"a;touch /tmp/x": {mpi_slots: 1}',
    "mpi_address": 'a: {mpi_slots: 1, mpi_address: "x y"}',
    "ansible_host": 'a: {mpi_slots: 1, ansible_host: "h$(reboot)"}',
}


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[object]:
    """Every way mpictl could start a process fails the command and is recorded.

    A good inventory is loaded first: importing Ansible runs ``ldconfig -p`` once (ctypes'
    find_library), which is not the command reaching a shell.
    """
    warm = tmp_path / "warm"
    warm.mkdir()
    load_inventory(inventory(warm, "w: {mpi_slots: 1}"))
    return forbid_processes(monkeypatch)


def inventory(tmp_path: Path, host: str) -> Path:
    path = tmp_path / "hosts.yml"
    path.write_text(f"mpi_nodes:\n  hosts:\n    {host}\n")
    return path


@pytest.mark.parametrize("command", [["hostfile"], ["run", "--", "hostname"]])
@pytest.mark.parametrize("bad", sorted(BAD))
def test_bad_inventory_refused_before_any_process(
    tmp_path: Path,
    spawned: list[object],
    capsys: pytest.CaptureFixture[str],
    command: list[str],
    bad: str,
) -> None:
    (tmp_path / "state" / "cluster_ssh").mkdir(parents=True)
    (tmp_path / "state" / "cluster_ssh" / "id_ed25519").write_text("key\n")
    inv = inventory(tmp_path, BAD[bad])
    code = cli.main([command[0], "-i", str(inv), *command[1:]])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"mpictl: error: {inv}: host ")
    assert "not a valid" in lines[0]
    assert spawned == []


def test_the_spies_would_see_a_job_start(tmp_path: Path, spawned: list[object]) -> None:
    # The control case: with a good inventory and a cluster key, `run` does reach ssh.
    (tmp_path / "state" / "cluster_ssh").mkdir(parents=True)
    (tmp_path / "state" / "cluster_ssh" / "id_ed25519").write_text("key\n")
    inv = inventory(tmp_path, "a: {mpi_slots: 1, ansible_host: 127.0.0.1, ansible_port: 9}")
    # main() turns the spy's exception into one "internal error" line, exit 1.
    assert cli.main(["run", "-i", str(inv), "--", "hostname"]) == 1
    argv = spawned[0][0]  # type: ignore[index]
    assert argv[0] == "ssh" and "127.0.0.1" in argv
