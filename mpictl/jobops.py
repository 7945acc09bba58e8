"""What the ``jobs`` commands do to recorded jobs: list them (asking each head about its running
detached jobs), show their output (following it), and cancel them.

A detached job lives on its head (:mod:`mpictl.detached`); its record is brought up to date from
there. An attached job lives in the ``mpictl run`` process that supervises it: following it
reads its record's output as that process writes it, and cancelling it signals that process,
which ends the job on every node as Ctrl-C does.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

from mpictl import detached, jobs, ranks, remote, slurm
from mpictl.errors import JobError
from mpictl.executor import CleanupReport
from mpictl.inventory import load_inventory

Printer = Callable[[str], None]
POLL_S = 0.5


def _head(record: jobs.JobRecord) -> remote.HeadSSH:
    return remote.HeadSSH.for_cluster(load_inventory(record.inventory))


def _hosts(record: jobs.JobRecord) -> list[str]:
    return [str(h["host"]) for h in record.hosts]


def refresh(records: list[jobs.JobRecord]) -> tuple[list[jobs.JobRecord], list[str]]:
    """``records`` with every running detached or Slurm job settled from its head's state;
    notes for heads that could not be asked (their jobs stay as recorded)."""
    by_inventory: dict[str, list[jobs.JobRecord]] = {}
    for record in records:
        if record.status == jobs.RUNNING and _remote(record):
            by_inventory.setdefault(record.inventory, []).append(record)
    notes = []
    settled: dict[str, jobs.JobRecord] = {}
    for inventory, group in by_inventory.items():
        try:
            settled.update(_settle_group(_head(group[0]), group))
        except Exception as exc:  # noqa: BLE001 - one unreachable head must not hide the list
            notes.append(f"{inventory}: could not ask the head ({exc})")
    records = [settled.get(r.id, r) for r in records]
    return records, notes


def _remote(record: jobs.JobRecord) -> bool:
    """Whether the job lives on the cluster (detached on its head, or in Slurm)."""
    return detached.is_detached(record) or slurm.is_slurm(record)


def _settle_group(head: remote.HeadSSH, group: list[jobs.JobRecord]) -> dict[str, jobs.JobRecord]:
    settled = {}
    on_head = [r for r in group if detached.is_detached(r)]
    for job_id, state in detached.states(head, on_head).items():
        settled[job_id] = detached.settle(jobs.load(job_id), state)
    in_slurm = [r for r in group if slurm.is_slurm(r)]
    for job_id, sstate in slurm.states(head, in_slurm).items():
        settled[job_id] = slurm.settle(jobs.load(job_id), sstate)
    for record in settled.values():
        ranks.write_rank_files(record)
    return settled


def logs(job_id: str, *, follow: bool = False, rank: int | None = None, out: Printer) -> int | None:
    """Print a job's output (``rank``: that rank's only); with ``follow``, until the job ends.
    The job's exit code when it has ended, else None."""
    record = jobs.load(job_id)
    launcher = jobs.launcher_of(record)
    if rank is not None:
        ranks.of_rank("", rank, record.ranks)  # a rank the job did not have: refused up front
    if _unfetched(record):
        jobs.writable(record)  # its output is fetched into the record's directory
    printed = 0
    if rank is None:
        data = jobs.output_bytes(record)
        if data:
            out(data.decode("utf-8", errors="replace"))
        printed = len(data)
    stream = None if rank is not None else out
    state = None
    if detached.is_detached(record) and not record.extra["detached"].get("fetched"):
        state = detached.fetch_output(_head(record), record, follow=follow, on_output=stream)
        if state is not None and state.state != "running":
            current = jobs.load(record.id)  # settled meanwhile, here or by another mpictl
            current.extra["detached"]["fetched"] = True
            jobs.save(current)
            ranks.write_rank_files(current)
    if slurm.is_slurm(record) and not record.extra["slurm"].get("fetched"):
        state = _fetch_slurm(record, follow=follow, out=stream)
    busy = _remote(record) and state is None  # another mpictl is fetching it
    if follow and record.status == jobs.RUNNING and (busy or not _remote(record)):
        _follow_local(record, printed, stream)  # what the process that holds the job appends
    if rank is not None:
        text = jobs.output_text(jobs.load(record.id))
        out(ranks.of_rank(text, rank, record.ranks, launcher=launcher))
    record = jobs.load(record.id)
    if record.status == jobs.RUNNING:
        return None
    code = record.exit_code if record.exit_code is not None else 1
    return code if code >= 0 else 1  # a lost job: its exit code was never known


