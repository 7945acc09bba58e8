"""``mpictl smoke``: prove that every collective works across nodes.

Steps: log in to the head as the MPI user; from the head, check every node (SSH as the MPI user
with strict host keys, the smoke programs and mpi4py/Horovod importable by the cluster venv) so a
broken node is named before mpirun starts; then run the smoke programs (installed by the mpi_jobs
role) with ``mpictl run``'s launcher on all slots. The programs print one JSON line per test
(see mpictl/scripts/smoke_mpi.py); this module parses those lines, never free text. A test that
did not report is a failure, explained with the lines of mpirun's output that name a node.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from mpictl import programs, remote, submit
from mpictl import settings as cluster_settings
from mpictl.errors import Interrupted, UsageError
from mpictl.executor import OutputHandler
from mpictl.inventory import Cluster
from mpictl.planner import LaunchOptions, LaunchPlan

SUITES = ("mpi", "horovod", "all")
MPI_TESTS = (
    "point_to_point",
    "broadcast",
    "scatter",
    "gather",
    "reduce_sum",
    "reduce_max",
    "allreduce",
)
HOROVOD_TESTS = ("hvd_allreduce", "hvd_broadcast", "hvd_allgather")
# The Horovod suite runs once per framework Horovod was built for (horovod_frameworks):
# framework -> (the module a node must import, the tests it reports)
HOROVOD_FRAMEWORKS = {
    "pytorch": ("horovod.torch", HOROVOD_TESTS),
    "tensorflow": (
        "horovod.tensorflow",
        ("hvd_tf_allreduce", "hvd_tf_broadcast", "hvd_tf_allgather"),
    ),
}
# suite -> its program in the job tools' directory
PROGRAMS = {"mpi": "smoke_mpi.py", "horovod": "smoke_horovod.py"}
PREFLIGHT = "smoke_preflight.py"
DEFAULT_TIMEOUT = 300.0


@dataclass
class TestResult:
    suite: str
    test: str
    ranks: int
    hosts: list[str]
    ok: bool
    time_s: float | None
    failures: list[dict[str, Any]] = field(default_factory=list)
    skipped: bool = False

    @property
    def result(self) -> str:
        if self.skipped:
            return "skipped"
        return "pass" if self.ok else "FAIL"

    @property
    def message(self) -> str:
        parts = []
        for f in self.failures:
            where = str(f.get("host") or "?")
            if f.get("rank") is not None:
                where += f" (rank {f['rank']})"
            parts.append(f"{where}: {f.get('error', '')}")
        return "; ".join(parts)


@dataclass
class SmokeReport:
    results: list[TestResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    job_ids: list[str] = field(default_factory=list)

    @property
    def failed_nodes(self) -> list[str]:
        """Nodes named by errors ("<node>: ...") and by failed tests."""
        nodes = {e.split(":", 1)[0] for e in self.errors if ":" in e and " " not in e.split(":")[0]}
        for r in self.results:
            if not r.ok and not r.skipped:
                nodes |= {str(f["host"]) for f in r.failures if f.get("host")}
        return sorted(nodes)

    @property
    def ok(self) -> bool:
        ran = [r for r in self.results if not r.skipped]
        return bool(ran) and not self.errors and all(r.ok for r in ran)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "errors": self.errors,
            "jobs": self.job_ids,
            "results": [{**asdict(r), "result": r.result} for r in self.results],
        }


def parse_results(output: str, suite: str) -> list[TestResult]:
    """The test records of ``suite`` in a job's output (JSON lines, tag prefixes allowed)."""
    out = []
    for rec in remote.json_lines(output):
        if rec.get("suite") != suite or "test" not in rec:
            continue
        out.append(
            TestResult(
                suite=suite,
                test=str(rec["test"]),
                ranks=int(rec.get("ranks") or 0),
                hosts=[str(h) for h in rec.get("hosts") or []],
                ok=bool(rec.get("ok")),
                time_s=float(rec["time_s"]) if rec.get("time_s") is not None else None,
                failures=list(rec.get("failures") or []),
            )
        )
    return out


def node_lines(output: str, names: Sequence[str], limit: int = 3) -> list[str]:
    """Lines of ``output`` that name one of ``names`` (as a whole word), for error messages."""
    found = []
    patterns = [re.compile(rf"(?<![\w.-]){re.escape(n)}(?![\w-])") for n in names if n]
    for line in output.splitlines():
        text = re.sub(r"^\[[^\]]*\]<std(out|err|diag)>:\s*", "", line.strip())
        matches = text and not text.startswith("{") and any(p.search(text) for p in patterns)
        if matches and text not in found:
            found.append(text)
        if len(found) >= limit:
            break
    return found


