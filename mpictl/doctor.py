"""``mpictl doctor``: preflight checks of a provisioned cluster, each naming the node and the fix.

1. The controller logs in to the head as the MPI user (cluster key, pinned host key).
2. From the head, as the MPI user, it runs a probe on every node over SSH with ``BatchMode=yes``
   and ``StrictHostKeyChecking=yes`` (exactly how mpirun starts remote daemons). The probe reports,
   as one JSON object: PATH and LD_LIBRARY_PATH of that non-interactive session, where mpirun and
   prted are, the versions of OpenMPI, mpi4py, Horovod, NCCL, the build-fingerprint markers under
   /opt and beside the NCCL the linker finds, the IPv4 networks, TCP reachability of every other
   node's SSH port, cores, GPUs, the hostfile and the job side's tools.
3. :func:`evaluate` (pure, unit-tested) turns the probes into checks.
"""

from __future__ import annotations

import ipaddress
import json
import shlex
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from mpictl import network, programs, remote
from mpictl import settings as cluster_settings
from mpictl.errors import JobError
from mpictl.inventory import Cluster
from mpictl.settings import ClusterSettings

PROVISION = "run `mpictl provision -i {inv}`"


@dataclass(frozen=True)
class Check:
    check: str
    node: str  # a node name, or "all"
    ok: bool
    detail: str
    fix: str = ""

    @property
    def result(self) -> str:
        return "ok" if self.ok else "FAIL"


@dataclass
class DoctorReport:
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "checks": [{**asdict(c), "result": c.result} for c in self.checks]}


PROBE = "doctor_probe.py"  # runs on every node (system python3)
VENV_PROGRAM = "venv_versions.py"  # the probe runs it with the cluster venv's python
TOOLS = ("smoke_mpi.py", "smoke_horovod.py", "bench_allreduce.py")
REQUIRED = ("openmpi", "mpi4py", "mpi4py_library")
VERSION_KEYS = ("openmpi", "mpi4py", "mpi4py_library", "horovod", "torch", "nccl")


def probe_spec(cluster: Cluster, settings: ClusterSettings) -> dict[str, Any]:
    """The probe's argument: whom to reach, and where the roles put things on this cluster."""
    return {
        "targets": {n.name: n.address for n in cluster.nodes},
        "hostfile": settings.hostfile,
        "venv_python": settings.venv_python,
        "venv_program": programs.source(VENV_PROGRAM),
        "tools": [settings.torch_env, *(settings.tool(t) for t in TOOLS)],
    }


def collect(
    cluster: Cluster, head: remote.HeadSSH, settings: ClusterSettings
) -> dict[str, remote.NodeOutput]:
    """Run the probe on every node, from the head as the MPI user (node name -> output)."""
    cmd = "python3 - " + shlex.quote(json.dumps(probe_spec(cluster, settings)))
    by_address = remote.run_on_nodes(
        head,
        [n.address for n in cluster.nodes],
        cmd,
        programs.source(PROBE),
        timeout=180,
        connect_timeout=8,
    )
    return {n.name: by_address[n.address] for n in cluster.nodes if n.address in by_address}


