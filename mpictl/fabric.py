"""``mpictl fabric``: every pair of nodes measured against what its link should do, and a
verdict that names the bad node or link (the rules, pure, in :mod:`mpictl.fabric_rules`).

- One MPI job with one rank per node (``fabric_p2p.py``, through ``submit`` as every job: the
  cluster's OpenMPI, transport and interface rule, recorded) measures each pair's point-to-point
  bandwidth in both directions and its latency, in rounds of disjoint pairs; ranks are placed by
  the host each reports (mpirun may put rank 0 on the head whatever the order given).
- On GPU nodes, NCCL point-to-point between one GPU of each end, per RDMA port, in the same
  rounds (:mod:`mpictl.fabric_nccl`): judged like the MPI figures, each port against its rate.
- Then iperf3, round by round, gives each pair's TCP figure as the link's reference (shown, not
  judged).
- A node that does not answer before the job fails its pairs and is named; the others are
  measured. A job that ends early fails the pairs it did not reach.
- The report (table rows, JSON, heat-map) is kept as ``fabric.json`` beside the job record.

Size: the report, its table and heat-map, and the run of its three measurements in order stay
together; the NCCL part and the rules live in their own modules.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mpictl import (
    fabric_nccl,
    fabric_rules,
    inputs,
    iperf,
    mpirun_plan,
    network,
    planner,
    ranks,
    remote,
    submit,
)
from mpictl import settings as cluster_settings
from mpictl.errors import Interrupted, JobError, UsageError
from mpictl.executor import OutputHandler
from mpictl.fabric_rules import (
    FAILED,
    NOT_ANSWERING,
    OK,
    SLOW,
    UNRATED,
    Finding,
    Pair,
    Rate,
    Schedule,
    diagnose_all,
    judge_all,
    node_rates,
    schedule,
)
from mpictl.hostnames import is_ip_address
from mpictl.inventory import Cluster, Node
from mpictl.planner import LaunchOptions

DEFAULT_THRESHOLD = 0.8
DEFAULT_SIZE = 4 * 1024 * 1024  # bytes per message: large, as a link's bandwidth needs
MAX_SIZE = 64 * 1024 * 1024  # the receiver holds a window of 16 messages
DEFAULT_SECONDS = 1.0  # per direction and pair
RESULTS_FILE = "fabric.json"
PROGRAM = "fabric_p2p.py"


# --------------------------------------------------------------------------- the report


@dataclass
class FabricReport:
    nodes: list[str]
    pairs: list[Pair] = field(default_factory=list)
    rounds: int = 0
    threshold: float = DEFAULT_THRESHOLD
    findings: list[Finding] = field(default_factory=list)
    transport: str = ""
    job_id: str = ""
    results_path: Path | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return bool(self.pairs) and all(p.overall == OK for p in self.pairs)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "nodes": self.nodes,
            "rounds": self.rounds,
            "threshold": self.threshold,
            "transport": self.transport,
            "job": self.job_id,
            "seconds": round(self.seconds, 1),
            "pairs": [
                {**asdict(p), "slower_GBps": p.slower_GBps, "nodes": list(p.nodes)}
                for p in self.pairs
            ],
            "findings": [asdict(f) for f in self.findings],
        }


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _nccl_cell(p: Pair) -> str:
    """The pair's NCCL figures (GB/s): one, or the slowest of its ports with their count."""
    if not p.nccl:
        return "-"
    figures = [n.slower_GBps for n in p.nccl]
    if any(f is None for f in figures):
        return "failed"
    low = min(f for f in figures if f is not None)
    return f"{low:.2f}" if len(figures) == 1 else f"{low:.2f} (min of {len(figures)} ports)"


def _verdict_cell(p: Pair) -> str:
    text = p.overall if not p.error else f"{p.overall}: {p.error}"
    for n in p.nccl:
        if n.verdict != OK:
            text += f"; {n.via} {n.verdict}" + (f": {n.error}" if n.error else "")
    return text


def table_rows(report: FabricReport) -> list[tuple[str, ...]]:
    rows = []
    for p in report.pairs:
        expected = "-"
        if p.expected_gbit:
            expected = f"{p.expected_gbit:g} ({p.expected_source})"
        rows.append(
            (
                f"{p.a} - {p.b}",
                _num(p.ab_GBps, ".3f"),
                _num(p.ba_GBps, ".3f"),
                _num(p.latency_us, ".1f"),
                _num(p.tcp_GBps, ".3f") if not p.tcp_error else "n/a",
                _nccl_cell(p),
                expected,
                _num(p.ratio, ".2f"),
                _verdict_cell(p),
            )
        )
    return rows


