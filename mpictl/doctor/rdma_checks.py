"""Checks of the RDMA layer, per node and per port, from the probe's ``rdma`` part: the transport
the jobs will use and why, each node's HCA ports (state, link layer, model, rate), the same
rails at the same rate on every node (front-end NICs named, not compared), rdma-core's verbs
library, GPUDirect RDMA on GPU nodes, and that UCX and OpenMPI see what the transport needs.
Nothing is said of a node without ports beyond the transport line (TCP is then the fabric)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from mpictl import rdma, transport
from mpictl.doctor.report import Check
from mpictl.inventory import Cluster

RDMA_CORE = (
    "install rdma-core and the verbs providers (apt install rdma-core ibverbs-providers), or "
    "the site's MOFED/DOCA-OFED"
)
PEERMEM = (
    "load nvidia_peermem (modprobe nvidia_peermem; /etc/modules-load.d/nvidia-peermem.conf), or "
    "use NVIDIA's open kernel module on a kernel with dma-buf (5.12+)"
)


def _ports(data: Mapping[str, Any]) -> list[rdma.Port]:
    lines = (data.get("rdma") or {}).get("ports") or []
    return rdma.parse_ports(str(line) for line in lines)


def _describe(port: rdma.Port) -> str:
    rate = f"{port.rate_gbit:g} Gb/s" if port.rate_gbit else "rate unknown"
    model = f" {port.hca_type}" if port.hca_type else ""
    return f"{port.name} {port.state} ({port.link_layer or 'link layer unknown'}{model}, {rate})"


def _family(rails: Sequence[rdma.Port]) -> str:
    first = rails[0]
    model = f" {first.hca_type}" if first.hca_type else ""
    return f"the {len(rails)} {first.link_layer}{model} ports"


def _kernel_has_dmabuf(release: str) -> bool:
    try:
        major, minor = (int(x) for x in release.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (5, 12)


def checks(
    cluster: Cluster,
    data: Mapping[str, Mapping[str, Any]],
    chosen: transport.Transport,
    provision: str,
) -> list[Check]:
    out = [Check("transport", "all", True, chosen.text)]
    ports = {name: _ports(d) for name, d in data.items()}
    with_ports = [n for n in data if ports[n]]
    if not with_ports:
        return out
    for name in with_ports:
        active = rdma.rails(ports[name])
        down = rdma.rails_down(ports[name])
        front = rdma.front_end(ports[name])
        detail = "; ".join(_describe(p) for p in ports[name])
        out.append(
            Check(
                "rdma ports",
                name,
                bool(active),
                detail,
                ""
                if active
                else "no active port: check cables, the switch and the subnet "
                "manager (ibstat; for RoCE, the Ethernet link)",
            )
        )
        if active and down:  # a rail's sibling down: named, not failed (uncabled second ports)
            out.append(
                Check(
                    "rdma ports down",
                    name,
                    True,
                    ", ".join(p.name for p in down) + " down (not used by jobs)",
                )
            )
        if front:
            out.append(
                Check(
                    "rdma front end",
                    name,
                    True,
                    ", ".join(_describe(p) for p in front)
                    + f": not a rail (the rails are {_family(active)}); jobs leave it out",
                )
            )
        info = data[name].get("rdma") or {}
        if not info.get("verbs"):
            out.append(
                Check("rdma-core", name, False, "the linker finds no libibverbs.so.1", RDMA_CORE)
            )
        if (data[name].get("gpus") or 0) > 0 and active:
            dmabuf = bool(info.get("open_kernel_module")) and _kernel_has_dmabuf(
                str(info.get("kernel", ""))
            )
            gdr = bool(info.get("peermem")) or dmabuf
            how = (
                "nvidia_peermem loaded" if info.get("peermem")
                else "dma-buf (open kernel module)" if gdr
                else "neither nvidia_peermem nor dma-buf: NCCL copies through host memory"
            )  # fmt: skip
            out.append(Check("GPUDirect RDMA", name, gdr, how, "" if gdr else PEERMEM))
    out += _same_shape(ports, with_ports)
    if chosen.pml == "ucx":
        out += _ucx_checks(data, chosen, provision)
    return out


def _shape(ports: Sequence[rdma.Port]) -> str:
    active = rdma.rails(ports)
    rates = sorted({p.rate_gbit or 0 for p in active})
    return f"{len(active)} active at {'/'.join(f'{r:g}' for r in rates)} Gb/s"


def _same_shape(ports: Mapping[str, list[rdma.Port]], nodes: Sequence[str]) -> list[Check]:
    """Every node with ports the same number of active ports at the same rate (a node with fewer
    rails or a port trained at a lower rate drags every collective down to its speed); nodes
    without any port (CPU nodes of a mixed cluster) are not compared."""
    shapes = {n: _shape(ports[n]) for n in nodes}
    common, _ = Counter(shapes.values()).most_common(1)[0]
    odd = [n for n in nodes if shapes[n] != common]
    if not odd:
        return [Check("rdma ports alike", "all", True, common)]
    fix = "bring the node's ports to the others' (a down rail, a port trained at a lower rate)"
    return [
        Check("rdma ports alike", n, False, f"{shapes[n]}; other nodes: {common}", fix) for n in odd
    ]


def _ucx_checks(
    data: Mapping[str, Mapping[str, Any]], chosen: transport.Transport, provision: str
) -> list[Check]:
    wanted = [d for d in chosen.ucx_devices.split(",") if d]
    out = []
    for name, d in data.items():
        info = d.get("rdma") or {}
        seen = info.get("ucx_devices")
        if seen is None:
            out.append(
                Check("ucx", name, False, "ucx_info is not on PATH", f"{provision} (ucx role)")
            )
            continue
        missing = [w for w in wanted if w not in seen]
        out.append(
            Check(
                "ucx devices",
                name,
                not missing,
                f"ucx_info -d lacks {', '.join(missing)}" if missing else ", ".join(wanted),
                ""
                if not missing
                else f"check rdma-core and UCX's verbs support (ucx_info -d); {provision}",
            )
        )
        if info.get("pml_ucx") is False:
            out.append(
                Check(
                    "openmpi ucx pml",
                    name,
                    False,
                    "ompi_info lists no ucx pml: OpenMPI was built without UCX",
                    f"{provision} (openmpi builds with the ucx role's UCX)",
                )
            )
    return out


UCC_FIX = (
    "rebuild with CUDA: UCX and UCC take CUDA where the node has the toolkit, nvml.h and the "
    "driver libraries (roles/ucx/README.md, CUDA), then {provision}"
)


def device_checks(
    data: Mapping[str, Mapping[str, Any]], chosen: transport.Transport, provision: str
) -> list[Check]:
    """On every GPU node, which path MPI's device (GPU) buffers take: collectives through UCC's
    cuda transport (OpenMPI's coll/ucc, which GPU jobs turn on) or staged through host memory
    and why; point-to-point over UCX's CUDA transports (pml ucx) or OpenMPI's ob1. Said, not
    failed: a job still runs either way, only slower."""
    out = []
    for name, d in data.items():
        path = d.get("device_path")
        if not (d.get("gpus") or 0) or not isinstance(path, Mapping):
            continue
        if chosen.coll == "ucc" and path.get("coll_ucc") and path.get("ucc_cuda"):
            coll = "collectives: UCC's cuda transport (coll/ucc)"
        elif not path.get("coll_ucc"):
            coll = (
                "collectives: staged through host memory: OpenMPI has no coll/ucc "
                f"(ucc_enabled false, or no UCC when OpenMPI was built; {provision})"
            )
        elif not path.get("ucc_cuda"):
            coll = "collectives: staged through host memory: UCC has no cuda transport; " + (
                UCC_FIX.format(provision=provision)
            )
        else:
            coll = (
                "collectives: OpenMPI's own, staged through host memory (jobs do not turn "
                "coll/ucc on: ucc_enabled false, or a node's mpi_ucc_cuda fact not cached; "
                f"{provision})"
            )
        p2p = (
            "point-to-point: UCX's cuda_ipc/cuda_copy (pml ucx)"
            if chosen.pml == "ucx" and path.get("ucx_cuda")
            else f"point-to-point: OpenMPI's CUDA-aware pml {chosen.pml}"
        )
        out.append(Check("device buffers", name, True, f"{coll}; {p2p}"))
    return out
