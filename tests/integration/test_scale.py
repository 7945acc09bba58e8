"""Provisioning at scale (issue 16) on a 6-node sandbox of its own: the controller sends each
build artifact to exactly one node and the nodes fan it out over their SSH mesh; every node ends
with the same bytes; a node stopped during the fan-out fails the run naming it, and the re-run
completes. Components: OpenMPI + mpi4py (NCCL, Horovod, Slurm off), from the warm cache."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mpictl import provision, runner, sandbox
from mpictl.inventory import Cluster, load_inventory
from mpictl.sandbox import host, podman
from tests.integration import stub_libcuda
from tests.integration.nodes import ssh

NAME = "mpictl-it-six"
SUBNET = "10.89.50.0/24"
PORT_BASE = 2271
TAGS = "ssh,environment,hostfile,ucx,ucc,openmpi,mpi4py"  # OpenMPI builds against UCX and UCC
OFF = {"nccl_enabled": False, "horovod_enabled": False, "slurm_enabled": False}
FROM_CONTROLLER = "Copy the artifact from the controller to the nodes that need it for {}"
SPREAD = "Spread the artifact from the seed node over the SSH mesh for {}"
LANDING = "Create the MPI user's landing directory for the fan-out of {}"


@pytest.fixture(scope="module")
def six(
    it_state: Path, warm_cache: None, source_vars: dict[str, Any]
) -> Iterator[tuple[Path, dict[str, Any]]]:
    inv = sandbox.clone_inventory(it_state / "six", NAME, SUBNET, PORT_BASE, count=6)
    sandbox.down(inv)
    cuda = Path("/usr/local/cuda").is_dir()
    sandbox.up(inv, cuda=cuda)
    if cuda:  # the session's OpenMPI build (CUDA-aware with the stub libcuda)
        stub_libcuda.install(inv)
    try:
        yield inv, {**source_vars, **OFF}
    finally:
        if not os.environ.get("MPICTL_KEEP_SANDBOX"):
            sandbox.down(inv)


def ran(result: runner.RunResult, task: str) -> list[str]:
    return sorted(r.host for r in result.task_results(task) if r.status in ("ok", "changed"))


def artifact_sums(cluster: Cluster) -> dict[str, str]:
    out = {}
    for node in cluster.nodes:
        proc = ssh(node, "sha256sum /var/cache/mpictl/artifacts/openmpi-*.tar.gz")
        assert proc.returncode == 0, (node.name, proc.stderr)
        out[node.name] = proc.stdout.split()[0]
    return out


def test_the_controller_sends_each_artifact_to_one_node(six: tuple[Path, dict[str, Any]]) -> None:
    inv, extravars = six
    _, result = provision.provision(inv, tags=TAGS, extravars=extravars)
    assert result.ok, result.stats
    for component in ("openmpi", "mpi4py"):
        sent = ran(result, FROM_CONTROLLER.format(component))
        assert sent == ["node1"], (component, sent)  # node1 is the seed: the first that needs it
        assert ran(result, SPREAD.format(component)) == ["node1"]
    sums = artifact_sums(load_inventory(inv))
    assert len(set(sums.values())) == 1 and len(sums) == 6, sums


def test_a_node_stopped_during_the_fanout_fails_the_run_naming_it_and_the_rerun_completes(
    six: tuple[Path, dict[str, Any]],
) -> None:
    inv, extravars = six
    cluster = load_inventory(inv)
    # every node but the seed needs OpenMPI again: its install, marker and artifact are gone
    for node in cluster.nodes[1:]:
        assert (
            ssh(node, "rm -rf /opt/openmpi /var/cache/mpictl/artifacts/openmpi-*").returncode == 0
        )
    victim = cluster.nodes[4]
    container = f"{NAME}-{victim.name}"
    stopped = threading.Event()

    def stop_at_the_fanout(event: dict[str, Any]) -> None:
        task = (event.get("event_data") or {}).get("task", "")
        if not stopped.is_set() and task == LANDING.format("openmpi"):
            stopped.set()
            podman.run(["stop", "-t", "0", container], runtime=host.choose_runtime())

    _, failed = provision.provision(
        inv, tags="openmpi", extravars=extravars, on_event=stop_at_the_fanout
    )
    assert stopped.is_set()
    assert not failed.ok
    assert failed.failed_hosts == [victim.name], failed.stats
    sandbox.up(inv, cuda=Path("/usr/local/cuda").is_dir())  # starts the stopped node again
    _, again = provision.provision(inv, tags="openmpi", extravars=extravars)
    assert again.ok, again.stats
    sums = artifact_sums(load_inventory(inv))
    assert len(set(sums.values())) == 1 and len(sums) == 6, sums
