"""Helpers of the job-side unit tests: clusters built directly from Node objects (no Ansible)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mpictl.inventory import Cluster, Node


def facts(address: str, iface: str = "eth0", netmask: str = "255.255.255.0") -> dict[str, Any]:
    ipv4 = {"address": address, "netmask": netmask}
    return {
        "ansible_interfaces": ["lo", iface],
        "ansible_default_ipv4": {"interface": iface, **ipv4},
        "ansible_lo": {"ipv4": {"address": "127.0.0.1", "netmask": "255.0.0.0"}},
        f"ansible_{iface}": {"ipv4": ipv4},
    }


def node(name: str, slots: int = 2, **kw: Any) -> Node:
    return Node(
        name=name,
        address=kw.pop("address", name),
        slots=slots,
        slots_source="mpi_slots",
        ssh_host="127.0.0.1",
        ssh_port=kw.pop("port", 22),
        **kw,
    )


def cluster(*nodes: Node, head: int = 0) -> Cluster:
    return Cluster(source=Path("/inv/hosts.yml"), nodes=tuple(nodes), head=nodes[head])


def three(slots: int = 2) -> Cluster:
    return cluster(
        node("node1", slots, facts=facts("10.0.0.11")),
        node("node2", slots, facts=facts("10.0.0.12")),
        node("node3", slots, facts=facts("10.0.0.13")),
    )


class Spawned(Exception):
    """A process start that a test forbids (raised by :func:`forbid_processes`' spy)."""


def forbid_processes(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Make every way of starting a process raise :class:`Spawned`; the attempts, recorded."""
    calls: list[object] = []

    def spy(*args: object, **kwargs: object) -> None:
        calls.append(args)
        raise Spawned(repr(args)[:200])

    for module, name in (
        (subprocess, "Popen"),
        (subprocess, "run"),
        (os, "system"),
        (os, "execvp"),
        (os, "posix_spawn"),
    ):
        monkeypatch.setattr(module, name, spy)
    return calls
