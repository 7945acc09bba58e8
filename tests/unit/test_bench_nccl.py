"""``mpictl bench`` on GPU nodes: the engine it picks, nccl-tests' ``all_reduce_perf`` planned
one rank per GPU, and its table read into the sweep (nccl-tests' layout as in
tests/unit/data/nccl_tests/, an abridged log of an H100 run written in that format)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from mpictl import bench, errors, jobs, mpirun_plan, remote, submit
from mpictl.executor import JobResult
from mpictl.inventory import Cluster
from mpictl.planner import LaunchOptions
from tests.unit.jobside import cluster, facts, node, three

NCCL_TABLE = Path(__file__).parent / "data" / "nccl_tests" / "all_reduce_perf_tagged.log"


class Head:
    def __init__(self, has_tests: bool) -> None:
        self.node = node("g1")
        self.has_tests = has_tests
        self.asked: list[str] = []

    def check_reachable(self) -> None:
        pass

    def run(self, command: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        self.asked.append(command)
        return subprocess.CompletedProcess([command], 0 if self.has_tests else 1, "", "")


def gpus(n: int = 2, per_node: int = 8) -> Cluster:
    return cluster(
        *(
            node(f"g{i}", per_node, facts=facts(f"10.0.0.{i}"), gpus=per_node)
            for i in range(1, n + 1)
        )
    )


def test_auto_picks_nccl_only_with_gpus_everywhere_and_nccl_tests_on_the_head() -> None:
    assert bench.pick_engine(gpus(), Head(True), "auto") == "nccl"  # type: ignore[arg-type]
    assert bench.pick_engine(gpus(), Head(False), "auto") == "mpi"  # type: ignore[arg-type]
    cpu = Head(True)
    assert bench.pick_engine(three(), cpu, "auto") == "mpi"  # type: ignore[arg-type]
    assert cpu.asked == []  # no GPU: the head is not even asked
    with pytest.raises(errors.CheckFailed, match="all_reduce_perf is not on the PATH of g1"):
        bench.pick_engine(gpus(), Head(False), "nccl")  # type: ignore[arg-type]
    with pytest.raises(errors.CheckFailed, match="no GPUs known on node1, node2, node3"):
        bench.pick_engine(three(), Head(True), "nccl")  # type: ignore[arg-type]


def table(ranks: int) -> str:
    """all_reduce_perf's table as mpirun tags it: the header of the data file, rows at 16 ranks."""
    header = NCCL_TABLE.read_text().splitlines()[:4]
    rows = []
    for size, algbw in ((8, 0.0005), (1048576, 20.0), (268435456, 240.0)):
        seconds = size / (algbw * 1e9)
        busbw = algbw * 2 * (ranks - 1) / ranks
        rows.append(
            f"[1,0]<stdout>: {size:12d} {size // 4:12d}     float     sum      -1 "
            f"{seconds * 1e6:8.2f} {algbw:7.2f} {busbw:7.2f}      0 {seconds * 1e6:8.2f} "
            f"{algbw:7.2f} {busbw:7.2f}      0"
        )
    return "\n".join([*header, *rows, "[1,0]<stdout>: # Avg bus bandwidth    : 150.1", ""])


def test_a_gpu_sweep_runs_all_reduce_perf_one_rank_per_gpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    head = Head(True)
    monkeypatch.setattr(remote.HeadSSH, "for_cluster", classmethod(lambda cls, c, key=None: head))
    monkeypatch.setattr(bench, "measure_link", lambda c, h: (12.0, ("g1", "g2")))
    calls: list[LaunchOptions] = []

    def fake(c: Cluster, options: LaunchOptions, **kw: Any) -> tuple[JobResult, Any]:
        calls.append(options)
        job_id = "20260101-000000-000001"
        plan = mpirun_plan.plan(c, options, job_id, None)
        record = submit.create_record(c, plan, options.command)
        record.output_path.write_text(table(plan.ranks))
        jobs.finish(record, exit_code=0, status="completed")
        return JobResult(job_id, 0, "completed", 1.0), record

    monkeypatch.setattr(submit, "submit", fake)
    report = bench.run_bench(gpus())
    (options,) = calls
    assert options.ppn == 8 and options.command[0] == "all_reduce_perf"
    assert options.command[options.command.index("-g") + 1] == "1"
    assert report.engine == "nccl" and [p.bytes for p in report.points] == [8, 1048576, 268435456]
    top = report.points[-1]
    assert top.ranks == 16 and top.algbw_gbps == pytest.approx(240.0, rel=1e-3)
    assert top.busbw_gbps == pytest.approx(240.0 * 30 / 16, rel=1e-3)  # nccl-tests' own busbw
    data = report.to_json()
    assert data["engine"] == "nccl" and "all_reduce_perf" in data["measured"]


