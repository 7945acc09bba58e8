"""One way in for every job: plan it, record it, execute it (``run``, ``smoke`` and ``bench``).

A *launcher* turns options into a plan and executes a plan; :func:`submit` is the sequence
around it (plan → job record → execute → finished record) that every caller shares. The mpirun
launcher plans with :mod:`mpictl.planner` and executes with :mod:`mpictl.executor`. A second
launcher (Slurm's sbatch/srun) implements :class:`Launcher` and registers in :data:`LAUNCHERS`;
the planner and the callers stay as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from mpictl import jobs, network, planner, remote
from mpictl import settings as cluster_settings
from mpictl.errors import UsageError
from mpictl.executor import JobResult, OutputHandler, execute
from mpictl.inventory import Cluster
from mpictl.planner import LaunchOptions, LaunchPlan

PlanHandler = Callable[[LaunchPlan, jobs.JobRecord], None]


class Launcher(Protocol):
    name: str

    def plan(self, cluster: Cluster, options: LaunchOptions, job_id: str) -> LaunchPlan:
        """Validate ``options`` (UsageError, nothing started) and plan the job."""
        ...

    def prepare(self, cluster: Cluster) -> None:
        """Check that a job can start at all (JobError naming the fix), before it is recorded."""
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
        """Run the plan, stream its output into ``record`` and finish the record."""
        ...


class MpirunLauncher:
    """mpirun on the head node as the MPI user, attached to this process."""

    name = "mpirun"

    def __init__(self, head: remote.HeadSSH | None = None) -> None:
        self._head = head

    def plan(self, cluster: Cluster, options: LaunchOptions, job_id: str) -> LaunchPlan:
        settings = cluster_settings.for_cluster(cluster)
        return planner.plan(cluster, options, job_id, network.derive_network(cluster), settings)

    def prepare(self, cluster: Cluster) -> None:
        self._head = self._head or remote.HeadSSH.for_cluster(cluster)  # the cluster key exists

    def execute(
        self,
        cluster: Cluster,
        plan: LaunchPlan,
        record: jobs.JobRecord,
        *,
        on_output: OutputHandler | None,
        timeout: float | None,
    ) -> JobResult:
        head = self._head or remote.HeadSSH.for_cluster(cluster)
        return execute(plan, record, head, on_output=on_output, timeout=timeout)


LAUNCHERS: dict[str, Callable[..., Launcher]] = {"mpirun": MpirunLauncher}


def launcher(name: str, **kwargs: Any) -> Launcher:
    """The launcher called ``name``; UsageError naming the valid ones otherwise."""
    factory = LAUNCHERS.get(name)
    if factory is None:
        raise UsageError(f"unknown launcher '{name}' (choose from {', '.join(LAUNCHERS)})")
    return factory(**kwargs)


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
        inventory=str(cluster.source),
        head=cluster.head.name,
        hosts=plan.hosts,
        ranks=plan.ranks,
        extra=extra,
    )


def submit(
    cluster: Cluster,
    options: LaunchOptions,
    *,
    via: Launcher | None = None,
    extra: dict[str, Any] | None = None,
    on_plan: PlanHandler | None = None,
    on_output: OutputHandler | None = None,
) -> tuple[JobResult, jobs.JobRecord]:
    """Plan, record and run one job; the result and its finished record.

    Bad options raise UsageError before any record or node is touched; the head must be
    reachable with the cluster key (JobError otherwise) before the record is written.
    """
    via = via or MpirunLauncher()
    job_id = jobs.new_id()
    plan = via.plan(cluster, options, job_id)
    via.prepare(cluster)
    record = create_record(cluster, plan, options.command, extra)
    if on_plan is not None:
        on_plan(plan, record)
    result = via.execute(cluster, plan, record, on_output=on_output, timeout=options.timeout)
    return result, record
