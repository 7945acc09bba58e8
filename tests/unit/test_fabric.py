"""``mpictl fabric`` without a cluster: the round-robin schedule, each pair's expectation, the
verdicts, the diagnosis rules (one bad node, one bad pair, everything slow, a node that does not
answer, two nodes), the program's output mapped to nodes, and bad options refused before any
contact."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from mpictl import cli, fabric, fabric_rules
from mpictl.errors import InventoryError, UsageError
from mpictl.fabric_rules import FAILED, OK, SLOW, UNRATED, Pair, Rate
from tests.unit.jobside import node

# --------------------------------------------------------------------------- the schedule


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7, 12, 13])
def test_schedule_covers_every_pair_once_in_disjoint_rounds(n: int) -> None:
    rounds = fabric_rules.schedule(n)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    pairs = [pair for r in rounds for pair in r]
    assert sorted(pairs) == list(itertools.combinations(range(n), 2))  # each exactly once
    for r in rounds:
        ends = [x for pair in r for x in pair]
        assert len(ends) == len(set(ends))  # no node twice in a round
        assert len(r) == n // 2  # every node busy but the one with a bye


def test_schedule_of_fewer_than_two_nodes_is_empty() -> None:
    assert fabric_rules.schedule(0) == [] and fabric_rules.schedule(1) == []


# --------------------------------------------------------------------------- expectations


def test_node_rates_from_expect_the_inventory_or_the_nic() -> None:
    facts = {"ansible_eth0": {"speed": 10000}, "ansible_ib_0": {"speed": -1}}
    nodes = [
        node("n1", facts=facts),
        node("n2", facts=facts, vars={"mpi_link_gbps": 400}),
        node("n3", facts=facts),
        node("n4", facts={}),
    ]
    ifaces = {"n1": "eth0", "n2": "eth0", "n3": "ib.0", "n4": "eth0"}
    assert fabric_rules.node_rates(nodes, ifaces, None) == {
        "n1": Rate(10.0, "eth0 speed"),
        "n2": Rate(400.0, "mpi_link_gbps"),
        "n3": None,  # the driver does not say (-1)
        "n4": None,
    }
    assert set(fabric_rules.node_rates(nodes, ifaces, 100).values()) == {Rate(100, "--expect")}


@pytest.mark.parametrize("value", ["fast", 0, -5, True, "nan", [400], 4e11, "10001"])
def test_a_bad_link_rate_is_an_inventory_error(value: Any) -> None:
    with pytest.raises(InventoryError) as caught:
        fabric_rules.node_rates([node("n7", vars={"mpi_link_gbps": value})], {}, 100)
    assert str(caught.value).startswith("n7: mpi_link_gbps ")
    assert "not a link rate in Gbit/s" in str(caught.value)


def pair(a: str, b: str, ab: float | None = 1.0, ba: float | None = 1.0, **kw: Any) -> Pair:
    return Pair(a, b, 0, ab_GBps=ab, ba_GBps=ba, latency_us=20.0, **kw)


def test_a_pair_is_judged_on_its_slower_direction_against_the_slower_end() -> None:
    rates = {"n1": Rate(100, "mpi_link_gbps"), "n2": Rate(10, "eth0 speed"), "n3": None}
    fast = pair("n1", "n2", ab=1.2, ba=1.1)  # 8.8 Gbit/s of 10: ok
    one_way = pair("n1", "n2", ab=1.2, ba=0.5)  # 4 Gbit/s of 10: slow
    wrong = pair("n1", "n2", error="n1->n2: wrong bytes received")
    fabric_rules.judge([fast, one_way, wrong], rates, 0.8)
    assert (fast.verdict, fast.expected_gbit, fast.expected_source) == (OK, 10, "eth0 speed")
    assert fast.ratio == pytest.approx(0.88)
    assert (one_way.verdict, one_way.ratio) == (SLOW, pytest.approx(0.4))
    assert wrong.verdict == FAILED and wrong.ratio is None


def test_without_a_known_rate_pairs_are_judged_against_their_median() -> None:
    """Four nodes and more: one bad node is in fewer than half the pairs, so the median is a
    healthy pair's figure."""
    figures = {("n1", "n2"): 1.0, ("n1", "n3"): 1.1, ("n1", "n4"): 0.1}
    figures |= {("n2", "n3"): 1.0, ("n2", "n4"): 0.12, ("n3", "n4"): 0.1}
    pairs = [pair(a, b, v, v) for (a, b), v in figures.items()]
    fabric_rules.judge(pairs, dict.fromkeys(names(4)), 0.8)
    assert {p.expected_source for p in pairs} == {"median of the pairs"}
    assert [p.verdict for p in pairs] == [OK, OK, SLOW, OK, SLOW, SLOW]
    assert [(f.kind, f.subjects) for f in fabric_rules.diagnose(names(4), pairs, 0.8)] == [
        ("node", ("n4",))
    ]


