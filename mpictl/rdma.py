"""A node's RDMA ports, pure: what the kernel says of each HCA port in sysfs
(``/sys/class/infiniband/<dev>/ports/<n>/{state,rate,link_layer}``), as the node probes print
it: ``port DEV N STATE|RATE|LINK_LAYER``, e.g.
``port mlx5_0 1 4: ACTIVE|400 Gb/sec (4X NDR)|InfiniBand``.

The port's name is NCCL's and UCX's: ``mlx5_0:1``. A port counts when its state is ACTIVE; its
rate is the figure in Gbit/s the kernel reports (``400 Gb/sec (4X NDR)`` -> 400.0).
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
        fields = [*m.group(3).split("|"), "", ""][:3]
        state = fields[0].split(":", 1)[-1].strip().upper()
        rate = _RATE.match(fields[1])
        ports.append(
            Port(
                device=m.group(1),
                port=int(m.group(2)),
                state=state,
                rate_gbit=float(rate.group(1)) if rate else None,
                link_layer=fields[2].strip(),
            )
        )
    return sorted(ports, key=lambda p: (_natural(p.device), p.port))


def _natural(name: str) -> list[object]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def active(ports: Sequence[Port]) -> list[Port]:
    return [p for p in ports if p.active]


def shared_rails(a: Sequence[Port], b: Sequence[Port]) -> list[tuple[Port, Port]]:
    """The active ports both nodes have under the same name, in order: a rail-optimized fabric
    connects port ``mlx5_3:1`` of one node to ``mlx5_3:1`` of the others, and NCCL_IB_HCA names
    the port for both ends of a two-rank job."""
    theirs = {p.name: p for p in active(b)}
    return [(p, theirs[p.name]) for p in active(a) if p.name in theirs]
