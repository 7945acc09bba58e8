"""Issue 12 on the provisioned sandbox: `mpictl init` writes an inventory of the sandbox's three
machines that provisions unchanged, and `--tags openmpi` runs the OpenMPI play and nothing else."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

from mpictl import paths, runner
from mpictl.inventory import load_inventory
from tests.integration.conftest import IT_FRAMEWORKS, provision_run
from tests.integration.nodes import run_cli

ALWAYS_PLAYS = (  # validation and preflight: they run whatever the tags select
    "Validate the controller and the inventory",
    "Gather the facts of every node",
    "Check the variables of every role before any node is changed",
    "Record what this run left on every node",
)


def test_init_writes_an_inventory_that_provisions_the_sandbox(
    inventory: Path, first_provision: object, source_vars: dict[str, Any], tmp_path: Path
) -> None:
    cluster = load_inventory(inventory)
    sandbox_dir = Path(cluster.nodes[0].ssh_key or "").parent  # <state>/sandbox/<name>
    specs = [f"{n.name}=127.0.0.1:{n.ssh_port}" for n in cluster.nodes]
    out = tmp_path / "hosts.yml"
    proc = run_cli(
        "init", *specs, "--user", "root", "--head", "node1", "--slots", "1",
        "--ssh-key", str(sandbox_dir / "id_ed25519"),
        "--ssh-option", f"UserKnownHostsFile={sandbox_dir / 'known_hosts'}",
        "-o", str(out), timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("node1", "node2", "node3"):
        assert name in proc.stdout
    data = yaml.safe_load(out.read_text())
    assert set(data["all"]["children"]["mpi_nodes"]["hosts"]) == {"node1", "node2", "node3"}
    # The written inventory, unchanged, provisions the same machines (a no-change run here; the
    # session's framework choice comes along, as a user's would in group_vars).
    result = provision_run(out, {**source_vars, "horovod_frameworks": IT_FRAMEWORKS})
    assert result.ok, [r for r in result.task_results() if r.status == "failed"]
    assert set(result.stats) >= {"node1", "node2", "node3"}
    # A closed port is reported unreachable within seconds, not a hang.
    started = time.monotonic()
    closed = run_cli("init", "x=127.0.0.1:9", "--user", "root", "-o", "-", timeout=60)
    assert closed.returncode == 1 and time.monotonic() - started < 10
    assert "unreachable" in closed.stderr + closed.stdout


def test_tags_openmpi_runs_the_openmpi_play_and_nothing_else(
    inventory: Path, first_provision: object, source_vars: dict[str, Any]
) -> None:
    result: runner.RunResult = provision_run(inventory, source_vars, tags="openmpi")
    assert result.ok
    plays = {
        str(e["event_data"].get("play"))
        for e in result.events
        if e.get("event") in runner.RESULT_EVENTS and e["event_data"].get("host") != "localhost"
        and not e["event_data"].get("task", "").startswith("Validating arguments")
    }  # fmt: skip
    component_plays = plays - set(ALWAYS_PLAYS)
    assert component_plays == {"Build OpenMPI once and install it on every node"}, plays
    bad = run_cli("provision", "-i", str(inventory), "--tags", "nosuch")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "openmpi" in bad.stderr
    assert paths.runs_dir().is_dir()