def test_too_few_nodes_for_a_median_are_unrated_not_ok() -> None:
    """Three nodes, one slow: it is in two of the three pairs, so their median is its figure and
    would pass it. Without a known rate such pairs are not judged, and the run is not ok."""
    pairs = [pair("n1", "n2", 1.1, 1.1), pair("n1", "n3", 0.11, 1.0), pair("n2", "n3", 0.11, 1.0)]
    fabric_rules.judge(pairs, dict.fromkeys(names(3)), 0.8)
    assert {p.verdict for p in pairs} == {UNRATED} and {p.ratio for p in pairs} == {None}
    (finding,) = fabric_rules.diagnose(names(3), pairs, 0.8)
    assert (finding.kind, finding.subjects) == (UNRATED, ("n1", "n2", "n3"))
    assert finding.text.endswith("set mpi_link_gbps or --expect")
    report = fabric.FabricReport(nodes=names(3), pairs=pairs, rounds=3)
    assert not report.ok


# --------------------------------------------------------------------------- the diagnosis


def judged(ratios: dict[tuple[str, str], float | str], n: int) -> list[Pair]:
    """Pairs of n1..n<n> with the given ratio (slower direction / 10 Gbit/s), or an error."""
    rates = {f"n{i}": Rate(10.0, "--expect") for i in range(1, n + 1)}
    pairs = []
    for a, b in itertools.combinations(sorted(rates), 2):
        value = ratios.get((a, b), 1.0)
        if isinstance(value, str):
            silent = tuple(n for n in (a, b) if value.startswith(f"{n} did not answer"))
            pairs.append(pair(a, b, None, None, error=value, silent=silent))
        else:
            pairs.append(pair(a, b, value * 1.25, value * 1.25))
    fabric_rules.judge(pairs, rates, 0.8)
    return pairs


def names(n: int) -> list[str]:
    return [f"n{i}" for i in range(1, n + 1)]


def test_all_ok() -> None:
    (finding,) = fabric_rules.diagnose(names(4), judged({}, 4), 0.8)
    assert finding.kind == "ok" and "6 pairs" in finding.text


def test_one_node_slow_with_every_partner_is_named() -> None:
    pairs = judged({("n1", "n3"): 0.1, ("n2", "n3"): 0.09, ("n3", "n4"): 0.1}, 4)
    (finding,) = fabric_rules.diagnose(names(4), pairs, 0.8)
    assert (finding.kind, finding.subjects) == ("node", ("n3",))
    assert finding.text.startswith("n3: slow with every partner (n1-n3, n2-n3, n3-n4, at 9%..10%")


def test_the_slow_node_of_three() -> None:
    pairs = judged({("n1", "n3"): 0.1, ("n2", "n3"): 0.1}, 3)
    assert [(f.kind, f.subjects) for f in fabric_rules.diagnose(names(3), pairs, 0.8)] == [
        ("node", ("n3",))
    ]


def test_one_slow_pair_is_the_link_not_a_node() -> None:
    pairs = judged({("n2", "n4"): 0.3}, 4)
    (finding,) = fabric_rules.diagnose(names(4), pairs, 0.8)
    assert (finding.kind, finding.subjects) == ("pair", ("n2", "n4"))
    assert "30% of 10 Gbit/s" in finding.text and "fine with other partners" in finding.text