def plot(report: FabricReport, path: Path) -> Path:
    """PNG heat-map of the pair matrix: each cell the pair's slower direction / expectation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = report.nodes
    index = {n: i for i, n in enumerate(names)}
    grid = [[math.nan] * len(names) for _ in names]
    for p in report.pairs:
        value = p.ratio if p.verdict != FAILED else 0.0
        if value is None:
            continue
        grid[index[p.a]][index[p.b]] = grid[index[p.b]][index[p.a]] = value
    size = max(4.0, 0.5 * len(names) + 2)
    fig, ax = plt.subplots(figsize=(size + 1, size), dpi=110)
    image = ax.imshow(grid, cmap="RdYlGn", vmin=0.0, vmax=1.2)
    ax.set_xticks(range(len(names)), names, rotation=90)
    ax.set_yticks(range(len(names)), names)
    for p in report.pairs:
        label = "fail" if p.verdict == FAILED else _num(p.ratio, ".2f")
        for i, j in ((index[p.a], index[p.b]), (index[p.b], index[p.a])):
            ax.text(j, i, label, ha="center", va="center", fontsize=8)
    fig.colorbar(image, ax=ax, label="measured / expected (slower direction)")
    ax.set_title(f"MPI point-to-point, {len(names)} nodes, threshold {report.threshold:.0%}")
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
    return Path(path)


# --------------------------------------------------------------------------- running it


def parse_output(text: str) -> tuple[dict[int, str], list[dict[str, Any]]]:
    """The program's rank -> host lines and its pair records."""
    hosts: dict[int, str] = {}
    records = []
    for rec in remote.json_lines(text):
        if "host" in rec and "rank" in rec and "a" not in rec:
            hosts[int(rec["rank"])] = str(rec["host"])
        elif "a" in rec and "b" in rec:
            records.append(rec)
    return hosts, records


def _names(node: Node) -> set[str]:
    facts = node.facts or {}
    names = {node.name, node.address}
    names |= {str(facts[k]) for k in ("ansible_hostname", "ansible_nodename", "ansible_fqdn")
              if facts.get(k)}  # fmt: skip
    return {n.lower() for n in names}


def _short(name: str) -> str:
    return name if is_ip_address(name) else name.split(".")[0]


def rank_nodes(hosts: Mapping[int, str], nodes: Sequence[Node]) -> dict[int, str] | str:
    """rank -> inventory name, from the hosts the ranks reported (mpirun may place rank 0 on the
    head whatever the order given): an exact name first, else a short name that only one node
    has; a sentence when a rank cannot be placed."""
    out: dict[int, str] = {}
    for rank, host in sorted(hosts.items()):
        said = host.lower()
        match = [n.name for n in nodes if said in _names(n)]
        if not match:
            match = [n.name for n in nodes if _short(said) in {_short(x) for x in _names(n)}]
        if len(match) != 1:
            return f"rank {rank} ran on {inputs.quoted(host)}, which is not one node of the job"
        out[rank] = match[0]
    if sorted(out.values()) != sorted(n.name for n in nodes):
        return "the ranks did not land one per node"
    return out


def _pairs_from_job(
    plan: Schedule, nodes: Sequence[Node], output: str, exit_code: int, job_id: str
) -> list[Pair]:
    hosts, records = parse_output(output)
    if hosts:
        placed = rank_nodes(hosts, nodes)
    else:  # the program never started: say why, once, on every pair
        said = remote.last_line(ranks.untagged(output)) or "no output"
        placed = (
            f"the measuring job did not start (exit {exit_code}: {said}); a cluster provisioned "
            f"by an older mpictl lacks {PROGRAM}: run `mpictl provision`"
        )
    by_ranks = {(int(r["a"]), int(r["b"])): r for r in records}
    pairs = []
    for number, round_pairs in enumerate(plan):
        for i, j in round_pairs:
            if isinstance(placed, str):
                a, b = nodes[i].name, nodes[j].name
                pair = Pair(a, b, number, error=f"{placed} (job {job_id})")
                pairs.append(pair)
                continue
            a, b = placed[i], placed[j]
            pair = Pair(a, b, number)
            rec = by_ranks.get((i, j))
            if rec is None:
                pair.error = (
                    f"not measured: the MPI job ended (exit {exit_code}) before this pair; "
                    f"`mpictl jobs logs {job_id}`"
                )
            else:
                pair.ab_GBps = float(rec["ab_Bps"]) / 1e9
                pair.ba_GBps = float(rec["ba_Bps"]) / 1e9
                pair.latency_us = float(rec["latency_s"]) * 1e6
                if not rec.get("ok", False):
                    pair.error = str(rec.get("error") or "wrong bytes received")
            pairs.append(pair)
    return pairs


