"""Job records under ``<state>/jobs/<id>/``.

Each job directory holds ``job.json`` (command, launcher command line, inventory, hosts, ranks,
start, end, exit code, status, and the controller process that supervises it) and ``output.log``
(everything the job printed, stdout and stderr in the order they arrived). This module takes
plain values: it knows nothing about launchers or plans (but the name of the one a record keeps).

A record still ``running`` whose controller process is gone (killed with SIGKILL, a crashed
controller) is reported as ``unknown``: an attached job ends with its controller's SSH channel,
so it is not running any more, but how it ended was never recorded.

A job id is ``YYYYMMDD-HHMMSS-xxxxxx`` (:func:`new_id`); a user may give any unique prefix of
one. Ids are never paths: anything else is an unknown job before a file is read, and a prefix is
matched against the names in the jobs dir (entries that are not ids are ignored). A record that
does not read (not JSON, not an object, a field of the wrong type, an id that is not its
directory's name) is a one-line JobError for the commands that act on it, and an ``unreadable``
row in :func:`list_jobs`. A state dir that cannot be used is :func:`paths.unusable`.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mpictl import paths
from mpictl.errors import JobError, UsageError
from mpictl.inputs import quoted, shown

RECORD = "job.json"
OUTPUT = "output.log"
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"
UNKNOWN = "unknown"
UNREADABLE = "unreadable"  # a record that does not read (listed, never acted on)
WHAT = "job records"  # what the state dir keeps in jobs/ (for paths.unusable)

ID = re.compile(r"[0-9]{8}-[0-9]{6}-[0-9a-f]{6}")
_FILLER = "00000000-000000-000000"  # completes a prefix into an id of the same shape


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
    if not is_id(record.id) or record.status == UNREADABLE:  # a bug: ids are never paths
        raise ValueError(f"not a job record to write: {record.id!r} ({record.status})")
    directory = paths.ensure_dir(record.directory, WHAT)
    tmp = directory / (RECORD + ".tmp")
    try:
        tmp.write_text(json.dumps(record.to_json(), indent=2) + "\n")
        os.replace(tmp, directory / RECORD)
    except OSError as exc:
        raise paths.unusable(directory, WHAT, exc) from None


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
    try:
        record.output_path.touch()
    except OSError as exc:
        raise paths.unusable(record.directory, WHAT, exc) from None
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


def is_id(text: str) -> bool:
    """``text`` is a whole job id (``YYYYMMDD-HHMMSS-xxxxxx``, 6 lowercase hex)."""
    return isinstance(text, str) and ID.fullmatch(text) is not None


def is_prefix(text: str) -> bool:
    """``text`` is a non-empty prefix of some job id (digits, dashes and hex where an id has
    them, no longer than one)."""
    return (
        isinstance(text, str)
        and 0 < len(text) <= len(_FILLER)
        and is_id(text + _FILLER[len(text) :])
    )


def _unknown(job_id: str) -> UsageError:
    return UsageError(f"unknown job {quoted(job_id)} (see `mpictl jobs list`)")


def _recorded() -> list[str]:
    """The ids of the jobs dir's entries that hold a record, sorted (other entries ignored)."""
    base = paths.jobs_dir()
    return [
        name
        for name in paths.entries(base, WHAT)
        if is_id(name) and os.path.lexists(base / name / RECORD)
    ]


def find(job_id: str) -> str:
    """The id of the one recorded job ``job_id`` is, or is a prefix of; UsageError (exit 2)
    when it is not an id or a prefix of one, when no job or more than one matches."""
    if not is_prefix(job_id):
        raise UsageError(
            f"unknown job {quoted(job_id)}: a job id is YYYYMMDD-HHMMSS-xxxxxx or a prefix of "
            "one (see `mpictl jobs list`)"
        )
    known = _recorded()
    if job_id in known:
        return job_id
    matches = [name for name in known if name.startswith(job_id)]
    if not matches:
        raise _unknown(job_id)
    if len(matches) > 1:
        some = ", ".join(matches[:3]) + (", ..." if len(matches) > 3 else "")
        raise UsageError(f"job id '{job_id}' is ambiguous ({len(matches)} jobs match: {some})")
    return matches[0]


def load(job_id: str) -> JobRecord:
    """The record of ``job_id`` (a unique prefix is enough); UsageError when unknown, JobError
    when its record does not read."""
    found = find(job_id)
    path = paths.jobs_dir() / found / RECORD
    try:
        return resolved(_read(path, found))
    except FileNotFoundError:  # removed since the listing
        raise _unknown(job_id) from None
    except _Unreadable as exc:
        raise JobError(
            f"job {found}: its record {shown(path)} is unreadable ({exc}); remove "
            f"{shown(path.parent)} to forget the job"
        ) from None


class _Unreadable(Exception):
    """A record that is not what :func:`_write` writes (the message says how)."""


