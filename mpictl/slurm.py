"""Jobs through Slurm: ``mpictl run --launcher slurm`` and ``smoke --launcher slurm``.

A job is one ``sbatch`` batch script (:mod:`mpictl.slurm_plan`) submitted on the head as the MPI
user; inside its allocation ``srun --mpi=pmix --label`` starts the ranks directly (OpenMPI's ranks
wire up through Slurm's PMIx, no mpirun). ``--torch`` runs the same wrapper as under mpirun, which
reads ``SLURM_PROCID``/``SLURM_NTASKS``/``SLURM_LOCALID`` when OpenMPI's variables are absent.

The batch script keeps its output, pid and srun's exit code in ``~/.mpictl/slurm/<id>/`` on the
allocation's batch host; ``scripts/slurm_job.sh`` on the head reads them from there (over the
cluster's SSH mesh) and asks ``scontrol`` for the job's state: without slurmdbd there is no
``sacct``, and once slurmctld forgets a finished job (MinJobAge) its exit code file is the record.
Attached runs follow the output until the job ends; Ctrl-C, SIGTERM/SIGHUP and ``--timeout``
cancel it with ``scancel``.
"""

from __future__ import annotations

import contextlib
import shlex
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mpictl import detached, executor, jobs, network, planner, programs, remote, slurm_plan
from mpictl import settings as cluster_settings
from mpictl.errors import JobError
from mpictl.executor import JobResult, OutputHandler
from mpictl.inventory import Cluster
from mpictl.planner import LaunchOptions, LaunchPlan

SCRIPT = "slurm_job.sh"
CANCELLED_EXIT = 143
_STATUS = {"completed": jobs.SUCCEEDED, "failed": jobs.FAILED, "cancelled": jobs.CANCELLED}


@dataclass(frozen=True)
class SlurmState:
    slurm_id: str
    state: str  # pending, running, completed, failed, cancelled, timeout, lost
    exit_code: int | None
    batch_host: str | None
    nodes: list[str]

    @property
    def ended(self) -> bool:
        return self.state not in ("pending", "running")


def parse_state(line: str) -> SlurmState:
    """``ID STATE EXIT HOST NODES`` (``-`` for unknown) -> SlurmState; ValueError otherwise."""
    parts = line.split()
    if len(parts) != 5 or parts[1] not in (
        "pending",
        "running",
        "completed",
        "failed",
        "cancelled",
        "timeout",
        "lost",
    ):
        raise ValueError(f"not a Slurm job state: {line!r}")
    code = parts[2]
    if code != "-" and not code.lstrip("-").isdecimal():
        raise ValueError(f"not a Slurm job state: {line!r}")
    return SlurmState(
        slurm_id=parts[0],
        state=parts[1],
        exit_code=None if code == "-" else int(code),
        batch_host=None if parts[3] == "-" else parts[3],
        nodes=[] if parts[4] == "-" else parts[4].split(","),
    )


# --------------------------------------------------------------------------------------------
# On the head


def _command(action: str, *args: str) -> str:
    argv = ["bash", "-c", programs.source(SCRIPT), "mpictl-slurm", action, *args]
    return "exec " + shlex.join(argv)


def _spec(record: jobs.JobRecord) -> str:
    """``ID:DIR:HOST``: the batch host when it was seen, else every node the job could have
    run on (once slurmctld forgot the job, its files are looked for there)."""
    info = record.extra["slurm"]
    candidates = ",".join(str(h["host"]) for h in record.hosts) or "-"
    return f"{info['id']}:{info['dir']}:{info.get('batch_host') or candidates}"


def is_slurm(record: jobs.JobRecord) -> bool:
    return jobs.launcher_of(record) == "slurm"


def check(head: remote.HeadSSH) -> None:
    """JobError (one line, naming the fix) unless the head has a Slurm client."""
    proc = head.run(_command("check"), timeout=30)
    if proc.returncode == 255:  # ssh's own failure: say so as every job command does
        head.check_reachable()
    if proc.returncode != 0:
        raise JobError(
            f"--launcher slurm: {remote.last_line(proc.stderr) or 'cannot reach Slurm on the head'}"
        )


