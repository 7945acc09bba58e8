"""The job's MPI transport (mpictl.transport) and what the planner makes of it, without HCAs: a
node's ports come from its ``mpi_rdma_ports`` fact, lines in the kernel's sysfs format (``4:
ACTIVE``, ``400 Gb/sec (4X NDR)``), written for these tests, not recorded on a machine with HCAs."""

from __future__ import annotations

from typing import Any

import pytest

from mpictl import mpirun_plan, planner, settings, slurm_plan, transport
from mpictl.errors import InventoryError
from mpictl.network import Network
from mpictl.planner import LaunchOptions
from tests.unit.jobside import cluster, facts, node

ETH = Network({"n1": "eth0", "n2": "eth0", "n3": "eth0"}, "10.0.0.0/24")


def ports(rails: int, down: tuple[int, ...] = ()) -> list[str]:
    return [
        f"port mlx5_{k} 1 {'1: DOWN' if k in down else '4: ACTIVE'}|400 Gb/sec (4X NDR)|InfiniBand"
        for k in range(rails)
    ]


def rdma_node(name: str, lines: list[str], **kw: Any):  # noqa: ANN201 - a jobside Node
    address = f"10.0.0.{name[1:]}"
    return node(name, 8, address=address, facts={**facts(address), "mpi_rdma_ports": lines}, **kw)


def test_auto_is_ucx_over_the_rails_every_node_shares() -> None:
    nodes = [
        rdma_node("n1", ports(8)),
        rdma_node("n2", ports(8, down=(3,))),
        rdma_node("n3", ports(8)),
    ]
    t = transport.choose("auto", nodes, ETH)
    rails = ",".join(f"mlx5_{k}:1" for k in (0, 1, 2, 4, 5, 6, 7))
    assert (t.pml, t.ucx_devices, t.nccl_hcas) == ("ucx", rails, "=" + rails)
    assert t.text == f"ucx (pml ucx over {rails}): auto: every node has an active RDMA port"


def test_auto_is_tcp_and_names_the_nodes_without_a_port() -> None:
    nodes = [rdma_node("n1", ports(2)), rdma_node("n2", []), rdma_node("n3", ports(2, down=(0, 1)))]
    t = transport.choose("auto", nodes, ETH)
    assert t.pml == "ob1" and t.reason == "auto: n2, n3 without an active RDMA port"
    assert t.nccl_hcas == ""  # NCCL chooses where nodes differ
    bare = [rdma_node("n1", []), rdma_node("n2", [])]
    assert transport.choose("auto", bare, ETH).reason == "auto: no node has an active RDMA port"
    off = transport.choose("auto", [rdma_node("n1", ports(1))], ETH, ucx_built=False)
    assert off.pml == "ob1" and "ucx_enabled: false" in off.reason


def test_asked_for_ucx_without_ports_runs_over_the_tcp_interfaces() -> None:
    t = transport.choose("ucx", [rdma_node("n1", []), rdma_node("n2", [])], ETH)
    assert (t.pml, t.ucx_devices) == ("ucx", "eth0")
    assert t.reason == "mpi_transport: ucx, over TCP (n1, n2 without an active RDMA port)"
    tcp = transport.choose("tcp", [rdma_node("n1", ports(1)), rdma_node("n2", ports(1))], ETH)
    assert tcp.pml == "ob1" and tcp.nccl_hcas == "=mlx5_0:1"  # NCCL still gets the HCAs


def plan(c: Any, **kw: Any) -> planner.LaunchPlan:
    return mpirun_plan.plan(c, LaunchOptions(command=["x"], ppn=1, **kw), "J1", ETH)


