"""The HCA logic against recorded output of real GPU nodes (tests/data/recordings/rdma/: an H100
node's /sys/class/infiniband with 8 ConnectX-7 NDR ports and a BlueField-3 RoCE bond; ibstat of
an InfiniBand H100 node and of a RoCE H100 node with two rails down; ibstatus of an A100 node;
recorded by others, provenance in the README there). Each machine's ports are real; clusters of
several nodes are built here from them (a node per recording, or the same recording twice), and
say so."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from mpictl import fabric_nccl, fabric_rules, programs, rdma, transport
from mpictl.doctor import rdma_checks as doctor_rdma
from mpictl.network import Network
from tests.unit import recordings
from tests.unit.jobside import cluster, facts, node
from tests.unit.loader import load

ROOT = Path(__file__).resolve().parents[2]
node_state = load("mpictl_node_state", ROOT / "playbooks" / "files" / "mpictl_node_state.py")


def doctor_probe() -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "mpictl_test"}
    exec(compile(programs.source("doctor_probe.py"), "doctor_probe.py", "exec"), namespace)  # noqa: S102
    return namespace


def lines_of(recording: Path, tmp_path: Path) -> list[str]:
    return node_state.rdma_ports(str(recordings.tree(recording, tmp_path / recording.name)))


def ports_of(recording: Path, tmp_path: Path) -> list[rdma.Port]:
    return rdma.parse_ports(lines_of(recording, tmp_path))


H100_RAILS = [f"mlx5_{k}:1" for k in (0, 1, 4, 5, 6, 7, 8, 9)]  # the recorded tree's 8 CX-7s


def test_one_sysfs_reader_serves_doctor_fabric_node_state_and_health() -> None:
    """hca_ports.py is the only reader of the RDMA ports: each program that needs them has it in
    place of its include line, and none has one of its own."""
    users = {
        "doctor_probe.py": programs.source("doctor_probe.py"),
        "fabric_node.sh": programs.source("fabric_node.sh"),
        "node_health.py": programs.source("node_health.py"),
        "mpictl_node_state.py": programs.expand(
            (ROOT / "playbooks" / "files" / "mpictl_node_state.py").read_text()
        ),
    }
    reader = programs.source("hca_ports.py").rstrip("\n")
    for name, text in users.items():
        assert text.count(reader) == 1 and text.count("def rdma_ports(") == 1, name
    written = [p for p in (ROOT / "mpictl" / "scripts").iterdir() if p.is_file()]
    written += list((ROOT / "playbooks" / "files").iterdir())
    own = [p.name for p in written if "def rdma_ports(" in p.read_text()]
    assert own == ["hca_ports.py"]


def test_the_readers_print_the_recorded_tree_alike(tmp_path: Path) -> None:
    root = recordings.tree(recordings.H100_IB_SYSFS, tmp_path / "ib")
    by_node_state = node_state.rdma_ports(str(root))
    by_doctor = doctor_probe()["rdma_ports"](str(root))
    shell = subprocess.run(
        ["sh", "-s", "--", str(root)], input=programs.source("fabric_node.sh"),
        capture_output=True, text=True, check=True, timeout=60,
        env={**os.environ, "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    by_fabric = [line for line in shell.stdout.splitlines() if line.startswith("port ")]
    key = rdma.parse_ports
    assert key(by_node_state) == key(by_doctor) == key(by_fabric)
    assert "port mlx5_0 1 4: ACTIVE|400 Gb/sec (4X NDR)|InfiniBand|MT4129" in by_node_state
    assert "port mlx5_bond_0 1 4: ACTIVE|200 Gb/sec (2X NDR)|Ethernet|MT41692" in by_node_state


def test_the_rails_of_each_recorded_node_leave_its_front_end_nics_out(tmp_path: Path) -> None:
    ib = ports_of(recordings.H100_IB_SYSFS, tmp_path)
    assert [p.name for p in rdma.rails(ib)] == H100_RAILS
    assert {(p.rate_gbit, p.link_layer, p.hca_type) for p in rdma.rails(ib)} == {
        (400.0, "InfiniBand", "MT4129")
    }
    assert [p.name for p in rdma.front_end(ib)] == ["mlx5_bond_0:1"]  # the BlueField-3 bond
    assert rdma.rails_down(ib) == []

    ibstat = ports_of(recordings.H100_IB_IBSTAT, tmp_path)
    assert [p.name for p in rdma.rails(ibstat)] == [
        f"mlx5_{k}:1" for k in (0, 3, 4, 5, 6, 9, 10, 11)
    ]
    assert [p.name for p in rdma.front_end(ibstat)] == ["mlx5_1:1"]  # ConnectX-6, 100G Ethernet
    assert rdma.rails_down(ibstat) == []  # its down ports are ConnectX-6 Ethernet, not rails

    # RoCE: rails and front end share the link layer; the HCA model tells them apart
    roce = ports_of(recordings.H100_ROCE_IBSTAT, tmp_path)
    assert [p.name for p in rdma.rails(roce)] == [f"mlx5_{k}:1" for k in (0, 3, 4, 6, 9, 10)]
    assert [p.name for p in rdma.rails_down(roce)] == ["mlx5_5:1", "mlx5_11:1"]
    assert [p.name for p in rdma.front_end(roce)] == [f"mlx5_{k}:1" for k in (1, 2, 7, 8)]

    # ibstatus shows no HCA model: the link layer alone tells the 40G Ethernet port apart
    a100 = ports_of(recordings.A100_IB_IBSTATUS, tmp_path)
    assert [p.name for p in rdma.rails(a100)] == [f"mlx5_{k}:1" for k in range(8)]
    assert [(p.name, p.rate_gbit) for p in rdma.front_end(a100)] == [("mlx5_8:1", 40.0)]


def rdma_node(name: str, lines: list[str]):  # noqa: ANN201 - a jobside Node
    address = f"10.0.0.{name[1:]}"
    return node(name, 8, address=address, facts={**facts(address), "mpi_rdma_ports": lines})


ETH = Network({"n1": "eth0", "n2": "eth0", "n3": "eth0"}, "10.0.0.0/24")


def test_jobs_on_recorded_h100_nodes_use_the_eight_rails_and_not_the_bond(tmp_path: Path) -> None:
    # three nodes, each with the recorded H100 tree
    lines = lines_of(recordings.H100_IB_SYSFS, tmp_path)
    nodes = [rdma_node(n, lines) for n in ("n1", "n2", "n3")]
    chosen = transport.choose("auto", nodes, ETH)
    rails = ",".join(H100_RAILS)
    assert (chosen.pml, chosen.ucx_devices, chosen.nccl_hcas) == ("ucx", rails, "=" + rails)
    assert chosen.reason == "auto: every node has an active RDMA port"


def test_jobs_on_recorded_roce_nodes_use_the_rails_every_node_has(tmp_path: Path) -> None:
    # two nodes of the RoCE recording: the 6 active ConnectX-7 rails, not the ConnectX-6 ports
    roce = lines_of(recordings.H100_ROCE_IBSTAT, tmp_path)
    both = transport.choose("auto", [rdma_node("n1", roce), rdma_node("n2", roce)], ETH)
    rails = ",".join(f"mlx5_{k}:1" for k in (0, 3, 4, 6, 9, 10))
    assert (both.pml, both.ucx_devices) == ("ucx", rails)
    assert "mlx5_1:1" not in both.nccl_hcas and "mlx5_5:1" not in both.nccl_hcas


def probe(lines: list[str]) -> dict[str, Any]:
    info = {"ports": lines, "verbs": True, "peermem": True, "open_kernel_module": False,
            "kernel": "6.8.0-45-generic"}  # fmt: skip
    return {"gpus": 8, "rdma": info}


def test_doctor_on_recorded_nodes_names_rate_rails_down_and_front_ends(tmp_path: Path) -> None:
    # a cluster of two recorded H100 InfiniBand nodes, the A100 node and the RoCE node
    data = {
        "h1": probe(lines_of(recordings.H100_IB_SYSFS, tmp_path / "1")),
        "h2": probe(lines_of(recordings.H100_IB_IBSTAT, tmp_path / "2")),
        "h3": probe(lines_of(recordings.H100_IB_SYSFS, tmp_path / "3")),
        "a1": probe(lines_of(recordings.A100_IB_IBSTATUS, tmp_path / "4")),
        "r1": probe(lines_of(recordings.H100_ROCE_IBSTAT, tmp_path / "5")),
    }
    c = cluster(*(node(n) for n in data))
    tcp = transport.Transport("ob1", "mpi_transport: tcp")
    checks = doctor_rdma.checks(c, data, tcp, "run `mpictl provision`")
    odd = {(x.check, x.node): x.detail for x in checks if not x.ok}
    assert odd == {
        ("rdma ports alike", "a1"): "8 active at 200 Gb/s; other nodes: 8 active at 400 Gb/s",
        ("rdma ports alike", "r1"): "6 active at 400 Gb/s; other nodes: 8 active at 400 Gb/s",
    }
    said = {(x.check, x.node): x.detail for x in checks}
    assert said[("rdma ports down", "r1")] == "mlx5_5:1, mlx5_11:1 down (not used by jobs)"
    assert ("rdma ports down", "h2") not in said  # down ConnectX-6 Ethernet ports: not rails
    assert said[("rdma front end", "h1")] == (
        "mlx5_bond_0:1 ACTIVE (Ethernet MT41692, 200 Gb/s): not a rail (the rails are the 8 "
        "InfiniBand MT4129 ports); jobs leave it out"
    )
    assert said[("rdma front end", "a1")].startswith("mlx5_8:1 ACTIVE (Ethernet, 40 Gb/s)")
    assert said[("rdma front end", "r1")].startswith("mlx5_1:1 ACTIVE (Ethernet MT4125, 100 Gb/s)")


def test_fabric_measures_each_rail_of_recorded_nodes_between_gpu_k_and_not_the_bond(
    tmp_path: Path,
) -> None:
    text = "\n".join(lines_of(recordings.H100_IB_SYSFS, tmp_path))
    found = "/usr/local/nccl-tests-2.19.6/bin/sendrecv_perf"
    probe_text = f"gpus 8\nnccl yes\nnccl-tests {found}\n{text}\n"
    c = cluster(*(node(f"g{i}", 1, facts=facts(f"10.0.0.{10 + i}")) for i in (1, 2)))
    node_facts = {n: fabric_nccl.parse_node(probe_text) for n in ("g1", "g2")}
    steps, known = fabric_nccl.plan(c, list(c.nodes), node_facts, fabric_rules.schedule(2), None,
                                    "J1")  # fmt: skip
    assert known == []
    measured = [m for step in steps for m in step]
    assert [m.via for m in measured] == [f"NCCL {p}" for p in H100_RAILS]
    for k, m in enumerate(measured):  # rail k between GPU k of each node
        assert f"CUDA_VISIBLE_DEVICES={k}" in m.argv and f"NCCL_IB_HCA=={H100_RAILS[k]}" in m.argv
    rates = fabric_nccl.port_rates(node_facts, None)
    assert set(rates) == {(n, p) for n in ("g1", "g2") for p in H100_RAILS}


def test_a_rail_trained_at_a_lower_rate_stays_a_rail_and_doctor_names_it(tmp_path: Path) -> None:
    # the recorded H100 tree with one ConnectX-7 port's rate changed to 200 (derived, not recorded)
    slow = recordings.tree(recordings.H100_IB_SYSFS, tmp_path / "slow")
    (slow / "mlx5_4" / "ports" / "1" / "rate").write_text("200 Gb/sec (2X NDR)\n")
    ports = rdma.parse_ports(node_state.rdma_ports(str(slow)))
    assert [p.name for p in rdma.rails(ports)] == H100_RAILS
    data = {
        "h1": probe(lines_of(recordings.H100_IB_SYSFS, tmp_path / "1")),
        "h2": probe(node_state.rdma_ports(str(slow))),
        "h3": probe(lines_of(recordings.H100_IB_SYSFS, tmp_path / "3")),
    }
    c = cluster(*(node(n) for n in data))
    checks = doctor_rdma.checks(c, data, transport.Transport("ob1", "x"), "provision")
    assert [(x.check, x.node, x.detail) for x in checks if not x.ok] == [
        ("rdma ports alike", "h2", "8 active at 200/400 Gb/s; other nodes: 8 active at 400 Gb/s")
    ]


def test_a_recorded_one_rail_node_with_its_sibling_port_down(tmp_path: Path) -> None:
    lines = lines_of(recordings.ONE_RAIL_IBSTAT, tmp_path)
    assert lines == [
        "port mlx5_0 1 4: ACTIVE|200 Gb/sec|InfiniBand|MT4123",
        "port mlx5_1 1 1: DOWN|10 Gb/sec|InfiniBand|MT4123",
    ]
    ports = rdma.parse_ports(lines)
    assert [p.name for p in rdma.rails(ports)] == ["mlx5_0:1"]
    assert [p.name for p in rdma.rails_down(ports)] == ["mlx5_1:1"]
    chosen = transport.choose("auto", [rdma_node("n1", lines), rdma_node("n2", lines)], ETH)
    assert (chosen.pml, chosen.ucx_devices, chosen.nccl_hcas) == ("ucx", "mlx5_0:1", "=mlx5_0:1")
    data = {"a": probe(lines), "b": probe(lines)}
    tcp = transport.Transport("ob1", "mpi_transport: tcp")  # (UCX's own checks: test_doctor_rdma)
    checks = doctor_rdma.checks(cluster(node("a"), node("b")), data, tcp, "provision")
    assert [x for x in checks if not x.ok] == []
    down = [x for x in checks if x.check == "rdma ports down"]
    assert [(x.node, x.detail) for x in down] == [
        ("a", "mlx5_1:1 down (not used by jobs)"), ("b", "mlx5_1:1 down (not used by jobs)"),
    ]  # fmt: skip
