"""The rules of ``mpictl fabric``, pure: the round-robin schedule of disjoint pairs, each
node's link rate, a pair's verdict and the diagnosis that names a node, a pair or the fabric.

- **Schedule** (:func:`schedule`): the circle method of a round-robin tournament, N-1 rounds for
  even N and N for odd N; every pair exactly once, no node twice in a round.
- **Expectation** (:func:`node_rates`): ``--expect``, else the node's ``mpi_link_gbps``
  (inventory, Gbit/s), else the speed of the interface the job uses (Ansible's facts, read from
  sysfs). A pair expects the slower end; with no rate known, the median of the measured pairs
  (which still names an outlier).
- **Verdict** (:func:`judge`): ``ok``; ``slow`` when either direction is below the threshold of
  the expectation; ``failed`` when it could not be measured or received wrong bytes.
- **Diagnosis** (:func:`diagnose`): a node none of whose pairs could be measured is ``down``; a
  node bad with every partner (at least two) while other pairs are fine is named; a bad pair
  whose ends are fine elsewhere is the link or the pair; everything slow blames the expectation
  or the fabric.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from mpictl import inputs, network
from mpictl.errors import InventoryError
from mpictl.inventory import Node

OK, SLOW, FAILED, UNRATED = "ok", "slow", "failed", "unrated"
#: Pairs judged against their median need nodes enough that one bad node is in fewer than half
#: of them (4 nodes: 3 of 6 pairs); with fewer, a pair without a known rate is not judged.
MEDIAN_MIN_NODES = 4
LINK_VAR = "mpi_link_gbps"
NOT_ANSWERING = "did not answer"  # how a pair's error names an end that did not answer

Schedule = list[list[tuple[int, int]]]


# --------------------------------------------------------------------------- the schedule


def schedule(n: int) -> Schedule:
    """Rounds of disjoint pairs of ``0..n-1`` covering every unordered pair exactly once: the
    circle method (one player fixed, the others rotate; a bye for odd ``n``)."""
    if n < 2:
        return []
    players: list[int | None] = [*range(n)] + ([None] if n % 2 else [])
    m = len(players)
    rounds: Schedule = []
    for _ in range(m - 1):
        pairs = []
        for i in range(m // 2):
            a, b = players[i], players[m - 1 - i]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        rounds.append(sorted(pairs))
        players = [players[0], players[-1], *players[1:-1]]
    return rounds


# --------------------------------------------------------------------------- expectations


@dataclass(frozen=True)
class Rate:
    """A link rate in Gbit/s and where it came from."""

    gbit: float
    source: str


#: The fastest link rate a node can be expected to have, in Gbit/s (eight 400G rails are 3200):
#: a larger figure is a unit mistake (``--expect 4e11``: bit/s given for Gbit/s).
MAX_LINK_GBPS = 10_000.0


def link_rate_rule(number: float) -> bool:
    """A link rate in Gbit/s: positive, finite, at most :data:`MAX_LINK_GBPS`."""
    return math.isfinite(number) and 0 < number <= MAX_LINK_GBPS


def link_var(node: Node) -> float | None:
    """``mpi_link_gbps`` of a node (Gbit/s), checked: InventoryError when it is not a positive
    number."""
    value = node.vars.get(LINK_VAR)
    if value is None or value == "":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not link_rate_rule(number):
        raise InventoryError(
            f"{node.name}: {LINK_VAR} {inputs.quoted(value)}: not a link rate in Gbit/s "
            f"(a positive number up to {MAX_LINK_GBPS:g}, e.g. 100 or 400)"
        )
    return number


def nic_speed(node: Node, interface: str | None) -> float | None:
    """The speed of ``interface`` in Gbit/s from the node's cached facts (Ansible reads sysfs;
    ``speed`` is in Mb/s, -1 or absent when the driver does not say)."""
    if not interface:
        return None
    speed = network.interface_facts(node.facts, interface).get("speed")
    if isinstance(speed, bool) or not isinstance(speed, (int, float)) or speed <= 0:
        return None
    return float(speed) / 1000


def node_rates(
    nodes: Sequence[Node], interfaces: Mapping[str, str], expect: float | None
) -> dict[str, Rate | None]:
    """Each node's link rate: ``--expect``, else ``mpi_link_gbps``, else its NIC's speed."""
    out: dict[str, Rate | None] = {}
    for node in nodes:
        declared = link_var(node)  # checked even when --expect wins: bad input is bad input
        iface = interfaces.get(node.name)
        speed = nic_speed(node, iface)
        if expect is not None:
            out[node.name] = Rate(expect, "--expect")
        elif declared is not None:
            out[node.name] = Rate(declared, LINK_VAR)
        elif speed is not None:
            out[node.name] = Rate(speed, f"{iface} speed")
        else:
            out[node.name] = None
    return out


# --------------------------------------------------------------------------- results


@dataclass
class Pair:
    """One unordered pair of nodes: what was measured and the verdict."""

    a: str
    b: str
    round: int
    ab_GBps: float | None = None  # MPI point-to-point a -> b
    ba_GBps: float | None = None
    latency_us: float | None = None
    tcp_GBps: float | None = None  # iperf3 a -> b, the link's reference
    tcp_error: str = ""
    error: str = ""  # why the pair failed
    silent: tuple[str, ...] = ()  # its ends that did not answer before the measurement
    expected_gbit: float | None = None
    expected_source: str = ""
    ratio: float | None = None  # slower direction / expectation
    verdict: str = ""
    # "" for MPI point-to-point; "NCCL" (the NICs NCCL picked) or "NCCL mlx5_0:1" (one port) for
    # an NCCL measurement between one GPU of each end, kept in its MPI pair's ``nccl``
    via: str = ""
    nccl: list[Pair] = field(default_factory=list)

    @property
    def slower_GBps(self) -> float | None:
        known = [v for v in (self.ab_GBps, self.ba_GBps) if v is not None]
        return min(known) if len(known) == 2 else None

    @property
    def nodes(self) -> tuple[str, str]:
        return self.a, self.b

    @property
    def overall(self) -> str:
        """The worst verdict of the pair's measurements (MPI's and each NCCL one)."""
        verdicts = [self.verdict, *(n.verdict for n in self.nccl)]
        return min(verdicts, key=lambda v: _WORST.get(v, len(_WORST)))


_WORST = {FAILED: 0, SLOW: 1, UNRATED: 2, OK: 3}


def judge(pairs: Sequence[Pair], rates: Mapping[str, Rate | None], threshold: float) -> None:
    """Fill each pair's expectation, ratio and verdict (in place). A pair without a known rate
    at either end is judged against the median of the measured pairs when the pairs span at
    least :data:`MEDIAN_MIN_NODES` nodes, else it is ``unrated`` (not ok: nothing judged it)."""
    measured = [p.slower_GBps * 8 for p in pairs if not p.error and p.slower_GBps]
    spanned = {n for p in pairs for n in p.nodes}
    median = statistics.median(measured) if measured else None
    if len(spanned) < MEDIAN_MIN_NODES:
        median = None
    for pair in pairs:
        ends = [rates.get(pair.a), rates.get(pair.b)]
        if all(r is not None for r in ends):
            slower = min((r for r in ends if r is not None), key=lambda r: r.gbit)
            pair.expected_gbit, pair.expected_source = slower.gbit, slower.source
        elif median:
            pair.expected_gbit, pair.expected_source = median, "median of the pairs"
        if pair.error or not pair.slower_GBps:
            pair.error = pair.error or "no bandwidth measured"
            pair.verdict = FAILED
            continue
        if not pair.expected_gbit:
            pair.verdict = UNRATED
            continue
        pair.ratio = pair.slower_GBps * 8 / pair.expected_gbit
        pair.verdict = SLOW if pair.ratio < threshold else OK


# --------------------------------------------------------------------------- the diagnosis


@dataclass(frozen=True)
class Finding:
    """One conclusion: ``kind`` is ``node`` (slow or failed with every partner), ``nic`` (a node's
    port slow or failed with every partner, NCCL over that port), ``down`` (did
    not answer: its pairs were not measured), ``pair`` (a link or pair), ``fabric`` (everything
    equally slow), ``failed`` (nothing could be measured), ``unrated`` (no expectation) or
    ``ok``."""

    kind: str
    subjects: tuple[str, ...]
    text: str


def judge_all(
    pairs: Sequence[Pair],
    rates: Mapping[str, Rate | None],
    port_rates: Mapping[tuple[str, str], Rate | None],
    threshold: float,
) -> None:
    """:func:`judge` the MPI pairs against ``rates``, and each NCCL measurement against its
    port's rate (``port_rates[(node, "mlx5_0:1")]``; ``rates`` where NCCL picked the NICs)."""
    judge(pairs, rates, threshold)
    for via, group in nccl_groups(pairs).items():
        port = via.partition(" ")[2]
        if port:
            group_rates = {n: port_rates.get((n, port)) for p in group for n in p.nodes}
        else:
            group_rates = dict(rates)
        judge(group, group_rates, threshold)


