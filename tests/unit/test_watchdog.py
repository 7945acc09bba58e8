"""The watchdog for OpenMPI's exit race (``scripts/job_ranks.py watch``, ``scripts/rank_exit.sh``),
run as the head runs it: the session script (attached) and the detached script, with a stand-in
``mpirun`` that starts its ranks here through the planned command line and then, like PRRTE
when it loses the race, never exits. A fake ``ssh`` runs the probe here. The tests show the
watchdog ends such a launcher with the ranks' own exit code, and never ends a job whose ranks
are alive (one blocked in a barrier the others left)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from mpictl import executor, programs
from mpictl.errors import UsageError
from mpictl.planner import LaunchPlan
from tests.unit.loader import load

SCRIPTS = Path(__file__).resolve().parents[2] / "mpictl" / "scripts"
ranks_py = load("job_ranks", SCRIPTS / "job_ranks.py")

#: A stand-in mpirun: ``mpirun -np N CMD...`` starts N ranks of CMD here (with the variables
#: OpenMPI gives a rank and the job id mpictl passes with -x), waits for them, and then exits
#: with the first non-zero code, or, with STANDIN_HANG=1, never exits (PRRTE's lost race).
STANDIN = r"""#!/usr/bin/env python3
import os, subprocess, sys, time
args = sys.argv[1:]
np = int(args[args.index("-np") + 1])
command = args[args.index("-np") + 2:]
job = next(a.split("=", 1)[1] for a in args if a.startswith("MPICTL_JOB_ID="))
command = command[command.index("--") + 1:] if "--" in command else command
procs = []
for rank in range(np):
    env = {**os.environ, "MPICTL_JOB_ID": job, "OMPI_COMM_WORLD_RANK": str(rank),
           "OMPI_COMM_WORLD_LOCAL_RANK": str(rank)}
    procs.append(subprocess.Popen(command, env=env, start_new_session=True))
codes = [p.wait() for p in procs]
if os.environ.get("STANDIN_HANG") == "1":
    while True:
        time.sleep(1)
