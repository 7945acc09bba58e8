"""The TCP network of a job: which interface each node uses, and the one common-subnet rule.

``mpictl run`` (from Ansible's fact cache) and ``mpictl doctor`` (from what its probe reads on
the nodes) both call :func:`resolve`, so doctor approves exactly the network run will use:

- a host's ``mpi_network_interface`` wins for that host (an override without an address known
  for it is trusted and takes no part in the subnet match);
- otherwise the IPv4 subnet every node has an address on; where several qualify, the one holding
  the head's default-route address, else the first in sorted order;
- each node then uses its interface on that subnet.

Loopback and link-local addresses never count.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mpictl.inventory import Cluster, Node

Nets = Mapping[str, ipaddress.IPv4Network]  # interface name -> its IPv4 network


@dataclass(frozen=True)
class Network:
    """The TCP network MPI (and NCCL) traffic uses: per-node interfaces and the shared subnet."""

    interfaces: Mapping[str, str]  # node name -> interface name
    subnet: str | None  # e.g. "10.89.46.0/24" when known

    @property
    def names(self) -> list[str]:
        return sorted(set(self.interfaces.values()))

    @property
    def btl_tcp_if_include(self) -> str:
        """One name when every node uses the same one, else the subnet, else the names."""
        if len(self.names) == 1:
            return self.names[0]
        return self.subnet or ",".join(self.names)

    @property
    def nccl_socket_ifname(self) -> str:
        return ",".join(self.names)


def _usable(iface: ipaddress.IPv4Interface) -> bool:
    return not (iface.ip.is_loopback or iface.ip.is_link_local)


def nets_from_addresses(pairs: Iterable[Sequence[str]]) -> dict[str, ipaddress.IPv4Network]:
    """interface -> network from ``[interface, "address/prefix"]`` pairs (the doctor probe's
    ``ipv4``); an interface's first usable address counts."""
    out: dict[str, ipaddress.IPv4Network] = {}
    for name, cidr in pairs:
        try:
            iface = ipaddress.IPv4Interface(cidr)
        except ValueError:
            continue
        if _usable(iface) and name not in out:
            out[str(name)] = iface.network
    return out


def interface_facts(facts: Mapping[str, Any] | None, name: str) -> Mapping[str, Any]:
    """Ansible's facts of one interface (``ansible_<name>``, with ``-`` and ``.`` as ``_``);
    empty when there are none."""
    data = (facts or {}).get("ansible_" + str(name).replace("-", "_").replace(".", "_"))
    return data if isinstance(data, Mapping) else {}


def nets_from_facts(facts: Mapping[str, Any] | None) -> dict[str, ipaddress.IPv4Network]:
    """interface -> IPv4 network of a node from its cached Ansible facts."""
    out: dict[str, ipaddress.IPv4Network] = {}
    facts = facts or {}
    names = list(facts.get("ansible_interfaces") or [])
    default = facts.get("ansible_default_ipv4") or {}
    if default.get("interface") and default["interface"] not in names:
        names.append(default["interface"])
    for name in names:
        ipv4 = interface_facts(facts, name).get("ipv4")
        if not ipv4 and default.get("interface") == name:
            ipv4 = default
        if not isinstance(ipv4, Mapping) or not ipv4.get("address"):
            continue
        try:
            iface = ipaddress.IPv4Interface(f"{ipv4['address']}/{ipv4.get('netmask', '32')}")
        except ValueError:
            continue
        if _usable(iface):
            out[str(name)] = iface.network
    return out


def resolve(
    per_node: Mapping[str, Nets],
    overrides: Mapping[str, str],
    prefer: ipaddress.IPv4Address | None = None,
) -> Network | None:
    """The rule (see the module docstring). ``per_node`` lists every node of the job in order;
    ``prefer`` is the head's default-route address. None when some node without an override
    has no address on a subnet that all nodes share."""
    common: set[ipaddress.IPv4Network] | None = None
    for name, nets in per_node.items():
        if name in overrides:
            if not nets:
                continue  # override without addresses: trusted, no part in the subnet match
            net = nets.get(overrides[name])
            candidates = {net} if net else set()
        else:
            candidates = set(nets.values())
        common = candidates if common is None else common & candidates
    subnet: ipaddress.IPv4Network | None = None
    if common:
        preferred = [net for net in common if prefer is not None and prefer in net]
        subnet = (preferred or sorted(common, key=str))[0]
    interfaces: dict[str, str] = {}
    for name, nets in per_node.items():
        if name in overrides:
            interfaces[name] = overrides[name]
            continue
        if subnet is None:
            return None
        interfaces[name] = next(i for i, net in nets.items() if net == subnet)
    if not interfaces:
        return None
    return Network(interfaces=interfaces, subnet=str(subnet) if subnet else None)


def overrides_of(nodes: Iterable[Node]) -> dict[str, str]:
    """node name -> its ``mpi_network_interface``, where set."""
    return {n.name: str(n.interface) for n in nodes if n.interface}


def default_address(facts: Mapping[str, Any] | None) -> ipaddress.IPv4Address | None:
    address = ((facts or {}).get("ansible_default_ipv4") or {}).get("address")
    try:
        return ipaddress.IPv4Address(address) if address else None
    except ValueError:
        return None


def derive_network(cluster: Cluster, nodes: Sequence[Node] | None = None) -> Network | None:
    """The network of a job on ``nodes`` (default: all), from the fact cache of the last
    provision. None when facts are missing and no override is set, or when the nodes share no
    subnet (``mpictl doctor`` reports that)."""
    nodes = list(nodes or cluster.nodes)
    per_node = {n.name: nets_from_facts(n.facts) for n in nodes}
    return resolve(per_node, overrides_of(nodes), default_address(cluster.head.facts))