def _read(path: Path, job_id: str) -> JobRecord:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise
    except UnicodeDecodeError:
        raise _Unreadable("not UTF-8 text") from None
    except OSError as exc:
        raise _Unreadable(exc.strerror or str(exc)) from None
    if not text.strip():
        raise _Unreadable("empty")
    try:
        data = json.loads(text)
    except ValueError as exc:  # JSONDecodeError, and numbers past the int digit limit
        raise _Unreadable(f"not JSON: {shown(exc, 80)}") from None
    except RecursionError:
        raise _Unreadable("not JSON: nested too deep") from None
    return _record(data, job_id)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _hosts(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(h, dict) and isinstance(h.get("host"), str) for h in value
    )


def _extra(value: Any) -> bool:
    """The keys other modules read from ``extra`` have the shape they write."""
    if not isinstance(value, dict) or not isinstance(value.get("output_dir", ""), str):
        return False
    on_head, in_slurm = value.get("detached", {"dir": ""}), value.get("slurm", {})
    return (
        isinstance(on_head, dict)
        and isinstance(on_head.get("dir"), str)
        and isinstance(in_slurm, dict)
        and ("id" not in in_slurm or isinstance(in_slurm.get("dir"), str))
    )


# field -> (its check, what it must be, whether a record may lack it)
_FIELDS: dict[str, tuple[Any, str, bool]] = {
    "id": (is_id, "a job id", False),
    "command": (_strings, "a list of strings", False),
    "mpirun": (lambda v: isinstance(v, str), "a string", False),
    "inventory": (lambda v: isinstance(v, str), "a string", False),
    "head": (lambda v: isinstance(v, str), "a string", False),
    "hosts": (_hosts, "a list of {host: name}", False),
    "ranks": (_int, "an integer", False),
    "start": (_number, "a number", False),
    "end": (lambda v: v is None or _number(v), "a number or null", True),
    "exit_code": (lambda v: v is None or _int(v), "an integer or null", True),
    "status": (lambda v: isinstance(v, str), "a string", True),
    "extra": (_extra, "an object of the shape mpictl writes", True),
    "controller": (lambda v: isinstance(v, dict), "an object", True),
}


def _record(data: Any, job_id: str) -> JobRecord:
    """``data`` (a parsed ``job.json``) as the record of ``job_id``; _Unreadable otherwise."""
    if not isinstance(data, dict):
        raise _Unreadable(
            f"a JSON {type(data).__name__ if data is not None else 'null'}, not an object"
        )
    for name, (check, must, optional) in _FIELDS.items():
        if name not in data:
            if optional:
                continue
            raise _Unreadable(f"no {name!r}")
        if not check(data[name]):
            raise _Unreadable(f"{name!r} is not {must}")
    if data["id"] != job_id:
        raise _Unreadable(f"its id {quoted(data['id'])} is not its directory's name")
    return JobRecord(**{k: v for k, v in data.items() if k in _FIELDS})


def _started(job_id: str) -> float:
    """When the job started, from its id (the controller's local time); 0 if it is no date."""
    try:
        return time.mktime(time.strptime(job_id[:15], "%Y%m%d-%H%M%S"))
    except (ValueError, OverflowError):
        return 0.0


def unreadable(job_id: str, path: Path, why: str) -> JobRecord:
    """The stand-in :func:`list_jobs` lists for a record that does not read: status
    ``unreadable``, ``extra["unreadable"]`` says why, the start read from the id."""
    return JobRecord(
        id=job_id,
        command=[],
        mpirun="",
        inventory="",
        head="",
        hosts=[],
        ranks=0,
        start=_started(job_id),
        status=UNREADABLE,
        extra={"unreadable": f"{path}: {why}"},
    )


def list_jobs() -> list[JobRecord]:
    """Every recorded job, oldest first; a record that does not read is listed as
    :func:`unreadable` (never dropped)."""
    out = []
    for job_id in _recorded():
        path = paths.jobs_dir() / job_id / RECORD
        try:
            out.append(resolved(_read(path, job_id)))
        except FileNotFoundError:  # removed since the listing
            continue
        except _Unreadable as exc:
            out.append(unreadable(job_id, path, str(exc)))
    return sorted(out, key=lambda r: (r.start, r.id))


def output_bytes(record: JobRecord, offset: int = 0) -> bytes:
    """The job's output as written, from byte ``offset`` (none yet: empty); JobError when the
    file does not read."""
    try:
        with record.output_path.open("rb") as fh:
            fh.seek(offset)
            return fh.read()
    except FileNotFoundError:
        return b""
    except OSError as exc:
        raise JobError(
            f"job {record.id}: its output {shown(record.output_path)} does not read "
            f"({exc.strerror or exc})"
        ) from None


def output(job_id: str) -> str:
    return output_bytes(load(job_id)).decode("utf-8", errors="replace")


def writable(record: JobRecord) -> None:
    """UsageError (:func:`paths.unusable`) unless this process can write the job's record."""
    paths.ensure_dir(record.directory, WHAT)


def launcher_of(record: JobRecord) -> str:
    """The launcher that ran the record's job: ``slurm`` where the record keeps a Slurm job."""
    return "slurm" if "slurm" in record.extra else "mpirun"


def output_text(record: JobRecord) -> str:
    """The record's output as written: no newline translation (carriage returns stay)."""
    return output_bytes(record).decode("utf-8", errors="replace")