def submit_job(head: remote.HeadSSH, plan: LaunchPlan, record: jobs.JobRecord) -> jobs.JobRecord:
    """sbatch the plan's script on the head; the record notes the Slurm job."""
    directory = slurm_plan.remote_dir(plan.job_id)
    (record.directory / "job.sbatch").write_text(plan.script)
    proc = head.run(_command("submit", directory), stdin=plan.script, timeout=60)
    words = proc.stdout.split()
    if proc.returncode != 0 or len(words) != 2 or words[0] != "submitted":
        jobs.finish(record, exit_code=proc.returncode or 1, status=jobs.FAILED)
        why = remote.last_line(proc.stderr) or remote.last_line(proc.stdout) or proc.returncode
        raise JobError(f"{head.node.name}: sbatch refused job {record.id}: {why}")
    record.extra["slurm"] = {"id": words[1], "dir": directory}
    jobs.save(record)
    return record


def _note(record: jobs.JobRecord, state: SlurmState) -> None:
    """Keep the batch host and the allocation in the record (the hosts the job really got)."""
    changed = False
    info = record.extra["slurm"]
    if state.batch_host and info.get("batch_host") != state.batch_host:
        info["batch_host"] = state.batch_host
        changed = True
    if state.nodes and info.get("nodes") != state.nodes:
        info["nodes"] = state.nodes
        changed = True
    if changed:
        jobs.save(record)


def settle(record: jobs.JobRecord, state: SlurmState) -> jobs.JobRecord:
    """Finish ``record`` from Slurm's state (a pending/running job stays as it is). The record
    on disk wins: another mpictl (a cancel) may have finished it meanwhile."""
    current = jobs.load(record.id)
    if is_slurm(current):
        _note(current, state)
    if current.status != jobs.RUNNING or not state.ended:
        return current
    if state.state == "cancelled":
        return jobs.finish(current, exit_code=CANCELLED_EXIT, status=jobs.CANCELLED)
    if state.state == "timeout":
        return jobs.finish(current, exit_code=executor.TIMEOUT_EXIT, status="timeout")
    if state.state == "lost":
        return jobs.finish(current, exit_code=-1, status=jobs.UNKNOWN)
    code = state.exit_code if state.exit_code is not None else 1
    if state.state == "failed" and code == 0:
        code = 1  # NODE_FAIL, BOOT_FAIL, ...: Slurm ended it, the script never returned
    status = _STATUS.get(state.state, jobs.FAILED) if code == 0 else jobs.status_of(code)
    return jobs.finish(current, exit_code=code, status=status)


def states(head: remote.HeadSSH, records: Sequence[jobs.JobRecord]) -> dict[str, SlurmState]:
    """mpictl job id -> its Slurm state (one SSH call for all of them)."""
    if not records:
        return {}
    by_slurm = {r.extra["slurm"]["id"]: r.id for r in records}
    proc = head.run(_command("state", *(_spec(r) for r in records)), timeout=60)
    if proc.returncode != 0:
        raise JobError(
            f"{head.node.name}: cannot read the Slurm jobs' state: {remote.last_line(proc.stderr)}"
        )
    out = {}
    for line in proc.stdout.splitlines():
        with contextlib.suppress(ValueError):
            state = parse_state(line)
            if state.slurm_id in by_slurm:
                out[by_slurm[state.slurm_id]] = state
    return out


def fetch_output(
    head: remote.HeadSSH,
    record: jobs.JobRecord,
    *,
    follow: bool = False,
    on_output: Callable[[str], None] | None = None,
) -> SlurmState | None:
    """Append what the batch host has beyond the record's output to it (following the job until
    it ends with ``follow``), then settle the record. One fetch at a time per job appends (the
    lock detached jobs use): another one meanwhile returns None."""
    with detached.fetch_lock(record) as locked:
        if not locked:
            return None
        info = record.extra["slurm"]
        offset = record.output_path.stat().st_size if record.output_path.exists() else 0
        args = [info["id"], info["dir"], info.get("batch_host") or "-", str(offset)]
        command = _command("logs", *args, *(["follow"] if follow else []))
        state = parse_state(detached.stream_output(head, record, command, on_output))
        settle(record, state)
        return state


