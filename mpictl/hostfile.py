"""Hostfiles for MPI launchers, rendered from the inventory.

One code path: ``mpictl hostfile`` and the ``hostfile`` role (through the ``mpictl_hostfile``
filter plugin) both call :func:`render`.

Formats:
- ``openmpi``: ``host slots=N`` per line (``mpirun --hostfile``)
- ``mpich``: ``host:N`` per line (MPICH / Intel MPI ``-f``)
- ``horovod``: ``-H host:N,host:N`` (``horovodrun``)

An IPv6 address cannot stand in the ``host:N`` formats, bracketed or not: MPICH's hydra reads
the host and the count with ``strtok(token, ":")`` and Horovod's ``HostInfo.from_string`` with
``split(':')`` into exactly two parts, so ``[::1]:4`` is as unparseable to them as ``::1:4``.
:func:`render` refuses such a node in those formats, naming it; give it a DNS name as
``mpi_address`` or use the openmpi format.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mpictl.errors import InventoryError, UsageError
from mpictl.inputs import quoted
from mpictl.inventory import Cluster, resolve_slots

FORMATS = ("openmpi", "mpich", "horovod")


@dataclass(frozen=True)
class HostEntry:
    host: str
    slots: int
    node: str = field(default="", compare=False)  # the inventory name, for messages


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise UsageError(
            f"unknown hostfile format {quoted(fmt)} (choose from {', '.join(FORMATS)})"
        )
    return fmt


def render(entries: Iterable[HostEntry], fmt: str = "openmpi", header: str = "") -> str:
    """The hostfile text for ``entries`` in ``fmt``; ``header`` (comment lines) goes first."""
    check_format(fmt)
    entries = list(entries)
    if fmt != "openmpi":
        for entry in entries:
            if ":" in entry.host:
                raise InventoryError(
                    f"{quoted(entry.node or entry.host)}: its address (mpi_address) "
                    f"{quoted(entry.host)} is an IPv6 address, which the {fmt} hostfile format "
                    "(host:N) cannot carry "
                    "(MPICH and Horovod split it at every ':'): give the node a DNS name as "
                    "mpi_address, or use the openmpi format"
                )
    if fmt == "horovod":
        return "-H " + ",".join(f"{e.host}:{e.slots}" for e in entries) + "\n"
    line = "{host} slots={slots}" if fmt == "openmpi" else "{host}:{slots}"
    body = "".join(line.format(host=e.host, slots=e.slots) + "\n" for e in entries)
    if header and not header.endswith("\n"):
        header += "\n"
    return header + body


def entries_for_cluster(cluster: Cluster) -> list[HostEntry]:
    return [HostEntry(node.address, slots, node.name) for node, slots in cluster.require_slots()]


def entries_from_hostvars(hosts: Iterable[str], hostvars: Mapping[str, Any]) -> list[HostEntry]:
    """Entries from Ansible's ``hostvars`` (used by the role's filter plugin)."""
    entries = []
    for host in hosts:
        hv = hostvars[host]
        slots, _ = resolve_slots(host, hv)
        if slots is None:
            raise InventoryError(f"{host}: mpi_slots is not set and no facts were gathered")
        entries.append(HostEntry(str(hv.get("mpi_address") or host), slots, host))
    return entries


def parse_hostfile(text: str) -> dict[str, int]:
    """host -> slots of an OpenMPI hostfile (``host slots=N``; comments and blank lines
    skipped; no ``slots=`` means 1)."""
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
