"""Detached jobs: started on the head, supervised there, independent of the controller.

``mpictl run --detach`` starts the planned mpirun on the head through
``scripts/job_detached.sh start`` (a transient systemd user unit where the MPI user has a
systemd manager, a session of its own through setsid otherwise; no daemon of mpictl's) and
returns once mpirun runs. The head keeps the job's output, pid and exit code in
``~/.mpictl/jobs/<id>/``; the controller's record fetches them: ``jobs logs [-f]`` streams the
output (following it until the job ends), ``jobs list`` asks the head for the state of running
jobs, and ``jobs cancel`` ends the job's process group on the head and then whatever still
carries the job's id on every node (the cleanup attached jobs use).
"""

from __future__ import annotations

import contextlib
import fcntl
import shlex
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from mpictl import executor, jobs, programs, remote
from mpictl.errors import JobError
from mpictl.planner import LaunchPlan

SCRIPT = "job_detached.sh"
REMOTE_BASE = ".mpictl/jobs"  # relative to the MPI user's home on the head
CANCELLED_EXIT = 143


@dataclass(frozen=True)
class HeadState:
    state: str  # "running", "exited", "cancelled", "lost"
    exit_code: int | None = None
    watchdog: bool = False  # the watchdog ended mpirun after every rank had ended


def remote_dir(job_id: str) -> str:
    return f"{REMOTE_BASE}/{job_id}"


def _command(action: str, *args: str, env: Sequence[str] = ()) -> str:
    argv = ["bash", "-c", programs.source(SCRIPT), "mpictl-detached", action, *args]
    return "exec " + shlex.join(["env", *env, *argv] if env else argv)


def parse_state(line: str) -> tuple[str, HeadState]:
    """``DIR exited RC [watchdog]`` / ``DIR cancelled`` / ``DIR running`` / ``DIR lost`` ->
    (dir, state)."""
    parts = line.split()
    if (
        len(parts) in (3, 4)
        and parts[1] == "exited"
        and parts[2].lstrip("-").isdecimal()
        and parts[3:] in ([], ["watchdog"])
    ):
        return parts[0], HeadState("exited", int(parts[2]), watchdog=len(parts) == 4)
    if len(parts) == 2 and parts[1] in ("running", "cancelled", "lost"):
        return parts[0], HeadState(parts[1])
    raise ValueError(f"not a job state: {line!r}")


def start(head: remote.HeadSSH, plan: LaunchPlan, record: jobs.JobRecord) -> jobs.JobRecord:
    """Start ``plan`` detached on the head; the record notes where and how it runs."""
    directory = remote_dir(plan.job_id)
    words, env = executor.launch(plan, executor.watchdog_grace_from_env())
    proc = head.run(_command("start", directory, *words, env=env), timeout=60)
    words = proc.stdout.split()
    if proc.returncode != 0 or not words or words[0] not in ("started", "ended"):
        jobs.finish(record, exit_code=proc.returncode or 1, status="failed")
        raise JobError(
            f"{head.node.name}: the detached job did not start: "
            f"{remote.last_line(proc.stderr) or remote.last_line(proc.stdout) or proc.returncode}"
        )
    record.extra["detached"] = {
        "dir": directory,
        "pid": int(words[1]) if words[0] == "started" else None,
        "supervisor": words[2] if words[0] == "started" and len(words) > 2 else None,
    }
    jobs.save(record)
    return record


def is_detached(record: jobs.JobRecord) -> bool:
    return "detached" in record.extra


def settle(record: jobs.JobRecord, state: HeadState) -> jobs.JobRecord:
    """Finish ``record`` from the head's state (a running job stays as it is). The record on
    disk wins over ``record``: another mpictl (a cancel) may have finished it meanwhile."""
    current = jobs.load(record.id)
    if current.status != jobs.RUNNING or state.state == "running":
        return current
    if state.state == "cancelled":
        return jobs.finish(current, exit_code=CANCELLED_EXIT, status=jobs.CANCELLED)
    if state.state == "lost":
        return jobs.finish(current, exit_code=-1, status=jobs.UNKNOWN)
    code = int(state.exit_code or 0)
    if state.watchdog:
        current.extra["watchdog"] = (
            f"{executor.WATCHDOG_LINE} every rank had ended but mpirun had not exited; "
            f"the watchdog ended it (exit code {code}, the ranks' own)"
        )
    return jobs.finish(current, exit_code=code, status=jobs.status_of(code))


