"""The CLI's argument handling and errors: one line on stderr, exit 2, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mpictl.cli import main


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mpictl", *args], capture_output=True, text=True, timeout=60
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("mpictl: error: ")
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in lines[0]


def test_help_lists_commands() -> None:
    proc = run_cli("--help")
    assert proc.returncode == 0
    for command in ("provision", "hostfile", "sandbox"):
        assert command in proc.stdout


def test_hostfile_prints_each_format(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = str(data / "cluster.ini")
    assert main(["hostfile", "-i", inv]) == 0
    assert capsys.readouterr().out == "n1 slots=4\nn2 slots=2\n"
    assert main(["hostfile", "-i", inv, "--format", "mpich"]) == 0
    assert capsys.readouterr().out == "n1:4\nn2:2\n"
    assert main(["hostfile", "-i", inv, "--format", "horovod"]) == 0
    assert capsys.readouterr().out == "-H n1:4,n2:2\n"


def test_missing_inventory_file(tmp_path: Path) -> None:
    assert_one_line_error(run_cli("hostfile", "-i", str(tmp_path / "x.yml")), "x.yml", "not found")


def test_inventory_without_mpi_nodes(tmp_path: Path) -> None:
    inv = tmp_path / "inv.yml"
    inv.write_text("all:\n  hosts:\n    a:\n")
    assert_one_line_error(run_cli("hostfile", "-i", str(inv)), "inv.yml", "mpi_nodes")


def test_duplicate_host(tmp_path: Path) -> None:
    inv = tmp_path / "inv.yml"
    inv.write_text("mpi_nodes:\n  hosts:\n    a: {mpi_slots: 1}\n    a: {mpi_slots: 2}\n")
    assert_one_line_error(run_cli("hostfile", "-i", str(inv)), "inv.yml", "duplicate", "'a'")


def test_two_hosts_with_one_address(tmp_path: Path) -> None:
    inv = tmp_path / "inv.yml"
    inv.write_text("mpi_nodes:\n  hosts:\n    a: {mpi_address: x}\n    b: {mpi_address: x}\n")
    assert_one_line_error(run_cli("hostfile", "-i", str(inv)), "inv.yml", "duplicate", "'x'")


def test_unparsable_group_vars_file(tmp_path: Path) -> None:
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "hosts.yml").write_text("mpi_nodes:\n  hosts:\n    a: {mpi_slots: 2}\n")
    (tmp_path / "group_vars" / "mpi_nodes.yml").write_text("mpi_slots: [\n")
    proc = run_cli("hostfile", "-i", str(tmp_path))
    assert_one_line_error(proc, str(tmp_path), "host 'a'", "YAML")


@pytest.mark.parametrize("value", ["0", "-1", "four"])
def test_bad_slots(tmp_path: Path, value: str) -> None:
    inv = tmp_path / "inv.yml"
    inv.write_text(f"mpi_nodes:\n  hosts:\n    n9: {{mpi_slots: {value}}}\n")
    assert_one_line_error(run_cli("hostfile", "-i", str(inv)), "n9", "mpi_slots")


@pytest.mark.parametrize("command", [["hostfile"], ["provision"]])
def test_bad_slots_refused_before_anything_runs(
    tmp_path: Path, command: list[str], isolated_state: Path
) -> None:
    inv = tmp_path / "inv.yml"
    inv.write_text("mpi_nodes:\n  hosts:\n    n9: {mpi_slots: 0, ansible_host: 127.0.0.1}\n")
    assert_one_line_error(run_cli(*command, "-i", str(inv)), "n9", "mpi_slots")
    # provision never started ansible-runner: no run directory was created.
    assert not (isolated_state / "runs").exists()


def test_unknown_format(data: Path) -> None:
    proc = run_cli("hostfile", "-i", str(data / "cluster.ini"), "--format", "slurm")
    assert_one_line_error(proc, "slurm")


def test_unknown_option() -> None:
    assert_one_line_error(run_cli("provision", "--bogus"), "--bogus")


def test_bad_extra_vars(data: Path) -> None:
    proc = run_cli("provision", "-i", str(data / "cluster.ini"), "-e", "not a pair")
    assert_one_line_error(proc, "-e expects key=value")


def test_missing_extra_vars_file(data: Path, tmp_path: Path) -> None:
    proc = run_cli("provision", "-i", str(data / "cluster.ini"), "-e", f"@{tmp_path}/none.yml")
    assert_one_line_error(proc, "none.yml")


def test_extra_vars_like_ansible_playbook(tmp_path: Path) -> None:
    from mpictl.provision import parse_extravars

    vars_file = tmp_path / "v.yml"
    vars_file.write_text("nccl_cuda_archs: ['90']\n")
    got = parse_extravars(
        [
            "horovod_version=0.30",
            "mpi_ssh_strict_host_key_checking=no a=1 b='two words'",
            '{"nccl_make_args": ["ONLY_FUNCS=AllReduce Sum f32 * *"]}',
            f"@{vars_file}",
        ]
    )
    assert got == {
        "horovod_version": "0.30",
        "mpi_ssh_strict_host_key_checking": "no",
        "a": "1",
        "b": "two words",
        "nccl_make_args": ["ONLY_FUNCS=AllReduce Sum f32 * *"],
        "nccl_cuda_archs": ["90"],
    }


@pytest.mark.parametrize("value", ["{not: [closed", "{}x: y", "a=1 =2"])
def test_bad_inline_extra_vars(tmp_path: Path, value: str, isolated_state: Path) -> None:
    inv = tmp_path / "inv.yml"  # loopback only, should anything ever run
    inv.write_text("mpi_nodes:\n  hosts:\n    n1: {ansible_host: 127.0.0.1, ansible_port: 9}\n")
    proc = run_cli("provision", "-i", str(inv), "-e", value)
    assert_one_line_error(proc, "-e")
    assert not (isolated_state / "runs").exists()
