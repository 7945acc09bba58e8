"""Job records under ``<state>/jobs/<id>/``.

Each job directory holds ``job.json`` (command, launcher command line, inventory, hosts, ranks,
start, end, exit code, status, and the controller process that supervises it) and ``output.log``
(everything the job printed, stdout and stderr in the order they arrived). This module takes
plain values: it knows nothing about launchers or plans.

A record still ``running`` whose controller process is gone (killed with SIGKILL, a crashed
controller) is reported as ``unknown``: an attached job ends with its controller's SSH channel,
so it is not running any more, but how it ended was never recorded.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mpictl import paths
from mpictl.errors import UsageError

RECORD = "job.json"
OUTPUT = "output.log"
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"
UNKNOWN = "unknown"


@dataclass
class JobRecord:
    id: str
    command: list[str]
    mpirun: str
    inventory: str
    head: str
    hosts: list[dict[str, Any]]
    ranks: int
    start: float
    end: float | None = None
    exit_code: int | None = None
    status: str = RUNNING
    extra: dict[str, Any] = field(default_factory=dict)
    controller: dict[str, Any] = field(default_factory=dict)  # host, pid, pid_start

    @property
    def directory(self) -> Path:
        return paths.jobs_dir() / self.id

    @property
    def output_path(self) -> Path:
        return self.directory / OUTPUT

    @property
    def duration_s(self) -> float | None:
        return None if self.end is None else self.end - self.start

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def new_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]


def _process_start(pid: int) -> str | None:
    """The start time of ``pid`` in clock ticks since boot (tells a reused pid apart)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]  # field 22 of proc(5), counted after "(comm)"


def _this_controller() -> dict[str, Any]:
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "pid_start": _process_start(pid)}


def controller_alive(controller: dict[str, Any]) -> bool | None:
    """Whether the process that supervises a job still runs: None when it cannot be told (no
    controller recorded, or another host's)."""
    pid = controller.get("pid")
    if not isinstance(pid, int) or controller.get("host") != socket.gethostname():
        return None
    return _process_start(pid) is not None and _process_start(pid) == controller.get("pid_start")


def status_of(exit_code: int) -> str:
    """The status of a job that ended by itself with ``exit_code``."""
    return SUCCEEDED if exit_code == 0 else FAILED


def not_running(record: JobRecord) -> UsageError:
    """The error for acting on a job that has ended (its status and exit code named)."""
    code = f", exit code {record.exit_code}" if record.exit_code is not None else ""
    return UsageError(f"job {record.id} is not running (status {record.status}{code})")


def save(record: JobRecord) -> None:
    """Write ``record`` (atomically: readers never see half a record)."""
    _write(record)


def _write(record: JobRecord) -> None:
    record.directory.mkdir(parents=True, exist_ok=True)
    tmp = record.directory / (RECORD + ".tmp")
    tmp.write_text(json.dumps(record.to_json(), indent=2) + "\n")
    os.replace(tmp, record.directory / RECORD)


def create(
    job_id: str,
    *,
    command: Sequence[str],
    launch_line: str,
    inventory: str,
    head: str,
    hosts: Sequence[tuple[str, int]],
    ranks: int,
    extra: dict[str, Any] | None = None,
) -> JobRecord:
    """Record a job that is about to start (status ``running``) and create its output file."""
    record = JobRecord(
        id=job_id,
        command=list(command),
        mpirun=launch_line,
        inventory=inventory,
        head=head,
        hosts=[{"host": h, "slots": s} for h, s in hosts],
        ranks=ranks,
        start=time.time(),
        extra=dict(extra or {}),
        controller=_this_controller(),
    )
    _write(record)
    record.output_path.touch()
    return record


def finish(record: JobRecord, *, exit_code: int, status: str) -> JobRecord:
    record.end = time.time()
    record.exit_code = exit_code
    record.status = status
    _write(record)
    return record


def resolved(record: JobRecord) -> JobRecord:
    """``record`` with status ``unknown`` when it says running but the controller process that
    supervised it is gone (a detached or Slurm job is supervised on the cluster: ``jobs list``
    asks it)."""
    if record.status == "ok":  # the name of success in records of mpictl before 0.2
        record.status = SUCCEEDED
    elsewhere = "detached" in record.extra or "slurm" in record.extra  # supervised on the cluster
    if record.status == RUNNING and not elsewhere and controller_alive(record.controller) is False:
        record.status = UNKNOWN
    return record


def load(job_id: str) -> JobRecord:
    """The record of ``job_id`` (a unique prefix is enough); UsageError when unknown."""
    base = paths.jobs_dir()
    exact = base / job_id / RECORD
    if exact.is_file():
        candidates = [exact]
    else:
        candidates = sorted(base.glob(f"{job_id}*/{RECORD}")) if job_id else []
    if not candidates:
        raise UsageError(f"unknown job '{job_id}' (see `mpictl jobs list`)")
    if len(candidates) > 1:
        raise UsageError(f"job id '{job_id}' is ambiguous ({len(candidates)} jobs match)")
    return resolved(_read(candidates[0]))


def _read(path: Path) -> JobRecord:
    data = json.loads(path.read_text())
    known = set(JobRecord.__dataclass_fields__)
    return JobRecord(**{k: v for k, v in data.items() if k in known})


def list_jobs() -> list[JobRecord]:
    """Every recorded job, oldest first (unreadable records are skipped)."""
    out = []
    for path in sorted(paths.jobs_dir().glob(f"*/{RECORD}")):
        try:
            out.append(resolved(_read(path)))
        except (OSError, ValueError, TypeError):
            continue
    return sorted(out, key=lambda r: (r.start, r.id))


def output(job_id: str) -> str:
    record = load(job_id)
    try:
        return record.output_path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