def test_the_plan_carries_the_transport_and_a_users_own_values_win() -> None:
    c = cluster(rdma_node("n1", ports(2)), rdma_node("n2", ports(2)))
    argv = plan(c).argv
    assert argv[argv.index("pml") + 1] == "ucx"
    assert "UCX_NET_DEVICES=mlx5_0:1,mlx5_1:1" in argv and "NCCL_IB_HCA==mlx5_0:1,mlx5_1:1" in argv
    mine = plan(c, env=["NCCL_IB_HCA=mlx5_1"], mca=["pml=ob1"])
    assert mine.argv[mine.argv.index("pml") + 1] == "ob1" and mine.argv.count("pml") == 1
    assert "NCCL_IB_HCA=mlx5_1" in mine.argv and "NCCL_IB_HCA==mlx5_0:1,mlx5_1:1" not in mine.argv
    assert not any(a.startswith("UCX_NET_DEVICES") for a in mine.argv)
    assert mine.transport is not None and mine.transport.reason == "--mca pml ob1 given"


def test_a_sandbox_without_ports_keeps_ob1_and_a_user_ucx_gets_the_interfaces() -> None:
    c = cluster(rdma_node("n1", []), rdma_node("n2", []))
    argv = plan(c).argv
    assert argv[argv.index("pml") + 1] == "ob1" and not any("UCX_" in a for a in argv)
    ucx = plan(c, mca=["pml=ucx"]).argv
    assert ucx[ucx.index("pml") + 1] == "ucx" and "UCX_NET_DEVICES=eth0" in ucx
    # OpenMPI's ucx pml runs over UCX's TCP only when told any transport and device will do
    for key in ("pml_ucx_tls", "pml_ucx_devices"):
        assert ucx[ucx.index(key) + 1] == "any"
    assert "pml_ucx_tls" not in argv  # ob1: nothing of UCX's
    mine = plan(c, mca=["pml=ucx", "pml_ucx_tls=tcp"]).argv
    assert mine[mine.index("pml_ucx_tls") + 1] == "tcp" and mine.count("pml_ucx_tls") == 1


def test_ports_of_other_names_on_every_node_leave_the_devices_to_ucx() -> None:
    a = rdma_node("n1", ["port mlx5_0 1 4: ACTIVE|200 Gb/sec (4X HDR)|Ethernet"])
    b = rdma_node("n2", ["port mlx5_bond_0 1 4: ACTIVE|200 Gb/sec (4X HDR)|Ethernet"])
    t = transport.choose("auto", [a, b], ETH)
    assert (t.pml, t.ucx_devices, t.nccl_hcas) == ("ucx", "", "")


def test_mpi_transport_from_the_inventory_and_a_bad_value_is_an_inventory_error() -> None:
    c = cluster(rdma_node("n1", ports(1), vars={"mpi_transport": "TCP"}), rdma_node("n2", ports(1)))
    assert settings.for_cluster(c).transport == "tcp"
    assert plan(c).transport.pml == "ob1"  # type: ignore[union-attr]
    bad = cluster(rdma_node("n1", [], vars={"mpi_transport": "verbs"}), rdma_node("n2", []))
    with pytest.raises(
        InventoryError, match="mpi_transport 'verbs': must be one of: auto, ucx, tcp"
    ):
        settings.for_cluster(bad)


def test_ucx_and_ucc_enabled_stay_tri_state_and_a_bad_value_is_one_inventory_error() -> None:
    # (one parse, settings', which the transport decides on: no second reading of the raw vars)
    for value, want in ((False, "false"), ("false", "false"), (True, "true"), ("auto", "auto")):
        c = cluster(
            rdma_node("n1", ports(1), vars={"ucx_enabled": value}), rdma_node("n2", ports(1))
        )
        assert settings.for_cluster(c).ucx_enabled == want, value
        assert plan(c).transport.pml == ("ob1" if want == "false" else "ucx")  # type: ignore[union-attr]
    bad = cluster(
        rdma_node("n1", ports(1), vars={"ucc_enabled": "maybe"}), rdma_node("n2", ports(1))
    )
    with pytest.raises(
        InventoryError, match="ucc_enabled 'maybe': must be one of: auto, true, false"
    ):
        settings.for_cluster(bad)