def _measure_tcp(
    head: remote.HeadSSH, plan: Schedule, nodes: Sequence[Node], pairs: list[Pair]
) -> None:
    """iperf3 for every pair, one round of disjoint pairs at a time, each round on a port of its
    own (a server left by a failed client holds its port for up to a minute). A round the head
    could not run is that round's pairs' ``tcp_error``; the MPI figures stay."""
    by_names = {p.nodes: p for p in pairs}
    for number, round_pairs in enumerate(plan):
        ends = [(nodes[i], nodes[j]) for i, j in round_pairs]
        addresses = [(a.address, b.address) for a, b in ends]
        try:
            results = iperf.measure_links(head, addresses, port=iperf.IPERF_PORT + number % 100)
        except JobError as exc:
            results = [f"did not run: {exc}"] * len(ends)
        for (a, b), result in zip(ends, results, strict=True):
            pair = by_names.get((a.name, b.name)) or by_names.get((b.name, a.name))
            if pair is None:
                continue
            if isinstance(result, str):
                pair.tcp_error = result
            else:
                pair.tcp_GBps = result


def job_timeout(rounds: int, seconds: float) -> float:
    """The measuring job's limit: per round, both directions of ``seconds`` (each may take up to
    twice that: a first window times the link) and a minute of margin, at least 10 minutes."""
    return max(600.0, rounds * (4 * seconds + 60))


def check_options(threshold: float, expect: float | None, size: int, seconds: float) -> None:
    if not 0 < threshold <= 1:
        raise UsageError(f"--threshold must be in (0, 1], got {threshold}")
    if expect is not None and not fabric_rules.link_rate_rule(expect):
        raise UsageError(
            f"--expect must be a link rate in Gbit/s, above 0 and up to "
            f"{fabric_rules.MAX_LINK_GBPS:g}, got {expect:g}"
        )
    inputs.integer("--size", size, minimum=1024, maximum=MAX_SIZE)
    if not (math.isfinite(seconds) and 0 < seconds <= 60):
        raise UsageError(f"--seconds must be in (0, 60], got {seconds}")


