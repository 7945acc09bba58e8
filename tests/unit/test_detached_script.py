"""scripts/job_detached.sh, run as detached.py runs it on the head (``bash -c SCRIPT
mpictl-detached ACTION ...``) with HOME in a temporary directory and a fake ``mpirun`` on PATH.
``XDG_RUNTIME_DIR`` points at an empty directory, so the setsid path is the one taken (this
machine has no systemd user manager to run a unit). A job that dies with its SSH session, a
``logs -f`` that never ends or a ``cancel`` that leaves ranks running would all be caught here."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mpictl import programs
from tests.unit.orphans import Reaper, alive, session_of


class Head:
    """The head's MPI user: a home, a PATH with the fake mpirun first, no systemd manager."""

    def __init__(self, tmp_path: Path) -> None:
        self.home = tmp_path / "home"
        self.home.mkdir()
        self.bindir = tmp_path / "bin"
        self.bindir.mkdir()
        runtime = tmp_path / "runtime"
        runtime.mkdir()
        self.env = {
            **os.environ,
            "HOME": str(self.home),
            "PATH": f"{self.bindir}:{os.environ['PATH']}",
            "XDG_RUNTIME_DIR": str(runtime),  # no systemd/private socket there
        }

    def mpirun(self, body: str) -> None:
        path = self.bindir / "mpirun"
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", programs.source("job_detached.sh"), "mpictl-detached", *args],
            env=self.env,
            cwd="/",
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self, directory: str, *args: str) -> int:
        proc = self.run("start", directory, *args)
        assert proc.returncode == 0, proc.stderr
        m = re.fullmatch(r"started (\d+) setsid\n", proc.stdout)
        assert m, proc.stdout
        return int(m.group(1))

    def wait_for(self, rel: str, timeout: float = 10) -> Path:
        path = self.home / rel
        deadline = time.monotonic() + timeout
        while not path.exists():
            assert time.monotonic() < deadline, f"{rel} never appeared"
            time.sleep(0.05)
        return path


@pytest.fixture
def head(tmp_path: Path) -> Iterator[Head]:
    h = Head(tmp_path)
    with Reaper(h.home):
        yield h


def test_the_script_is_package_data() -> None:
    path = Path(__file__).resolve().parents[2] / "mpictl" / "scripts" / "job_detached.sh"
    assert programs.source("job_detached.sh") == path.read_text()


def test_start_returns_while_the_job_runs_on_in_a_session_of_its_own(head: Head) -> None:
    head.mpirun(
        'for a; do echo "arg: $a"; done\n'
        "i=0\n"
        'while [ "$i" -lt 30 ]; do echo "line $i"; i=$((i + 1)); sleep 0.1; done\n'
    )
    began = time.monotonic()
    pid = head.start("jobs/j1", "-np", "2", "--", "python", "a b.py")
    assert time.monotonic() - began < 3  # it did not wait for the 3 s job
    assert (head.home / "jobs/j1/pid").read_text().strip() == str(pid)
    assert alive(pid)  # the starting shell is gone, the job runs on
    assert session_of(pid) == pid != os.getsid(0)  # a session of its own
    log = head.home / "jobs/j1/output.log"
    first = log.stat().st_size
    time.sleep(0.5)
    assert log.stat().st_size > first  # output.log grows
    assert head.run("state", "jobs/j1").stdout == "jobs/j1 running\n"
    text = log.read_text()
    assert text.startswith("arg: -np\narg: 2\narg: --\narg: python\narg: a b.py\nline 0\n")


def test_logs_prints_from_an_offset_and_follow_streams_until_the_end(head: Head) -> None:
    head.mpirun('i=0\nwhile [ "$i" -lt 20 ]; do echo "line $i"; i=$((i + 1)); sleep 0.1; done\n')
    head.start("jobs/j2", "x")
    time.sleep(0.4)
    now = head.run("logs", "jobs/j2", "0")
    assert now.returncode == 0, now.stderr
    assert now.stdout.startswith("line 0\n") and now.stdout.endswith("\n")
    assert now.stderr == "mpictl-state jobs/j2 running\n"
    offset = len(now.stdout.encode())
    began = time.monotonic()
    rest = head.run("logs", "jobs/j2", str(offset), "follow", timeout=30)
    assert rest.returncode == 0, rest.stderr
    assert time.monotonic() - began > 0.5  # it waited for the job
    assert rest.stderr == "mpictl-state jobs/j2 exited 0\n"
    full = (head.home / "jobs/j2/output.log").read_text()
    assert now.stdout + rest.stdout == full
    assert full.splitlines() == [f"line {i}" for i in range(20)]
    # an ended job: follow returns at once with the rest from the offset
    tail = head.run("logs", "jobs/j2", str(len(full) - len("line 19\n")), "follow", timeout=10)
    assert (tail.stdout, tail.stderr) == ("line 19\n", "mpictl-state jobs/j2 exited 0\n")


