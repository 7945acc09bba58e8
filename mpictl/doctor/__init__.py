"""``mpictl doctor``: preflight checks of a provisioned cluster, each naming the node and the fix.

1. The controller logs in to the head as the MPI user (cluster key, pinned host key).
2. From the head, as the MPI user, it runs a probe on every node over SSH with ``BatchMode=yes``
   and ``StrictHostKeyChecking=yes`` (exactly how mpirun starts remote daemons). The probe reports,
   as one JSON object: PATH and LD_LIBRARY_PATH of that non-interactive session, where mpirun and
   prted are, the versions of OpenMPI, mpi4py, Horovod, NCCL, the build-fingerprint markers under
   /opt and beside the NCCL the linker finds, the IPv4 networks, TCP reachability of every other
   node's SSH port, cores, GPUs, the hostfile and the job side's tools.
3. :func:`evaluate` (pure, unit-tested) turns the probes into checks: ``nodes`` checks each
   node's own stack, ``topology`` the cluster's shape (network, reachability, slots, hostfile).
   ``slurm`` adds Slurm's checks where the inventory enables it. The probe is
   ``mpictl/scripts/doctor_probe.py``; it runs ``venv_versions.py`` with the
   cluster venv's python. Paths come from :mod:`mpictl.settings` (the head's variables).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

from mpictl import network, programs, remote, transport
from mpictl import settings as cluster_settings
from mpictl.doctor import containers as container_checks
from mpictl.doctor import health as health_checks
from mpictl.doctor import rdma_checks, slurm_checks
from mpictl.doctor import shared as shared_checks
from mpictl.doctor.nodes import build_checks, env_checks, key_checks, ssh_checks
from mpictl.doctor.report import PROVISION, Check, DoctorReport
from mpictl.doctor.topology import network_checks, slot_checks
from mpictl.errors import JobError
from mpictl.inventory import Cluster
from mpictl.settings import ClusterSettings

__all__ = ["Check", "DoctorReport", "collect", "evaluate", "probe_spec", "run_doctor"]

PROBE = "doctor_probe.py"  # runs on every node (system python3)
VENV_PROGRAM = "venv_versions.py"  # the probe runs it with the cluster venv's python
TOOLS = ("smoke_mpi.py", "smoke_horovod.py", "bench_allreduce.py")


def probe_spec(
    cluster: Cluster, settings: ClusterSettings, shared_token: str = ""
) -> dict[str, Any]:
    """The probe's argument: whom to reach, and where the roles put things on this cluster."""
    return {
        # mpi_shared_dir: the token file the head wrote there, which every node reads back
        "shared_dir": settings.shared_dir,
        "shared_token": shared_token,
        "slurm": slurm_checks.enabled(cluster),
        "containers": container_checks.enabled(cluster),
        "targets": {n.name: n.address for n in cluster.nodes},
        "hostfile": settings.hostfile,
        "venv_python": settings.venv_python,
        # horovod_python: PyTorch and Horovod live in the user's environment, not the venv
        "frameworks_python": settings.horovod_interpreter,
        "venv_program": programs.source(VENV_PROGRAM),
        "tools": [settings.torch_env, settings.tf_env, *(settings.tool(t) for t in TOOLS)],
        # UCX and OpenMPI's pml are asked about where UCX is the transport (or a node has ports)
        "ucx": cluster_transport(cluster, settings).pml == "ucx",
    }


def cluster_transport(cluster: Cluster, settings: ClusterSettings) -> transport.Transport:
    """The transport a job on every node gets (run's rule: transport.for_job)."""
    net = network.derive_network(cluster, list(cluster.nodes))
    return transport.for_job(cluster.nodes, net, settings)


def collect(
    cluster: Cluster, head: remote.HeadSSH, settings: ClusterSettings, shared_token: str = ""
) -> dict[str, remote.NodeOutput]:
    """Run the probe on every node, from the head as the MPI user (node name -> output)."""
    cmd = "python3 - " + shlex.quote(json.dumps(probe_spec(cluster, settings, shared_token)))
    by_address = remote.run_on_nodes(
        head,
        [n.address for n in cluster.nodes],
        cmd,
        programs.source(PROBE),
        timeout=180,
        connect_timeout=8,
    )
    return {n.name: by_address[n.address] for n in cluster.nodes if n.address in by_address}


def evaluate(
    cluster: Cluster,
    probes: Mapping[str, remote.NodeOutput],
    inventory_slots: Mapping[str, int] | None = None,
    settings: ClusterSettings | None = None,
    slurm: Mapping[str, Any] | None = None,
    health: Mapping[str, Any] | None = None,
    shared: tuple[str, str] | None = None,
) -> DoctorReport:
    """Checks from the probe outputs (node name -> output of the PROBE program)."""
    settings = settings or cluster_settings.for_cluster(cluster)
    provision = PROVISION.format(inv=str(cluster.source))
    checks, data = ssh_checks(cluster, probes, provision)
    checks += env_checks(data, settings, provision)
    if data:
        checks += build_checks(data, provision)
        checks += key_checks(data, provision)
    checks += network_checks(cluster, data, provision)
    checks += slot_checks(cluster, data, provision, inventory_slots, settings.hostfile)
    if data:
        chosen = cluster_transport(cluster, settings)
        checks += rdma_checks.checks(cluster, data, chosen, provision)
        checks += rdma_checks.device_checks(data, chosen, provision)
    if slurm is not None:  # the head's Slurm answers: Slurm is enabled on this cluster
        checks += slurm_checks.checks(cluster, data, slurm, provision)
    if health is not None:  # the health program's answers, as root (None: not asked)
        checks += health_checks.checks(cluster, health, settings, provision)
    if data and container_checks.enabled(cluster):
        checks += container_checks.checks(data, provision, slurm_checks.enabled(cluster))
    if shared is not None:  # (the token the head wrote in mpi_shared_dir, why it could not)
        checks += shared_checks.checks(cluster, data, settings, *shared)
    return DoctorReport(checks)


def run_doctor(cluster: Cluster) -> DoctorReport:
    """Log in to the head, probe every node from there, and evaluate."""
    try:
        head = remote.HeadSSH.for_cluster(cluster)
        head.check_reachable()
    except JobError as exc:
        return DoctorReport(
            [
                Check(
                    "ssh to head",
                    cluster.head.name,
                    False,
                    str(exc),
                    PROVISION.format(inv=cluster.source),
                )
            ]
        )
    settings = cluster_settings.for_cluster(cluster)
    shared, name = None, ""
    if settings.shared_dir:
        name, token = shared_checks.new_token()
        shared = (token, shared_checks.write_token(head, settings.shared_dir, name, token))
    try:
        probes = collect(cluster, head, settings, name)
    finally:
        if shared is not None and not shared[1]:
            shared_checks.remove_token(head, settings.shared_dir, name)
    slurm = None
    if slurm_checks.enabled(cluster):
        _, data = ssh_checks(cluster, probes, "")
        # (255: ssh could not log in; 124: the node did not answer in time)
        reachable = [n for n, out in probes.items() if out is not None and out.rc not in (255, 124)]
        slurm = slurm_checks.ask_head(head, cluster, data, reachable)
    health = health_checks.collect(cluster, settings) if health_checks.enabled(cluster) else None
    return evaluate(cluster, probes, settings=settings, slurm=slurm, health=health, shared=shared)