def test_slurm_exports_the_same_transport() -> None:
    c = cluster(rdma_node("n1", ports(1)), rdma_node("n2", ports(1)))
    p = slurm_plan.plan(c, LaunchOptions(command=["x"], ppn=1), "J2", ETH)
    assert "export OMPI_MCA_pml=ucx" in p.script and "export UCX_NET_DEVICES=mlx5_0:1" in p.script
    assert p.transport is not None and p.transport.name == "ucx"


def gpu_node(  # noqa: ANN201
    name: str, gpus: int, ucc_cuda: bool = True, ucx_cuda: bool = False, **kw: Any
):
    """A node with ``gpus`` GPUs whose UCC has (or lacks) its cuda transport and whose UCX has
    (or lacks) its CUDA transports (the facts the ucc and ucx plays cache)."""
    address = f"10.0.0.{name[1:]}"
    cached = {**facts(address), "mpi_rdma_ports": [], "mpi_ucc_cuda": ucc_cuda,
              "mpi_ucx_cuda": ucx_cuda}  # fmt: skip
    return node(name, 8, address=address, facts=cached, gpus=gpus, **kw)


def test_gpu_jobs_run_on_pml_ucx_where_every_nodes_ucx_has_its_cuda_transports() -> None:
    # (measured on an H200 node, issue 37: 256 MiB MPI_Sendrecv on device buffers 1.95 GB/s
    # through pml ob1, 1907 GB/s through pml ucx's cuda_ipc)
    gpus = plan(cluster(gpu_node("n1", 8, ucx_cuda=True), gpu_node("n2", 8, ucx_cuda=True)))
    argv = gpus.argv
    assert argv[argv.index("pml") + 1] == "ucx"
    assert argv[argv.index("pml_ucx_tls") + 1] == "any"  # no RDMA port: UCX over TCP between nodes
    assert "UCX_NET_DEVICES=eth0" in argv
    assert gpus.transport is not None and gpus.transport.text == (
        "ucx (pml ucx over eth0): auto: every node of the job has GPUs and UCX's CUDA transports: "
        "device buffers move GPU to GPU, not through host memory; collectives: ucc (every node "
        "of the job has GPUs and UCC's cuda transport: device buffers reduced on the GPUs)"
    )
    both = cluster(gpu_node("n1", 8, ucx_cuda=True), gpu_node("n2", 8, ucx_cuda=True))
    script = slurm_plan.plan(both, LaunchOptions(command=["x"], ppn=1), "J2", ETH).script
    assert "export OMPI_MCA_pml=ucx" in script  # the same rule under Slurm
    one = plan(cluster(gpu_node("n1", 1, ucx_cuda=True)))  # one GPU node: the same
    assert one.transport is not None and one.transport.pml == "ucx"
    # a node without GPUs, or whose UCX lacks them (built without nvml.h), or the site's choice
    for c, why in (
        (cluster(gpu_node("n1", 8, ucx_cuda=True), gpu_node("n2", 0, ucx_cuda=True)), "auto:"),
        (cluster(gpu_node("n1", 8, ucx_cuda=True), gpu_node("n2", 8)), "auto:"),
        (cluster(gpu_node("n1", 8, ucx_cuda=True, vars={"mpi_transport": "tcp"}),
                 gpu_node("n2", 8, ucx_cuda=True)), "mpi_transport: tcp"),
        (cluster(gpu_node("n1", 8, ucx_cuda=True, vars={"ucx_enabled": "false"}),
                 gpu_node("n2", 8, ucx_cuda=True)), "auto: UCX is not built"),
    ):  # fmt: skip
        t = plan(c).transport
        assert t is not None and t.pml == "ob1" and t.reason.startswith(why), t
    # a user's own --mca pml ob1 wins
    ob1 = plan(cluster(gpu_node("n1", 8, ucx_cuda=True)), mca=["pml=ob1"])
    assert ob1.transport is not None and ob1.transport.pml == "ob1"
    assert ob1.argv.count("pml") == 1 and "pml_ucx_tls" not in ob1.argv


