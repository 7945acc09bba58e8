"""Checks of the cluster's shape from the probes: the network `mpictl run` would use (the same
rule, :func:`mpictl.network.resolve`), each ``mpi_network_interface``, TCP reachability between
nodes, slots against GPUs and cores, and one hostfile on every node."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from mpictl import network
from mpictl.doctor.report import Check
from mpictl.hostfile import parse_hostfile
from mpictl.inventory import Cluster


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


def network_checks(
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


def slot_checks(
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
