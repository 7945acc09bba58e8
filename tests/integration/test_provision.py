"""Foundation: provision a real 3-node sandbox and check what the controller and nodes see."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from mpictl import lock, paths, runner
from mpictl.inventory import load_inventory
from tests.integration.nodes import ssh


def mpictl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mpictl", *args], capture_output=True, text=True, timeout=900
    )


def test_recap_reports_every_node_ok(first_provision: runner.RunResult) -> None:
    nodes = {"node1", "node2", "node3"}
    assert nodes <= set(first_provision.stats)
    for host in nodes:
        stats = first_provision.stats[host]
        assert stats.failed == 0 and stats.unreachable == 0
        assert stats.ok > 0
    assert first_provision.rc == 0
    # ansible-runner's artifacts are kept under the state dir.
    run_dir = first_provision.private_data_dir
    assert run_dir.parent == paths.runs_dir()
    assert (run_dir / "artifacts" / "run" / "job_events").is_dir()


def test_controller_reaches_every_node_over_ssh_with_pinned_keys(
    first_provision: runner.RunResult, inventory: Path
) -> None:
    cluster = load_inventory(inventory)
    for node in cluster.nodes:
        assert "StrictHostKeyChecking=yes" in node.ssh_common_args
        proc = ssh(node, "hostname")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == node.name


def test_nodes_reach_each_other_by_hostname(
    first_provision: runner.RunResult, inventory: Path
) -> None:
    cluster = load_inventory(inventory)
    for node in cluster.nodes:
        for other in cluster.nodes:
            if other is node:
                continue
            probe = f"getent hosts {other.name} && timeout 5 bash -c '</dev/tcp/{other.name}/22'"
            proc = ssh(node, probe)
            assert proc.returncode == 0, f"{node.name} -> {other.name}: {proc.stderr}"


def test_slot_defaults_come_from_the_fact_cache(
    first_provision: runner.RunResult, inventory: Path, tmp_path: Path
) -> None:
    # The sandbox inventory sets mpi_slots: 1; a copy without it falls back to the facts the
    # provision cached (same host names, same state directory).
    assert {n.slots_source for n in load_inventory(inventory).nodes} == {"mpi_slots"}
    copy = tmp_path / "inventory"
    shutil.copytree(inventory, copy)
    group_vars = copy / "group_vars" / "all.yml"
    text = group_vars.read_text()
    assert "\nmpi_slots: 1\n" in text
    group_vars.write_text(text.replace("\nmpi_slots: 1\n", "\n"))
    cluster = load_inventory(copy)
    for node in cluster.nodes:
        assert node.slots_source == "vcpus"
        assert node.slots == node.facts["ansible_processor_vcpus"]
        assert node.facts["mpi_gpu_count"] in (0, "0")
    proc = mpictl("hostfile", "-i", str(copy))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "".join(f"{n.name} slots={n.slots}\n" for n in cluster.nodes)


def test_cli_provision_prints_recap_and_exit_code(
    first_provision: runner.RunResult, inventory: Path
) -> None:
    # Only the validation and fact plays: quick, and exercises the CLI end to end.
    proc = mpictl("provision", "-i", str(inventory), "--playbook", "validate.yml")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    assert "Recap" in proc.stdout
    for host in ("node1", "node2", "node3"):
        assert host in proc.stdout


def test_cli_provision_names_an_unreachable_node(
    first_provision: runner.RunResult, inventory: Path, tmp_path: Path
) -> None:
    """A node that does not answer: exit 1, the recap counts it unreachable, and the one error
    line names it; the reachable nodes are not reported as failed."""
    copy = tmp_path / "inventory"
    shutil.copytree(inventory, copy)
    hosts = copy / "hosts.yml"
    text = hosts.read_text()
    assert "\n    mpi_head:" in text
    hosts.write_text(
        text.replace(
            "\n    mpi_head:",
            "\n        node4:\n          ansible_port: 2199\n          sandbox_ip: 10.89.41.14"
            "\n    mpi_head:",
            1,
        )
    )
    assert [n.name for n in load_inventory(copy).nodes] == ["node1", "node2", "node3", "node4"]
    proc = mpictl("provision", "-i", str(copy), "--playbook", "validate.yml")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mpictl: error: provision failed"), err
    assert "node4" in err[0] and "node1" not in err[0], err
    row = next(ln for ln in proc.stdout.splitlines() if re.match(r"^\W*node4\W+\d", ln))
    cells = [c.strip() for c in re.split(r"[│|┃]", row) if c.strip()]
    assert cells[0] == "node4" and cells[4] == "1", row  # host ok changed failed unreachable


def test_cli_provision_limit_keeps_the_validation_play(
    first_provision: runner.RunResult, inventory: Path
) -> None:
    proc = mpictl("provision", "-i", str(inventory), "--playbook", "validate.yml", "-l", "node2")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    assert "TASK Check that the Ansible version is supported\n    localhost: ok" in proc.stdout
    hosts = set(re.findall(r"^    (\S+): (?:ok|changed|failed|unreachable)", proc.stdout, re.M))
    assert hosts == {"localhost", "node2"}, proc.stdout


def test_second_provision_is_refused_while_one_runs(
    first_provision: runner.RunResult, inventory: Path
) -> None:
    with lock.hold(load_inventory(inventory).endpoints, source=inventory):
        proc = mpictl("provision", "-i", str(inventory))
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("mpictl: error: another mpictl provision is running")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_validation_play_stops_before_any_node_is_touched(
    first_provision: runner.RunResult, inventory: Path, tmp_path: Path
) -> None:
    # Bypass the CLI's own checks: the playbook must stand on its own for ansible-playbook users.
    bad = tmp_path / "inventory"
    subprocess.run(["cp", "-r", str(inventory), str(bad)], check=True)
    hosts = bad / "hosts.yml"
    hosts.write_text(
        hosts.read_text().replace("node2:\n", "node2:\n          mpi_slots: four\n", 1)
    )
    assert "mpi_slots: four" in hosts.read_text()
    result = runner.run_playbook(paths.playbook("site.yml"), bad)
    assert result.rc != 0
    assert result.failed_hosts == ["localhost"]
    touched = {r.host for r in result.task_results() if r.host != "localhost"}
    assert touched == set()
    failure = next(r for r in result.task_results() if r.status == "failed")
    assert failure.result.get("msg") == (
        "node2: mpi_slots 'four': must be an integer "
        "(roles/cluster_defaults/meta/argument_specs.yml)"
    )
