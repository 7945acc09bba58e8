"""Doctor's RDMA checks, per node and per port, from probe data. The ports are lines in the
kernel's sysfs format for mlx5 HCAs (``4: ACTIVE``, ``400 Gb/sec (4X NDR)``, ``InfiniBand`` or
``Ethernet`` for RoCE): written for these tests, not recorded on a machine with HCAs."""

from __future__ import annotations

from typing import Any

from mpictl import transport
from mpictl.doctor import rdma_checks
from tests.unit.jobside import cluster, node

TCP = transport.Transport("ob1", "auto: no node has an active RDMA port")


def ports(
    rails: int, down: tuple[int, ...] = (), rate: int = 400, layer: str = "InfiniBand"
) -> list[str]:
    names = {400: "4X NDR", 200: "4X HDR", 100: "4X EDR"}
    state = {True: "1: DOWN", False: "4: ACTIVE"}
    return [
        f"port mlx5_{k} 1 {state[k in down]}|{rate} Gb/sec ({names[rate]})|{layer}"
        for k in range(rails)
    ]


def probe(lines: list[str], gpus: int = 8, **rdma: Any) -> dict[str, Any]:
    info = {"ports": lines, "verbs": True, "peermem": True, "open_kernel_module": False,
            "kernel": "6.8.0-45-generic", **rdma}  # fmt: skip
    return {"gpus": gpus, "rdma": info}


def run(data: dict[str, dict[str, Any]], chosen: transport.Transport = TCP) -> list[Any]:
    c = cluster(*(node(n) for n in data))
    return rdma_checks.checks(c, data, chosen, "run `mpictl provision`")


def failed(checks: list[Any]) -> list[tuple[str, str]]:
    return [(c.check, c.node) for c in checks if not c.ok]


def test_nodes_without_ports_get_only_the_transport_line() -> None:
    checks = run({"a": probe([], gpus=0), "b": probe([], gpus=0)})
    assert [(c.check, c.ok, c.detail) for c in checks] == [
        ("transport", True, "tcp (pml ob1): auto: no node has an active RDMA port")
    ]


def test_eight_rails_alike_are_ok_and_a_down_rail_names_the_node_and_port() -> None:
    good = run({"a": probe(ports(8)), "b": probe(ports(8))})
    assert failed(good) == []
    assert any(c.check == "rdma ports alike" and c.detail == "8 active at 400 Gb/s" for c in good)
    checks = run({"a": probe(ports(8)), "b": probe(ports(8, down=(3,))), "c": probe(ports(8))})
    assert failed(checks) == [("rdma ports alike", "b")]
    (odd,) = [c for c in checks if not c.ok]
    assert odd.detail == "7 active at 400 Gb/s; other nodes: 8 active at 400 Gb/s"
    note = next(c for c in checks if c.check == "rdma ports down")
    assert note.node == "b" and note.detail.startswith("mlx5_3:1 down")


def test_a_port_trained_at_a_lower_rate_and_roce_ports() -> None:
    slow = ports(1, rate=200, layer="Ethernet")
    checks = run(
        {
            "a": probe(ports(1, layer="Ethernet")),
            "b": probe(slow),
            "c": probe(ports(1, layer="Ethernet")),
        }
    )
    assert failed(checks) == [("rdma ports alike", "b")]
    b = next(c for c in checks if c.check == "rdma ports" and c.node == "b")
    assert b.detail == "mlx5_0:1 ACTIVE (Ethernet, 200 Gb/s)"


def test_no_active_port_no_verbs_and_no_gpudirect_each_name_the_fix() -> None:
    checks = run(
        {
            "a": probe(ports(2, down=(0, 1))),
            "b": probe(ports(2), verbs=False),
            "c": probe(ports(2), peermem=False),
            "d": probe(ports(2), peermem=False, open_kernel_module=True),
        }
    )
    bad = {(c.check, c.node): c for c in checks if not c.ok}
    assert set(bad) == {("rdma ports", "a"), ("rdma ports alike", "a"), ("rdma-core", "b"),
                        ("GPUDirect RDMA", "c")}  # fmt: skip
    assert "rdma-core" in bad[("rdma-core", "b")].fix
    assert "nvidia_peermem" in bad[("GPUDirect RDMA", "c")].fix
    d = next(c for c in checks if c.check == "GPUDirect RDMA" and c.node == "d")
    assert d.ok and d.detail == "dma-buf (open kernel module)"


