"""A provision with nothing to do takes the short path (issues 4 and 16: a no-change re-run of
site.yml), and the short path still finds and repairs a node that drifted.

Two levels. The cluster's: one probe per node compares the node with the record the last
successful run left (playbooks/files/mpictl_node_state.py); a component converged on every node
has no node to run on, so a no-change run is the validation play and one probe per node. The
roles': with ``mpictl_short_path: false`` (or where a component did drift), each role reads what
it manages in one pass (raw probes: markers, checksums, modes, packages) and skips its writes, and
the checks of what it would have written, where the node already matches. These tests pin both
down from the runs' events, so a role that falls back to its slow path (a template that no longer
compares equal, say) fails here rather than only in the benchmark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mpictl import runner
from tests.integration.conftest import (
    STALE_MACHINE_ID,
    STALE_NODE,
    cached_machine_id,
    describe_failures,
    provision_run,
)
from tests.integration.nodes import load, ssh

NODES = ["node1", "node2", "node3"]

# Tasks that write to a node (or copy to it), and the checks that follow a write: in a no-change
# run every one of them must be skipped on every node.
# (A group of writes that share one condition is one include: its one skipped result stands for
# all of them.)
SHORT_PATH_SKIPS = (
    "Install iproute2 where the node lacks ip",
    "Create the MPI user and give it the node's own key pair where the node differs",
    "Write the pinned host keys of every node",
    "Write who may log in as the MPI user",
    "Write the MPI user's ssh client configuration",
    "Verify passwordless SSH between the nodes",
    "Write the hostfile of the whole cluster",
    "Build, publish and verify the artifact where a node needs it",
    "Install the OpenMPI build on the nodes that need it",
    "Install the mpi4py build on the nodes that need it",
    "Install PyTorch and Horovod's dependencies where the venv lacks them",
    "Install the Horovod build on the nodes that need it",
    "Verify the Horovod build on the nodes where it changed",
    "Install the torch and TensorFlow wrappers and the smoke and bench programs",
    "Verify the job side's tools",
)
ENV_MODULE = "Record the environment contribution and re-render PATH and LD_LIBRARY_PATH"
PROBE = "Count the node's GPUs and find the components still as its last run left them"
# The only tasks with results in a no-change run on the cluster's short path.
SHORT_PATH_TASKS = {
    "Check that the Ansible version is supported",
    "Check that the group mpi_nodes has hosts",
    "Check that every node has a unique name and address",
    "Check every role and cluster variable of every node against its declared rule",
    "Remember that the inventory was validated in this run",
    "Digest the inputs of this run",
    PROBE,
    "Find the nodes whose cached facts describe another machine",
    "Say which nodes' cached facts were of another machine",
    "Gather the facts of a node whose cached facts were of another machine",
    "Digest the inputs of this run again, from the fresh facts",
    "Cache the GPU count and the RDMA ports of every node as facts (mpi_slots, transport)",
    "Remember that the nodes' facts were gathered, and the components every node still holds",
}


def statuses(result: runner.RunResult, task: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for r in result.task_results(task):
        out.setdefault(r.host, set()).add(r.status)
    return out


def test_no_change_provision_skips_every_write_and_its_check(
    second_provision: runner.RunResult,
) -> None:
    assert all(s.changed == 0 for s in second_provision.stats.values()), second_provision.stats
    for task in SHORT_PATH_SKIPS:
        seen = statuses(second_provision, task)
        assert sorted(seen) == NODES, f"{task}: results on {sorted(seen)}"
        assert all(s == {"skipped"} for s in seen.values()), f"{task}: {seen}"
    # The environment module runs once per node (the role's own re-render); the components'
    # drop-ins already match, so their contributions are skipped.
    ran = [r.host for r in second_provision.task_results(ENV_MODULE) if r.status != "skipped"]
    assert sorted(ran) == NODES, ran


def test_the_cluster_short_path_is_one_probe_per_node(
    short_path_provision: runner.RunResult,
) -> None:
    result = short_path_provision
    assert all(s.changed == 0 for s in result.stats.values()), result.stats
    tasks = {r.task for r in result.task_results()}
    assert tasks <= SHORT_PATH_TASKS, sorted(tasks - SHORT_PATH_TASKS)
    assert statuses(result, PROBE) == {n: {"ok"} for n in NODES}
    # nothing else ran on a node (the controller's own tasks are delegated from the first one)
    plays = {
        e["event_data"].get("play") for e in result.events if e.get("event") in runner.RESULT_EVENTS
    }
    assert plays == {"Validate the controller and the inventory", "Gather the facts of every node"}


def test_a_drifted_node_is_repaired_and_only_it_changes(
    short_path_provision: runner.RunResult, inventory: Path, source_vars: dict[str, Any]
) -> None:
    node3 = next(n for n in load(inventory).nodes if n.name == "node3")
    drift = (
        "chmod 0644 /home/mpi/.ssh/id_ed25519"
        " && rm /opt/mpictl/share/jobs/smoke_mpi.py"
        " && echo 'stray slots=9' >> /etc/mpictl/hostfile"
        " && rm /etc/mpictl/env.d/python_venv.json"
    )
    proc = ssh(node3, drift)
    assert proc.returncode == 0, proc.stderr

    result = provision_run(inventory, source_vars)
    assert result.ok, describe_failures(result)
    changed = sorted({r.host for r in result.changed_tasks() if r.host != "localhost"})
    assert changed == ["node3"], [(r.host, r.task) for r in result.changed_tasks()]
    # What changed was checked again: the SSH ring (a node's keys matter to its neighbour), the
    # hostfile and the job tools on the node that drifted.
    ring = statuses(result, "Reach the next node as the MPI user without a password or a prompt")
    assert sorted(ring) == NODES and all(s == {"ok"} for s in ring.values()), ring
    assert statuses(result, "Read the hostfile back") == {"node3": {"ok"}}
    assert statuses(result, "Run the torch wrapper as rank 3 of 4 with two GPUs") == {
        "node3": {"ok"}
    }
    # Components that did not drift keep the short path: OpenMPI's play had no node to run on.
    openmpi = [
        e
        for e in result.events
        if e.get("event") in runner.RESULT_EVENTS
        and e["event_data"].get("play") == "Build OpenMPI once and install it on every node"
    ]
    assert openmpi == [], [e["event_data"].get("task") for e in openmpi]

    proc = ssh(
        node3,
        "stat -c %a /home/mpi/.ssh/id_ed25519; test -f /opt/mpictl/share/jobs/smoke_mpi.py"
        " && echo tool; grep -c stray /etc/mpictl/hostfile; set -a; . /etc/environment;"
        ' echo "$PATH"',
    )
    mode, tool, stray, path = proc.stdout.strip().splitlines()
    assert (mode, tool, stray) == ("600", "tool", "0"), proc.stdout
    assert "/opt/mpictl/venv/bin" in path.split(":"), path

    again = provision_run(inventory, source_vars)
    assert again.ok, describe_failures(again)
    assert not [r for r in again.changed_tasks() if r.host != "localhost"]
    # The repair run recorded what it left: the next run is the short path again.
    assert {r.task for r in again.task_results()} <= SHORT_PATH_TASKS


def test_an_install_changed_under_mpictl_is_installed_again(
    short_path_provision: runner.RunResult, inventory: Path, source_vars: dict[str, Any]
) -> None:
    """A file deleted inside OpenMPI's prefix: the probe finds the component drifted on that
    node, its marker is dropped there, and the role installs the build again (the roles' own
    short path reads only the marker)."""
    node2 = next(n for n in load(inventory).nodes if n.name == "node2")
    prefix = "/opt/openmpi/" + str(source_vars.get("openmpi_version", "5.0.7"))
    proc = ssh(node2, f"rm {prefix}/bin/mpicc")
    assert proc.returncode == 0, proc.stderr

    result = provision_run(inventory, source_vars)
    assert result.ok, describe_failures(result)
    changed = sorted({r.host for r in result.changed_tasks() if r.host != "localhost"})
    assert changed == ["node2"], [(r.host, r.task) for r in result.changed_tasks()]
    assert ssh(node2, f"test -x {prefix}/bin/mpicc").returncode == 0

    again = provision_run(inventory, source_vars)
    assert again.ok, describe_failures(again)
    assert {r.task for r in again.task_results()} <= SHORT_PATH_TASKS


def test_cached_facts_of_another_machine_are_gathered_again(
    second_provision: runner.RunResult, inventory: Path, it_state: Path
) -> None:
    """node2's cached facts said another machine id (as when a node is re-imaged or replaced
    behind the same name) before the second provision (conftest.second_provision replaced it):
    the run says so, gathers node2's facts again, and changes nothing."""
    result = second_provision
    warned = [r for r in result.task_results()
              if r.task == "Say which nodes' cached facts were of another machine"
              and r.status == "ok"]  # fmt: skip
    assert len(warned) == 1 and STALE_NODE in str(warned[0].result.get("msg")), warned
    assert statuses(
        result, "Gather the facts of a node whose cached facts were of another machine"
    )[STALE_NODE] == {"ok"}
    # the cache holds node2's own id again (the id its /etc/machine-id says)
    node = next(n for n in load(inventory).nodes if n.name == STALE_NODE)
    real = ssh(node, "cat /etc/machine-id").stdout.strip()
    assert cached_machine_id(it_state, STALE_NODE) == real != STALE_MACHINE_ID, real
    assert not [r for r in result.changed_tasks() if r.host != "localhost"]
