"""Job records of ``mpictl run`` under ``<state>/jobs/<id>/``.

Each job directory holds ``job.json`` (command, mpirun command line, inventory, hosts, ranks,
start, end, exit code, status) and ``output.log`` (everything the job printed, stdout and stderr
in the order they arrived).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mpictl import paths
from mpictl.errors import UsageError

if TYPE_CHECKING:
    from mpictl.inventory import Cluster
    from mpictl.launch import LaunchPlan

RECORD = "job.json"
OUTPUT = "output.log"


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
    status: str = "running"
    extra: dict[str, Any] = field(default_factory=dict)

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


def _write(record: JobRecord) -> None:
    record.directory.mkdir(parents=True, exist_ok=True)
    tmp = record.directory / (RECORD + ".tmp")
    tmp.write_text(json.dumps(record.to_json(), indent=2) + "\n")
    os.replace(tmp, record.directory / RECORD)


def create(
    cluster: Cluster,
    plan: LaunchPlan,
    user_command: list[str] | None = None,
    extra: dict[str, Any] | None = None,
) -> JobRecord:
    """Record a job that is about to start (status ``running``) and create its output file."""
    record = JobRecord(
        id=plan.job_id,
        command=list(user_command if user_command is not None else plan.command),
        mpirun=plan.display,
        inventory=str(cluster.source),
        head=cluster.head.name,
        hosts=[{"host": h, "slots": s} for h, s in plan.hosts],
        ranks=plan.ranks,
        start=time.time(),
        extra=dict(extra or {}),
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
    return _read(candidates[0])


def _read(path: Path) -> JobRecord:
    data = json.loads(path.read_text())
    known = set(JobRecord.__dataclass_fields__)
    return JobRecord(**{k: v for k, v in data.items() if k in known})


def list_jobs() -> list[JobRecord]:
    """Every recorded job, oldest first (unreadable records are skipped)."""
    out = []
    for path in sorted(paths.jobs_dir().glob(f"*/{RECORD}")):
        try:
            out.append(_read(path))
        except (OSError, ValueError, TypeError):
            continue
    return sorted(out, key=lambda r: (r.start, r.id))


def output(job_id: str) -> str:
    record = load(job_id)
    try:
        return record.output_path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
