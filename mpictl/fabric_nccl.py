"""The GPU part of ``mpictl fabric``: NCCL point-to-point between one GPU of each node of a pair
(nccl-tests' ``sendrecv_perf``, two ranks, one per node), per RDMA port where both ends have
the same ports, in the rounds of disjoint pairs of the MPI measurement.

- **What a node has** is read before anything is measured (``scripts/fabric_node.sh``, on every
  node at once from the head): its GPUs, nccl-tests on its PATH, its RDMA ports. A node that does
  not answer this is the one fabric names as not answering.
- **Each measurement is an mpirun line of its own**, planned by :func:`mpictl.mpirun_plan.plan` as
  every job is (the cluster's transport, interface rule, ``NCCL_SOCKET_IFNAME``), with
  ``NCCL_IB_HCA==<port>`` to hold NCCL to one port (``=``: that name exactly). Pairs whose ends
  share rails by name (``rdma.rails``: front-end NICs left out) are measured once per port
  (rail k of one node faces rail k of the others); other GPU pairs once, over what NCCL picks.
- **The head runs them** (``scripts/fabric_nccl_driver.py``): the measurements of a step at the same
  time, the steps one after the other; a step is one round and one port index.
- **A figure** is the out-of-place bus bandwidth of the largest size, which for a send/receive
  is what each direction carried; a measurement that failed, printed no table, or received a
  wrong element (``-c 1``) fails with the reason.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from mpictl import mpirun_plan, nccl_tests, planner, programs, ranks, rdma, remote
from mpictl import settings as cluster_settings
from mpictl.errors import JobError
from mpictl.fabric_rules import Pair, Rate, Schedule
from mpictl.inventory import Cluster, Node
from mpictl.network import Network

PROBE = "fabric_node.sh"
DRIVER = "fabric_nccl_driver.py"
DEFAULT_BYTES = 256 * 1024 * 1024  # per message: large enough for a 400 Gb/s port's plateau
RUN_TIMEOUT = 180.0  # one mpirun of two ranks: NCCL's start, a warm-up and 20 iterations
NCCL = "NCCL"


@dataclass(frozen=True)
class NodeFacts:
    gpus: int = 0  # 0 also where nvidia-smi hung or failed ("gpus ?"): no NCCL measured there
    nccl_tests: str = ""  # sendrecv_perf's path on the node, "" when absent
    ports: list[rdma.Port] = field(default_factory=list)
    nccl: bool = False  # libnccl.so.2 installed (the nccl role skips nodes without CUDA)


def parse_node(text: str) -> NodeFacts:
    gpus, found, nccl = 0, "", False
    for line in text.splitlines():
        word, _, rest = line.strip().partition(" ")
        if word == "gpus" and rest.strip().isdigit():
            gpus = int(rest.strip())
        elif word == "nccl-tests" and rest.strip() != "none":
            found = rest.strip()
        elif word == "nccl":
            nccl = rest.strip() == "yes"
    return NodeFacts(gpus, found, rdma.parse_ports(text.splitlines()), nccl)


def probe(
    head: remote.HeadSSH, nodes: Sequence[Node]
) -> tuple[dict[str, NodeFacts], dict[str, str]]:
    """Each node's facts by name, and why each node that did not answer did not."""
    answers = remote.run_on_nodes(
        head, [n.address for n in nodes], "sh -s", programs.source(PROBE), timeout=60
    )
    facts: dict[str, NodeFacts] = {}
    silent: dict[str, str] = {}
    for node in nodes:
        answer = answers.get(node.address)
        if answer is None:
            silent[node.name] = ""
        elif not answer.ok:
            silent[node.name] = answer.error
        else:
            facts[node.name] = parse_node(answer.stdout)
    return facts, silent


def port_rates(facts: Mapping[str, NodeFacts], expect: float | None) -> dict[tuple[str, str], Rate]:
    """Each active port's rate by (node, port): ``--expect`` when given, else the kernel's."""
    out: dict[tuple[str, str], Rate] = {}
    for name, node in facts.items():
        for port in rdma.rails(node.ports):
            if expect is not None:
                out[(name, port.name)] = Rate(expect, "--expect")
            elif port.rate_gbit:
                out[(name, port.name)] = Rate(port.rate_gbit, f"{port.name} rate")
    return out


@dataclass(frozen=True)
class Measurement:
    id: str
    a: str
    b: str
    round: int
    via: str
    argv: list[str]