def nccl_groups(pairs: Sequence[Pair]) -> dict[str, list[Pair]]:
    """The NCCL measurements of the pairs by what they went over (``via``), in order."""
    groups: dict[str, list[Pair]] = {}
    for pair in pairs:
        for link in pair.nccl:
            groups.setdefault(link.via, []).append(link)
    return groups


def diagnose_all(nodes: Sequence[str], pairs: Sequence[Pair], threshold: float) -> list[Finding]:
    """:func:`diagnose` the MPI pairs, then each NCCL group on its own (one port of every GPU
    node, or the NICs NCCL picked): a node slow on one port with every partner is named with the
    port (``nic``). One ``ok`` finding when everything is ok."""
    groups = {"": list(pairs), **nccl_groups(pairs)}
    if all(p.verdict == OK for group in groups.values() for p in group):
        vias = ", ".join(["MPI", *(v for v in groups if v)])
        count = sum(len(g) for g in groups.values())
        return [
            Finding(
                "ok",
                (),
                f"every pair is within {threshold:.0%} of its expected rate "
                f"({len(pairs)} pairs; {count} measurements: {vias})",
            )
        ]
    findings: list[Finding] = []
    for via, group in groups.items():
        names = [n for n in nodes if any(n in p.nodes for p in group)]
        port = via.partition(" ")[2]
        for found in diagnose(names, group, threshold):
            if found.kind == "ok":
                continue
            if not via:
                findings.append(found)
            elif port and found.kind == "node":
                findings.append(Finding("nic", (*found.subjects, port), f"{via}: {found.text}"))
            else:
                findings.append(Finding(found.kind, found.subjects, f"{via}: {found.text}"))
    return findings


