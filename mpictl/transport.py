"""Which transport a job's MPI uses between nodes, pure: UCX (``pml ucx``) or OpenMPI's own TCP
(``pml ob1`` with the tcp btl), and why.

- ``mpi_transport`` (inventory, the head's value; default ``auto``): ``tcp``, ``ucx`` or
  ``auto``. ``auto`` is ``ucx`` where every node of the job has an active rail (the
  ``mpi_rdma_ports`` fact, read from sysfs by every provision), or where every node of the job
  has GPUs and a UCX with its CUDA transports (the ``mpi_ucx_cuda`` fact): OpenMPI's own pml
  moves device buffers through host memory; else ``tcp``.
- UCX's devices (``UCX_NET_DEVICES``) follow the same rule as NCCL's HCAs (``NCCL_IB_HCA``): the
  rails every node of the job has under the same name, in the kernel's order (all of them);
  with no RDMA port, ``ucx`` runs over the interfaces of ``btl_tcp_if_include`` (the planner
  then also passes ``pml_ucx_tls any``/``pml_ucx_devices any``: OpenMPI's ucx pml otherwise
  declines to run without a verbs or mlx5 transport).
- A rail is an ACTIVE InfiniBand or Ethernet (RoCE) port of the node's rail family, its fastest
  port's HCA model and link layer (``rdma.rails``): a front-end NIC beside the rails (a
  BlueField bond, a 100G ConnectX-6 for storage) carries no job traffic.
- A user's own ``--mca pml``, ``-x UCX_NET_DEVICES`` or ``-x NCCL_IB_HCA`` wins (the planner
  adds a default only where the user gave none).

``for_job`` is the one home of that decision: ``run``, Slurm jobs, bench, fabric and doctor all
ask it, with the head's values as :mod:`mpictl.settings` parsed and checked them
(``mpi_transport``, and ``ucx_enabled``/``ucc_enabled`` kept tri-state: auto, true, false).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mpictl import rdma
from mpictl.inventory import Node
from mpictl.network import Network

if TYPE_CHECKING:
    from mpictl.settings import ClusterSettings

VAR = "mpi_transport"
PORTS_FACT = "mpi_rdma_ports"


@dataclass(frozen=True)
class Transport:
    pml: str  # "ucx" or "ob1"
    reason: str
    ucx_devices: str = ""  # UCX_NET_DEVICES for pml ucx ("" lets UCX choose)
    nccl_hcas: str = ""  # NCCL_IB_HCA: "=mlx5_0:1,mlx5_1:1" (exact names), "" when none
    coll: str = ""  # "ucc": MPI collectives through UCC (OpenMPI's coll/ucc), "" OpenMPI's own

    @property
    def name(self) -> str:
        return "ucx" if self.pml == "ucx" else "tcp"

    @property
    def text(self) -> str:
        """One line for run's announcement, doctor and the job record."""
        over = f" over {self.ucx_devices}" if self.ucx_devices and self.pml == "ucx" else ""
        coll = f"; collectives: ucc ({COLL_UCC_WHY})" if self.coll == "ucc" else ""
        return f"{self.name} (pml {self.pml}{over}): {self.reason}{coll}"


#: Why GPU jobs run their MPI collectives through UCC (issue 24): OpenMPI's own collectives reduce
#: device buffers through host memory (337 us for 8 bytes, 0.4 GB/s at 256 MiB on an H100 node);
#: UCC's cuda transport reduces them on the GPUs, over NVLink/CUDA IPC inside a node.
COLL_UCC_WHY = (
    "every node of the job has GPUs and UCC's cuda transport: device buffers reduced on the GPUs"
)
#: The fact the ucc play caches per node: its UCC has the cuda transport.
UCC_CUDA_FACT = "mpi_ucc_cuda"
#: Why GPU jobs run on pml ucx without RDMA ports too (issue 37, on an H200 node: 256 MiB
#: MPI_Sendrecv between two ranks on one GPU 1.95 GB/s with pml ob1, which stages device buffers
#: through host memory; 1907 GB/s with pml ucx, whose cuda_ipc copies GPU to GPU).
GPU_UCX_WHY = (
    "every node of the job has GPUs and UCX's CUDA transports: device buffers move GPU to GPU, "
    "not through host memory"
)
#: The fact the ucx play caches per node: its UCX has the CUDA transports (cuda_copy, cuda_ipc).
UCX_CUDA_FACT = "mpi_ucx_cuda"


def gpu_ucx(nodes: Sequence[Node]) -> bool:
    """Every node of the job has GPUs and a UCX with its CUDA transports."""
    return bool(nodes) and all(
        (n.gpus or 0) > 0 and _true((n.facts or {}).get(UCX_CUDA_FACT)) for n in nodes
    )


def _true(value: object) -> bool:
    """A cached boolean fact (JSON true, or the string an older cache may hold)."""
    return value is True or str(value).lower() == "true"


