"""Execute a planned job on the head, attached to this process, and clean up after it.

The controller logs in to the head as the MPI user (:mod:`mpictl.remote`) and runs the session
script ``mpictl/scripts/job_session.sh`` there: it starts mpirun in its own process group with
stdin from /dev/null and watches the SSH channel. When the controller closes it (Ctrl-C,
SIGTERM, SIGHUP, ``--timeout``) or the connection drops, the session ends mpirun's process group
and mpirun takes the job down on every node. After a failed, timed-out or interrupted job the
controller runs ``job_ranks.py cleanup`` on every node (from the head), which kills whatever
still carries the job's ``MPICTL_JOB_ID`` and reports what it found.

The watchdog: OpenMPI 5's runtime now and then never exits after every rank of a job has ended
(PRRTE's exit race). Every rank runs behind ``scripts/rank_exit.sh``, which notes its exit code
on its node, and ``job_ranks.py watch`` runs on the head beside mpirun: when no node holds a live
rank of the job a few seconds (``MPICTL_WATCHDOG_GRACE``, default 3) after the head's last one
ended and mpirun still runs, it ends mpirun and the job's exit code is the ranks' own, with one
line saying so (also in the job record, ``watchdog``). Ranks that are alive are never touched.
``MPICTL_WATCHDOG_GRACE=off`` runs mpirun bare (to show the race).

Output streams live (stdout and stderr separately, through a callback) into the job record's
output file; the exit code is mpirun's, 124 on timeout, 128+N when signal N ended the run.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mpictl import jobs, programs, remote
from mpictl.errors import JobError, UsageError

if TYPE_CHECKING:  # the plan is read, never built here: no import of planner at run time
    from mpictl.planner import LaunchPlan

OutputHandler = Callable[[str, str], None]  # (stream "stdout"|"stderr", line with newline)

TIMEOUT_EXIT = 124
INTERRUPT_EXIT = 130
SESSION = "job_session.sh"
RANKS = "job_ranks.py"  # cleanup, probe and the watchdog
RANK_EXIT = "rank_exit.sh"
WATCHDOG_GRACE_S = 3.0
WATCHDOG_LINE = "mpictl: watchdog:"
#: Signals that end an attached job as Ctrl-C does (``timeout``, a closed terminal).
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@dataclass
class CleanupReport:
    per_host: list[dict[str, Any]] = field(default_factory=list)

    @property
    def killed(self) -> int:
        return sum(int(r.get("found") or 0) for r in self.per_host)

    @property
    def left(self) -> list[str]:
        return [r["host"] for r in self.per_host if not r.get("ok") or r.get("left")]


@dataclass
class JobResult:
    job_id: str
    exit_code: int
    status: str  # succeeded, failed, timeout, interrupted
    duration_s: float
    cleanup: CleanupReport | None = None


class _Ended(Exception):
    """A signal in :data:`ENDING_SIGNALS` arrived while the job ran."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class EndingSignals:
    """While armed, SIGTERM/SIGHUP raise :class:`_Ended` and SIGINT KeyboardInterrupt; once
    disarmed all three are only noted, so ending the job, the cleanup and the record are never
    cut short (a second Ctrl-C included). The previous handlers come back on exit. Outside the
    main thread no handler can be set, and the defaults stay."""

    def __init__(self) -> None:
        self.armed = False
        self._previous: dict[int, Any] = {}

    def _handler(self, signum: int, _frame: Any) -> None:
        if self.armed:
            self.armed = False
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            raise _Ended(signum)

    def __enter__(self) -> EndingSignals:
        if threading.current_thread() is threading.main_thread():
            # SIGINT too: a second Ctrl-C during the teardown must not skip the cleanup
            watched = (signal.SIGINT, *ENDING_SIGNALS)
            self._previous = {sig: signal.signal(sig, self._handler) for sig in watched}
            self.armed = True
        return self

    def disarm(self) -> None:
        self.armed = False

    def __exit__(self, *exc: object) -> None:
        self.armed = False
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def watchdog_grace_from_env() -> float | None:
    """The watchdog's grace for this process: ``MPICTL_WATCHDOG_GRACE`` (:func:`watchdog_grace`)."""
    return watchdog_grace(os.environ.get("MPICTL_WATCHDOG_GRACE"))


def watchdog_grace(value: str | None) -> float | None:
    """``MPICTL_WATCHDOG_GRACE``: seconds (0.5-600, default 3), or ``off`` (None)."""
    if value is None or value.strip() == "":
        return WATCHDOG_GRACE_S
    if value.strip().lower() == "off":
        return None
    try:
        grace = float(value)
    except ValueError:
        grace = -1.0
    if not 0.5 <= grace <= 600:
        raise UsageError(
            f"MPICTL_WATCHDOG_GRACE={value!r}: give seconds between 0.5 and 600, or off"
        )
    return grace


def launch(plan: LaunchPlan, grace: float | None) -> tuple[list[str], list[str]]:
    """(mpirun's options, what every rank runs): the rank's command behind ``rank_exit.sh``
    and the environment that starts the watchdog beside mpirun (``KEY=VALUE`` items), unless
    the watchdog is off."""
    if grace is None:
        return [*plan.mpirun[1:], *plan.command], []
    command = ["bash", "-c", programs.source(RANK_EXIT), "mpictl-rank", *plan.command]
    watch = " ".join([plan.job_id, str(plan.ranks), f"{grace:g}", *(h for h, _ in plan.hosts)])
    env = [f"MPICTL_WATCH={watch}", f"MPICTL_WATCHDOG={programs.source(RANKS)}"]
    return [*plan.mpirun[1:], *command], env