sys.exit(next((c for c in codes if c), 0))
"""


def job_id() -> str:
    return "20261127-120000-" + os.urandom(3).hex()


def plan(job: str, command: list[str], ranks: int = 3) -> LaunchPlan:
    mpirun = ["mpirun", "-np", str(ranks), "-x", f"MPICTL_JOB_ID={job}", "--"]
    return LaunchPlan(mpirun=mpirun, command=command, hosts=[("node-a", ranks), ("node-b", 0)],
                      ranks=ranks, network=None, job_id=job)  # fmt: skip


@pytest.fixture
def bindir(tmp_path: Path) -> Path:
    """mpirun (the stand-in) and ssh (runs the remote command here, the program on stdin)."""
    path = tmp_path / "bin"
    path.mkdir()
    (path / "mpirun").write_text(STANDIN)
    (path / "ssh").write_text('#!/bin/sh\nfor last; do :; done\nexec sh -c "$last"\n')
    for name in ("mpirun", "ssh"):
        (path / name).chmod(0o755)
    return path


def attached(bindir: Path, p: LaunchPlan, grace: float | None, hang: bool, wait: float = 30):
    """Run the session command as the head's login shell would; (rc, stderr, seconds)."""
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "STANDIN_HANG": str(int(hang))}
    start = time.monotonic()
    proc = subprocess.Popen(["sh", "-c", executor.session_command(p, grace)], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:
        rc: int | None = proc.wait(timeout=wait)  # stdin stays open: the SSH channel lives
    except subprocess.TimeoutExpired:
        rc = None
    took = time.monotonic() - start
    proc.stdin.close()  # type: ignore[union-attr]  # the controller hangs up
    proc.wait(timeout=30)
    ranks_py.end_job(p.job_id)  # what the controller's cleanup does after a hang-up
    return rc, proc.stderr.read(), took  # type: ignore[union-attr]


def test_a_launcher_that_never_exits_after_its_ranks_is_ended_with_their_exit_code(
    bindir: Path,
) -> None:
    job = job_id()
    rank = 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then exit 3; fi'
    rc, err, took = attached(bindir, plan(job, ["sh", "-c", rank]), 0.5, hang=True)
    assert rc == 3, err
    line = [x for x in err.splitlines() if x.startswith(executor.WATCHDOG_LINE)]
    assert len(line) == 1 and "rank 1 exited 3" in line[0] and job in line[0], err
    assert took < 15
    assert not ranks_py.job_processes(job)


def test_the_same_launcher_hangs_with_the_watchdog_off(bindir: Path) -> None:
    rc, err, took = attached(bindir, plan(job_id(), ["true"]), None, hang=True, wait=6)
    assert rc is None and took >= 6  # still running when the controller hung up
    assert executor.WATCHDOG_LINE not in err


def test_ranks_alive_in_a_barrier_are_never_ended(bindir: Path) -> None:
    # Ranks 0 and 2 end at once; rank 1 stays in "the barrier" (it runs on for 8 s). The
    # launcher would hang after it. The watchdog must wait for rank 1, however long.
    job = job_id()
    rank = 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then sleep 8; fi'
    rc, err, took = attached(bindir, plan(job, ["sh", "-c", rank]), 0.5, hang=True)
    assert rc == 0, err
    assert took >= 8, f"ended after {took:.1f} s while rank 1 was alive: {err}"
    assert "all 3 ranks exited 0" in err


def test_a_blocked_rank_is_left_to_the_timeout(bindir: Path) -> None:
    rank = 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then sleep 60; fi'
    rc, err, took = attached(bindir, plan(job_id(), ["sh", "-c", rank]), 0.5, hang=False, wait=6)
    assert rc is None, err  # the controller's hang-up (its --timeout) ended it, not the watchdog
    assert executor.WATCHDOG_LINE not in err


def test_a_launcher_that_exits_is_left_alone(bindir: Path) -> None:
    rank = 'echo "rank $OMPI_COMM_WORLD_RANK"; [ "$OMPI_COMM_WORLD_RANK" != 2 ] || exit 5'
    rc, err, took = attached(bindir, plan(job_id(), ["sh", "-c", rank]), 0.5, hang=False)
    assert rc == 5 and executor.WATCHDOG_LINE not in err
    assert took < 5


def test_a_job_whose_ranks_have_not_started_yet_is_left_alone(bindir: Path) -> None:
    # The launcher takes 6 s to start its ranks (a slow start: many nodes, a slow filesystem):
    # nothing is alive and nothing has ended for twice the grace; the watchdog must wait.
    slow = STANDIN.replace("procs = []", "time.sleep(6)\nprocs = []")
    (bindir / "mpirun").write_text(slow)
    rc, err, took = attached(bindir, plan(job_id(), ["true"]), 0.5, hang=False)
    assert rc == 0 and executor.WATCHDOG_LINE not in err, err
    assert took >= 6


def test_a_node_that_does_not_answer_counts_as_holding_live_ranks(bindir: Path) -> None:
    (bindir / "ssh").write_text("#!/bin/sh\nexit 255\n")
    rc, err, _ = attached(bindir, plan(job_id(), ["true"]), 0.5, hang=True, wait=6)
    assert rc is None and executor.WATCHDOG_LINE not in err


def test_the_rank_wrapper_notes_the_code_and_raises_the_signal_again(tmp_path: Path) -> None:
    job = job_id()
    env = {**os.environ, "MPICTL_JOB_ID": job, "OMPI_COMM_WORLD_RANK": "4"}
    wrap = ["bash", "-c", programs.source("rank_exit.sh"), "mpictl-rank"]
    crash = subprocess.run([*wrap, "sh", "-c", "kill -SEGV $$"], env=env, check=False)
    assert crash.returncode == -11  # as if the rank had crashed under mpirun itself
    assert ranks_py.rank_codes(job) == {"4": 139}
    out = subprocess.run([*wrap, "echo", "a b"], env=env, capture_output=True, text=True)
    assert (out.returncode, out.stdout) == (0, "a b\n")
    assert ranks_py.rank_codes(job) == {"4": 0}
    assert ranks_py.probe_line(job) == "0 4:0"


def test_exit_codes_from_the_ranks() -> None:
    assert ranks_py.job_exit_code({"0": 0, "1": 0}, 2) == (0, "all 2 ranks exited 0")
    assert ranks_py.job_exit_code({"0": 0, "2": 7, "10": 3}, 3)[0] == 7
    assert ranks_py.job_exit_code({"0": 0}, 3) == (1, "2 of 3 ranks left no exit code")
    assert ranks_py.parse_probe("2 0:0 1:3") == (2, {"0": 0, "1": 3})
    assert ranks_py.parse_probe("ssh: no route") is None


def test_detached_job_ended_by_the_watchdog_keeps_the_ranks_code(
    bindir: Path, tmp_path: Path
) -> None:
    job = job_id()
    home = tmp_path / "home"
    home.mkdir()
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    rank = 'if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then exit 4; fi'
    words, env = executor.launch(plan(job, ["sh", "-c", rank]), 0.5)
    shell_env = {**os.environ, "HOME": str(home), "XDG_RUNTIME_DIR": str(runtime),
                 "PATH": f"{bindir}:{os.environ['PATH']}", "STANDIN_HANG": "1"}  # fmt: skip
    script = ["bash", "-c", programs.source("job_detached.sh"), "mpictl-detached"]
    start = subprocess.run(["env", *env, *script, "start", f"jobs/{job}", *words],
                           env=shell_env, capture_output=True, text=True, timeout=30)  # fmt: skip
    assert re.match(r"(started|ended) ", start.stdout), start.stderr
    deadline = time.monotonic() + 20
    state = ""
    while time.monotonic() < deadline:
        state = subprocess.run([*script, "state", f"jobs/{job}"], env=shell_env,
                               capture_output=True, text=True).stdout.strip()  # fmt: skip
        if "exited" in state:
            break
        time.sleep(0.3)
    assert state == f"jobs/{job} exited 4 watchdog"
    assert "rank 0 exited 4" in (home / "jobs" / job / "output.log").read_text()


@pytest.mark.parametrize("value", ["0", "-3", "x", "1e9", "nan"])
def test_a_bad_grace_is_one_usage_error(value: str) -> None:
    with pytest.raises(UsageError, match="MPICTL_WATCHDOG_GRACE"):
        executor.watchdog_grace(value)


def test_grace_default_and_off() -> None:
    assert executor.watchdog_grace(None) == executor.WATCHDOG_GRACE_S
    assert executor.watchdog_grace("off") is None
    assert executor.watchdog_grace("2.5") == 2.5
