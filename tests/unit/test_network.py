"""One common-subnet rule: `mpictl doctor` approves the network `mpictl run` uses."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

from mpictl import doctor, network, remote
from tests.unit.jobside import cluster, node

NODES = ("node1", "node2", "node3")


def two_nic_facts(i: int) -> dict[str, Any]:
    """Two subnets on every node; the default route goes through eth1 (the later-sorted one)."""
    mgmt = {"address": f"10.0.0.1{i}", "netmask": "255.255.255.0"}
    fast = {"address": f"192.168.5.1{i}", "netmask": "255.255.255.0"}
    return {
        "ansible_interfaces": ["lo", "eth0", "eth1"],
        "ansible_default_ipv4": {"interface": "eth1", **fast},
        "ansible_eth0": {"ipv4": mgmt},
        "ansible_eth1": {"ipv4": fast},
    }


def probe_of(i: int) -> dict[str, Any]:
    return {
        "hostname": f"node{i}",
        "ipv4": [
            ["lo", "127.0.0.1/8"],
            ["eth0", f"10.0.0.1{i}/24"],
            ["eth1", f"192.168.5.1{i}/24"],
        ],
        "default_interface": "eth1",
        "reach": {},
        "hostfile": None,
    }


def test_run_and_doctor_pick_the_same_subnet_the_heads_default_route() -> None:
    c = cluster(*(node(n, facts=two_nic_facts(i)) for i, n in enumerate(NODES, 1)))
    chosen = network.derive_network(c)
    assert chosen is not None and chosen.subnet == "192.168.5.0/24"
    probes = {
        n: remote.NodeOutput(n, 0, json.dumps(probe_of(i)), "") for i, n in enumerate(NODES, 1)
    }
    report = doctor.evaluate(c, probes)
    check = next(x for x in report.checks if x.check == "common network")
    assert check.ok and check.detail == "192.168.5.0/24 via eth1"


def test_resolve_prefers_the_given_address_else_the_first_sorted() -> None:
    a = {"eth0": ipaddress.IPv4Network("10.0.0.0/24"), "ib0": ipaddress.IPv4Network("10.9.0.0/16")}
    per_node = {"n1": a, "n2": a}
    assert network.resolve(per_node, {}).subnet == "10.0.0.0/24"  # type: ignore[union-attr]
    net = network.resolve(per_node, {}, ipaddress.IPv4Address("10.9.3.4"))
    assert net is not None and net.subnet == "10.9.0.0/16" and net.names == ["ib0"]


def test_an_override_wins_and_a_node_off_the_subnet_means_no_network() -> None:
    a = {"eth0": ipaddress.IPv4Network("10.0.0.0/24")}
    b = {"eth0": ipaddress.IPv4Network("10.1.0.0/24")}
    assert network.resolve({"n1": a, "n2": b}, {}) is None
    net = network.resolve({"n1": a, "n2": {}}, {"n2": "ib0"})
    assert net is not None and net.interfaces == {"n1": "eth0", "n2": "ib0"}
    assert network.nets_from_addresses([["lo", "127.0.0.1/8"], ["eth0", "169.254.1.2/16"]]) == {}