def test_with_ucx_as_the_transport_ucx_and_openmpi_must_see_the_ports() -> None:
    ucx = transport.Transport(
        "ucx", "auto: every node has an active RDMA port", "mlx5_0:1,mlx5_1:1"
    )
    seen = ["mlx5_0:1", "mlx5_1:1", "lo", "eth0"]
    checks = run(
        {
            "a": probe(ports(2), ucx_devices=seen, pml_ucx=True),
            "b": probe(ports(2), ucx_devices=["mlx5_0:1", "lo"], pml_ucx=True),
            "c": probe(ports(2), ucx_devices=seen, pml_ucx=False),
            "d": probe(ports(2), ucx_devices=None),
        },
        ucx,
    )
    bad = {(c.check, c.node): c.detail for c in checks if not c.ok}
    assert bad == {
        ("ucx devices", "b"): "ucx_info -d lacks mlx5_1:1",
        ("openmpi ucx pml", "c"): "ompi_info lists no ucx pml: OpenMPI was built without UCX",
        ("ucx", "d"): "ucx_info is not on PATH",
    }


def test_cpu_nodes_of_a_mixed_cluster_are_not_compared_with_the_rdma_nodes() -> None:
    checks = run({"cpu1": probe([], gpus=0), "cpu2": probe([], gpus=0), "ib1": probe(ports(2))})
    assert failed(checks) == []
    alike = [c for c in checks if c.check == "rdma ports alike"]
    assert [(c.node, c.detail) for c in alike] == [("all", "2 active at 400 Gb/s")]


def test_ports_of_other_link_layers_are_not_rdma_ports() -> None:
    efa = ["port rdmap16s27 1 4: ACTIVE|100 Gb/sec (4X EDR)|Unspecified"]
    checks = run({"a": probe(efa), "b": probe(efa)})
    bad = {(c.check, c.node) for c in checks if not c.ok}
    assert ("rdma ports", "a") in bad  # listed, but no usable (IB/RoCE) port


def test_doctor_says_which_path_device_buffers_take_on_each_gpu_node() -> None:
    ucc = transport.Transport("ob1", "auto: no node has an active RDMA port", coll="ucc")
    ucx = transport.Transport("ucx", "auto: every node has an active RDMA port", coll="ucc")

    def gpu(**path: bool) -> dict[str, Any]:
        return {"gpus": 8, "device_path": {"coll_ucc": True, "ucc_cuda": True, "ucx_cuda": True,
                                           **path}}  # fmt: skip

    data = {
        "a": gpu(),
        "b": gpu(ucc_cuda=False),  # UCX/UCC built without CUDA (no nvml.h on the builder)
        "c": gpu(coll_ucc=False),
        "cpu": {"gpus": 0},
    }
    said = {c.node: c for c in rdma_checks.device_checks(data, ucx, "run `mpictl provision`")}
    assert set(said) == {"a", "b", "c"} and all(c.ok for c in said.values())
    assert said["a"].detail == (
        "collectives: UCC's cuda transport (coll/ucc); point-to-point: UCX's cuda_ipc/cuda_copy "
        "(pml ucx)"
    )
    assert said["b"].detail.startswith(
        "collectives: staged through host memory: UCC has no cuda transport; rebuild with CUDA"
    )
    assert "OpenMPI has no coll/ucc" in said["c"].detail
    tcp = rdma_checks.device_checks({"a": gpu()}, ucc, "p")[0]
    assert tcp.detail.endswith("point-to-point: OpenMPI's CUDA-aware pml ob1")
    off = transport.Transport("ob1", "x")  # a cluster whose jobs do not turn coll/ucc on
    assert rdma_checks.device_checks({"a": gpu()}, off, "p")[0].detail.startswith(
        "collectives: OpenMPI's own, staged through host memory (jobs do not turn coll/ucc on"
    )
    # jobs do not turn it on because UCC has no cuda transport: that is what doctor says
    assert rdma_checks.device_checks({"b": gpu(ucc_cuda=False)}, off, "p")[0].detail.startswith(
        "collectives: staged through host memory: UCC has no cuda transport"
    )
