"""``mpictl bench``: allreduce bandwidth across nodes, against the TCP link limit.

- The sweep runs through mpictl's launcher, 8 B to 256 MiB by powers of two, with one of two
  engines: ``mpi``, ``bench_allreduce.py`` (mpi4py, installed by the mpi_jobs role; one rank per
  node unless ``--ppn``), or ``nccl``, nccl-tests' ``all_reduce_perf`` (the nccl_tests role;
  one rank per GPU, ``-g 1``, results checked). ``auto`` takes ``nccl`` where every node has
  GPUs and the head finds ``all_reduce_perf`` on its PATH, else ``mpi``.
- Definitions as in nccl-tests: algbw = bytes / time; busbw = algbw * 2(n-1)/n for allreduce
  (n ranks), the figure comparable to the link bandwidth.
- The link limit: iperf3 between the first two nodes (server on the second, client on the first),
  run from the head as the MPI user; ratio = busbw / limit.
- The plot (PNG) is drawn on the controller with matplotlib.

Size: both engines' sweeps, the link limit, the report with its table, plot and JSON belong to
one command (the iperf3 driver's client side, ``iperf.measure_links``, is shared with fabric).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mpictl import (
    inputs,
    iperf,
    mpirun_plan,
    nccl_tests,
    network,
    ranks,
    remote,
    submit,
    transport,
)
from mpictl import settings as cluster_settings
from mpictl.errors import CheckFailed, Interrupted, JobError, UsageError
from mpictl.executor import OutputHandler
from mpictl.inventory import Cluster
from mpictl.planner import LaunchOptions
from mpictl.transport import Transport

MIN_BYTES = 8
MAX_BYTES = 256 * 1024 * 1024
MAX_SWEEP_BYTES = 16 * 1024**3  # bench_allreduce.py allocates two buffers of the largest size
MAX_PPN = 4096
REPORT_BYTES = 64 * 1024 * 1024
RESULTS_FILE = "bench.json"
ENGINES = ("auto", "mpi", "nccl")
ENGINE_TEXT = {
    "mpi": "MPI_Allreduce (mpi4py, host memory)",
    "nccl": "NCCL allreduce (nccl-tests all_reduce_perf, one rank per GPU)",
}


@dataclass(frozen=True)
class Point:
    bytes: int
    ranks: int
    time_s: float
    iters: int = 0
    ok: bool = True

    @property
    def latency_us(self) -> float:
        return self.time_s * 1e6

    @property
    def algbw_gbps(self) -> float:
        """Algorithm bandwidth in GB/s (10^9 bytes per second)."""
        return algbw(self.bytes, self.time_s) / 1e9

    @property
    def busbw_gbps(self) -> float:
        return busbw(self.bytes, self.time_s, self.ranks) / 1e9


def algbw(nbytes: int, seconds: float) -> float:
    """Bytes per second of the operation (nccl-tests' algbw)."""
    if seconds <= 0:
        raise ValueError("time must be positive")
    return nbytes / seconds


def busbw(nbytes: int, seconds: float, ranks: int) -> float:
    """Allreduce bus bandwidth in bytes/s: algbw * 2(n-1)/n (nccl-tests)."""
    if ranks <= 0:
        raise ValueError("ranks must be positive")
    return algbw(nbytes, seconds) * 2 * (ranks - 1) / ranks


@dataclass
class BenchReport:
    points: list[Point] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    link_gbps: float | None = None  # the link limit in GB/s: iperf3, or the RDMA ports' rate
    link_pair: tuple[str, str] | None = None
    link_error: str = ""
    link_source: str = "iperf3"  # or "RDMA ports mlx5_0:1,... (N x 400 Gb/s)"
    transport: str = ""  # the job's transport line (transport.Transport.text)
    job_id: str = ""
    results_path: Path | None = None  # bench.json in the job record's directory
    engine: str = "mpi"  # what measured the sweep: mpi or nccl (ENGINE_TEXT)

    def at(self, nbytes: int) -> Point | None:
        return next((p for p in self.points if p.bytes == nbytes), None)

    @property
    def peak(self) -> Point | None:
        return max(self.points, key=lambda p: p.busbw_gbps) if self.points else None

    def ratio(self, point: Point | None) -> float | None:
        if point is None or not self.link_gbps:
            return None
        return point.busbw_gbps / self.link_gbps

    def to_json(self) -> dict[str, Any]:
        at64 = self.at(REPORT_BYTES)
        return {
            "engine": self.engine,
            "transport": self.transport,
            "measured": ENGINE_TEXT.get(self.engine, self.engine),
            "hosts": self.hosts,
            "job": self.job_id,
            "points": [
                {
                    **asdict(p),
                    "latency_us": p.latency_us,
                    "algbw_GBps": p.algbw_gbps,
                    "busbw_GBps": p.busbw_gbps,
                }
                for p in self.points
            ],
            "link": {
                "GBps": self.link_gbps,
                "Gbit_s": self.link_gbps * 8 if self.link_gbps else None,
                "pair": list(self.link_pair) if self.link_pair else None,
                "error": self.link_error or None,
                "source": self.link_source,
            },
            "busbw_64MiB_GBps": at64.busbw_gbps if at64 else None,
            "ratio_64MiB": self.ratio(at64),
        }


def parse_points(output: str) -> tuple[list[Point], list[str]]:
    """Sweep points (and the hosts) from the bench program's JSON lines."""
    points, hosts = [], []
    for rec in remote.json_lines(output):
        if "bytes" not in rec or "time_s" not in rec:
            continue
        points.append(
            Point(
                bytes=int(rec["bytes"]),
                ranks=int(rec["ranks"]),
                time_s=float(rec["time_s"]),
                iters=int(rec.get("iters") or 0),
                ok=bool(rec.get("ok", True)),
            )
        )
        hosts = [str(h) for h in rec.get("hosts") or hosts]
    return points, hosts


def parse_nccl_points(output: str, ranks_count: int) -> list[Point]:
    """Sweep points from ``all_reduce_perf``'s table (rank 0 prints it; out of place)."""
    by_rank = ranks.split(output)
    lines = [line for r in sorted(by_rank) for line in by_rank[r]["stdout"]]
    table = nccl_tests.parse(lines)
    return [
        Point(
            bytes=row.bytes,
            ranks=ranks_count,
            time_s=row.time_us / 1e6,
            iters=NCCL_ITERS,
            ok=row.wrong == 0 and not table.out_of_bounds,
        )
        for row in table.rows
        if row.time_us > 0
    ]


NCCL_ITERS = 20


def check_gpu_ppn(cluster: Cluster, ppn: int | None) -> None:
    """nccl-tests runs one rank per GPU: ``--ppn`` above a node's GPU count is refused, naming
    the node (NCCL would fail at init with two ranks on one GPU)."""
    if ppn is None:
        return
    short = [(n.name, n.gpus) for n in cluster.nodes if n.gpus and ppn > n.gpus]
    if short:
        name, gpus = short[0]
        raise UsageError(
            f"--ppn {ppn}: {name} has {gpus} GPU{'s' if gpus != 1 else ''} and NCCL runs one rank "
            f"per GPU (give --ppn {gpus} or less, or --engine mpi)"
        )


def pick_engine(cluster: Cluster, head: remote.HeadSSH, engine: str) -> str:
    """``mpi`` or ``nccl`` for ``engine`` (auto: nccl where every node has GPUs and the head has
    ``all_reduce_perf`` on its PATH); CheckFailed when nccl is asked for and cannot run."""
    if engine == "mpi":
        return "mpi"
    gpus = all((n.gpus or 0) > 0 for n in cluster.nodes)
    if engine == "auto" and not gpus:
        return "mpi"
    if not gpus:
        without = ", ".join(n.name for n in cluster.nodes if not n.gpus)
        raise CheckFailed(f"--engine nccl: no GPUs known on {without} (facts: mpictl provision)")
    if head.run(f"command -v {nccl_tests.ALL_REDUCE}", timeout=30).returncode == 0:
        return "nccl"
    if engine == "auto":
        return "mpi"
    raise CheckFailed(
        f"--engine nccl: {nccl_tests.ALL_REDUCE} is not on the PATH of {head.node.name}: run "
        "`mpictl provision` (the nccl_tests role installs nccl-tests where NCCL is)"
    )


def ports_limit(
    cluster: Cluster, plan_transport: Transport | None, engine: str
) -> tuple[float, str] | None:
    """On RDMA nodes whose sweep went over the ports (nccl with NCCL_IB_HCA, or mpi over UCX on
    them), the link limit is those ports' summed rate in GB/s, not a TCP figure; None otherwise
    (a TCP transport is compared with iperf3)."""
    if plan_transport is None:
        return None
    shared = transport.shared_ports(list(cluster.nodes))
    over_ports = (engine == "nccl" and plan_transport.nccl_hcas) or (
        plan_transport.pml == "ucx" and plan_transport.ucx_devices == ",".join(shared)
    )
    if not shared or not over_ports:
        return None
    by_name = {p.name: p for p in transport.node_ports(cluster.head)}
    rates = [by_name[n].rate_gbit or 0.0 for n in shared if n in by_name]
    if not rates or not all(rates):
        return None
    each = "/".join(sorted({f"{r:g}" for r in rates}))
    return sum(rates) / 8, f"RDMA ports {','.join(shared)} ({len(rates)} x {each} Gb/s)"


def measure_link(cluster: Cluster, head: remote.HeadSSH) -> tuple[float, tuple[str, str]]:
    if len(cluster.nodes) < 2:
        raise UsageError("bench needs at least two nodes")
    a, b = cluster.nodes[0], cluster.nodes[1]
    (result,) = iperf.measure_links(head, [(a.address, b.address)], timeout=150)
    if isinstance(result, str):
        raise JobError(f"iperf3 from {a.name} to {b.name} {result}")
    return result, (a.name, b.name)


def run_bench(
    cluster: Cluster,
    *,
    min_bytes: int = MIN_BYTES,
    max_bytes: int = MAX_BYTES,
    ppn: int | None = None,
    timeout: float = 900,
    engine: str = "auto",
    on_output: OutputHandler | None = None,
) -> BenchReport:
    if min_bytes < 4 or max_bytes < min_bytes or max_bytes > MAX_SWEEP_BYTES:
        raise UsageError(
            f"bad size range {min_bytes}..{max_bytes} (need 4 <= min <= max <= {MAX_SWEEP_BYTES})"
        )
    if ppn is not None:
        inputs.integer("--ppn", ppn, minimum=1, maximum=MAX_PPN)
    inputs.seconds("bench's timeout", timeout)
    if engine not in ENGINES:
        choices = ", ".join(ENGINES)
        raise UsageError(f"--engine must be one of {choices}, got {inputs.quoted(engine)}")
    if len(cluster.nodes) < 2:
        raise UsageError("bench needs at least two nodes (it measures the link between them)")
    settings = cluster_settings.for_cluster(cluster)
    mpi_options = LaunchOptions(
        command=[
            settings.venv_python,
            "-u",
            settings.tool("bench_allreduce.py"),
            str(min_bytes),
            str(max_bytes),
        ],
        ppn=ppn or 1,
        timeout=timeout,
    )
    # One rank per GPU (the fewest any node has), or --ppn.
    gpu_ppn = ppn or min(max(1, min(n.gpus or 1, n.slots or 1)) for n in cluster.nodes)
    nccl_options = LaunchOptions(
        command=nccl_tests.command(
            nccl_tests.ALL_REDUCE, min_bytes, max_bytes, iters=NCCL_ITERS, warmup=5
        ),
        ppn=gpu_ppn,
        timeout=timeout,
    )
    for options in (mpi_options, nccl_options) if engine != "mpi" else (mpi_options,):
        mpirun_plan.plan(cluster, options, "check", settings=settings)  # before any contact
    if engine == "nccl":
        check_gpu_ppn(cluster, ppn)
    head = remote.HeadSSH.for_cluster(cluster)
    head.check_reachable()
    report = BenchReport(engine=pick_engine(cluster, head, engine))
    if report.engine == "nccl":
        check_gpu_ppn(cluster, ppn)
    options = nccl_options if report.engine == "nccl" else mpi_options
    result, record = submit.submit(
        cluster,
        options,
        via=submit.MpirunLauncher(head),
        extra={"kind": "bench"},
        on_output=on_output,
    )
    job_id = result.job_id
    if result.status == "interrupted":
        raise Interrupted(f"bench interrupted (job {job_id})", result.exit_code)
    report.job_id = job_id
    output = record.output_path.read_text(errors="replace")
    if report.engine == "nccl":
        report.points = parse_nccl_points(output, gpu_ppn * len(cluster.nodes))
        report.hosts = [n.name for n in cluster.nodes]
    else:
        report.points, report.hosts = parse_points(output)
    if result.exit_code != 0 or not report.points:
        raise CheckFailed(
            f"allreduce sweep failed (exit {result.exit_code}); see `mpictl jobs logs {job_id}`"
        )
    bad = [p.bytes for p in report.points if not p.ok]
    if bad:
        raise CheckFailed(f"allreduce returned wrong sums at sizes {bad} (job {job_id})")
    plan_transport = transport.for_job(
        list(cluster.nodes), network.derive_network(cluster), settings
    )
    report.transport = str(record.extra.get("transport") or plan_transport.text)
    limit = ports_limit(cluster, plan_transport, report.engine)
    if limit is not None:
        report.link_gbps, report.link_source = limit
    else:
        try:
            report.link_gbps, report.link_pair = measure_link(cluster, head)
        except JobError as exc:
            report.link_error = str(exc)
    # The figures stay with the job record: `mpictl jobs show` finds the run, this file its results.
    report.results_path = record.directory / RESULTS_FILE
    report.results_path.write_text(json.dumps(report.to_json(), indent=2) + "\n")
    return report


def human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:g} {unit}"
        value /= 1024
    return f"{n} B"


