"""The CLI's argument handling and errors: one line on stderr, exit 2, no traceback."""

from __future__ import annotations

import os
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


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--tags", "nosuch"], "unknown tag 'nosuch' in --tags"),
        (["--skip-tags", "openmpi,nosuch"], "unknown tag 'nosuch' in --skip-tags"),
        (["--tags", "openmpi", "--playbook", "nccl.yml"], "unknown tag 'openmpi' in --tags"),
    ],
)
def test_unknown_tags_are_refused_naming_the_valid_ones(
    data: Path, args: list[str], fragment: str, isolated_state: Path
) -> None:
    proc = run_cli("provision", "-i", str(data / "cluster.ini"), *args)
    assert_one_line_error(proc, fragment, "(valid: ")
    if "--playbook" not in args:
        assert (
            "environment, health, horovod, hostfile, jobs, monitoring, mpi4py, nccl, nccl_tests,"
            " openmpi, slurm, ssh, ucc, ucx)" in proc.stderr
        )
    assert not (isolated_state / "runs").exists()


@pytest.mark.parametrize("name", ["nope.yml", "../../etc/passwd"])
def test_a_playbook_that_is_not_mpictls_is_refused(
    data: Path, name: str, isolated_state: Path
) -> None:
    proc = run_cli("provision", "-i", str(data / "cluster.ini"), "--playbook", name)
    assert_one_line_error(proc, f"unknown playbook '{name}'", "site.yml")
    assert not (isolated_state / "runs").exists()


def test_list_tags_prints_the_components_and_runs_nothing(isolated_state: Path) -> None:
    proc = run_cli("provision", "--list-tags")
    assert proc.returncode == 0, proc.stderr
    tags = [line.split()[0] for line in proc.stdout.splitlines()]
    assert tags == [
        "ssh",
        "environment",
        "hostfile",
        "ucx",
        "ucc",
        "openmpi",
        "mpi4py",
        "nccl",
        "nccl_tests",
        "horovod",
        "jobs",
        "health",
        "monitoring",
        "slurm",
        "containers",
    ]
    assert not isolated_state.exists()


def test_ansibles_own_error_is_the_failure_line(tmp_path: Path, isolated_state: Path) -> None:
    """A playbook Ansible refuses (here: mpictl's content under MPICTL_ROOT with a site.yml that
    does not parse) ends with Ansible's first error line and the artifacts, exit 1."""
    root = tmp_path / "root"
    (root / "playbooks").mkdir(parents=True)
    (root / "ansible.cfg").write_text("[defaults]\n")
    (root / "playbooks" / "site.yml").write_text("- name: Broken\n  hosts: localhost\n  tasks: [\n")
    inv = tmp_path / "inv.ini"
    inv.write_text("[mpi_nodes]\nlocalhost ansible_connection=local mpi_slots=1\n")
    proc = subprocess.run(
        [sys.executable, "-m", "mpictl", "provision", "-i", str(inv)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MPICTL_ROOT": str(root)},
    )
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("mpictl: error: provision failed (rc=")
    assert "YAML parsing failed" in lines[0] and f"{root}/playbooks/site.yml:" in lines[0]
    assert f"(artifacts: {isolated_state}/runs/" in lines[0]