def test_the_exit_code_is_kept_and_state_answers_for_several_jobs(head: Head) -> None:
    head.mpirun("sleep 0.5\necho bye\nexit 3\n")
    head.start("jobs/bad", "x")
    head.mpirun("sleep 60\n")
    head.start("jobs/long", "x")
    head.wait_for("jobs/bad/exit_code")
    (head.home / "jobs/gone").mkdir()
    (head.home / "jobs/gone/pid").write_text("999999999\n")  # its process is gone, no exit code
    proc = head.run("state", "jobs/bad", "jobs/long", "jobs/never", "jobs/gone")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "jobs/bad exited 3",
        "jobs/long running",
        "jobs/never lost",
        "jobs/gone lost",
    ]
    logs = head.run("logs", "jobs/bad", "0", "follow")
    assert (logs.stdout, logs.stderr) == ("bye\n", "mpictl-state jobs/bad exited 3\n")


def test_cancel_ends_the_whole_process_group(head: Head) -> None:
    head.mpirun('echo $$ > "$HOME/mpirun.pid"\nsleep 300 &\necho $! > "$HOME/child.pid"\nwait\n')
    pid = head.start("jobs/c", "x")
    mpirun = int(head.wait_for("mpirun.pid").read_text())
    child = int(head.wait_for("child.pid").read_text())
    assert all(alive(p) for p in (pid, mpirun, child))
    began = time.monotonic()
    proc = head.run("cancel", "jobs/c")
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - began < 10
    assert proc.stdout == "jobs/c cancelled\n"
    assert not any(alive(p) for p in (pid, mpirun, child))
    assert head.run("state", "jobs/c").stdout == "jobs/c cancelled\n"
    logs = head.run("logs", "jobs/c", "0", "follow", timeout=10)
    assert logs.stderr == "mpictl-state jobs/c cancelled\n"


def test_cancel_of_a_job_that_has_ended_keeps_its_exit_code(head: Head) -> None:
    head.mpirun("exit 4\n")
    head.run("start", "jobs/e", "x")
    head.wait_for("jobs/e/exit_code")
    proc = head.run("cancel", "jobs/e")
    assert (proc.returncode, proc.stdout) == (0, "jobs/e exited 4\n")
    assert not (head.home / "jobs/e/cancelled").exists()


def test_cancel_kills_a_job_that_ignores_sigterm(head: Head) -> None:
    head.mpirun(
        "trap '' TERM\n"
        'echo $$ > "$HOME/mpirun.pid"\nsleep 300 &\necho $! > "$HOME/child.pid"\nwait\nwait\n'
    )
    pid = head.start("jobs/s", "x")
    mpirun = int(head.wait_for("mpirun.pid").read_text())
    child = int(head.wait_for("child.pid").read_text())
    began = time.monotonic()
    proc = head.run("cancel", "jobs/s", timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert 8 < time.monotonic() - began < 16  # SIGTERM, 10 s, then SIGKILL
    assert proc.stdout == "jobs/s cancelled\n"
    assert not any(alive(p) for p in (pid, mpirun, child))


def test_a_missing_job_dir_is_reported(head: Head) -> None:
    logs = head.run("logs", "jobs/nope", "0")
    assert logs.returncode == 2
    assert logs.stderr.startswith("mpictl: no job in ~/jobs/nope on ")
    assert logs.stdout == ""
    cancel = head.run("cancel", "jobs/nope")
    assert (cancel.returncode, cancel.stdout) == (0, "jobs/nope lost\n")
    usage = head.run("restart", "jobs/nope")
    assert usage.returncode == 2 and "usage:" in usage.stderr


def test_start_without_mpirun_says_so(head: Head) -> None:
    if shutil.which("mpirun", path=os.environ["PATH"]):
        pytest.skip("this machine has an mpirun on PATH")
    proc = head.run("start", "jobs/m", "x")
    assert proc.returncode == 127
    assert proc.stderr.startswith("mpictl: mpirun not found on ")
    assert not (head.home / "jobs/m").exists()