def parse_hostfile(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        slots = 1
        for p in parts[1:]:
            if p.startswith("slots="):
                try:
                    slots = int(p.split("=", 1)[1])
                except ValueError:
                    slots = 0
        out[parts[0]] = slots
    return out


def _differs(
    label: str, values: Mapping[str, Any], fix: str, required: bool = False
) -> list[Check]:
    """One check: every node holds the same value (absent everywhere is fine unless required)."""
    present = {n: v for n, v in values.items() if v is not None}
    if not present:
        return [
            Check(label, "all", not required, "not installed on any node", fix if required else "")
        ]
    counts = Counter(str(v) for v in present.values())
    majority, _ = counts.most_common(1)[0]
    odd = [n for n, v in values.items() if v is None or str(v) != majority]
    if not odd:
        return [Check(label, "all", True, majority)]
    out = []
    for n in odd:
        have = "missing" if values[n] is None else str(values[n])
        out.append(Check(label, n, False, f"{have}; other nodes: {majority}", fix))
    return out


def evaluate(
    cluster: Cluster,
    probes: Mapping[str, remote.NodeOutput],
    inventory_slots: Mapping[str, int] | None = None,
    settings: ClusterSettings | None = None,
) -> DoctorReport:
    """Checks from the probe outputs (node name -> output of the PROBE program)."""
    settings = settings or cluster_settings.for_cluster(cluster)
    inv = str(cluster.source)
    provision = PROVISION.format(inv=inv)
    head = cluster.head.name
    report = DoctorReport()
    add = report.checks.append
    data: dict[str, dict[str, Any]] = {}

    # SSH head -> node
    for node in cluster.nodes:
        out = probes.get(node.name)
        if out is None or out.rc == 255:
            why = out.error if out is not None else "no answer"
            add(
                Check(
                    "ssh from head",
                    node.name,
                    False,
                    f"ssh {node.address} from {head} (BatchMode, strict host keys): {why}",
                    f"start the node; {provision} (ssh_mesh: cluster key, pinned host keys)",
                )
            )
            continue
        parsed = None
        for line in reversed(out.stdout.splitlines()):
            try:
                parsed = json.loads(line)
                break
            except ValueError:
                continue
        if not isinstance(parsed, dict):
            add(
                Check(
                    "ssh from head",
                    node.name,
                    False,
                    f"logged in, but the probe failed: {out.error}",
                    "check that python3 is installed on the node",
                )
            )
            continue
        add(Check("ssh from head", node.name, True, f"{head} -> {node.address} as MPI user"))
        data[node.name] = parsed

    # PATH / LD_LIBRARY_PATH of a non-interactive session
    env_fix = f"{provision} (mpi_environment writes PATH/LD_LIBRARY_PATH to /etc/environment)"
    for name, d in data.items():
        problems = []
        if not d.get("mpirun"):
            problems.append("mpirun not in PATH")
        if not d.get("prted"):
            problems.append("prted not in PATH")
        prefix = d.get("openmpi_prefix")
        if prefix:
            if f"{prefix}/bin" not in d.get("path", "").split(":"):
                problems.append(f"PATH lacks {prefix}/bin")
            if f"{prefix}/lib" not in d.get("ld_library_path", "").split(":"):
                problems.append(f"LD_LIBRARY_PATH lacks {prefix}/lib")
        detail = "; ".join(problems) or f"PATH={d.get('path')} LD_LIBRARY_PATH=" + str(
            d.get("ld_library_path") or ""
        )
        add(Check("non-interactive env", name, not problems, detail, env_fix if problems else ""))

    # the cluster venv (mpi4py, Horovod, the smoke/bench programs run with it)
    for name, d in data.items():
        if not d.get("venv"):
            add(
                Check(
                    "cluster venv",
                    name,
                    False,
                    f"{settings.venv_python} is missing or broken",
                    f"{provision} (mpi4py role: cluster venv)",
                )
            )

    # identical versions and build fingerprints
    if data:
        vfix = f"{provision} (build-once reinstalls the cached build where the marker differs)"
        for key in VERSION_KEYS:
            values = {n: d.get("versions", {}).get(key) for n, d in data.items()}
            report.checks += _differs(f"{key} version", values, vfix, key in REQUIRED)
        marker_paths = sorted({p for d in data.values() for p in d.get("markers", {})})
        for path in marker_paths:
            values = {n: d.get("markers", {}).get(path) for n, d in data.items()}
            report.checks += _differs(f"fingerprint {path}", values, vfix)
        if not marker_paths:
            add(Check("fingerprints", "all", False, "no build markers under /opt", vfix))
        tools = sorted({p for d in data.values() for p in d.get("tools", {})})
        missing = {n: [p for p in tools if not d.get("tools", {}).get(p)] for n, d in data.items()}
        for n, paths_missing in missing.items():
            if paths_missing:
                add(
                    Check(
                        "job tools",
                        n,
                        False,
                        "missing: " + ", ".join(paths_missing),
                        f"{provision} (mpi_jobs role)",
                    )
                )
        if not any(missing.values()):
            add(Check("job tools", "all", True, "torch wrapper, smoke and bench programs"))

    report.checks += _network_checks(cluster, data, provision)
    report.checks += _slot_checks(cluster, data, provision, inventory_slots, settings.hostfile)
    return report


def _probe_network(
    cluster: Cluster, data: Mapping[str, Mapping[str, Any]]
) -> tuple[dict[str, network.Nets], network.Network | None]:
    """Each probed node's networks, and the network `mpictl run` would choose from them (the
    same rule, :func:`mpictl.network.resolve`; the head's default route breaks ties)."""
    per_node = {
        n.name: network.nets_from_addresses(data[n.name].get("ipv4", []))
        for n in cluster.nodes
        if n.name in data
    }
    head = data.get(cluster.head.name, {})
    prefer = None
    head_nets = per_node.get(cluster.head.name, {})
    default_iface = head.get("default_interface")
    for iface, cidr in head.get("ipv4", []):
        if iface == default_iface and iface in head_nets:
            prefer = ipaddress.IPv4Interface(cidr).ip
            break
    overrides = network.overrides_of(n for n in cluster.nodes if n.name in per_node)
    return per_node, network.resolve(per_node, overrides, prefer)


def _network_checks(
    cluster: Cluster, data: Mapping[str, Mapping[str, Any]], provision: str
) -> list[Check]:
    out: list[Check] = []
    if not data:
        return out
    nets, chosen = _probe_network(cluster, data)
    fix = "put every node on one subnet, or set mpi_network_interface per host"
    if chosen is not None:
        where = chosen.subnet or "mpi_network_interface"
        out.append(Check("common network", "all", True, f"{where} via {', '.join(chosen.names)}"))
    else:
        head_nets = set((nets.get(cluster.head.name) or next(iter(nets.values()), {})).values())
        for name, mine in nets.items():
            if not set(mine.values()) & head_nets:
                shown = ", ".join(map(str, mine.values())) or "-"
                out.append(
                    Check(
                        "common network",
                        name,
                        False,
                        f"no IPv4 subnet shared with the head ({shown})",
                        fix,
                    )
                )
        if not out:
            out.append(
                Check("common network", "all", False, "no IPv4 subnet shared by all nodes", fix)
            )
    # mpi_network_interface overrides: the interface must exist and carry an IPv4 address there.
    for node in cluster.nodes:
        if not node.interface or node.name not in data:
            continue
        have = sorted({iface for iface, _ in data[node.name].get("ipv4", [])})
        if str(node.interface) in have:
            out.append(Check("network interface", node.name, True, f"{node.interface}"))
        else:
            out.append(
                Check(
                    "network interface",
                    node.name,
                    False,
                    f"mpi_network_interface {node.interface} has no IPv4 address on this node "
                    f"(it has: {', '.join(have) or '-'})",
                    "set mpi_network_interface of this host to one of those, or remove it",
                )
            )
    # TCP reachability: every node reaches every other node's SSH port by its mpi_address. A
    # failure is reported on the node that could not be reached, with who tried.
    unreachable: dict[str, list[str]] = {}
    for name, d in data.items():
        for target, r in (d.get("reach") or {}).items():
            if target != name and not r.get("tcp"):
                unreachable.setdefault(target, []).append(f"{name}: {r.get('error')}")
    for target, sources in sorted(unreachable.items()):
        out.append(
            Check(
                "tcp reachability",
                target,
                False,
                "not reachable from " + "; ".join(sources),
                f"check that {target} is up, its mpi_address resolves on every node, and no "
                "firewall blocks it",
            )
        )
    if not unreachable:
        out.append(
            Check("tcp reachability", "all", True, "every node reaches every other (22/tcp)")
        )
    return out


def _slot_checks(
    cluster: Cluster,
    data: Mapping[str, Mapping[str, Any]],
    provision: str,
    inventory_slots: Mapping[str, int] | None,
    hostfile_path: str,
) -> list[Check]:
    out: list[Check] = []
    head = data.get(cluster.head.name)
    if head is None:
        return out
    if head.get("hostfile") is None:
        return [
            Check(
                "hostfile",
                cluster.head.name,
                False,
                f"{hostfile_path} missing",
                f"{provision} (hostfile role)",
            )
        ]
    hostfile = parse_hostfile(head["hostfile"])
    want = inventory_slots
    if want is None:
        try:
            want = {n.name: s for n, s in cluster.require_slots()}
        except Exception:  # noqa: BLE001 - slots unknown: compare with the hostfile only
            want = {}
    for node in cluster.nodes:
        slots = hostfile.get(node.address)
        if slots is None:
            out.append(
                Check(
                    "hostfile",
                    node.name,
                    False,
                    f"{node.address} not in {hostfile_path}",
                    f"{provision} (hostfile role)",
                )
            )
            continue
        problems = []
        if node.name in want and want[node.name] != slots:
            problems.append(f"hostfile slots={slots}, inventory says {want[node.name]}")
        d = data.get(node.name)
        if d is not None:
            gpus, cores = int(d.get("gpus") or 0), int(d.get("cores") or 0)
            if gpus and slots > gpus:
                problems.append(f"slots={slots} > {gpus} GPUs (ranks would share GPUs)")
            if cores and slots > cores:
                problems.append(f"slots={slots} > {cores} cores (oversubscribed)")
            res = f"slots={slots}, {gpus} GPUs, {cores} cores"
        else:
            res = f"slots={slots}"
        out.append(
            Check(
                "slots",
                node.name,
                not problems,
                "; ".join(problems) or res,
                "set mpi_slots in the inventory, then " + provision if problems else "",
            )
        )
    for name, d in data.items():
        if name != cluster.head.name and d.get("hostfile") != head.get("hostfile"):
            out.append(
                Check(
                    "hostfile",
                    name,
                    False,
                    f"differs from the head's {hostfile_path}",
                    f"{provision} (hostfile role)",
                )
            )
    return out


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
    return evaluate(cluster, collect(cluster, head, settings), settings=settings)