def complete(
    suite: str,
    expected: Sequence[str],
    parsed: list[TestResult],
    output: str,
    exit_code: int,
    names: Sequence[str],
) -> list[TestResult]:
    """``parsed`` plus a failed result for every expected test that did not report."""
    seen = {r.test for r in parsed}
    missing = [t for t in expected if t not in seen]
    if not missing:
        return parsed
    lines = node_lines(output, names)
    reason = f"did not report (job exit code {exit_code})"
    if lines:
        reason += "; mpirun said: " + " | ".join(lines)
    hosts = sorted({n for n in names if any(n in line for line in lines)})
    extra = [
        TestResult(
            suite=suite,
            test=t,
            ranks=0,
            hosts=hosts,
            ok=False,
            time_s=None,
            failures=[{"rank": None, "host": ", ".join(hosts) or "?", "error": reason}],
        )
        for t in missing
    ]
    return parsed + extra


def preflight(
    cluster: Cluster,
    head: remote.HeadSSH,
    suites: Sequence[str],
    settings: cluster_settings.ClusterSettings | None = None,
) -> tuple[list[str], dict[str, str]]:
    """Errors naming nodes (unreachable, smoke programs or mpi4py missing), and for each optional
    suite the reason it cannot run ("" when it can)."""
    settings = settings or cluster_settings.for_cluster(cluster)
    venv_python = settings.venv_python
    files = [settings.tool(PROGRAMS[s]) for s in suites]
    # Horovod's module of every framework it was built for (horovod.torch, horovod.tensorflow).
    hmods = (
        [HOROVOD_FRAMEWORKS[f][0] for f in settings.horovod_frameworks]
        if "horovod" in suites
        else []
    )
    # Horovod in another environment (horovod_python) is checked with that interpreter.
    apart = "horovod" in suites and settings.horovod_interpreter != venv_python
    modules = ["mpi4py", *([] if apart else hmods)]
    hosts = [n.address for n in cluster.nodes]
    cmd = f"{shlex.quote(venv_python)} - " + shlex.join([*files, *modules])
    outputs = remote.run_on_nodes(head, hosts, cmd, programs.source(PREFLIGHT), timeout=120)
    horovod_outputs = {}
    if apart:
        hcmd = f"{shlex.quote(settings.horovod_interpreter)} - " + shlex.join(hmods)
        horovod_outputs = remote.run_on_nodes(
            head, hosts, hcmd, programs.source(PREFLIGHT), timeout=120
        )
    errors: list[str] = []
    imports: dict[str, dict[str, str]] = {m: {} for m in hmods}  # module -> node -> "ok" or why
    for node in cluster.nodes:
        out = outputs.get(node.address)
        if out is None or out.rc == 255:
            why = out.error if out else "no answer"
            errors.append(
                f"{node.name}: cannot ssh from {cluster.head.name} as {head.user} ({why}); "
                "fix: start the node, then `mpictl provision` (ssh_mesh)"
            )
            continue
        rec = next(iter(remote.json_lines(out.stdout)), None)
        if not out.ok or rec is None:
            errors.append(
                f"{node.name}: the cluster venv does not run ({venv_python}: {out.error}); "
                "fix: `mpictl provision` (mpi4py role: cluster venv)"
            )
            continue
        for path in rec["missing"]:
            errors.append(
                f"{node.name}: {path} is missing; fix: `mpictl provision` (mpi_jobs role)"
            )
        mods = rec["modules"]
        if apart:
            hout = horovod_outputs.get(node.address)
            hrec = next(iter(remote.json_lines(hout.stdout)), None) if hout and hout.ok else None
            found = (hrec or {}).get("modules", {})
            mods = {
                **mods,
                **{m: found.get(m, f"{settings.horovod_interpreter} does not run") for m in hmods},
            }
        if mods.get("mpi4py") != "ok":
            errors.append(
                f"{node.name}: mpi4py does not import ({mods.get('mpi4py')}); "
                "fix: `mpictl provision` (mpi4py role)"
            )
        for m in hmods:
            imports[m][node.name] = str(mods.get(m))
    # Horovod imports nowhere (under any framework): a cluster without Horovod, its suite skipped.
    # Where it imports somewhere, every node and framework that fails is a broken install.
    anywhere = {m: [n for n, why in got.items() if why == "ok"] for m, got in imports.items()}
    skip = {}
    if imports and not any(anywhere.values()):
        skip["horovod"] = "; ".join(
            f"{n}: " + "; ".join(f"{m}: {imports[m][n]}" for m in hmods)
            for n in next(iter(imports.values()))
        )
        return errors, skip
    for m, got in imports.items():
        for name, why in got.items():
            if why == "ok":
                continue
            if anywhere[m]:  # installed on some nodes only
                others = f"{', '.join(anywhere[m])} have it"
            else:  # this framework nowhere, another one imports
                working = ", ".join(k for k in hmods if anywhere[k])
                others = f"horovod_frameworks names it and {working} import"
            errors.append(
                f"{name}: Horovod does not import ({m}: {why}) while {others}; "
                "fix: `mpictl provision` (horovod role)"
            )
    return errors, skip