def _unfetched(record: jobs.JobRecord) -> bool:
    """Whether the job's output is still to be fetched from the cluster."""
    return (detached.is_detached(record) and not record.extra["detached"].get("fetched")) or (
        slurm.is_slurm(record) and not record.extra["slurm"].get("fetched")
    )


def _fetch_slurm(record: jobs.JobRecord, *, follow: bool, out: Printer | None) -> object:
    """The Slurm job's output from its batch host (None when another mpictl is fetching it)."""
    if "id" not in record.extra["slurm"]:
        return None
    state = slurm.fetch_output(_head(record), record, follow=follow, on_output=out)
    if state is not None and state.ended:
        current = jobs.load(record.id)
        current.extra["slurm"]["fetched"] = True
        jobs.save(current)
        ranks.write_rank_files(current)
    return state


def _follow_local(record: jobs.JobRecord, offset: int, out: Printer | None) -> None:
    """Print what an attached job's supervisor appends to its output, until the job ends."""
    while True:
        chunk = jobs.output_bytes(record, offset)
        offset += len(chunk)
        if chunk and out is not None:
            out(chunk.decode("utf-8", errors="replace"))
        if jobs.load(record.id).status != jobs.RUNNING:
            rest = jobs.output_bytes(record, offset)
            if rest and out is not None:
                out(rest.decode("utf-8", errors="replace"))
            return
        time.sleep(POLL_S)


def cancel(job_id: str) -> dict[str, Any]:
    """End a running job on every node; what happened, for the CLI to print."""
    record = jobs.load(job_id)
    if record.status == jobs.RUNNING:
        jobs.writable(record)  # the cancel is recorded: a state dir that cannot be written says so
    if record.status == jobs.RUNNING and _remote(record):
        record = refresh([record])[0][0]  # ended by itself: settled, not cancelled
    if record.status != jobs.RUNNING:
        raise jobs.not_running(record)
    if slurm.is_slurm(record) and "id" in record.extra["slurm"]:
        state = slurm.cancel(_head(record), record)
        record = jobs.load(record.id)
        ranks.write_rank_files(record)
        return {
            "job": record.id,
            "status": record.status,
            "cleanup": f"scancel (Slurm: {state.state})",
        }
    if detached.is_detached(record):
        report = detached.cancel(_head(record), record, _hosts(record))
        record = jobs.load(record.id)  # settled by the cancel (or by the job's own end)
        ranks.write_rank_files(record)
        return {"job": record.id, "status": record.status, "cleanup": _summary(report)}
    return _cancel_attached(record)


def _cancel_attached(record: jobs.JobRecord) -> dict[str, Any]:
    """Signal the ``mpictl run`` that supervises the job (it ends the job everywhere)."""
    pid = record.controller.get("pid")
    if jobs.controller_alive(record.controller) is not True or not isinstance(pid, int):
        raise JobError(
            f"job {record.id} is attached to an mpictl run on {record.controller.get('host')} "
            "that this machine cannot signal; end it there (Ctrl-C)"
        )
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        current = jobs.load(record.id)
        if current.status != jobs.RUNNING:
            return {"job": record.id, "status": current.status, "cleanup": "by its mpictl run"}
        time.sleep(POLL_S)
    raise JobError(f"job {record.id}: its mpictl run (pid {pid}) did not end it within 60 s")


def _summary(report: CleanupReport) -> str:
    text = f"{report.killed} leftover process(es) ended"
    if report.left:
        text += f"; could not verify {', '.join(report.left)}"
    return text
