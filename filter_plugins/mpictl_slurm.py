"""Ansible filters of the slurm role: what slurm.conf and gres.conf say about each node, and
which process tracking the cluster can use. Pure (plain values in, plain values out), so the
unit tests call them without Ansible."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

PROCTRACK_CHOICES = ("auto", "cgroup", "linuxproc")
# The TaskPlugin that goes with each ProctrackType: task/cgroup needs the same cgroup controllers
# as proctrack/cgroup. Without them no task plugin: task/affinity also sets NUMA memory policies
# (set_mempolicy), which a container's seccomp profile refuses without CAP_SYS_NICE (measured in
# the sandbox: every task launch failed with "task_g_set_affinity: Operation not permitted").
# Slurm has no task/none plugin any more (26.05: TaskPlugin unset means none): "" leaves the
# TaskPlugin line out of slurm.conf.
TASK_PLUGINS = {"cgroup": "task/cgroup,task/affinity", "linuxproc": ""}


class SlurmFilterError(ValueError):
    """A node lacks what slurm.conf needs (its facts); the message names the node."""


def _fact(hv: Mapping[str, Any], name: str) -> Any:
    facts = hv.get("ansible_facts") or {}
    value = facts.get(name) if isinstance(facts, Mapping) else None
    return hv.get("ansible_" + name) if value is None else value


def _positive(host: str, hv: Mapping[str, Any], name: str) -> int:
    value = _fact(hv, name)
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if number <= 0:
        raise SlurmFilterError(
            f"{host}: fact {name} is {value!r}; slurm.conf needs the node's facts (gather them)"
        )
    return number


def slurm_nodes(
    hosts: Iterable[str], hostvars: Mapping[str, Any], memory_headroom_mb: int = 0
) -> list[dict[str, Any]]:
    """One entry per host, in order: the Slurm node name (the inventory name), the host name
    slurmd finds itself by, the address the others reach it at (``mpi_address``, else the
    inventory name: the rule of mpictl's hostfile), the CPU layout and memory from its facts
    (RealMemory: MemTotal minus ``memory_headroom_mb``), and its GPU count (``mpi_gpu_count``)."""
    out = []
    for host in hosts:
        hv = hostvars[host]
        memory = _positive(host, hv, "memtotal_mb") - int(memory_headroom_mb)
        if memory <= 0:
            raise SlurmFilterError(f"{host}: memory headroom leaves no memory for RealMemory")
        out.append(
            {
                "name": host,
                "hostname": str(_fact(hv, "hostname") or host),
                "address": str(hv.get("mpi_address") or host),
                "cpus": _positive(host, hv, "processor_vcpus"),
                "sockets": _positive(host, hv, "processor_count"),
                "cores_per_socket": _positive(host, hv, "processor_cores"),
                "threads_per_core": _positive(host, hv, "processor_threads_per_core"),
                "real_memory": memory,
                "gpus": int(hv.get("mpi_gpu_count") or 0),
            }
        )
    return out


def slurm_node_line(node: Mapping[str, Any]) -> str:
    """The slurm.conf line of one node (an entry of ``slurm_nodes``)."""
    line = (
        f"NodeName={node['name']} NodeHostname={node['hostname']} NodeAddr={node['address']}"
        f" CPUs={node['cpus']} Sockets={node['sockets']}"
        f" CoresPerSocket={node['cores_per_socket']} ThreadsPerCore={node['threads_per_core']}"
        f" RealMemory={node['real_memory']}"
    )
    if node["gpus"] > 0:
        line += f" Gres=gpu:{node['gpus']}"
    return line + " State=UNKNOWN"


def slurm_gres_line(node: Mapping[str, Any]) -> str:
    """The gres.conf line of a node with GPUs (its /dev/nvidiaN devices); '' without GPUs."""
    count = int(node["gpus"])
    if count <= 0:
        return ""
    files = "/dev/nvidia0" if count == 1 else f"/dev/nvidia[0-{count - 1}]"
    return f"NodeName={node['name']} Name=gpu File={files}"


def slurm_proctrack(requested: str, cgroup_writable: Iterable[Any]) -> str:
    """``cgroup`` or ``linuxproc``: ``auto`` is cgroup when every node's cgroup controllers are
    writable (one value per node), else linuxproc; the other choices stand as they are."""
    if requested not in PROCTRACK_CHOICES:
        raise SlurmFilterError(
            f"slurm_proctrack_type must be one of {', '.join(PROCTRACK_CHOICES)}, got {requested!r}"
        )
    if requested != "auto":
        return requested
    values = list(cgroup_writable)
    return "cgroup" if values and all(_truthy(v) for v in values) else "linuxproc"


def slurm_task_plugin(proctrack: str) -> str:
    return TASK_PLUGINS[proctrack]


def _truthy(value: Any) -> bool:
    return value is True or str(value).strip().lower() in ("true", "yes", "1")


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "mpictl_slurm_nodes": slurm_nodes,
            "mpictl_slurm_node_line": slurm_node_line,
            "mpictl_slurm_gres_line": slurm_gres_line,
            "mpictl_slurm_proctrack": slurm_proctrack,
            "mpictl_slurm_task_plugin": slurm_task_plugin,
        }