def test_everything_slow_blames_the_expectation_or_the_fabric() -> None:
    pairs = judged({p: 0.05 for p in itertools.combinations(names(3), 2)}, 3)
    (finding,) = fabric_rules.diagnose(names(3), pairs, 0.8)
    assert finding.kind == "fabric" and finding.subjects == ()
    assert "every pair is slow (3 pairs below 80% of 10 Gbit/s (--expect))" in finding.text
    assert "the expectation is too high, or the whole fabric is slow" in finding.text


def test_a_node_that_does_not_answer_is_named_and_the_rest_judged() -> None:
    down = "n2 did not answer (ssh: connect to host n2 port 22: No route to host)"
    pairs = judged({("n1", "n2"): down, ("n2", "n3"): down, ("n2", "n4"): down}, 4)
    (finding,) = fabric_rules.diagnose(names(4), pairs, 0.8)
    assert (finding.kind, finding.subjects) == ("down", ("n2",))
    assert finding.text.startswith("n2: did not answer, its pairs were not measured (n2 did not")
    assert "No route to host" in finding.text
    # ... and a slow link among the others is still found.
    pairs = judged(
        {("n1", "n2"): down, ("n2", "n3"): down, ("n2", "n4"): down, ("n3", "n4"): 0.2}, 4
    )
    assert [(f.kind, f.subjects) for f in fabric_rules.diagnose(names(4), pairs, 0.8)] == [
        ("down", ("n2",)),
        ("pair", ("n3", "n4")),
    ]


def test_a_failed_pair_between_healthy_nodes() -> None:
    pairs = judged({("n1", "n3"): "n1->n3: wrong bytes received"}, 3)
    (finding,) = fabric_rules.diagnose(names(3), pairs, 0.8)
    assert (finding.kind, finding.subjects) == ("pair", ("n1", "n3"))
    assert "failed (n1->n3: wrong bytes received)" in finding.text


def test_two_nodes_cannot_tell_which_end() -> None:
    pairs = judged({("n1", "n2"): 0.1}, 2)
    (finding,) = fabric_rules.diagnose(names(2), pairs, 0.8)
    assert finding.kind == "pair" and "two nodes cannot tell which" in finding.text


# --------------------------------------------------------------------------- the job's output


OUTPUT = "\n".join(
    [
        '[1,0]<stdout>: {"rank": 0, "host": "node3"}',
        '[1,0]<stdout>: {"rank": 1, "host": "node1.example.com"}',
        '[1,0]<stdout>: {"rank": 2, "host": "node2"}',
        '[1,0]<stdout>: {"round": 0, "a": 0, "b": 2, "ab_Bps": 1.1e9, "ba_Bps": 1.0e9, '
        '"latency_s": 2.5e-5, "bytes": 4194304, "ok": true, "error": ""}',
        '[1,0]<stdout>: {"round": 1, "a": 0, "b": 1, "ab_Bps": 1.2e8, "ba_Bps": 1.1e9, '
        '"latency_s": 3e-5, "bytes": 4194304, "ok": false, "error": "1->0: wrong bytes received"}',
    ]
)


def test_ranks_are_mapped_to_nodes_by_the_host_they_report() -> None:
    """mpirun may put rank 0 on the head whatever the order given: the ranks' own host names
    place them (short names and FQDNs both match)."""
    nodes = [node("node1"), node("node2"), node("node3")]
    plan = [[(0, 2)], [(0, 1)], [(1, 2)]]
    pairs = fabric._pairs_from_job(plan, nodes, OUTPUT, 1, "J1")
    assert [(p.a, p.b) for p in pairs] == [
        ("node3", "node2"),
        ("node3", "node1"),
        ("node1", "node2"),
    ]
    assert pairs[0].ab_GBps == pytest.approx(1.1) and pairs[0].latency_us == pytest.approx(25)
    assert pairs[1].error == "1->0: wrong bytes received"
    assert pairs[2].error.startswith("not measured: the MPI job ended (exit 1) before this pair")
    assert "mpictl jobs logs J1" in pairs[2].error


