"""``mpictl status``: one screen of the cluster, read from the Prometheus the monitoring role runs.

The controller logs in to the head as the MPI user and runs ``scripts/cluster_status.py`` there:
it reads the role's file (``mpi_monitoring_config``: where Prometheus answers, the nodes), asks
Prometheus's HTTP API the instant queries of :data:`QUERIES`, and, where Slurm is on, ``sinfo``.
:func:`build` (pure, unit-tested) turns that into one row per node: up or down (the exporter's
``up``), load, memory, disk, network throughput, GPU utilisation and memory where DCGM's exporter
is scraped, and the Slurm state with its reason. A node of the inventory that Prometheus does not
scrape is shown as such (the monitoring role has not run since it was added).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mpictl import paths, programs, remote, role_vars
from mpictl.errors import JobError, UsageError
from mpictl.inventory import Cluster, flag
from mpictl.settings import ClusterSettings

HEAD_PROGRAM = "cluster_status.py"
FIX = "run `mpictl provision -i {inv} --tags monitoring` (monitoring role)"
# the host's own interfaces: container and bridge interfaces would count the same bytes twice
_NET = '{device!~"lo|veth.*|docker.*|br-.*|virbr.*|cali.*",node!=""}'
QUERIES = {
    "up": 'up{job="node",node!=""}',
    "load1": 'node_load1{node!=""}',
    "cpus": 'count by (node) (node_cpu_seconds_total{mode="idle",node!=""})',
    "mem_total": 'node_memory_MemTotal_bytes{node!=""}',
    "mem_available": 'node_memory_MemAvailable_bytes{node!=""}',
    "disk_size": 'node_filesystem_size_bytes{mountpoint="/",node!=""}',
    "disk_avail": 'node_filesystem_avail_bytes{mountpoint="/",node!=""}',
    # irate: the last two samples of the window, whatever the scrape interval (up to 2.5 min)
    "rx": f"sum by (node) (irate(node_network_receive_bytes_total{_NET}[5m]))",
    "tx": f"sum by (node) (irate(node_network_transmit_bytes_total{_NET}[5m]))",
    "gpus": 'count by (node) (DCGM_FI_DEV_GPU_UTIL{node!=""})',
    "gpu_util": 'avg by (node) (DCGM_FI_DEV_GPU_UTIL{node!=""})',
    "gpu_mem_used": 'sum by (node) (DCGM_FI_DEV_FB_USED{node!=""})',
    "gpu_mem_free": 'sum by (node) (DCGM_FI_DEV_FB_FREE{node!=""})',
}


@dataclass(frozen=True)
class NodeStatus:
    node: str
    up: bool | None  # None: Prometheus has no target for it
    load1: float | None = None
    cpus: int | None = None
    mem_used: float | None = None  # fraction
    mem_total: float | None = None  # bytes
    disk_used: float | None = None  # fraction of /
    rx: float | None = None  # bytes/s
    tx: float | None = None
    gpus: int | None = None
    gpu_util: float | None = None  # percent, mean over the node's GPUs
    gpu_mem_used: float | None = None  # MiB (DCGM's unit)
    gpu_mem_total: float | None = None
    slurm: str = ""
    reason: str = ""

    @property
    def state(self) -> str:
        return "not scraped" if self.up is None else ("up" if self.up else "DOWN")


@dataclass(frozen=True)
class StatusReport:
    prometheus: str
    server: str
    nodes: list[NodeStatus]
    error: str = ""  # Prometheus could not be read at all
    notes: list[str] = field(default_factory=list)  # what was read only in part

    @property
    def problems(self) -> list[str]:
        if self.error:
            return [self.error]
        return [f"{n.node}: {n.state}" for n in self.nodes if not n.up]

    def to_json(self) -> dict[str, Any]:
        return {
            "prometheus": self.prometheus,
            "server": self.server,
            "error": self.error,
            "notes": self.notes,
            "nodes": [{**n.__dict__, "state": n.state} for n in self.nodes],
        }


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and abs(number) != float("inf") else None


def _by_node(results: Mapping[str, Any], name: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for pair in results.get(name) or []:
        if isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str):
            number = _number(pair[1])
            if number is not None:
                out.setdefault(pair[0], number)
    return out


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or not den else num / den


def build(cluster: Cluster, data: Mapping[str, Any]) -> StatusReport:
    """One row per node of the inventory (and of Prometheus's targets) from the head's answer."""
    results = data.get("results") or {}
    v = {name: _by_node(results, name) for name in QUERIES}
    sinfo = data.get("sinfo") or {}
    names = list(cluster.names) + [n for n in v["up"] if n not in cluster.names]
    rows = []
    for name in names:
        up = v["up"].get(name)
        state = [str(x) for x in (sinfo.get(name) or [])] + ["", ""]
        slurm = {"slurm": state[0], "reason": state[1]}
        if up != 1:  # a down target's last samples are stale: no numbers rather than old ones
            rows.append(NodeStatus(name, None if up is None else False, **slurm))
            continue
        avail, size = v["disk_avail"].get(name), v["disk_size"].get(name)
        mem_avail, mem_total = v["mem_available"].get(name), v["mem_total"].get(name)
        mem_used = None if mem_avail is None or mem_total is None else mem_total - mem_avail
        gpu_used, gpu_free = v["gpu_mem_used"].get(name), v["gpu_mem_free"].get(name)
        cpus, gpus = v["cpus"].get(name), v["gpus"].get(name)
        rows.append(
            NodeStatus(
                node=name,
                up=True,
                load1=v["load1"].get(name),
                cpus=int(cpus) if cpus is not None else None,
                mem_used=_ratio(mem_used, mem_total),
                mem_total=mem_total,
                disk_used=None if avail is None or size is None else _ratio(size - avail, size),
                rx=v["rx"].get(name),
                tx=v["tx"].get(name),
                gpus=int(gpus) if gpus is not None else None,
                gpu_util=v["gpu_util"].get(name),
                gpu_mem_used=gpu_used,
                gpu_mem_total=None if gpu_used is None or gpu_free is None else gpu_used + gpu_free,
                **slurm,
            )
        )
    notes = [f"{q}: {why}" for q, why in sorted((data.get("query_errors") or {}).items())]
    if data.get("sinfo_error"):
        notes.append(str(data["sinfo_error"]))
    return StatusReport(
        prometheus=str(data.get("prometheus") or ""),
        server=str(data.get("server") or ""),
        nodes=rows,
        error=str(data.get("error") or ""),
        notes=notes,
    )


def spec(cluster: Cluster, settings: ClusterSettings) -> dict[str, Any]:
    """What the head program gets on argv."""
    slurm = flag((cluster.head.vars or {}).get("slurm_enabled", False))
    return {"config": settings.monitoring_config, "queries": QUERIES, "slurm": slurm}


def collect(cluster: Cluster, settings: ClusterSettings) -> StatusReport:
    """Log in to the head, read Prometheus there, and build the report."""
    used = {k: v for k, v in (cluster.head.vars or {}).items()
            if k.startswith("monitoring_") or k == "slurm_enabled"}  # fmt: skip
    role_vars.check_cluster({cluster.head.name: used}, paths.roles_dir())  # before any ssh
    if not flag((cluster.head.vars or {}).get("monitoring_enabled", False)):
        raise UsageError(
            f"{cluster.source}: monitoring_enabled is not true for the head "
            f"{cluster.head.name}: set it in the inventory and "
            f"{FIX.format(inv=cluster.source)}"
        )
    head = remote.HeadSSH.for_cluster(cluster)
    head.check_reachable()
    proc = head.run_python(
        programs.source(HEAD_PROGRAM), [json.dumps(spec(cluster, settings))], timeout=120
    )
    line = remote.last_line(proc.stdout)
    try:
        data = json.loads(line) if proc.returncode == 0 and line else None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        why = remote.last_line(proc.stderr) or f"exit {proc.returncode}"
        raise JobError(f"{cluster.head.name}: {HEAD_PROGRAM} failed on the head: {why}")
    report = build(cluster, data)
    if report.error:
        report = StatusReport(
            report.prometheus,
            report.server,
            report.nodes,
            f"{cluster.head.name}: {report.error}; fix: {FIX.format(inv=cluster.source)}",
            report.notes,
        )
    return report


def table_rows(report: StatusReport) -> list[Sequence[str]]:
    """The cells of ``mpictl status``'s table, one row per node."""

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.0f}%"

    def rate(x: float | None) -> str:
        return "-" if x is None else f"{x / 1e6:.1f}"

    rows = []
    for n in report.nodes:
        load = "-" if n.load1 is None else f"{n.load1:.2f}" + (f"/{n.cpus}" if n.cpus else "")
        mem = pct(n.mem_used) + (f" of {n.mem_total / 2**30:.0f} GiB" if n.mem_total else "")
        gpu = "-"
        if n.gpus:
            gpu = f"{n.gpus} × {n.gpu_util:.0f}%" if n.gpu_util is not None else f"{n.gpus}"
            if n.gpu_mem_used is not None and n.gpu_mem_total:
                gpu += f", {n.gpu_mem_used / 1024:.0f}/{n.gpu_mem_total / 1024:.0f} GiB"
        slurm = n.slurm + (f" ({n.reason})" if n.reason else "") if n.slurm else "-"
        rows.append(
            (n.node, n.state, load, mem, pct(n.disk_used), rate(n.rx), rate(n.tx), gpu, slurm)
        )
    return rows