def suite_runs(
    name: str, settings: cluster_settings.ClusterSettings
) -> list[tuple[list[str], Sequence[str]]]:
    """The jobs of a suite: (the program's arguments, the tests it reports) each. The Horovod
    suite runs once per framework Horovod was built for (the framework is its argument)."""
    if name == "horovod":
        return [([f], HOROVOD_FRAMEWORKS[f][1]) for f in settings.horovod_frameworks]
    return [([], MPI_TESTS)]


def single_node_options(cluster: Cluster) -> dict[str, Any]:
    """On a cluster of one node (the most common first cluster: one 8-GPU server) the tests
    cannot cross nodes: they must span that node's ranks (``MPICTL_SMOKE_MIN_HOSTS=1``), at least
    two of them. A cluster of several nodes keeps the rule that a test crosses nodes, so one whose
    ranks all landed on one host still fails."""
    if len(cluster.nodes) != 1:
        return {}
    slots = cluster.require_slots()[0][1]
    extra: dict[str, Any] = {"env": ["MPICTL_SMOKE_MIN_HOSTS=1"]}
    if slots < 2:
        extra.update(np=2, oversubscribe=True)
    return extra


def run_smoke(
    cluster: Cluster,
    suite: str = "all",
    *,
    timeout: float = DEFAULT_TIMEOUT,
    launcher: str = "mpirun",
    on_output: OutputHandler | None = None,
    on_suite: Callable[[str, LaunchPlan], None] | None = None,
) -> SmokeReport:
    """Run the smoke suite(s) and return the structured report (no printing)."""
    if suite not in SUITES:
        raise UsageError(f"unknown suite '{suite}' (choose from {', '.join(SUITES)})")
    suites = ["mpi", "horovod"] if suite == "all" else [suite]
    report = SmokeReport()
    settings = cluster_settings.for_cluster(cluster)
    head = remote.HeadSSH.for_cluster(cluster)
    head.check_reachable()
    via = submit.launcher(launcher, head)
    via.prepare(cluster)  # Slurm: the head has a Slurm client, before any job
    errors, skip = preflight(cluster, head, suites, settings)
    if errors:
        report.errors = errors
        return report
    names = sorted({n.name for n in cluster.nodes} | {n.address for n in cluster.nodes})
    one_node = single_node_options(cluster)
    for name in suites:
        if name in skip:
            if suite == name:
                report.errors.append(f"Horovod is not usable on {skip[name]}")
            else:
                report.results.append(
                    TestResult(
                        name,
                        "(not installed)",
                        0,
                        [],
                        True,
                        None,
                        skipped=True,
                    )
                )
            continue
        python = settings.horovod_interpreter if name == "horovod" else settings.venv_python
        for args, tests in suite_runs(name, settings):
            options = LaunchOptions(
                command=[python, "-u", settings.tool(PROGRAMS[name]), *args],
                timeout=timeout,
                **one_node,
            )
            result, record = submit.submit(
                cluster,
                options,
                via=via,
                extra={"kind": f"smoke-{name}"},
                on_plan=None if on_suite is None else lambda plan, _rec, n=name: on_suite(n, plan),
                on_output=on_output,
            )
            report.job_ids.append(result.job_id)
            if result.status == "interrupted":
                raise Interrupted(f"smoke interrupted (job {result.job_id})", result.exit_code)
            output = record.output_path.read_text(errors="replace")
            parsed = [r for r in parse_results(output, name) if r.test in tests]
            report.results += complete(name, tests, parsed, output, result.exit_code, names)
    return report