def test_a_rank_on_an_unknown_host_fails_every_pair() -> None:
    nodes = [node("node1"), node("node2"), node("node3")]
    text = OUTPUT.replace('"host": "node2"', '"host": "elsewhere"')
    pairs = fabric._pairs_from_job([[(0, 2)], [(0, 1)], [(1, 2)]], nodes, text, 0, "J2")
    assert {p.error for p in pairs} == {
        "rank 2 ran on 'elsewhere', which is not one node of the job (job J2)"
    }


def test_transport_from_the_recorded_launcher_line() -> None:
    line = (
        "mpirun --host a:1,b:1 -np 2 --mca pml ob1 --mca btl ^openib "
        "--mca btl_tcp_if_include eth0 --tag-output"
    )
    assert fabric.transport_of(line) == "pml=ob1 btl=^openib btl_tcp_if_include=eth0"


def test_report_json_and_rows() -> None:
    pairs = judged({("n1", "n3"): 0.1, ("n2", "n3"): 0.1}, 3)
    pairs[0].tcp_GBps = 1.17
    pairs[1].tcp_error = "failed: no iperf3"
    report = fabric.FabricReport(nodes=names(3), pairs=pairs, rounds=3)
    report.findings = fabric_rules.diagnose(report.nodes, pairs, 0.8)
    data = json.loads(json.dumps(report.to_json()))
    assert data["ok"] is False and data["rounds"] == 3
    assert [p["verdict"] for p in data["pairs"]] == [OK, SLOW, SLOW]
    assert data["findings"][0]["kind"] == "node"
    rows = fabric.table_rows(report)
    assert rows[0] == (
        "n1 - n2", "1.250", "1.250", "20.0", "1.170", "-", "10 (--expect)", "1.00", OK
    )  # fmt: skip
    assert rows[1][4] == "n/a" and rows[1][-1] == SLOW
    assert (
        fabric.summary(report)[-1] == "3 pairs of 3 nodes in 3 rounds (0 s): 1 ok, 2 slow, 0 failed"
    )


