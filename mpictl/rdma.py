"""A node's RDMA ports, pure: what the kernel says of each HCA port in sysfs
(``/sys/class/infiniband/<dev>/ports/<n>/{state,rate,link_layer}`` and the device's
``hca_type``), as the node probes print it: ``port DEV N STATE|RATE|LINK_LAYER|HCA_TYPE``, e.g.
``port mlx5_0 1 4: ACTIVE|400 Gb/sec (4X NDR)|InfiniBand|MT4129`` (facts cached before the HCA
type was read have three fields; the type is then unknown).

The port's name is NCCL's and UCX's: ``mlx5_0:1``. A port is active when its state is ACTIVE;
its rate is the figure in Gbit/s the kernel reports (``400 Gb/sec (4X NDR)`` -> 400.0).

Not every active port is a rail. Real GPU nodes carry front-end NICs beside their compute rails,
and those are RDMA ports too: an H100 node with 8 ConnectX-7 NDR ports and a BlueField-3 RoCE
bond at 200 Gb/s, a RoCE H100 node with 8 ConnectX-7 at 400 Gb/s and four ConnectX-6 at
100 Gb/s (both recorded in ``tests/data/recordings/rdma/``). :func:`rails` picks the compute
rails: the ports of the HCA model and link layer of the node's fastest port.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_LINE = re.compile(r"^port\s+(\S+)\s+(\d+)\s+(.*)$")
_RATE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/sec")
_DEVICE = re.compile(r"^[A-Za-z0-9_.-]+$")
LINK_LAYERS = ("InfiniBand", "Ethernet")


@dataclass(frozen=True)
class Port:
    device: str
    port: int
    state: str  # ACTIVE, DOWN, INIT, ARMED, ... (the word after "N: ")
    rate_gbit: float | None
    link_layer: str  # InfiniBand or Ethernet (RoCE)
    hca_type: str = ""  # the device's model (MT4129 = ConnectX-7); "" when not read

    @property
    def kind(self) -> tuple[str, str]:
        """What makes ports the same rail family: link layer and HCA model."""
        return (self.link_layer, self.hca_type)

    @property
    def name(self) -> str:
        return f"{self.device}:{self.port}"

    @property
    def active(self) -> bool:
        """Up, and InfiniBand or RoCE (Ethernet): the ports verbs, UCX's ib transports and NCCL's
        IB plugin use (EFA and other link layers are not RDMA ports here)."""
        return self.state == "ACTIVE" and self.link_layer in LINK_LAYERS


def parse_ports(lines: Iterable[str]) -> list[Port]:
    """The ports of the ``port`` lines (other lines ignored), in the kernel's device order made
    stable: by device name with its numbers compared as numbers (mlx5_2 before mlx5_10)."""
    ports = []
    for line in lines:
        m = _LINE.match(line.strip())
        if not m or not _DEVICE.match(m.group(1)):
            continue
        fields = [*m.group(3).split("|"), "", "", ""][:4]
        state = fields[0].split(":", 1)[-1].strip().upper()
        rate = _RATE.match(fields[1])
        ports.append(
            Port(
                device=m.group(1),
                port=int(m.group(2)),
                state=state,
                rate_gbit=float(rate.group(1)) if rate else None,
                link_layer=fields[2].strip(),
                hca_type=fields[3].strip(),
            )
        )
    return sorted(ports, key=order)


def order(port: Port) -> tuple[list[object], int]:
    """The kernel's device order made stable: device names with their numbers compared as
    numbers (mlx5_2 before mlx5_10), then the port number."""
    return ([int(part) if part.isdigit() else part for part in re.split(r"(\d+)", port.device)],
            port.port)  # fmt: skip


def active(ports: Sequence[Port]) -> list[Port]:
    return [p for p in ports if p.active]


def rail_kind(ports: Sequence[Port]) -> tuple[str, str] | None:
    """The (link layer, HCA model) of the node's compute rails: that of its fastest active port,
    ties going to the family with more active ports, then to InfiniBand. None without an active
    port."""
    up = active(ports)
    if not up:
        return None
    count = {kind: sum(1 for p in up if p.kind == kind) for kind in {p.kind for p in up}}
    fastest = max(
        up, key=lambda p: (p.rate_gbit or 0.0, count[p.kind], p.link_layer == "InfiniBand")
    )
    return fastest.kind


def rails(ports: Sequence[Port]) -> list[Port]:
    """The active ports jobs use: those of the node's rail family (:func:`rail_kind`). A port of
    that family trained at a lower rate stays a rail (doctor names it); a front-end NIC of
    another model or link layer does not."""
    kind = rail_kind(ports)
    return [p for p in active(ports) if p.kind == kind]


def front_end(ports: Sequence[Port]) -> list[Port]:
    """Active ports that are not rails (management, storage or a DPU's bond)."""
    kind = rail_kind(ports)
    return [p for p in active(ports) if p.kind != kind]


def rails_down(ports: Sequence[Port]) -> list[Port]:
    """Ports of the rail family that are not active: a rail lost."""
    kind = rail_kind(ports)
    return [p for p in ports if not p.active and p.kind == kind]


def shared_rails(a: Sequence[Port], b: Sequence[Port]) -> list[tuple[Port, Port]]:
    """The rails both nodes have under the same name, in order: a rail-optimized fabric
    connects port ``mlx5_3:1`` of one node to ``mlx5_3:1`` of the others, and NCCL_IB_HCA names
    the port for both ends of a two-rank job."""
    theirs = {p.name: p for p in rails(b)}
    return [(p, theirs[p.name]) for p in rails(a) if p.name in theirs]