def run_fabric(
    cluster: Cluster,
    *,
    hosts: Sequence[str] | None = None,
    expect: float | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    size: int = DEFAULT_SIZE,
    seconds: float = DEFAULT_SECONDS,
    tcp: bool = True,
    on_output: OutputHandler | None = None,
    clock: Callable[[], float] | None = None,
) -> FabricReport:
    """Measure every pair of ``hosts`` (default: every node) and judge them."""
    import time

    clock = clock or time.monotonic
    started = clock()
    check_options(threshold, expect, size, seconds)
    nodes = planner.select_nodes(cluster, hosts)
    if len(nodes) < 2:
        raise UsageError("fabric needs at least two nodes (it measures the links between them)")
    net = network.derive_network(cluster, nodes)
    rates = node_rates(nodes, net.interfaces if net else {}, expect)
    settings = cluster_settings.for_cluster(cluster)
    names = [n.name for n in nodes]
    command = [settings.venv_python, "-u", settings.tool(PROGRAM)]
    # Bad options before any contact: the plan of the full job.
    probe = LaunchOptions(command=[*command, "[]", str(size), str(seconds)], hosts=names, ppn=1)
    mpirun_plan.plan(cluster, probe, "check", settings=settings)
    head = remote.HeadSSH.for_cluster(cluster)
    head.check_reachable()

    report = FabricReport(nodes=names, threshold=threshold)
    facts, silent = fabric_nccl.probe(head, nodes)  # GPUs, nccl-tests, RDMA ports; who answers
    live = [n for n in nodes if n.name not in silent]
    ports = fabric_nccl.port_rates(facts, expect)
    pairs: list[Pair] = []
    for i, a in enumerate(nodes):  # the pairs of a node that did not answer: never scheduled
        for b in nodes[i + 1 :]:
            gone = [n.name for n in (a, b) if n.name in silent]
            if gone:
                why = "; ".join(f"{n} {NOT_ANSWERING}" + (f" ({silent[n]})" if silent[n] else "")
                                for n in gone)  # fmt: skip
                pairs.append(Pair(a.name, b.name, -1, error=why, silent=tuple(gone)))
    plan = schedule(len(live))
    report.rounds = len(plan)
    if len(live) >= 2:
        options = LaunchOptions(
            command=[*command, json.dumps(plan), str(size), str(seconds)],
            hosts=[n.name for n in live],
            ppn=1,
            timeout=job_timeout(len(plan), seconds),
        )
        result, record = submit.submit(
            cluster,
            options,
            via=submit.MpirunLauncher(head),
            extra={"kind": "fabric"},
            on_output=on_output,
        )
        report.job_id = result.job_id
        if result.status == "interrupted":
            raise Interrupted(f"fabric interrupted (job {result.job_id})", result.exit_code)
        output = record.output_path.read_text(errors="replace")
        measured = _pairs_from_job(plan, live, output, result.exit_code, result.job_id)
        pairs += measured
        report.results_path = record.directory / RESULTS_FILE
        report.transport = transport_of(record.mpirun)
        _settle(report, pairs, names, rates, ports, clock() - started)  # kept before the rest
        steps, known = fabric_nccl.plan(
            cluster, live, facts, plan, net, result.job_id, settings=settings
        )
        if steps or known:
            try:
                known += fabric_nccl.run(head, steps)
            except JobError as exc:
                known += [Pair(m.a, m.b, m.round, via=m.via, error=str(exc))
                          for step in steps for m in step]  # fmt: skip
            fabric_nccl.attach(measured, known)
            _settle(report, pairs, names, rates, ports, clock() - started)
        if tcp:
            _measure_tcp(head, plan, live, measured)
    _settle(report, pairs, names, rates, ports, clock() - started)
    return report


def _settle(
    report: FabricReport,
    pairs: list[Pair],
    names: Sequence[str],
    rates: Mapping[str, Any],
    ports: Mapping[tuple[str, str], Rate],
    seconds: float,
) -> None:
    """Order, judge and diagnose the pairs; write ``fabric.json`` with the job record."""
    order = {n: i for i, n in enumerate(names)}
    for p in [*pairs, *(n for q in pairs for n in q.nccl)]:  # in the order of the job's nodes
        if order[p.a] > order[p.b]:
            p.a, p.b, p.ab_GBps, p.ba_GBps = p.b, p.a, p.ba_GBps, p.ab_GBps
    report.pairs = sorted(pairs, key=lambda p: (order[p.a], order[p.b]))
    judge_all(report.pairs, rates, ports, report.threshold)
    report.findings = diagnose_all(names, report.pairs, report.threshold)
    report.seconds = seconds
    if report.results_path is not None:
        report.results_path.write_text(json.dumps(report.to_json(), indent=2) + "\n")


def transport_of(mpirun: str) -> str:
    """The transport a job's recorded launcher line chose (``--mca pml/btl/btl_tcp_if_include``
    as mpictl's planner sets them), e.g. ``pml=ob1 btl=^openib btl_tcp_if_include=eth0``."""
    try:
        words = shlex.split(mpirun)
    except ValueError:
        words = mpirun.split()
    picked = [
        f"{words[i + 1]}={words[i + 2]}"
        for i, word in enumerate(words[:-2])
        if word == "--mca" and words[i + 1] in ("pml", "btl", "btl_tcp_if_include")
    ]
    return " ".join(picked)


def summary(report: FabricReport) -> list[str]:
    """The verdict's lines: one per finding, then the totals."""
    verdicts = [OK, SLOW, FAILED, UNRATED]
    counts = {v: sum(p.overall == v for p in report.pairs) for v in verdicts}
    totals = ", ".join(f"{counts[v]} {v}" for v in verdicts if counts[v] or v != UNRATED)
    lines = [f.text for f in report.findings]
    lines.append(
        f"{len(report.pairs)} pairs of {len(report.nodes)} nodes in {report.rounds} rounds "
        f"({report.seconds:.0f} s): {totals}"
    )
    return lines