def _describe(pairs: Sequence[Pair]) -> str:
    return ", ".join(f"{p.a}-{p.b}" for p in pairs)


def diagnose(nodes: Sequence[str], pairs: Sequence[Pair], threshold: float) -> list[Finding]:
    """What the verdicts say, most specific cause first."""
    bad = [p for p in pairs if p.verdict != OK]
    if not bad:
        return [
            Finding(
                "ok",
                (),
                f"every pair is within {threshold:.0%} of its expected rate ({len(pairs)} pairs)",
            )
        ]
    findings: list[Finding] = []
    unrated = [p for p in pairs if p.verdict == UNRATED]
    if unrated:
        ends = sorted({n for p in unrated for n in p.nodes}, key=list(nodes).index)
        findings.append(
            Finding(
                UNRATED,
                tuple(ends),
                f"no expected rate for {', '.join(ends)} (the NIC does not report its speed) and "
                f"too few nodes to judge by the median: set mpi_link_gbps or --expect",
            )
        )
        pairs = [p for p in pairs if p.verdict != UNRATED]
        if not pairs:
            return findings
    silent = {n for p in pairs for n in p.silent}
    if all(p.verdict == FAILED for p in pairs) and not silent:
        errors = "; ".join(sorted({p.error for p in pairs}))
        return [*findings, Finding("failed", (), f"no pair could be measured: {errors}")]
    of = {n: [p for p in pairs if n in p.nodes] for n in nodes}
    down = [n for n in nodes if n in silent]
    for n in down:
        reasons = "; ".join(sorted({p.error for p in of[n]}))
        findings.append(
            Finding("down", (n,), f"{n}: did not answer, its pairs were not measured ({reasons})")
        )
    # A node that answered but failed with every partner (wrong bytes, a job that died on it)
    # while pairs without it were measured.
    broken = [
        n
        for n in nodes
        if n not in silent
        and len(of[n]) >= 2
        and all(p.verdict == FAILED for p in of[n])
        and any(p.verdict != FAILED for p in pairs if n not in p.nodes)
    ]
    for n in broken:
        reasons = "; ".join(sorted({p.error for p in of[n] if not p.silent}))
        findings.append(Finding("node", (n,), f"{n}: failed with every partner ({reasons})"))
    down += broken
    rest = [p for p in pairs if not set(p.nodes) & set(down)]
    slow_nodes = [n for n in nodes if n not in down and _slow_node(n, rest)]
    for n in slow_nodes:
        ps = [p for p in rest if n in p.nodes]
        ratios = [p.ratio for p in ps if p.ratio is not None]
        how = f", at {min(ratios):.0%}..{max(ratios):.0%} of expected" if ratios else ""
        findings.append(
            Finding(
                "node",
                (n,),
                f"{n}: slow with every partner ({_describe(ps)}{how}): check its NIC, link, "
                "cable and switch port",
            )
        )
    left = [p for p in rest if p.verdict != OK and not set(p.nodes) & set(slow_nodes)]
    uniform = not slow_nodes and len(rest) >= 2 and len(left) == len(rest)
    if uniform and all(p.verdict == SLOW for p in left):
        expected = sorted({f"{p.expected_gbit:g} Gbit/s ({p.expected_source})" for p in left})
        findings.append(
            Finding(
                "fabric",
                (),
                f"every pair is slow ({len(left)} pairs below {threshold:.0%} of "
                f"{', '.join(expected)}): the expectation is too high, or the whole fabric is slow",
            )
        )
        return findings
    fine = {n for p in pairs if p.verdict == OK for n in p.nodes}
    for p in left:
        if p.verdict == FAILED:
            why = p.error
        else:
            why = f"{p.ratio:.0%} of {p.expected_gbit:g} Gbit/s" if p.ratio is not None else "slow"
        if len(nodes) == 2:
            where = "; the link between them or one of the two (two nodes cannot tell which)"
        elif set(p.nodes) <= fine:
            where = (
                "; both are fine with other partners: the path between them (switch, route, cable)"
            )
        else:
            where = ""
        findings.append(Finding("pair", p.nodes, f"{p.a}-{p.b}: {p.verdict} ({why}){where}"))
    return findings


def _score(pair: Pair) -> float:
    """How well a pair did: its ratio, 0 when it failed."""
    return 0.0 if pair.verdict == FAILED or pair.ratio is None else pair.ratio


def _slow_node(name: str, pairs: Sequence[Pair]) -> bool:
    """``name`` is bad with every partner (at least two), and the pairs without it did better:
    one of them is ok, or their median is more than three times its pairs' median (so a
    uniformly slow fabric names no node, nor does the spread of rates on busy nodes, 2x measured
    on the sandbox's shared cores, while a node at a tenth of the others is named, even with an
    expectation that every pair misses)."""
    mine = [p for p in pairs if name in p.nodes]
    others = [p for p in pairs if name not in p.nodes]
    if len(mine) < 2 or any(p.verdict == OK for p in mine) or not others:
        return False
    if any(p.verdict == OK for p in others):
        return True
    return statistics.median(map(_score, mine)) * 3 < statistics.median(map(_score, others))
