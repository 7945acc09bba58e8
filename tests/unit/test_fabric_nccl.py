"""``mpictl fabric`` on GPU nodes without a GPU: the node probe's lines, the RDMA ports, the
NCCL measurements planned per pair and per port, the head's driver run with a fake mpirun, the
nccl-tests table read back and the verdict that names a node's port.

The nccl-tests table is tests/unit/data/nccl_tests/'s: nccl-tests' layout with the figures an
H100 run reported, abridged (written in that format, not a recording); every nccl-tests binary
prints the same columns, sendrecv_perf included. The sysfs lines are in
the kernel's format for mlx5 ports (``4: ACTIVE``, ``400 Gb/sec (4X NDR)``, ``InfiniBand``):
written for these tests, not recorded on a machine with HCAs (none was available).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mpictl import fabric, fabric_nccl, fabric_rules, nccl_tests, programs, rdma
from mpictl.fabric_rules import FAILED, OK, SLOW, Pair, Rate
from mpictl.settings import ClusterSettings
from tests.unit.jobside import cluster, facts, node

NCCL_TABLE = Path(__file__).parent / "data" / "nccl_tests" / "all_reduce_perf_tagged.log"
SETTINGS = ClusterSettings("mpi", "/opt/mpictl/venv", "/etc/mpictl/hostfile", "/t", "/b", "/h")


def ib_lines(rails: int, down: tuple[int, ...] = (), rate: str = "400 Gb/sec (4X NDR)") -> str:
    lines = []
    for k in range(rails):
        state = "1: DOWN" if k in down else "4: ACTIVE"
        lines.append(f"port mlx5_{k} 1 {state}|{rate}|InfiniBand")
    return "\n".join(lines)


def probe_text(gpus: int, tests: bool = True, ports: str = "", nccl: bool = True) -> str:
    found = "/usr/local/nccl-tests-2.19.6/bin/sendrecv_perf" if tests else "none"
    return f"gpus {gpus}\nnccl {'yes' if nccl else 'no'}\nnccl-tests {found}\n{ports}\n"


# --------------------------------------------------------------------------- ports and tables


def test_ports_from_sysfs_lines_ib_and_roce_in_a_stable_order() -> None:
    text = "\n".join(
        [
            "port mlx5_10 1 4: ACTIVE|400 Gb/sec (4X NDR)|InfiniBand",
            "port mlx5_2 1 1: DOWN|10 Gb/sec (4X SDR)|InfiniBand",
            "port mlx5_0 1 4: ACTIVE|200 Gb/sec (4X HDR)|Ethernet",
            "port bad;name 1 4: ACTIVE|1 Gb/sec|Ethernet",
            "gpus 8",
        ]
    )
    ports = rdma.parse_ports(text.splitlines())
    assert [p.name for p in ports] == ["mlx5_0:1", "mlx5_2:1", "mlx5_10:1"]
    assert [p.active for p in ports] == [True, False, True]
    assert [p.rate_gbit for p in ports] == [200.0, 10.0, 400.0]
    assert [p.link_layer for p in ports] == ["Ethernet", "InfiniBand", "InfiniBand"]


def test_shared_rails_are_the_active_ports_both_ends_have() -> None:
    a = rdma.parse_ports(ib_lines(8, down=(3,)).splitlines())
    b = rdma.parse_ports(ib_lines(8).splitlines())
    rails = rdma.shared_rails(a, b)
    assert [p.name for p, _ in rails] == [f"mlx5_{k}:1" for k in (0, 1, 2, 4, 5, 6, 7)]


def test_the_nccl_tests_table_is_read() -> None:
    from mpictl import ranks

    lines = ranks.split(NCCL_TABLE.read_text())[0]["stdout"]
    table = nccl_tests.parse(lines)
    assert [r.bytes for r in table.rows] == [8, 1073741824, 2147483648, 4294967296]
    assert table.largest is not None and table.largest.algbw_GBps == pytest.approx(1513.00)
    assert table.largest.time_us == pytest.approx(2838.71) and table.wrong == 0
    assert table.avg_busbw_GBps == 0 and table.out_of_bounds == 0


def test_a_wrong_element_counts() -> None:
    line = (
        "   268435456   67108864  float  sum  -1  5800.1  46.28  46.28  3  5790.2  46.36  46.36  0"
    )
    table = nccl_tests.parse([line, "# Out of bounds values : 2 FAILED"])
    assert table.wrong == 3 and table.rows[0].busbw_GBps == pytest.approx(46.28)
    assert table.failed_check == "3 wrong elements received, 2 sizes out of bounds"
    assert nccl_tests.parse([line.replace("  3  ", "  0  ", 1)]).failed_check == ""


# --------------------------------------------------------------------------- planning


def gpu_cluster(n: int = 3):  # noqa: ANN201 - the jobside Cluster
    return cluster(*(node(f"g{i}", 1, facts=facts(f"10.0.0.{10 + i}")) for i in range(1, n + 1)))


def test_a_measurement_per_shared_port_in_steps_of_disjoint_pairs() -> None:
    c = gpu_cluster(4)
    node_facts = {
        "g1": fabric_nccl.parse_node(probe_text(8, ports=ib_lines(2))),
        "g2": fabric_nccl.parse_node(probe_text(8, ports=ib_lines(2))),
        "g3": fabric_nccl.parse_node(probe_text(8, ports=ib_lines(2, down=(1,)))),
        "g4": fabric_nccl.parse_node(probe_text(0)),  # no GPU: no NCCL pair
    }
    rounds = fabric_rules.schedule(4)
    steps, known = fabric_nccl.plan(
        c, list(c.nodes), node_facts, rounds, None, "J9", settings=SETTINGS
    )
    # g3's mlx5_1 is down: its pairs fail on that port, naming it (a down rail is not skipped)
    assert sorted((p.a, p.b, p.via, p.error) for p in known) == [
        ("g1", "g3", "NCCL mlx5_1:1", "mlx5_1:1 is not an active rail on g3"),
        ("g2", "g3", "NCCL mlx5_1:1", "mlx5_1:1 is not an active rail on g3"),
    ]
    done = [(m.a, m.b, m.via) for step in steps for m in step]
    assert sorted(done) == [
        ("g1", "g2", "NCCL mlx5_0:1"),
        ("g1", "g2", "NCCL mlx5_1:1"),
        ("g1", "g3", "NCCL mlx5_0:1"),
        ("g2", "g3", "NCCL mlx5_0:1"),
    ]
    for step in steps:  # no node twice in a step
        ends = [n for m in step for n in (m.a, m.b)]
        assert len(ends) == len(set(ends))
    m = next(m for step in steps for m in step if m.via == "NCCL mlx5_1:1")
    argv = m.argv
    assert argv[0] == "mpirun" and "--tag-output" in argv
    assert argv[argv.index("--host") + 1] == "g1:1,g2:1"
    assert argv[argv.index("-np") + 1] == "2"
    assert "NCCL_IB_HCA==mlx5_1:1" in argv and "MPICTL_JOB_ID=J9" in argv
    assert "CUDA_VISIBLE_DEVICES=1" in argv  # port 1 between GPU 1 of each node
    assert argv[argv.index("sendrecv_perf") :][:5] == [
        "sendrecv_perf",
        "-b",
        "268435456",
        "-e",
        "268435456",
    ]  # noqa: E501


def test_gpu_nodes_without_ports_are_measured_once_over_what_nccl_picks() -> None:
    c = gpu_cluster(2)
    node_facts = {n: fabric_nccl.parse_node(probe_text(1)) for n in ("g1", "g2")}
    steps, _ = fabric_nccl.plan(
        c, list(c.nodes), node_facts, [[(0, 1)]], None, "J", settings=SETTINGS
    )
    ((m,),) = steps
    assert m.via == "NCCL" and not any(a.startswith("NCCL_IB_HCA") for a in m.argv)


def test_a_gpu_node_without_nccl_tests_fails_its_pairs_with_the_fix() -> None:
    c = gpu_cluster(2)
    node_facts = {"g1": fabric_nccl.parse_node(probe_text(1)),
                  "g2": fabric_nccl.parse_node(probe_text(1, tests=False))}  # fmt: skip
    steps, known = fabric_nccl.plan(
        c, list(c.nodes), node_facts, [[(0, 1)]], None, "J", settings=SETTINGS
    )
    assert steps == []
    (pair,) = known
    assert "nccl-tests is not on the PATH of g2" in pair.error and "mpictl provision" in pair.error


# --------------------------------------------------------------------------- the head's driver


def fake_mpirun(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "fake-mpirun"
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return path


def drive(spec: dict[str, object]) -> list[dict[str, object]]:
    proc = subprocess.run(
        [sys.executable, "-c", programs.source(fabric_nccl.DRIVER)],
        input=json.dumps(spec) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_the_driver_runs_a_step_at_once_and_steps_in_order(tmp_path: Path) -> None:
    log = tmp_path / "log"
    run = fake_mpirun(
        tmp_path,
        f"""\
        echo "start $1" >> {log}
        sleep 1
        echo "end $1" >> {log}
        echo "[1,0]<stdout>: ran $1"
        exit "$2"
        """,
    )
    spec = {
        "steps": [
            [{"id": "a", "argv": [str(run), "a", "0"]}, {"id": "b", "argv": [str(run), "b", "3"]}],
            [{"id": "c", "argv": [str(run), "c", "0"]}],
        ],
        "timeout": 30,
    }
    results = drive(spec)
    assert [(r["id"], r["rc"]) for r in results] == [("a", 0), ("b", 3), ("c", 0)]
    assert results[0]["output"] == "[1,0]<stdout>: ran a\n"
    events = log.read_text().split("\n")
    # a and b overlap; c starts after both ended
    assert events.index("start b") < events.index("end a")
    assert events.index("start c") > max(events.index("end a"), events.index("end b"))


def test_the_driver_ends_a_measurement_past_its_limit_and_names_a_missing_program(
    tmp_path: Path,
) -> None:
    slow = fake_mpirun(tmp_path, "echo started\nexec sleep 60\n")
    spec = {
        "steps": [[{"id": "s", "argv": [str(slow)]}, {"id": "m", "argv": [str(tmp_path / "no")]}]],
        "timeout": 1,
    }
    results = {r["id"]: r for r in drive(spec)}
    assert results["s"]["rc"] == 124 and "did not finish within 1 s" in str(results["s"]["output"])
    assert results["m"]["rc"] == 127 and "cannot start" in str(results["m"]["output"])


# --------------------------------------------------------------------------- results and verdict


def table_output(busbw: float, wrong: int = 0) -> str:
    rows = NCCL_TABLE.read_text().splitlines()[:4]  # the table's header lines
    row = (
        f"   268435456      67108864     float     sum      -1  5800.00  {busbw:.2f}  {busbw:.2f}"
        f"  {wrong}  5790.00  {busbw:.2f}  {busbw:.2f}  0"
    )
    return "\n".join([*rows, f"[1,0]<stdout>: {row}", "[1,0]<stdout>: # Avg bus bandwidth : 1"])


M = fabric_nccl.Measurement("0:0:0:1", "g1", "g2", 0, "NCCL mlx5_0:1", ["mpirun"])


def test_a_measurement_reads_its_figure_or_says_why_it_has_none() -> None:
    assert fabric_nccl.read(M, 0, table_output(46.3)).slower_GBps == pytest.approx(46.3)
    failed = fabric_nccl.read(M, 1, "NCCL WARN NET/IB : No device found.\n")
    assert failed.error == "sendrecv_perf exit 1: NCCL WARN NET/IB : No device found."
    assert "2 wrong elements" in fabric_nccl.read(M, 0, table_output(46.3, wrong=2)).error


def mpi_pair(a: str, b: str) -> Pair:
    return Pair(a, b, 0, ab_GBps=1.2, ba_GBps=1.2)


def test_one_nodes_port_slow_with_every_partner_is_named_with_the_port() -> None:
    names = ["g1", "g2", "g3", "g4"]
    pairs = [mpi_pair(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
    ports = {(n, f"mlx5_{k}:1"): Rate(400.0, f"mlx5_{k}:1 rate") for n in names for k in (0, 1)}
    for p in pairs:
        for k in (0, 1):
            slow = k == 1 and "g3" in p.nodes
            bw = 9.0 if slow else 47.0
            p.nccl.append(Pair(p.a, p.b, 0, ab_GBps=bw, ba_GBps=bw, via=f"NCCL mlx5_{k}:1"))
    rates = dict.fromkeys(names, Rate(10.0, "--expect"))
    fabric_rules.judge_all(pairs, rates, ports, 0.8)
    assert all(p.verdict == OK for p in pairs)  # MPI over the Ethernet NIC is fine
    assert {p.overall for p in pairs if "g3" in p.nodes} == {SLOW}
    findings = fabric_rules.diagnose_all(names, pairs, 0.8)
    assert [(f.kind, f.subjects) for f in findings] == [("nic", ("g3", "mlx5_1:1"))]
    assert findings[0].text.startswith("NCCL mlx5_1:1: g3: slow with every partner")
    report = fabric.FabricReport(nodes=names, pairs=pairs, rounds=3)
    assert not report.ok
    row = dict(zip(range(9), fabric.table_rows(report)[1], strict=True))  # g1 - g3
    assert row[5] == "9.00 (min of 2 ports)" and "NCCL mlx5_1:1 slow" in row[8]


def test_everything_ok_is_one_finding_and_a_failed_nccl_pair_is_not_ok() -> None:
    names = ["g1", "g2"]
    pair = mpi_pair("g1", "g2")
    pair.nccl.append(Pair("g1", "g2", 0, ab_GBps=47.0, ba_GBps=47.0, via="NCCL mlx5_0:1"))
    ports = {(n, "mlx5_0:1"): Rate(400.0, "mlx5_0:1 rate") for n in names}
    rates = dict.fromkeys(names, Rate(10.0, "--expect"))
    fabric_rules.judge_all([pair], rates, ports, 0.8)
    (finding,) = fabric_rules.diagnose_all(names, [pair], 0.8)
    assert finding.kind == "ok" and "MPI, NCCL mlx5_0:1" in finding.text
    pair.nccl[0] = Pair("g1", "g2", 0, via="NCCL mlx5_0:1", error="sendrecv_perf exit 1: x")
    fabric_rules.judge_all([pair], rates, ports, 0.8)
    assert pair.overall == FAILED
    (finding,) = fabric_rules.diagnose_all(names, [pair], 0.8)
    assert finding.kind == "failed"
    assert finding.text == "NCCL mlx5_0:1: no pair could be measured: sendrecv_perf exit 1: x"


def test_port_rates_come_from_the_kernel_unless_expect_is_given() -> None:
    node_facts = {"g1": fabric_nccl.parse_node(probe_text(8, ports=ib_lines(2, down=(1,))))}
    assert fabric_nccl.port_rates(node_facts, None) == {
        ("g1", "mlx5_0:1"): Rate(400.0, "mlx5_0:1 rate")
    }
    assert fabric_nccl.port_rates(node_facts, 100.0) == {
        ("g1", "mlx5_0:1"): Rate(100.0, "--expect")
    }


class LocalHead:
    """The head's ssh, run here: ``command`` through sh, as ssh would on the head."""

    def __init__(self) -> None:
        self.node = node("g1")

    def run(self, command: str, *, stdin: str | None = None, timeout: float = 120):  # noqa: ANN201
        return subprocess.run(
            ["sh", "-c", command], input=stdin, capture_output=True, text=True, timeout=timeout
        )