def check_plotting() -> None:
    """UsageError when matplotlib (the ``plot`` extra) is not installed."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError("--plot needs matplotlib: pip install 'mpictl[plot]'")


def check_plot_path(path: Path) -> Path:
    """``--plot FILE.png`` before the sweep: a ``.png`` name in an existing, writable directory,
    not a directory, link or device (the sweep takes minutes; its end is no time to find out)."""
    where = f"--plot {inputs.shown(str(path), limit=1000)}"
    if path.suffix.lower() != ".png":
        raise UsageError(f"{where}: the plot is a PNG file: give a name ending in .png")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"{where}: no directory {inputs.shown(str(parent), limit=1000)}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{where}: {inputs.shown(str(parent), limit=1000)} is not writable")
    if os.path.lexists(path) and (path.is_symlink() or not path.is_file()):
        raise UsageError(f"{where}: exists and is not a regular file")
    return path


def plot(report: BenchReport, path: Path) -> Path:
    """PNG of busbw and algbw vs message size, with the iperf3 link limit as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [p.bytes for p in report.points]
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    ax.plot(sizes, [p.busbw_gbps for p in report.points], marker="o", label="busbw")
    ax.plot(sizes, [p.algbw_gbps for p in report.points], marker=".", ls="--", label="algbw")
    if report.link_gbps:
        label = "TCP link (iperf3)" if report.link_source == "iperf3" else "RDMA ports' rate"
        ax.axhline(report.link_gbps, color="red", ls=":", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("GB/s")
    ranks = report.points[0].ranks if report.points else 0
    what = "NCCL allreduce" if report.engine == "nccl" else "MPI_Allreduce"
    ax.set_title(f"{what}, {ranks} ranks on {', '.join(report.hosts)}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, format="png")
    plt.close(fig)
    return path


def table_rows(report: BenchReport) -> list[Sequence[str]]:
    return [
        (
            human_bytes(p.bytes),
            f"{p.latency_us:,.1f}",
            f"{p.algbw_gbps:.3f}",
            f"{p.busbw_gbps:.3f}",
        )
        for p in report.points
    ]


def summary(report: BenchReport) -> str:
    at = report.at(REPORT_BYTES) or report.peak
    parts = []
    if at is not None:
        parts.append(f"busbw at {human_bytes(at.bytes)}: {at.busbw_gbps:.3f} GB/s")
    if report.link_gbps and report.link_source != "iperf3":
        parts.append(f"link limit: {report.link_source}: {report.link_gbps:.3f} GB/s")
        ratio = report.ratio(at)
        if ratio is not None:
            parts.append(f"ratio busbw/ports: {ratio:.2f}")
    elif report.link_gbps:
        a, b = report.link_pair or ("?", "?")
        parts.append(
            f"TCP link {a}->{b} (iperf3): {report.link_gbps:.3f} GB/s "
            f"({report.link_gbps * 8:.2f} Gbit/s)"
        )
        ratio = report.ratio(at)
        if ratio is not None:
            parts.append(f"ratio busbw/link: {ratio:.2f}")
    elif report.link_error:
        parts.append(f"link limit unknown: {report.link_error}")
    return "; ".join(parts)