def session_command(plan: LaunchPlan, grace: float | None = WATCHDOG_GRACE_S) -> str:
    """The remote shell command line that runs ``plan`` on the head (any POSIX login shell)."""
    words, env = launch(plan, grace)
    opts = plan.mpirun[1:]
    script = programs.source(SESSION)
    args = ["bash", "-c", script, "mpictl-job", str(len(opts)), *words]
    return "exec " + shlex.join(["env", *env, *args] if env else args)


def cleanup(head: remote.HeadSSH, job_id: str, hosts: Sequence[str]) -> CleanupReport:
    """Kill leftovers of ``job_id`` on ``hosts`` (from the head, as the MPI user) and report."""
    outputs = remote.run_on_nodes(
        head,
        hosts,
        f"python3 - cleanup {shlex.quote(job_id)}",
        programs.source(RANKS),
        timeout=30,
    )
    report = CleanupReport()
    for host in hosts:
        out = outputs.get(host)
        parts = out.stdout.split() if out else []
        if out is not None and out.ok and len(parts) == 2 and all(p.isdecimal() for p in parts):
            report.per_host.append(
                {"host": host, "ok": True, "found": int(parts[0]), "left": int(parts[1])}
            )
        else:
            error = out.error if out is not None else "no answer"
            report.per_host.append({"host": host, "ok": False, "error": error})
    return report


def _pump(stream: Any, name: str, sink: Callable[[str, str], None]) -> None:
    for raw in iter(stream.readline, b""):
        sink(name, raw.decode("utf-8", errors="replace"))
    stream.close()


def wait_until(
    alive: Callable[[], bool], timeout: float | None, started: float, signals: EndingSignals
) -> tuple[str, int]:
    """Wait while ``alive()``; ("", 0) when it ended by itself, else why the job must be ended
    (``timeout`` seconds after ``started``, Ctrl-C, SIGTERM, SIGHUP) and the exit code."""
    try:
        while alive():
            if timeout is not None and time.monotonic() - started > timeout:
                return "timeout", TIMEOUT_EXIT
            time.sleep(0.1)
    except KeyboardInterrupt:
        return "interrupted", INTERRUPT_EXIT
    except _Ended as ended:
        return "interrupted", 128 + ended.signum
    finally:
        signals.disarm()
    return "", 0


def execute(
    plan: LaunchPlan,
    record: jobs.JobRecord,
    head: remote.HeadSSH,
    *,
    on_output: OutputHandler | None = None,
    timeout: float | None = None,
) -> JobResult:
    """Run ``plan`` on the head, streaming output into ``record``; end the job on timeout,
    Ctrl-C, SIGTERM or SIGHUP (status ``interrupted``, exit 130/143/129), clean up and finish
    the record in every case."""
    lock = threading.Lock()
    log = record.output_path.open("ab")
    grace = watchdog_grace_from_env()

    def sink(stream: str, line: str) -> None:
        with lock:
            if stream == "stderr" and line.startswith(WATCHDOG_LINE):
                record.extra["watchdog"] = line.strip()
            log.write(line.encode())
            log.flush()
            if on_output is not None:
                on_output(stream, line)

    started = time.monotonic()
    proc = subprocess.Popen(
        head.argv(session_command(plan, grace)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # the terminal's Ctrl-C reaches us, not ssh
    )
    threads = [
        threading.Thread(target=_pump, args=(proc.stdout, "stdout", sink), daemon=True),
        threading.Thread(target=_pump, args=(proc.stderr, "stderr", sink), daemon=True),
    ]
    for t in threads:
        t.start()
    with EndingSignals() as signals:
        status, exit_code = wait_until(lambda: proc.poll() is None, timeout, started, signals)
        if status:
            sink("stderr", f"mpictl: {status}: ending job {plan.job_id} on every node\n")
            _hang_up(proc)
        rc = proc.wait()
        for t in threads:
            t.join(timeout=5)
        report = _cleanup_if_needed(head, plan, sink) if status or rc != 0 else None
        log.close()
        if not status:
            exit_code, status = rc, jobs.status_of(rc)
        jobs.finish(record, exit_code=exit_code, status=status)
    return JobResult(plan.job_id, exit_code, status, time.monotonic() - started, report)


def _cleanup_if_needed(
    head: remote.HeadSSH, plan: LaunchPlan, sink: Callable[[str, str], None]
) -> CleanupReport:
    try:
        report = cleanup(head, plan.job_id, [h for h, _ in plan.hosts])
    except JobError as exc:
        report = CleanupReport([{"host": head.node.name, "ok": False, "error": str(exc)}])
    if report.killed:
        sink("stderr", f"mpictl: cleanup ended {report.killed} leftover process(es)\n")
    if report.left:
        sink("stderr", f"mpictl: cleanup could not verify {', '.join(report.left)}\n")
    return report


def _hang_up(proc: subprocess.Popen[bytes]) -> None:
    """Close the SSH channel's stdin (the remote session then ends mpirun), then wait."""
    try:
        if proc.stdin is not None:
            proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=25)
    except subprocess.TimeoutExpired:
        proc.kill()