def test_a_bad_engine_is_one_line_before_any_contact() -> None:
    with pytest.raises(errors.UsageError, match="--engine must be one of auto, mpi, nccl"):
        bench.run_bench(three(), engine="gpu")


def test_on_rdma_nodes_busbw_is_compared_with_the_ports_rate_not_iperf3(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nodes whose facts list 8 active 400 Gb/s ports (lines in the kernel's sysfs format,
    written for this test): the limit is 8 x 400 Gb/s = 400 GB/s and iperf3 never runs."""
    rails = [f"port mlx5_{k} 1 4: ACTIVE|400 Gb/sec (4X NDR)|InfiniBand" for k in range(8)]
    c = cluster(
        *(
            node(f"g{i}", 8, facts={**facts(f"10.0.0.{i}"), "mpi_rdma_ports": rails}, gpus=8)
            for i in (1, 2)
        )
    )
    head = Head(True)
    monkeypatch.setattr(remote.HeadSSH, "for_cluster", classmethod(lambda cls, c, key=None: head))

    def no_iperf(*a: Any) -> Any:
        raise AssertionError("iperf3 ran on RDMA nodes")

    monkeypatch.setattr(bench, "measure_link", no_iperf)

    def fake(c: Cluster, options: LaunchOptions, **kw: Any) -> tuple[JobResult, Any]:
        plan = mpirun_plan.plan(c, options, "20260101-000000-000002", None)
        record = submit.create_record(c, plan, options.command)
        record.output_path.write_text(table(plan.ranks))
        jobs.finish(record, exit_code=0, status="completed")
        return JobResult(plan.job_id, 0, "completed", 1.0), record

    monkeypatch.setattr(submit, "submit", fake)
    report = bench.run_bench(c)
    assert report.link_gbps == pytest.approx(400.0)
    assert (
        report.link_source.startswith("RDMA ports mlx5_0:1,")
        and "(8 x 400 Gb/s)" in report.link_source
    )
    assert report.transport.startswith("ucx (pml ucx over mlx5_0:1,")
    assert "ratio busbw/ports: 1.13" in bench.summary(report)  # 450 / 400 GB/s at 256 MiB


def test_a_tcp_transport_on_rdma_nodes_is_still_compared_with_iperf3() -> None:
    from mpictl import transport

    rails = [f"port mlx5_{k} 1 4: ACTIVE|400 Gb/sec (4X NDR)|InfiniBand" for k in range(2)]
    c = cluster(
        *(node(f"g{i}", 8, facts={**facts(f"10.0.0.{i}"), "mpi_rdma_ports": rails}) for i in (1, 2))
    )
    tcp = transport.choose("tcp", list(c.nodes), None)
    assert bench.ports_limit(c, tcp, "mpi") is None  # MPI went over TCP
    assert bench.ports_limit(c, tcp, "nccl") == (
        100.0,
        "RDMA ports mlx5_0:1,mlx5_1:1 (2 x 400 Gb/s)",
    )
    ucx = transport.choose("auto", list(c.nodes), None)
    assert bench.ports_limit(c, ucx, "mpi") is not None


def test_more_ranks_per_node_than_gpus_is_refused_with_the_nccl_engine() -> None:
    # --engine nccl: before any contact (the head is not even looked up); 16 slots, 8 GPUs
    wide = cluster(*(node(f"g{i}", 16, facts=facts(f"10.0.0.{i}"), gpus=8) for i in (1, 2)))
    with pytest.raises(errors.UsageError, match=r"--ppn 9: g1 has 8 GPUs and NCCL runs one rank"):
        bench.run_bench(wide, engine="nccl", ppn=9)
    bench.check_gpu_ppn(gpus(), 8)  # one rank per GPU is fine
    bench.check_gpu_ppn(gpus(), None)
    mixed = cluster(node("g1", 8, facts=facts("10.0.0.1"), gpus=8),
                    node("g2", 8, facts=facts("10.0.0.2"), gpus=1))  # fmt: skip
    with pytest.raises(errors.UsageError, match=r"g2 has 1 GPU and .*--ppn 1 or less"):
        bench.check_gpu_ppn(mixed, 2)
