"""Detached jobs end to end (mpictl.submit.submit_detached, mpictl.detached, mpictl.jobops) with
the head and nodes as directories (tests/unit/fake_nodes.py: the real job_detached.sh runs there
through a fake ``ssh``) and a fake ``mpirun`` on PATH that prints tagged lines as mpirun
--tag-output does. The records must end as the jobs did on the head: a wrong exit code, a job
cancelled that had ended by itself, output fetched twice or a rank's lines mixed with another's
would all be caught here. Attached jobs' follow and cancel (a signal to their ``mpictl run``) are
here too."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mpictl import (
    detached,
    executor,
    jobops,
    jobs,
    mpirun_plan,
    paths,
    planner,
    programs,
    remote,
    submit,
    workdir,
)
from mpictl.errors import JobError, UsageError
from mpictl.inventory import Cluster
from mpictl.planner import LaunchOptions
from tests.unit import fake_nodes
from tests.unit.fake_nodes import FakeHead, snapshot
from tests.unit.jobside import facts
from tests.unit.orphans import Reaper, alive

HOSTS = ["node1", "node2", "node3"]

# What a 3-rank job prints through mpirun --tag-output, and mpirun's own untagged line.
TAGGED = (
    'echo "mpirun: starting"\n'
    'echo "[1,0]<stdout>: hello from 0"\n'
    'echo "[1,1]<stdout>: hello from 1"\n'
    'echo "[1,2]<stdout>: hello from 2"\n'
    'echo "[1,2]<stderr>: warn 2"\n'
    "sleep 1\n"
    'echo "[1,0]<stdout>: done"\n'
)


def cluster() -> Cluster:
    nodes = tuple(
        fake_nodes.node(name, facts=facts(f"10.0.0.{11 + i}")) for i, name in enumerate(HOSTS)
    )
    return Cluster(source=Path("/inv/hosts.yml"), nodes=nodes, head=nodes[0])


class Head:
    def __init__(self, nodes: Path, tmp_path: Path) -> None:
        self.nodes = nodes
        self.home = nodes / "node1"
        self.bindir = tmp_path / "bin"
        self.ssh = FakeHead(node=cluster().head, user="mpi", key=tmp_path / "key")
        self.cleaned: list[tuple[list[str], str]] = []

    def mpirun(self, body: str) -> None:
        path = self.bindir / "mpirun"
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)

    def wait_for(self, rel: str, timeout: float = 10) -> Path:
        path = self.home / rel
        deadline = time.monotonic() + timeout
        while not path.exists():
            assert time.monotonic() < deadline, f"{rel} never appeared"
            time.sleep(0.05)
        return path

    def job_dir(self, record: jobs.JobRecord) -> Path:
        return self.home / ".mpictl" / "jobs" / record.id


@pytest.fixture
def head(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Head]:
    nodes = fake_nodes.install(tmp_path, monkeypatch, HOSTS)
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))  # no systemd manager: setsid
    h = Head(nodes, tmp_path)

    def fake_cleanup(head, hosts, command, program="", **kw):  # type: ignore[no-untyped-def]
        h.cleaned.append((list(hosts), command))
        return {host: remote.NodeOutput(host, 0, "1 0\n", "") for host in hosts}

    monkeypatch.setattr(remote, "run_on_nodes", fake_cleanup)
    monkeypatch.setattr(jobops, "_head", lambda record: h.ssh)
    with Reaper(nodes):
        yield h


def no_head(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(record: object) -> None:
        raise AssertionError("the head was asked")

    monkeypatch.setattr(jobops, "_head", fail)


def start(head: Head, np: int = 3, **request: object) -> jobs.JobRecord:
    return submit.submit_detached(
        cluster(),
        LaunchOptions(command=["train", "--lr", "0.1"], np=np),
        via=submit.MpirunLauncher(head=head.ssh),
        request=submit.JobRequest(**request),  # type: ignore[arg-type]
    )


def follow(job_id: str, **kw: object) -> tuple[int | None, str]:
    chunks: list[str] = []
    code = jobops.logs(job_id, follow=True, out=chunks.append, **kw)  # type: ignore[arg-type]
    return code, "".join(chunks)


def test_start_records_where_the_job_runs(head: Head, tmp_path: Path) -> None:
    head.mpirun('echo "args: $*"\n' + TAGGED)
    planned: list[planner.LaunchPlan] = []
    record = submit.submit_detached(
        cluster(),
        LaunchOptions(command=["train", "--lr", "0.1"], np=3),
        via=submit.MpirunLauncher(head=head.ssh),
        request=submit.JobRequest(output_dir=tmp_path / "out"),
        on_plan=lambda plan, rec: planned.append(plan),
    )
    info = record.extra["detached"]
    assert info["dir"] == f".mpictl/jobs/{record.id}"
    assert info["supervisor"] == "setsid"
    assert (head.job_dir(record) / "pid").read_text().strip() == str(info["pid"])
    stored = jobs.load(record.id)
    assert stored.status == jobs.RUNNING and stored.extra["detached"] == info
    assert stored.extra["output_dir"] == str((tmp_path / "out").resolve())
    assert [p.job_id for p in planned] == [record.id] and stored.ranks == 3
    first = head.wait_for(f".mpictl/jobs/{record.id}/output.log")
    deadline = time.monotonic() + 10
    while "args:" not in first.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # mpirun got the plan's options and command, the command behind the watchdog's rank_exit.sh
    words, _ = executor.launch(planned[0], executor.WATCHDOG_GRACE_S)
    assert words == [*planned[0].argv[1:-3], "bash", "-c", programs.source("rank_exit.sh"),
                     "mpictl-rank", "train", "--lr", "0.1"]  # fmt: skip
    args = first.read_text().removeprefix("args: ")
    assert args.startswith(" ".join(planned[0].mpirun[1:]))
    assert f"MPICTL_JOB_ID={record.id}" in args and "mpictl-rank train --lr 0.1" in args


def test_timeout_is_refused_before_anything_is_recorded(head: Head) -> None:
    with pytest.raises(UsageError) as err:
        submit.submit_detached(
            cluster(),
            LaunchOptions(command=["train"], timeout=5),
            via=submit.MpirunLauncher(head=head.ssh),
        )
    assert "--timeout applies to attached runs" in str(err.value)
    assert not paths.jobs_dir().exists()
    assert not (head.home / ".mpictl").exists()


@pytest.mark.parametrize(("rc", "status"), [(0, "succeeded"), (3, "failed")])
def test_logs_follow_returns_the_exit_code_and_settles_the_record(
    head: Head, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rc: int, status: str
) -> None:
    head.mpirun(TAGGED + f"exit {rc}\n")
    out = tmp_path / "out"
    record = start(head, output_dir=out)
    code, text = follow(record.id)
    assert code == rc
    on_head = (head.job_dir(record) / "output.log").read_text()
    assert text == on_head and on_head.endswith("[1,0]<stdout>: done\n")
    final = jobs.load(record.id)
    assert (final.status, final.exit_code) == (status, rc)
    assert final.output_path.read_text() == on_head
    assert final.extra["detached"]["fetched"] is True
    # --output-dir: each rank's own lines
    assert (out / "rank.0" / "stdout").read_text() == "hello from 0\ndone\n"
    assert (out / "rank.1" / "stdout").read_text() == "hello from 1\n"
    assert (out / "rank.2" / "stderr").read_text() == "warn 2\n"
    assert (out / "rank.0" / "stderr").read_text() == ""
    # fetched: the record answers alone now
    no_head(monkeypatch)
    assert follow(record.id) == (rc, on_head)


def test_logs_without_follow_fetch_only_what_is_new(head: Head) -> None:
    head.mpirun(
        'i=0\nwhile [ "$i" -lt 15 ]; do echo "[1,0]<stdout>: line $i"; i=$((i + 1)); '
        "sleep 0.1; done\nexit 0\n"
    )
    record = start(head)
    seen: list[str] = []
    time.sleep(0.3)
    assert jobops.logs(record.id, out=seen.append) is None  # still running
    time.sleep(0.3)
    assert jobops.logs(record.id, out=seen.append) is None
    assert jobs.load(record.id).status == jobs.RUNNING
    code, text = follow(record.id)
    on_head = (head.job_dir(record) / "output.log").read_text()
    assert code == 0 and text == on_head  # printed whole, each line once
    assert jobs.load(record.id).output_path.read_text() == on_head
    assert len(on_head.splitlines()) == 15


def test_logs_of_one_rank(head: Head) -> None:
    head.mpirun(TAGGED + "exit 0\n")
    record = start(head)
    assert follow(record.id, rank=2) == (0, "hello from 2\nwarn 2\n")
    assert follow(record.id, rank=0) == (0, "hello from 0\ndone\n")


def test_a_rank_the_job_did_not_have_is_refused_before_asking_the_head(
    head: Head, monkeypatch: pytest.MonkeyPatch
) -> None:
    head.mpirun("sleep 30\n")
    record = start(head)
    no_head(monkeypatch)
    with pytest.raises(UsageError) as err:
        jobops.logs(record.id, rank=7, out=print)
    assert str(err.value) == "--rank 7: the job had 3 rank(s) (0..2)"


def test_unknown_job_ids_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="unknown job 'nope'"):
        jobops.logs("nope", out=print)
    with pytest.raises(UsageError, match="unknown job 'nope'"):
        jobops.cancel("nope")


def test_refresh_settles_what_ended_and_keeps_what_runs(
    head: Head, monkeypatch: pytest.MonkeyPatch
) -> None:
    head.mpirun("sleep 0.3\nexit 3\n")
    ended = start(head)
    head.mpirun("sleep 60\n")
    running = start(head)
    head.wait_for(f".mpictl/jobs/{ended.id}/exit_code")
    calls: list[str] = []
    real = FakeHead.run

    def counting(self: FakeHead, command: str, **kw: object) -> object:
        calls.append(command)
        return real(self, command, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(FakeHead, "run", counting)
    records, notes = jobops.refresh(jobs.list_jobs())
    assert notes == [] and len(calls) == 1  # one SSH call for both
    by_id = {r.id: r for r in records}
    assert (by_id[ended.id].status, by_id[ended.id].exit_code) == ("failed", 3)
    assert by_id[running.id].status == jobs.RUNNING
    assert (jobs.load(ended.id).status, jobs.load(ended.id).exit_code) == ("failed", 3)
    assert jobs.load(running.id).status == jobs.RUNNING

    def unreachable(record: object) -> None:
        raise JobError("node1: no answer")

    monkeypatch.setattr(jobops, "_head", unreachable)
    records, notes = jobops.refresh(jobs.list_jobs())
    assert notes == ["/inv/hosts.yml: could not ask the head (node1: no answer)"]
    assert {r.id: r.status for r in records}[running.id] == jobs.RUNNING


def test_cancel_ends_a_running_job_everywhere(head: Head, tmp_path: Path) -> None:
    head.mpirun(
        'echo $$ > "$HOME/mpirun.pid"\nsleep 300 &\necho $! > "$HOME/child.pid"\n'
        'echo "[1,1]<stdout>: working"\nwait\n'
    )
    out = tmp_path / "out"
    record = start(head, output_dir=out)
    mpirun = int(head.wait_for("mpirun.pid").read_text())
    child = int(head.wait_for("child.pid").read_text())
    pid = record.extra["detached"]["pid"]
    assert all(alive(p) for p in (pid, mpirun, child))
    began = time.monotonic()
    result = jobops.cancel(record.id)
    assert time.monotonic() - began < 15
    assert result == {
        "job": record.id,
        "status": "cancelled",
        "cleanup": "3 leftover process(es) ended",
    }
    assert not any(alive(p) for p in (pid, mpirun, child))
    final = jobs.load(record.id)
    assert (
        (final.status, final.exit_code)
        == ("cancelled", detached.CANCELLED_EXIT)
        == (
            "cancelled",
            143,
        )
    )
    assert head.cleaned and head.cleaned[0][0] == HOSTS
    assert record.id in head.cleaned[0][1]  # the cleanup looks for this job's processes
    assert "working" in final.output_path.read_text()  # what it printed was fetched
    assert (out / "rank.1" / "stdout").read_text() == "working\n"
    with pytest.raises(UsageError) as err:
        jobops.cancel(record.id)
    assert str(err.value) == f"job {record.id} is not running (status cancelled, exit code 143)"


def test_cancel_of_a_finished_job_is_a_usage_error(head: Head) -> None:
    head.mpirun("exit 3\n")
    record = start(head)
    assert follow(record.id)[0] == 3
    with pytest.raises(UsageError) as err:
        jobops.cancel(record.id)
    assert str(err.value) == f"job {record.id} is not running (status failed, exit code 3)"
    assert not head.cleaned


def test_cancel_of_a_job_that_ended_on_its_head_keeps_its_exit_code(head: Head) -> None:
    head.mpirun("sleep 0.3\nexit 3\n")
    record = start(head)
    head.wait_for(f".mpictl/jobs/{record.id}/exit_code")
    assert jobs.load(record.id).status == jobs.RUNNING  # nobody asked the head yet
    with pytest.raises(UsageError) as err:
        jobops.cancel(record.id)
    assert str(err.value) == f"job {record.id} is not running (status failed, exit code 3)"
    final = jobs.load(record.id)
    assert (final.status, final.exit_code) == ("failed", 3)


def test_a_job_that_cannot_start_fails_its_record(head: Head) -> None:
    (head.bindir / "mpirun").unlink(missing_ok=True)
    if subprocess.run(["sh", "-c", "command -v mpirun"], capture_output=True).returncode == 0:
        pytest.skip("this machine has an mpirun on PATH")
    with pytest.raises(JobError) as err:
        start(head)
    assert "the detached job did not start: mpictl: mpirun not found on" in str(err.value)
    (record,) = jobs.list_jobs()
    assert (record.status, record.exit_code) == ("failed", 127)


def test_workdir_reaches_every_node_and_the_job_starts_in_it(head: Head, tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text("print('train')\n")
    (project / "debug.log").write_text("left out\n")
    head.mpirun(
        'while [ "$#" -gt 0 ]; do [ "$1" = --wdir ] && cd "$2"; shift; done\n'
        'echo "[1,0]<stdout>: $(pwd)"\n'
        'for f in *; do echo "[1,0]<stdout>: $f"; done\n'
    )
    reports: list[object] = []
    record = submit.submit_detached(
        cluster(),
        LaunchOptions(command=["python", "train.py"], np=3),
        via=submit.MpirunLauncher(head=head.ssh),
        request=submit.JobRequest(workdir=submit.WorkdirRequest(str(project), ["*.log"])),
        on_sync=reports.append,
    )
    assert len(reports) == 1
    rel = workdir.remote_dir(project.resolve())
    path = f"{head.home}/{rel}"
    assert record.extra["workdir"]["path"] == path
    assert record.extra["workdir"]["digest"] == workdir.select(project, ["*.log"]).digest
    assert f"--wdir {path}" in record.mpirun
    for name in HOSTS:
        assert set(snapshot(head.nodes / name / rel)) == {"train.py"}, name
    code, text = follow(record.id)
    assert code == 0
    assert text.splitlines() == [f"[1,0]<stdout>: {path}", "[1,0]<stdout>: train.py"]


def test_a_workdir_over_the_cap_records_and_sends_nothing(head: Head, tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "big.bin").write_bytes(b"x" * 4096)
    head.mpirun("exit 0\n")
    with pytest.raises(UsageError, match="over the 1.0 KiB cap"):
        start(head, workdir=submit.WorkdirRequest(str(project), (), 1024))
    assert not paths.jobs_dir().exists()
    assert not (head.home / ".mpictl").exists()


# Attached jobs: their record is written by the `mpictl run` that supervises them.


def attached_record() -> jobs.JobRecord:
    c = cluster()
    plan = mpirun_plan.plan(c, LaunchOptions(command=["x"], np=3), jobs.new_id(), None)
    return submit.create_record(c, plan)


def test_follow_of_an_attached_job_reads_its_record_until_it_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(jobops, "POLL_S", 0.05)
    record = attached_record()
    record.output_path.write_bytes(b"ssh: warning\r\n")  # ssh ends its lines so

    def supervise() -> None:
        time.sleep(0.3)
        with record.output_path.open("a") as fh:
            fh.write("[1,1]<stdout>: 10%\r100%\n")
        time.sleep(0.3)
        with record.output_path.open("a") as fh:
            fh.write("after\n")
        jobs.finish(record, exit_code=5, status=jobs.FAILED)

    thread = threading.Thread(target=supervise)
    thread.start()
    try:
        code, text = follow(record.id)
    finally:
        thread.join()
    # printed as written, each byte once (the offset counts the carriage returns)
    assert (code, text) == (5, "ssh: warning\r\n[1,1]<stdout>: 10%\r100%\nafter\n")
    assert follow(record.id, rank=1) == (5, "10%\r100%\n")


SUPERVISOR = """
import signal, sys, time
from mpictl import jobs
def end(signum, frame):
    jobs.finish(jobs.load(sys.argv[1]), exit_code=143, status="interrupted")
    sys.exit(143)
signal.signal(signal.SIGTERM, end)
print("ready", flush=True)
time.sleep(60)
"""


def test_cancel_of_an_attached_job_signals_its_mpictl_run() -> None:
    record = attached_record()
    proc = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, record.id],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        record.controller = {
            "host": socket.gethostname(),
            "pid": proc.pid,
            "pid_start": jobs._process_start(proc.pid),
        }
        jobs.save(record)
        result = jobops.cancel(record.id)
        assert result == {"job": record.id, "status": "interrupted", "cleanup": "by its mpictl run"}
        assert proc.wait(timeout=10) == 143
    finally:
        proc.kill()
        proc.wait()


def test_cancel_of_an_attached_job_elsewhere_says_where_to_end_it() -> None:
    record = attached_record()
    record.controller = {"host": "elsewhere", "pid": os.getpid(), "pid_start": "1"}
    jobs.save(record)
    with pytest.raises(JobError) as err:
        jobops.cancel(record.id)
    assert str(err.value).startswith(f"job {record.id} is attached to an mpictl run on elsewhere")
    assert jobs.load(record.id).status == jobs.RUNNING