def states(head: remote.HeadSSH, records: Sequence[jobs.JobRecord]) -> dict[str, HeadState]:
    """job id -> its state on the head (one SSH call for all of them)."""
    dirs = {record.extra["detached"]["dir"]: record.id for record in records}
    if not dirs:
        return {}
    proc = head.run(_command("state", *dirs), timeout=60)
    if proc.returncode != 0:
        raise JobError(
            f"{head.node.name}: cannot read the jobs' state: {remote.last_line(proc.stderr)}"
        )
    out = {}
    for line in proc.stdout.splitlines():
        try:
            directory, state = parse_state(line)
        except ValueError:
            continue
        if directory in dirs:
            out[dirs[directory]] = state
    return out


def fetch_output(
    head: remote.HeadSSH,
    record: jobs.JobRecord,
    *,
    follow: bool = False,
    on_output: Callable[[str], None] | None = None,
) -> HeadState | None:
    """Append what the head has beyond the record's output to it (streaming, and following
    the job until it ends with ``follow``), then settle the record. Ctrl-C while following
    stops following; the job runs on. One fetch at a time per job appends (a lock in the
    record's directory): another one meanwhile returns None and the record's output as is."""
    with fetch_lock(record) as locked:
        if not locked:
            return None
        return _fetch(head, record, follow=follow, on_output=on_output)


@contextlib.contextmanager
def fetch_lock(record: jobs.JobRecord) -> Iterator[bool]:
    record.directory.mkdir(parents=True, exist_ok=True)
    with (record.directory / "fetch.lock").open("w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _fetch(
    head: remote.HeadSSH,
    record: jobs.JobRecord,
    *,
    follow: bool,
    on_output: Callable[[str], None] | None,
) -> HeadState:
    directory = record.extra["detached"]["dir"]
    offset = record.output_path.stat().st_size if record.output_path.exists() else 0
    args = [directory, str(offset), *(["follow"] if follow else [])]
    payload = stream_output(head, record, _command("logs", *args), on_output)
    _, state = parse_state(payload)
    settle(record, state)
    return state


def stream_output(
    head: remote.HeadSSH,
    record: jobs.JobRecord,
    command: str,
    on_output: Callable[[str], None] | None,
) -> str:
    """Run ``command`` on the head, appending its stdout to the record's output as it comes (and
    to ``on_output``); the payload of the ``mpictl-state ...`` line it ends with on stderr.
    JobError when it failed or said no state; Ctrl-C kills it and propagates."""
    proc = subprocess.Popen(
        head.argv(command),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    err: list[bytes] = []
    reader = threading.Thread(target=lambda: err.extend(proc.stderr or []), daemon=True)
    reader.start()
    assert proc.stdout is not None
    with record.output_path.open("ab") as log:
        try:
            for chunk in iter(lambda: proc.stdout.readline(), b""):  # type: ignore[union-attr]
                log.write(chunk)
                log.flush()
                if on_output is not None:
                    on_output(chunk.decode("utf-8", errors="replace"))
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    proc.wait()
    reader.join(timeout=5)
    text = b"".join(err).decode("utf-8", errors="replace")
    marker = next((line for line in text.splitlines() if line.startswith("mpictl-state ")), "")
    if proc.returncode != 0 or not marker:
        raise JobError(
            f"{head.node.name}: cannot read the output of job {record.id}: "
            f"{remote.last_line(text) or proc.returncode}"
        )
    return marker.removeprefix("mpictl-state ")


def cancel(
    head: remote.HeadSSH, record: jobs.JobRecord, hosts: Sequence[str]
) -> executor.CleanupReport:
    """End a running detached job on every node; the record says cancelled."""
    if record.status != jobs.RUNNING:
        raise jobs.not_running(record)
    directory = record.extra["detached"]["dir"]
    proc = head.run(_command("cancel", directory), timeout=60)
    if proc.returncode != 0:
        raise JobError(
            f"{head.node.name}: cannot cancel job {record.id}: {remote.last_line(proc.stderr)}"
        )
    try:  # the script's last line: "DIR cancelled", or "DIR exited RC" if it ended first
        _, state = parse_state(remote.last_line(proc.stdout))
    except ValueError:
        state = HeadState("cancelled")
    report = executor.cleanup(head, record.id, hosts)
    settle(record, state)
    with contextlib.suppress(JobError):  # the output fetched so far stays; the job is over
        fetch_output(head, record)
    return report