def collectives(nodes: Sequence[Node], *, ucx_built: bool, ucc_built: bool) -> str:
    """``ucc`` where every node of the job has GPUs and a UCC with its cuda transport (the
    ``mpi_ucc_cuda`` fact; ``ucx_enabled`` and ``ucc_enabled`` not false), else ``""``
    (OpenMPI's own collectives): a UCC without it would take device buffers for host memory. A
    user's own ``--mca coll_ucc_enable`` wins (the planner adds nothing then)."""
    if not (ucx_built and ucc_built and nodes):
        return ""
    if all((n.gpus or 0) > 0 and _true((n.facts or {}).get(UCC_CUDA_FACT)) for n in nodes):
        return "ucc"
    return ""


def node_ports(node: Node) -> list[rdma.Port]:
    """A node's RDMA ports from its cached facts (the probe's ``port ...`` lines)."""
    lines = (node.facts or {}).get(PORTS_FACT) or []
    if not isinstance(lines, list):
        return []
    return rdma.parse_ports(str(line) for line in lines)


def shared_ports(nodes: Sequence[Node]) -> list[str]:
    """The active ports every node has under the same name, in the first node's order."""
    if not nodes:
        return []
    names = [p.name for p in rdma.rails(node_ports(nodes[0]))]
    for node in nodes[1:]:
        theirs = {p.name for p in rdma.rails(node_ports(node))}
        names = [n for n in names if n in theirs]
    return names


def choose(
    mode: str, nodes: Sequence[Node], network: Network | None, *, ucx_built: bool = True
) -> Transport:
    """The transport of a job on ``nodes`` for ``mpi_transport: mode`` (checked by the caller);
    ``ucx_built`` false (``ucx_enabled: false``) makes ``auto`` TCP."""
    without = [n.name for n in nodes if not rdma.rails(node_ports(n))]
    shared = shared_ports(nodes)
    hcas = "=" + ",".join(shared) if shared and not without else ""
    # UCX's devices whichever pml is asked for (a user's own --mca pml ucx too): every node's
    # shared ports, else the TCP interfaces MPI uses.
    tcp_devices = network.nccl_socket_ifname if network is not None else ""
    # (every node with ports but none shared by name: "" lets UCX choose among them)
    devices = ",".join(shared) if not without else tcp_devices
    if mode == "tcp":
        return Transport("ob1", f"{VAR}: tcp", devices, hcas)
    if mode == "ucx":
        if not without:
            return Transport("ucx", f"{VAR}: ucx", devices, hcas)
        return Transport(
            "ucx",
            f"{VAR}: ucx, over TCP ({_listed(without)} without an active RDMA port)",
            devices,
            hcas,
        )
    if not ucx_built:
        return Transport("ob1", "auto: UCX is not built (ucx_enabled: false)", devices, hcas)
    if not without:
        return Transport("ucx", "auto: every node has an active RDMA port", devices, hcas)
    if gpu_ucx(nodes):
        return Transport("ucx", f"auto: {GPU_UCX_WHY}", devices, hcas)
    if len(without) == len(nodes):
        return Transport("ob1", "auto: no node has an active RDMA port", devices)
    return Transport("ob1", f"auto: {_listed(without)} without an active RDMA port", devices)


def for_job(
    nodes: Sequence[Node],
    network: Network | None,
    settings: ClusterSettings,
    mca: Sequence[tuple[str, str]] = (),
    env: Sequence[str] = (),
) -> Transport:
    """The transport of a job on ``nodes``: ``mpi_transport`` (the head's) applied to them, or
    the user's own ``--mca pml``; a user's own ``-x UCX_NET_DEVICES=...`` is what it runs over.
    ``ucx_enabled``/``ucc_enabled`` false: nothing was built, so neither is chosen."""
    ucx_built = settings.ucx_enabled != "false"
    chosen = choose(settings.transport, nodes, network, ucx_built=ucx_built)
    coll = collectives(nodes, ucx_built=ucx_built, ucc_built=settings.ucc_enabled != "false")
    if coll and "coll_ucc_enable" not in {k for k, _ in mca}:
        chosen = dataclasses.replace(chosen, coll=coll)
    # (a bare -x UCX_NET_DEVICES passes the head's own value, which only the head knows)
    devices = [item.split("=", 1)[1] if "=" in item else "$UCX_NET_DEVICES of the head"
               for item in env if item.split("=", 1)[0] == "UCX_NET_DEVICES"]  # fmt: skip
    if devices:
        chosen = dataclasses.replace(chosen, ucx_devices=devices[-1])
    pml = user_pml(mca)
    if pml and pml != chosen.pml:
        return dataclasses.replace(chosen, pml=pml, reason=f"--mca pml {pml} given")
    return chosen


def user_pml(mca: Sequence[tuple[str, str]]) -> str:
    return next((value for key, value in mca if key == "pml"), "")


def _listed(names: Sequence[str]) -> str:
    if len(names) <= 4:
        return ", ".join(names)
    return f"{', '.join(names[:3])} and {len(names) - 3} more"
