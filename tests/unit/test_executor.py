"""Executing an attached job (mpictl.executor) with the head replaced by a local shell: the real
session script, a fake mpirun on PATH, the real job record. What a signal to ``mpictl run`` does
to the job and its record, and how a record whose controller died is shown."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from mpictl import executor, jobs, mpirun_plan, planner, remote, submit
from tests.unit.jobside import three


class LocalHead(remote.HeadSSH):
    """The head's SSH session replaced by a local ``sh -c`` (the session reads the pipe's EOF)."""

    def argv(self, command: str, *, tty: bool = False, connect_timeout: int = 10) -> list[str]:
        return ["sh", "-c", command]


@pytest.fixture
def head(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalHead:
    c = three()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    cleaned: list[str] = []

    def fake_cleanup(head, hosts, command, program="", **kw):  # type: ignore[no-untyped-def]
        cleaned.append(command)
        return {h: remote.NodeOutput(h, 0, "1 0\n", "") for h in hosts}

    monkeypatch.setattr(remote, "run_on_nodes", fake_cleanup)
    h = LocalHead(node=c.head, user="mpi", key=tmp_path / "key")
    h.cleaned = cleaned  # type: ignore[attr-defined]
    return h


def fake_mpirun(head: LocalHead, body: str) -> None:
    bindir = Path(os.environ["PATH"].split(":")[0])
    (bindir / "mpirun").write_text("#!/bin/sh\n" + body)
    (bindir / "mpirun").chmod(0o755)


def start(head: LocalHead, **kw: object) -> tuple[planner.LaunchPlan, jobs.JobRecord]:
    c = three()
    plan = mpirun_plan.plan(c, planner.LaunchOptions(command=["train"], **kw), jobs.new_id(), None)  # type: ignore[arg-type]
    return plan, submit.create_record(c, plan)


def test_a_job_that_ends_by_itself_keeps_its_exit_code_and_output(head: LocalHead) -> None:
    fake_mpirun(head, 'echo "ranks say hi"\nexit 3\n')
    plan, record = start(head)
    lines: list[tuple[str, str]] = []
    result = executor.execute(plan, record, head, on_output=lambda s, line: lines.append((s, line)))
    assert (result.status, result.exit_code) == ("failed", 3)
    assert ("stdout", "ranks say hi\n") in lines
    data = json.loads((record.directory / "job.json").read_text())
    assert (data["status"], data["exit_code"]) == ("failed", 3)
    assert head.cleaned  # type: ignore[attr-defined]  # a failed job is cleaned up


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_and_sighup_end_the_job_and_finish_its_record(
    head: LocalHead, tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    pidfile = tmp_path / "mpirun.pid"
    fake_mpirun(head, f"echo $$ > {pidfile}\nsleep 60 & wait\n")
    plan, record = start(head)
    before = signal.getsignal(sig)
    timer = threading.Timer(1.0, os.kill, (os.getpid(), sig))
    timer.start()
    began = time.monotonic()
    try:
        result = executor.execute(plan, record, head)
    finally:
        timer.cancel()
    assert (result.status, result.exit_code) == ("interrupted", code)
    assert time.monotonic() - began < 20
    data = json.loads((record.directory / "job.json").read_text())
    assert (data["status"], data["exit_code"]) == ("interrupted", code)
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the session ended mpirun's process group
    assert head.cleaned  # type: ignore[attr-defined]
    assert signal.getsignal(sig) == before  # the caller's handler is back


def test_timeout_ends_the_job(head: LocalHead) -> None:
    fake_mpirun(head, "sleep 60 & wait\n")
    plan, record = start(head)
    result = executor.execute(plan, record, head, timeout=1)
    assert (result.status, result.exit_code) == ("timeout", 124)
    assert jobs.load(record.id).status == "timeout"


def test_a_record_whose_controller_died_is_unknown_not_running() -> None:
    c = three()
    plan = mpirun_plan.plan(c, planner.LaunchOptions(command=["x"]), jobs.new_id(), None)
    record = submit.create_record(c, plan)
    assert jobs.load(record.id).status == "running"  # this process supervises it
    dead = subprocess.Popen(["true"])
    dead.wait()
    data = json.loads((record.directory / "job.json").read_text())
    data["controller"]["pid"] = dead.pid
    (record.directory / "job.json").write_text(json.dumps(data))
    assert jobs.load(record.id).status == "unknown"
    assert [r.status for r in jobs.list_jobs()] == ["unknown"]
    # another host's controller cannot be judged from here: it stays as recorded
    data["controller"]["host"] = "elsewhere"
    (record.directory / "job.json").write_text(json.dumps(data))
    assert jobs.load(record.id).status == "running"