def test_gpu_jobs_run_their_collectives_through_ucc_and_cpu_jobs_do_not() -> None:
    gpus = cluster(gpu_node("n1", 8), gpu_node("n2", 8))
    p = plan(gpus)
    argv = p.argv
    assert argv[argv.index("coll_ucc_enable") + 1] == "1"
    assert argv[argv.index("coll_ucc_priority") + 1] == "100"
    assert p.transport is not None and p.transport.coll == "ucc"
    assert p.transport.text == (
        "tcp (pml ob1): auto: no node has an active RDMA port; collectives: ucc (every node of "
        "the job has GPUs and UCC's cuda transport: device buffers reduced on the GPUs)"
    )
    # one node of the job without GPUs, UCC or UCX off: OpenMPI's own collectives
    mixed = plan(cluster(gpu_node("n1", 8), gpu_node("n2", 0)))
    assert "coll_ucc_enable" not in mixed.argv and mixed.transport.coll == ""  # type: ignore[union-attr]
    # a node whose UCC lacks its cuda transport (built without nvml.h): UCC would take device
    # buffers for host memory, so OpenMPI's own collectives
    no_cuda = plan(cluster(gpu_node("n1", 8), gpu_node("n2", 8, ucc_cuda=False)))
    assert "coll_ucc_enable" not in no_cuda.argv
    for off in ({"ucc_enabled": False}, {"ucx_enabled": "false"}):
        c = cluster(gpu_node("n1", 8, vars=off), gpu_node("n2", 8))
        assert "coll_ucc_enable" not in plan(c).argv, off
    # --hosts on the GPU node only: its job runs through UCC
    mixed_cluster = cluster(gpu_node("n1", 8), gpu_node("n2", 0))
    one = mpirun_plan.plan(
        mixed_cluster, LaunchOptions(command=["x"], hosts=["n1"], np=2), "J1", ETH
    )
    assert "coll_ucc_enable" in one.argv


def test_a_users_own_coll_ucc_setting_wins() -> None:
    gpus = cluster(gpu_node("n1", 8), gpu_node("n2", 8))
    off = plan(gpus, mca=["coll_ucc_enable=0"])
    assert off.argv.count("coll_ucc_enable") == 1
    assert off.argv[off.argv.index("coll_ucc_enable") + 1] == "0"
    assert off.transport is not None and off.transport.coll == ""
    assert "coll_ucc_priority" not in off.argv
    low = plan(gpus, mca=["coll_ucc_priority=10"])
    assert low.argv.count("coll_ucc_priority") == 1
    assert low.argv[low.argv.index("coll_ucc_priority") + 1] == "10"


def test_slurm_gpu_jobs_export_the_ucc_collectives() -> None:
    c = cluster(gpu_node("n1", 8), gpu_node("n2", 8))
    p = slurm_plan.plan(c, LaunchOptions(command=["x"], ppn=1), "J3", ETH)
    assert "export OMPI_MCA_coll_ucc_enable=1" in p.script


def test_a_users_own_ucx_net_devices_is_the_one_announced() -> None:
    c = cluster(rdma_node("n1", ports(2)), rdma_node("n2", ports(2)))
    p = plan(c, env=["UCX_NET_DEVICES=mlx5_1:1"])
    assert p.transport is not None and p.transport.ucx_devices == "mlx5_1:1"
    assert p.transport.text.startswith("ucx (pml ucx over mlx5_1:1): ")
    assert "UCX_NET_DEVICES=mlx5_1:1" in p.argv
    assert "UCX_NET_DEVICES=mlx5_0:1,mlx5_1:1" not in p.argv
    s = slurm_plan.plan(c, LaunchOptions(command=["x"], ppn=1, env=["UCX_NET_DEVICES=mlx5_1:1"]),
                        "J4", ETH)  # fmt: skip
    assert s.transport is not None and s.transport.ucx_devices == "mlx5_1:1"
    bare = plan(c, env=["UCX_NET_DEVICES"])  # the head's own value: named, not guessed
    assert bare.transport is not None
    assert bare.transport.text.startswith("ucx (pml ucx over $UCX_NET_DEVICES of the head): ")
    assert not any(a.startswith("UCX_NET_DEVICES=") for a in bare.argv)