# --------------------------------------------------------------------------- bad options


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--threshold", "0"], "--threshold must be in (0, 1]"),
        (["--threshold", "1.5"], "--threshold must be in (0, 1]"),
        (["--expect", "-1"], "--expect must be a link rate in Gbit/s"),
        (["--expect", "nan"], "--expect must be a link rate in Gbit/s"),
        (["--size", "10"], "--size"),
        (["--seconds", "0"], "--seconds must be in (0, 60]"),
        (["--plot", "out.jpg"], "the plot is a PNG file"),
    ],
)
def test_bad_options_are_one_line_before_any_contact(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  children:\n    mpi_nodes:\n      hosts:\n        a:\n        b:\n")
    assert cli.main(["fabric", "-i", str(inv), *args]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and message in err, err


def test_fabric_needs_two_nodes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = tmp_path / "hosts.yml"
    inv.write_text(
        "all:\n  children:\n    mpi_nodes:\n      vars:\n        mpi_slots: 1\n"
        "      hosts:\n        a:\n        b:\n"
    )
    assert cli.main(["fabric", "-i", str(inv), "--hosts", "a"]) == 2
    assert "fabric needs at least two nodes" in capsys.readouterr().err
    with pytest.raises(UsageError, match="unknown host 'c'"):
        from mpictl.inventory import load_inventory

        fabric.run_fabric(load_inventory(inv), hosts=["a", "c"])


def test_a_node_far_below_the_others_is_named_even_when_every_pair_misses() -> None:
    """The sandbox case: the expectation is a little high for the healthy pair (79%) and node3
    runs at a tenth: node3 is named, the healthy pair reported as slow on its own."""
    pairs = judged({("n1", "n2"): 0.79, ("n1", "n3"): 0.07, ("n2", "n3"): 0.08}, 3)
    findings = fabric_rules.diagnose(names(3), pairs, 0.8)
    assert [(f.kind, f.subjects) for f in findings] == [("node", ("n3",)), ("pair", ("n1", "n2"))]
    assert findings[1].text == "n1-n2: slow (79% of 10 Gbit/s)"  # its ends are not fine elsewhere
    # Uniformly slow: no node stands out.
    pairs = judged({("n1", "n2"): 0.3, ("n1", "n3"): 0.25, ("n2", "n3"): 0.35}, 3)
    assert [f.kind for f in fabric_rules.diagnose(names(3), pairs, 0.8)] == ["fabric"]
    # Nor does a 2x spread on busy nodes (CI, `--expect 10000`: 0.41, 0.19 and 0.61 GB/s)
    pairs = judged({("n1", "n2"): 0.41, ("n1", "n3"): 0.19, ("n2", "n3"): 0.61}, 3)
    assert [f.kind for f in fabric_rules.diagnose(names(3), pairs, 0.8)] == ["fabric"]


def test_nothing_measured_is_one_finding_not_every_node_down() -> None:
    error = "the measuring job did not start (exit 1: python: can't open file)"
    pairs = judged({p: error for p in itertools.combinations(names(3), 2)}, 3)
    (finding,) = fabric_rules.diagnose(names(3), pairs, 0.8)
    assert finding.kind == "failed" and finding.text == f"no pair could be measured: {error}"


def test_a_job_that_never_started_says_why_on_every_pair() -> None:
    nodes = [node("node1"), node("node2"), node("node3")]
    output = (
        "[1,0]<stderr>: /opt/mpictl/venv/bin/python: can't open file "
        "'/opt/mpictl/share/jobs/fabric_p2p.py': [Errno 2] No such file or directory\n"
    )
    pairs = fabric._pairs_from_job([[(0, 2)], [(0, 1)], [(1, 2)]], nodes, output, 2, "J3")
    (error,) = {p.error for p in pairs}
    assert error.startswith(
        "the measuring job did not start (exit 2: /opt/mpictl/venv/bin/python: can't open file "
    )
    assert "lacks fabric_p2p.py: run `mpictl provision` (job J3)" in error


def test_a_node_that_answers_but_fails_with_every_partner_is_not_down() -> None:
    wrong = "{}->n3: wrong bytes received"
    pairs = judged({("n1", "n3"): wrong.format("n1"), ("n2", "n3"): wrong.format("n2")}, 3)
    (finding,) = fabric_rules.diagnose(names(3), pairs, 0.8)
    assert (finding.kind, finding.subjects) == ("node", ("n3",))
    assert finding.text == (
        "n3: failed with every partner (n1->n3: wrong bytes received; n2->n3: wrong bytes received)"
    )


def test_short_host_names_place_a_rank_only_when_one_node_has_them() -> None:
    nodes = [node("gpu01.rack1"), node("gpu01.rack2"), node("10.0.0.3")]
    exact = {0: "gpu01.rack2", 1: "10.0.0.3", 2: "GPU01.rack1"}
    assert fabric.rank_nodes(exact, nodes) == {0: "gpu01.rack2", 1: "10.0.0.3", 2: "gpu01.rack1"}
    assert fabric.rank_nodes({0: "gpu01", 1: "10.0.0.3", 2: "gpu01.rack1"}, nodes) == (
        "rank 0 ran on 'gpu01', which is not one node of the job"
    )
    assert fabric.rank_nodes({0: "n1"}, [node("n1.example.com"), node("n2")]) == (
        "the ranks did not land one per node"
    )
    assert fabric.rank_nodes({0: "10", 1: "n2"}, [node("10.0.0.1"), node("n2")]) == (
        "rank 0 ran on '10', which is not one node of the job"
    )


def test_the_job_limit_grows_with_the_rounds_and_seconds() -> None:
    assert fabric.job_timeout(3, 1.0) == 600
    assert fabric.job_timeout(31, 60) == 31 * (240 + 60)
