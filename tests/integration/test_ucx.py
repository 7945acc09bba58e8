"""UCX and UCC under OpenMPI on the sandbox (issue 24; the sandbox has no HCA, so UCX's own TCP
transport stands in for the fabric, and no GPU, so UCC runs its ucp transport on host buffers): UCX
and UCC are built once and on every node's PATH, OpenMPI lists the ucx pml and the ucc collective
component, a job with ``coll_ucc_enable 1`` runs the seed collectives through UCC (UCC's own
collective trace names them), a job asked for ``pml ucx`` runs the seed collectives across the 3
nodes over UCX's tcp transport (OpenMPI's and UCX's own verbose lines name both), the same job with
``pml ob1`` is the negative control, the smoke suite passes with ``mpi_transport: ucx`` in the
inventory, and ``auto`` picks ob1/tcp there and says why."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import yaml

from mpictl.inventory import Cluster
from tests.integration.nodes import run_cli, ssh_mpi

SEED = "/opt/mpictl/share/jobs/smoke_mpi.py"
VENV_PY = "/opt/mpictl/venv/bin/python"


def mpictl(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, timeout=timeout)


def test_ucx_is_on_every_node_and_openmpi_has_its_pml(cluster: Cluster) -> None:
    for node in cluster.nodes:
        info = ssh_mpi(node, "ucx_info -v && ompi_info")
        assert info.returncode == 0, f"{node.name}: {info.stdout}{info.stderr}"
        assert "Library version:" in info.stdout or "UCT version" in info.stdout, info.stdout
        pmls = [line.split(":", 1)[1].strip() for line in info.stdout.splitlines()
                if line.split(":", 1)[0].strip() == "MCA pml"]  # fmt: skip
        assert any(p.startswith("ucx") for p in pmls), f"{node.name}: pmls {pmls}"
        devices = ssh_mpi(node, "ucx_info -d | grep -E 'Transport|Device'").stdout
        assert "Transport: tcp" in devices, f"{node.name}: {devices}"


def test_ucc_is_on_every_node_and_openmpi_has_its_collective_component(cluster: Cluster) -> None:
    for node in cluster.nodes:
        info = ssh_mpi(node, "ucc_info -v && ompi_info | grep 'MCA coll:'")
        assert info.returncode == 0, f"{node.name}: {info.stdout}{info.stderr}"
        assert "# UCC version=" in info.stdout, info.stdout
        assert "MCA coll: ucc" in info.stdout, f"{node.name}: {info.stdout}"


def run_seed(inventory: Path, *mpi_args: str) -> subprocess.CompletedProcess[str]:
    return mpictl(
        "run", "-i", str(inventory), "--ppn", "1", *mpi_args,
        "--", VENV_PY, SEED, timeout=600,
    )  # fmt: skip


def test_pml_ucx_runs_the_seed_collectives_over_ucxs_tcp_and_ob1_is_the_control(
    inventory: Path, cluster: Cluster
) -> None:
    ucx = run_seed(
        inventory, "--mca", "pml=ucx", "--mca", "pml_base_verbose=10",
        "-x", "UCX_TLS=tcp,self,sm", "-x", "UCX_LOG_LEVEL=info",
    )  # fmt: skip
    out = ucx.stdout + ucx.stderr
    assert ucx.returncode == 0, out
    assert "select: component ucx selected" in out, out
    assert "tcp/eth0" in out, out  # UCX's own line: the transports its endpoints use
    assert "UCX_NET_DEVICES=eth0" in ucx.stderr  # announced: the interface rule, for UCX
    results = [json.loads(line[line.index("{") :]) for line in ucx.stdout.splitlines()
               if '"suite": "mpi"' in line and '"test"' in line]  # fmt: skip
    assert len(results) == 7, ucx.stdout  # point-to-point ... allreduce, rank 0's lines
    assert all(r["ok"] and r["ranks"] == 3 and len(r["hosts"]) == 3 for r in results), results
    # UCX logging on here too: had UCX carried the job, its endpoint lines would show
    ob1 = run_seed(
        inventory, "--mca", "pml=ob1", "--mca", "pml_base_verbose=10", "-x", "UCX_LOG_LEVEL=info"
    )
    out = ob1.stdout + ob1.stderr
    assert ob1.returncode == 0, out
    assert "select: component ob1 selected" in out and "component ucx selected" not in out, out
    assert "tcp/eth0" not in out


def test_coll_ucc_runs_the_seed_collectives_through_ucc_across_three_nodes(
    inventory: Path, cluster: Cluster
) -> None:
    """What GPU jobs get (the job side turns coll/ucc on where every node has GPUs; the sandbox
    has none, so it is asked for here): the seed collectives pass across the 3 nodes, and UCC's
    own collective trace names each collective it ran."""
    ucc = run_seed(
        inventory, "--mca", "coll_ucc_enable=1", "--mca", "coll_ucc_priority=100",
        "-x", "UCC_COLL_TRACE=info",
    )  # fmt: skip
    out = ucc.stdout + ucc.stderr
    assert ucc.returncode == 0, out
    results = [json.loads(line[line.index("{") :]) for line in ucc.stdout.splitlines()
               if '"suite": "mpi"' in line and '"test"' in line]  # fmt: skip
    assert len(results) == 7 and all(r["ok"] and r["ranks"] == 3 for r in results), ucc.stdout
    for coll in ("Allreduce", "Bcast", "Barrier"):  # UCC's trace line for each one it ran
        assert f"coll_init: {coll}" in out, out


def test_auto_picks_tcp_without_rdma_and_mpi_transport_ucx_runs_smoke_over_ucx(
    inventory: Path, tmp_path: Path, it_state: Path
) -> None:
    auto = mpictl("run", "-i", str(inventory), "--ppn", "1", "--", "true")
    assert auto.returncode == 0, auto.stderr
    assert "transport: tcp (pml ob1): auto: no node has an active RDMA port\n" in auto.stderr
    assert "coll_ucc" not in auto.stderr  # no GPU: OpenMPI's own collectives
    ucx_inv = tmp_path / "inventory"
    shutil.copytree(inventory, ucx_inv)
    group_vars = ucx_inv / "group_vars" / "all.yml"
    data = yaml.safe_load(group_vars.read_text()) or {}
    group_vars.write_text(yaml.safe_dump({**data, "mpi_transport": "ucx"}))
    smoke = mpictl("smoke", "-i", str(ucx_inv), "--suite", "mpi", "--json", timeout=900)
    report = json.loads(smoke.stdout)
    assert smoke.returncode == 0 and report["ok"], smoke.stdout + smoke.stderr
    for job in report["jobs"]:  # the job record keeps the transport and why
        record = json.loads((it_state / "jobs" / job / "job.json").read_text())
        assert record["extra"]["transport"].startswith("ucx (pml ucx over eth0)"), record
    run = mpictl("run", "-i", str(ucx_inv), "--ppn", "1", "--", "true")
    assert "transport: ucx (pml ucx over eth0): mpi_transport: ucx, over TCP" in run.stderr
