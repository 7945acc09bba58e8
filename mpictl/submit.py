"""One way in for every job: plan it, record it, execute it (``run``, ``smoke`` and ``bench``).

A *launcher* turns options into a plan, executes a plan attached, or starts it detached;
:func:`submit` and :func:`submit_detached` are the sequence around it (plan → the workdir on
every node → job record → execute or start) that every caller shares. The mpirun launcher plans
with :mod:`mpictl.mpirun_plan`, executes with :mod:`mpictl.executor` and starts detached jobs with
:mod:`mpictl.detached`. A second launcher (Slurm's sbatch/srun) implements :class:`Launcher`
and is passed as ``via``: :class:`mpictl.slurm.SlurmLauncher` (sbatch/srun) is one; the callers
stay as they are.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from mpictl import (
    container,
    detached,
    inputs,
    jobs,
    mpirun_plan,
    network,
    paths,
    planner,
    ranks,
    remote,
    slurm,
    transfer,
    workdir,
)
from mpictl import settings as cluster_settings
from mpictl.errors import UsageError
from mpictl.executor import JobResult, OutputHandler, execute
from mpictl.inventory import Cluster
from mpictl.planner import LaunchOptions, LaunchPlan

PlanHandler = Callable[[LaunchPlan, jobs.JobRecord], None]
SyncHandler = Callable[[transfer.SyncReport], None]


class Launcher(Protocol):
    name: str

    def plan(self, cluster: Cluster, options: LaunchOptions, job_id: str) -> LaunchPlan:
        """Validate ``options`` (UsageError, nothing started) and plan the job."""
        ...

    def prepare(self, cluster: Cluster) -> remote.HeadSSH:
        """Check that a job can start at all (JobError naming the fix), before it is recorded;
        how to reach the head."""
        ...

    def execute(
        self,
        cluster: Cluster,
        plan: LaunchPlan,
        record: jobs.JobRecord,
        *,
        on_output: OutputHandler | None,
        timeout: float | None,
    ) -> JobResult:
        """Run the plan attached, stream its output into ``record`` and finish the record."""
        ...

    def start(self, cluster: Cluster, plan: LaunchPlan, record: jobs.JobRecord) -> jobs.JobRecord:
        """Start the plan detached; it runs on without this process."""
        ...


class MpirunLauncher:
    """mpirun on the head node as the MPI user."""

    name = "mpirun"

    def __init__(self, head: remote.HeadSSH | None = None) -> None:
        self._head = head

    def plan(self, cluster: Cluster, options: LaunchOptions, job_id: str) -> LaunchPlan:
        settings = cluster_settings.for_cluster(cluster)
        nodes = planner.select_nodes(cluster, options.hosts)  # the job's network, not the cluster's
        net = network.derive_network(cluster, nodes)
        return mpirun_plan.plan(cluster, options, job_id, net, settings)

    def prepare(self, cluster: Cluster) -> remote.HeadSSH:
        if self._head is None:  # the cluster key exists and the head answers, before any record
            head = remote.HeadSSH.for_cluster(cluster)
            head.check_reachable()
            self._head = head
        return self._head

    def execute(
        self,
        cluster: Cluster,
        plan: LaunchPlan,
        record: jobs.JobRecord,
        *,
        on_output: OutputHandler | None,
        timeout: float | None,
    ) -> JobResult:
        head = self.prepare(cluster)
        return execute(plan, record, head, on_output=on_output, timeout=timeout)

    def start(self, cluster: Cluster, plan: LaunchPlan, record: jobs.JobRecord) -> jobs.JobRecord:
        return detached.start(self.prepare(cluster), plan, record)


LAUNCHERS = ("mpirun", "slurm")


def launcher(name: str, head: remote.HeadSSH | None = None) -> Launcher:
    """The launcher called ``name`` (``--launcher``); UsageError for an unknown one."""
    if name == "mpirun":
        return MpirunLauncher(head)
    if name == "slurm":
        return slurm.SlurmLauncher(head)
    raise UsageError(f"--launcher {name!r}: choose one of {', '.join(LAUNCHERS)}")


@dataclass(frozen=True)
class WorkdirRequest:
    """``--workdir DIR [--exclude PATTERN]... [--max-workdir-size SIZE]``."""

    directory: str
    excludes: Sequence[str] = ()
    max_bytes: int = workdir.DEFAULT_MAX_BYTES


@dataclass(frozen=True)
class JobRequest:
    """What a job needs around its launch options (all optional)."""

    workdir: WorkdirRequest | None = None
    output_dir: Path | None = None  # per-rank files on the controller, written when it ends
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


def create_record(
    cluster: Cluster,
    plan: LaunchPlan,
    command: Sequence[str] | None = None,
    extra: dict[str, Any] | None = None,
) -> jobs.JobRecord:
    """The record of a planned job about to start (``command``: what the user asked to run;
    default the plan's)."""
    return jobs.create(
        plan.job_id,
        command=list(command if command is not None else plan.command),
        launch_line=plan.display,
        inventory=str(Path(cluster.source).resolve()),  # `jobs ...` may run from elsewhere
        head=cluster.head.name,
        hosts=plan.hosts,
        ranks=plan.ranks,
        extra={
            **(extra or {}),
            **({"launcher": plan.launcher} if plan.launcher != "mpirun" else {}),
            **({"transport": plan.transport.text} if plan.transport is not None else {}),
            **({"container": plan.container} if plan.container else {}),
        },
    )


def _prepare(
    cluster: Cluster,
    options: LaunchOptions,
    via: Launcher,
    request: JobRequest,
    on_sync: SyncHandler | None,
) -> tuple[LaunchPlan, jobs.JobRecord]:
    """Plan (bad options: UsageError before anything), select and sync the workdir, record."""
    job_id = jobs.new_id()
    plan = via.plan(cluster, options, job_id)
    selection = None
    if request.workdir is not None:
        req = request.workdir
        selection = workdir.select(req.directory, req.excludes, req.max_bytes)
        _refuse_state_in(selection)
    if request.output_dir is not None:
        check_output_dir(request.output_dir)
    paths.check_dir(paths.jobs_dir(), "job records")  # a broken state dir: before any contact
    head = via.prepare(cluster)
    if options.container is not None:
        check_image(cluster, head, plan)
    extra = dict(request.extra)
    if request.output_dir is not None:
        extra["output_dir"] = str(_writable_dir(request.output_dir))
    if selection is not None:
        report = transfer.sync(head, selection, [h for h, _ in plan.hosts])
        if on_sync is not None:
            on_sync(report)
        extra["workdir"] = report.to_json()
        plan = via.plan(cluster, dataclasses.replace(options, wdir=report.path), job_id)
    return plan, create_record(cluster, plan, options.command, extra)


def check_image(cluster: Cluster, head: remote.HeadSSH, plan: LaunchPlan) -> None:
    """``--container``: every node of the job reads the image and has enroot (the containers
    role's wrapper, ``--check``), before the job is recorded or started; UsageError naming each
    node that cannot, and why."""
    settings = cluster_settings.for_cluster(cluster)
    wrapper = container.Container(plan.container).wrapper(settings.bin_dir)
    hosts = [h for h, _ in plan.hosts]
    results = remote.run_on_nodes(
        head, hosts, f"{shlex.quote(wrapper)} --check {shlex.quote(plan.container)}"
    )
    names = {n.address: n.name for n in cluster.nodes}
    bad = []
    for host in hosts:
        out = results.get(host)
        if out is None or out.ok:
            continue
        why = out.error
        if why.startswith(f"{container.WRAPPER}: "):  # "mpictl-container: HOSTNAME: what"
            why = why.split(": ", 2)[-1]
        elif out.rc == 127:
            why = "no containers role here (provision with containers_enabled: true)"
        bad.append(f"{names.get(host, host)}: {why}")
    if bad:
        raise UsageError(f"--container {plan.container}: " + "; ".join(bad))


def _refuse_state_in(selection: workdir.Selection) -> None:
    """A workdir that would send mpictl's own state (the cluster key, job records) is refused:
    the state dir lies inside it and something of it is selected."""
    state = paths.state_dir().resolve()
    root = selection.root
    if state != root and root not in state.parents:
        return
    inside = state.relative_to(root).as_posix() if state != root else ""
    chosen = [os.fsdecode(f) for f in (*selection.files, *selection.links)]
    if any(not inside or f == inside or f.startswith(inside + "/") for f in chosen):
        raise UsageError(
            f"--workdir {inputs.shown(str(root), limit=1000)} holds mpictl's state dir "
            f"{inputs.shown(str(state), limit=1000)} (the cluster key, job records): leave it out "
            "with .mpictlignore or --exclude, or set MPICTL_STATE_DIR elsewhere"
        )


def check_output_dir(path: Path) -> None:
    """``--output-dir`` before anything starts: a directory mpictl can write in, or a new path
    whose nearest existing ancestor is one (it is created when the job starts)."""
    where = f"--output-dir {inputs.shown(str(path), limit=1000)}"
    probe = paths.nearest_existing(path)
    if not probe.is_dir():
        raise UsageError(f"{where}: {inputs.shown(str(probe), limit=1000)} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"{where}: {inputs.shown(str(probe), limit=1000)} is not writable")


def _writable_dir(path: Path) -> Path:
    """``--output-dir``, created now: a path that cannot hold the files is refused up front."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--output-dir {path}: {exc.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"--output-dir {path}: not writable")
    return path.resolve()


def submit(
    cluster: Cluster,
    options: LaunchOptions,
    *,
    via: Launcher | None = None,
    request: JobRequest | None = None,
    extra: dict[str, Any] | None = None,
    on_plan: PlanHandler | None = None,
    on_sync: SyncHandler | None = None,
    on_output: OutputHandler | None = None,
) -> tuple[JobResult, jobs.JobRecord]:
    """Plan, record and run one job attached; the result and its finished record.

    Bad options raise UsageError before any record or node is touched; the head must be
    reachable with the cluster key (JobError otherwise) before the record is written.
    """
    via = via or MpirunLauncher()
    request = request or JobRequest(extra=dict(extra or {}))
    plan, record = _prepare(cluster, options, via, request, on_sync)
    if on_plan is not None:
        on_plan(plan, record)
    result = via.execute(cluster, plan, record, on_output=on_output, timeout=options.timeout)
    ranks.write_rank_files(record)
    return result, record


def submit_detached(
    cluster: Cluster,
    options: LaunchOptions,
    *,
    via: Launcher | None = None,
    request: JobRequest | None = None,
    on_plan: PlanHandler | None = None,
    on_sync: SyncHandler | None = None,
) -> jobs.JobRecord:
    """Plan, record and start one job detached (``--timeout`` does not apply: cancel it)."""
    if options.timeout is not None:
        raise UsageError("--timeout applies to attached runs; end a detached job with jobs cancel")
    via = via or MpirunLauncher()
    plan, record = _prepare(cluster, options, via, request or JobRequest(), on_sync)
    if on_plan is not None:
        on_plan(plan, record)
    return via.start(cluster, plan, record)