def plan(
    cluster: Cluster,
    nodes: Sequence[Node],
    facts: Mapping[str, NodeFacts],
    rounds: Schedule,
    net: Network | None,
    job_id: str,
    *,
    nbytes: int = DEFAULT_BYTES,
    settings: cluster_settings.ClusterSettings | None = None,
) -> tuple[list[list[Measurement]], list[Pair]]:
    """The steps of measurements, and the NCCL results known without measuring: a pair of NCCL
    nodes one of whose ends lacks nccl-tests fails with the fix, a port active at one end only
    fails naming the other. Pairs without GPUs and NCCL at both ends: none.

    Port k of a pair is measured between GPU k (modulo the GPUs of the smaller end) of each node:
    on HGX-style nodes GPU k sits beside NIC k, so the path is the one NCCL takes for it."""
    settings = settings or cluster_settings.for_cluster(cluster)
    steps: list[list[Measurement]] = []
    known: list[Pair] = []
    for number, round_pairs in enumerate(rounds):
        by_index: list[list[Measurement]] = []
        for i, j in round_pairs:
            a, b = nodes[i], nodes[j]
            fa, fb = facts.get(a.name, NodeFacts()), facts.get(b.name, NodeFacts())
            if not (fa.gpus and fb.gpus and fa.nccl and fb.nccl):
                continue
            lacking = [n.name for n, f in ((a, fa), (b, fb)) if not f.nccl_tests]
            if lacking:
                known.append(
                    Pair(
                        a.name,
                        b.name,
                        number,
                        via=NCCL,
                        error=f"nccl-tests is not on the PATH of {', '.join(lacking)}: "
                        "run `mpictl provision` (nccl_tests role, on nodes with NCCL)",
                    )
                )
                continue
            shared = [p.name for p, _ in rdma.shared_rails(fa.ports, fb.ports)]
            ports = _union(fa.ports, fb.ports) if shared else [""]
            for k, port in enumerate(ports):
                if port and port not in shared:
                    lacking = [n.name for n, f in ((a, fa), (b, fb))
                               if port not in {p.name for p in rdma.rails(f.ports)}]  # fmt: skip
                    known.append(
                        Pair(a.name, b.name, number, via=f"{NCCL} {port}",
                             error=f"{port} is not an active rail on {', '.join(lacking)}")
                    )  # fmt: skip
                    continue
                gpu = k % min(fa.gpus, fb.gpus)
                env = [f"NCCL_IB_HCA=={port}", f"CUDA_VISIBLE_DEVICES={gpu}"] if port else []
                options = planner.LaunchOptions(
                    command=nccl_tests.command(nccl_tests.SENDRECV, nbytes, nbytes),
                    hosts=[a.name, b.name],
                    ppn=1,
                    env=env,
                )
                launch = mpirun_plan.plan(cluster, options, job_id, network=net, settings=settings)
                via = f"{NCCL} {port}" if port else NCCL
                while len(by_index) <= k:
                    by_index.append([])
                by_index[k].append(
                    Measurement(f"{number}:{k}:{i}:{j}", a.name, b.name, number, via, launch.argv)
                )
        steps += by_index
    return steps, known


def _union(a: Sequence[rdma.Port], b: Sequence[rdma.Port]) -> list[str]:
    """The names of the rails active at either end, in the kernel's order."""
    ports = {p.name: p for p in [*rdma.rails(a), *rdma.rails(b)]}
    return [p.name for p in sorted(ports.values(), key=rdma.order)]


def run(
    head: remote.HeadSSH, steps: Sequence[Sequence[Measurement]], *, timeout: float = RUN_TIMEOUT
) -> list[Pair]:
    """Every measurement's result (a failed one with its reason); JobError when the head could
    not run them at all."""
    if not steps:
        return []
    spec = {
        "steps": [[{"id": m.id, "argv": m.argv} for m in step] for step in steps],
        "timeout": timeout,
    }
    proc = head.run(
        "python3 -c " + shlex.quote(programs.source(DRIVER)),
        stdin=json.dumps(spec) + "\n",
        timeout=len(steps) * (timeout + 20) + 60,
    )
    said = {str(r.get("id")): r for r in remote.json_lines(proc.stdout)}
    out = []
    for step in steps:
        for m in step:
            rec = said.get(m.id)
            if rec is None:
                why = remote.last_line(proc.stderr) or f"exit {proc.returncode}"
                out.append(Pair(m.a, m.b, m.round, via=m.via, error=f"not measured: {why}"))
            else:
                out.append(read(m, int(rec.get("rc", 1)), str(rec.get("output", ""))))
    if proc.returncode != 0 and not said:
        raise JobError(
            f"{head.node.name}: could not run the NCCL measurements from the head: "
            f"{remote.last_line(proc.stderr) or proc.returncode}"
        )
    return out


def read(m: Measurement, rc: int, output: str) -> Pair:
    """One measurement's result from its mpirun output (tagged lines, rank 0 prints the table)."""
    pair = Pair(m.a, m.b, m.round, via=m.via)
    lines = [line for r, text in sorted(ranks.split(output).items()) for line in text["stdout"]]
    table = nccl_tests.parse(lines)
    row = table.largest
    if rc != 0 or row is None:
        said = remote.last_line(ranks.untagged(output)) or "no output"
        pair.error = f"{nccl_tests.SENDRECV} exit {rc}: {said}"
    elif table.failed_check:
        pair.error = f"{nccl_tests.SENDRECV}: {table.failed_check}"
    else:
        pair.ab_GBps = pair.ba_GBps = row.busbw_GBps
    return pair


def attach(pairs: Sequence[Pair], results: Sequence[Pair]) -> None:
    """Put each NCCL result into the MPI pair of the same two nodes."""
    by_nodes = {frozenset(p.nodes): p for p in pairs}
    for result in results:
        pair = by_nodes.get(frozenset(result.nodes))
        if pair is not None:
            pair.nccl.append(result)