def test_measurements_run_on_the_head_and_land_in_their_pairs(tmp_path: Path) -> None:
    out = tmp_path / "table.txt"
    out.write_text(table_output(46.5) + "\n")
    ok = fake_mpirun(tmp_path, f"cat {out}\n")
    bad = tmp_path / "bad"
    bad.write_text("#!/bin/sh\necho 'NCCL WARN Net : Connect to 10.0.0.12 failed' >&2\nexit 3\n")
    bad.chmod(0o755)
    steps = [
        [fabric_nccl.Measurement("0:0:0:1", "g1", "g2", 0, "NCCL mlx5_0:1", [str(ok)])],
        [fabric_nccl.Measurement("0:1:0:1", "g1", "g2", 0, "NCCL mlx5_1:1", [str(bad)])],
    ]
    results = fabric_nccl.run(LocalHead(), steps, timeout=30)  # type: ignore[arg-type]
    pairs = [mpi_pair("g2", "g1")]
    fabric_nccl.attach(pairs, results)
    first, second = pairs[0].nccl
    assert first.via == "NCCL mlx5_0:1" and first.slower_GBps == pytest.approx(46.5)
    assert second.error == "sendrecv_perf exit 3: NCCL WARN Net : Connect to 10.0.0.12 failed"


def test_gpu_nodes_without_nccl_are_not_measured_and_not_failed() -> None:
    """The nccl role skips a node without a CUDA toolkit: its GPUs have no NCCL to measure, and
    provisioning would not change that, so its pairs carry no NCCL result at all."""
    c = gpu_cluster(2)
    node_facts = {"g1": fabric_nccl.parse_node(probe_text(8)),
                  "g2": fabric_nccl.parse_node(probe_text(8, tests=False, nccl=False))}  # fmt: skip
    steps, known = fabric_nccl.plan(
        c, list(c.nodes), node_facts, [[(0, 1)]], None, "J", settings=SETTINGS
    )
    assert steps == [] and known == []
    hung = fabric_nccl.parse_node("gpus ?\nnccl yes\nnccl-tests /x/sendrecv_perf\n")
    assert hung.gpus == 0 and hung.nccl