def cancel(head: remote.HeadSSH, record: jobs.JobRecord) -> SlurmState:
    """scancel a pending or running job and wait until Slurm ended it; the record says
    cancelled (or how it ended, if it ended first)."""
    if record.status != jobs.RUNNING:
        raise jobs.not_running(record)
    proc = head.run(_command("cancel", _spec(record)), timeout=90)
    try:
        state = parse_state(remote.last_line(proc.stdout))
    except ValueError:
        raise JobError(
            f"{head.node.name}: cannot cancel Slurm job {record.extra['slurm']['id']}: "
            f"{remote.last_line(proc.stderr) or proc.returncode}"
        ) from None
    settle(record, state)
    with contextlib.suppress(JobError):  # the output so far; the job is over
        fetch_output(head, record)
    return state


# --------------------------------------------------------------------------------------------
# The launcher


class SlurmLauncher:
    """sbatch on the head as the MPI user; srun --mpi=pmix starts the ranks."""

    name = "slurm"

    def __init__(self, head: remote.HeadSSH | None = None) -> None:
        self._head = head
        self._checked = False

    def plan(self, cluster: Cluster, options: LaunchOptions, job_id: str) -> LaunchPlan:
        settings = cluster_settings.for_cluster(cluster)
        nodes = planner.select_nodes(cluster, options.hosts)
        net = network.derive_network(cluster, nodes)
        return slurm_plan.plan(cluster, options, job_id, net, settings)

    def prepare(self, cluster: Cluster) -> remote.HeadSSH:
        head = self._head or remote.HeadSSH.for_cluster(cluster)
        if not self._checked:  # the head answers and has Slurm, before any record
            check(head)
            self._head, self._checked = head, True
        return head

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
        started = time.monotonic()
        submit_job(head, plan, record)
        return follow(head, record, started, on_output=on_output, timeout=timeout)

    def start(self, cluster: Cluster, plan: LaunchPlan, record: jobs.JobRecord) -> jobs.JobRecord:
        return submit_job(self.prepare(cluster), plan, record)


def follow(
    head: remote.HeadSSH,
    record: jobs.JobRecord,
    started: float,
    *,
    on_output: OutputHandler | None,
    timeout: float | None,
) -> JobResult:
    """Stream a submitted job's output until it ends; cancel it on timeout, Ctrl-C, SIGTERM or
    SIGHUP (status timeout/interrupted, exit 124/130/143/129)."""
    result: dict[str, SlurmState | BaseException | None] = {}

    def stream(text: str) -> None:
        if on_output is not None:
            on_output("stdout", text)

    def fetch() -> None:
        try:
            result["state"] = fetch_output(head, record, follow=True, on_output=stream)
        except BaseException as exc:  # noqa: BLE001 - reported by the waiting thread
            result["error"] = exc

    fetcher = threading.Thread(target=fetch, daemon=True)
    fetcher.start()
    with executor.EndingSignals() as signals:
        status, exit_code = executor.wait_until(fetcher.is_alive, timeout, started, signals)
        if status:  # finished first: the fetcher's settle then leaves the record alone
            jobs.finish(jobs.load(record.id), exit_code=exit_code, status=status)
            _end(head, record, status, on_output)
    fetcher.join(timeout=30)
    if "error" in result and not status:
        error = result["error"]
        raise error if isinstance(error, JobError) else JobError(str(error))
    final = jobs.load(record.id)
    code = final.exit_code if final.exit_code is not None else 1
    return JobResult(record.id, code, final.status, time.monotonic() - started)


def _end(
    head: remote.HeadSSH, record: jobs.JobRecord, status: str, on_output: OutputHandler | None
) -> None:
    info = record.extra.get("slurm") or jobs.load(record.id).extra["slurm"]
    # only on the terminal: the record's output is the batch host's, byte for byte (its size is
    # where the next fetch resumes)
    if on_output is not None:
        on_output("stderr", f"mpictl: {status}: cancelling Slurm job {info['id']}\n")
    proc = head.run(_command("cancel", _spec(jobs.load(record.id))), timeout=90)
    with contextlib.suppress(ValueError):
        _note(jobs.load(record.id), parse_state(remote.last_line(proc.stdout)))
