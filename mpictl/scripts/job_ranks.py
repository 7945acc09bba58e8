"""The ranks of one mpirun job on a node: end them, count them, and watch for a stuck mpirun.

Runs with the node's system python3 (standard library only), as the MPI user, who can see and
signal only their own processes. A job's processes are the ones whose environment carries
``MPICTL_JOB_ID=<id>`` (mpictl passes it to every rank). Every rank of an mpirun job runs behind
``rank_exit.sh`` (the controller puts it in front of the command), which writes the rank's
exit code to ``/tmp/mpictl-ranks-<uid>/<job id>/<rank>`` once the rank has ended: ``rank_exit.sh``.

    python3 - cleanup JOB_ID
        SIGTERM, then SIGKILL, to whatever carries the job's id; prints ``<found> <left>``.
    python3 - probe JOB_ID
        prints ``<alive> RANK:RC ...``: the job's live processes here, and the exit codes of the
        ranks that ended here.
    python3 FILE watch JOB_ID PID RANKS GRACE RC_FILE HOST...
        (on the head, beside mpirun, whose pid is PID) OpenMPI 5's runtime (PRRTE) sometimes
        never exits after every rank of a job has ended (its daemons miss the exit order:
        open-mpi/ompi#10586, openpmix/prrte#1839). When the head has held no live rank of the job
        for GRACE seconds while mpirun still runs, the watchdog probes every HOST over the
        cluster's SSH; when none holds a live rank either and every rank has noted its exit code,
        it ends mpirun (SIGTERM to its process group, SIGKILL after 5 s), writes the job's exit
        code (the ranks' own: the first non-zero in rank order, else 0) to RC_FILE and says so in
        one line on stderr. A job still starting (no rank alive yet, none ended) is never taken for
        an ended one. Ranks that are alive (running, or blocked in a barrier) are never touched:
        while any node holds one, the probes back off (GRACE, 2*GRACE, ... up to 60 s). A node
        that does not answer counts as holding live ranks.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

MAX_BACKOFF_S = 60.0
PROBE_TIMEOUT_S = 20


def rc_dir(job_id: str) -> str:
    return f"/tmp/mpictl-ranks-{os.getuid()}/{job_id}"


def job_processes(job_id: str, proc: str = "/proc") -> list[int]:
    """PIDs (other than this one) whose environment holds MPICTL_JOB_ID=<job_id>. A zombie (a
    rank that ended and was not reaped yet) has no environment left and is not counted."""
    marker = ("MPICTL_JOB_ID=" + job_id).encode()
    me, out = os.getpid(), []
    for entry in os.listdir(proc):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(os.path.join(proc, entry, "environ"), "rb") as fh:
                env = fh.read().split(b"\0")
        except OSError:
            continue
        if marker in env:
            out.append(int(entry))
    return out


def end_job(job_id: str, grace_s: float = 1.0) -> tuple[int, int]:
    """Signal the job's processes (TERM, then KILL); return (found, left)."""
    found = job_processes(job_id)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = job_processes(job_id)
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        if pids:
            time.sleep(grace_s)
    return len(found), len(job_processes(job_id))


def rank_codes(job_id: str) -> dict[str, int]:
    """rank -> exit code, of the ranks that ended on this node."""
    out: dict[str, int] = {}
    directory = rc_dir(job_id)
    with contextlib.suppress(OSError):
        for name in os.listdir(directory):
            with (
                contextlib.suppress(OSError, ValueError),
                open(os.path.join(directory, name)) as fh,
            ):
                out[name] = int(fh.read().strip())
    return out


def probe_line(job_id: str) -> str:
    codes = rank_codes(job_id)
    return " ".join([str(len(job_processes(job_id))), *(f"{r}:{c}" for r, c in codes.items())])


def parse_probe(text: str) -> tuple[int, dict[str, int]] | None:
    """``probe``'s line -> (live processes, rank -> code); None when it does not read."""
    words = text.split()
    if not words or not words[0].isdecimal():
        return None
    codes: dict[str, int] = {}
    for word in words[1:]:
        rank, _, code = word.partition(":")
        if not code.lstrip("-").isdecimal():
            return None
        codes[rank] = int(code)
    return int(words[0]), codes


def job_exit_code(codes: dict[str, int], ranks: int) -> tuple[int, str]:
    """The job's exit code from its ranks' codes, and how it was decided."""
    numbered = sorted((int(r), c) for r, c in codes.items() if r.isdecimal())
    failed = [(r, c) for r, c in numbered if c != 0]
    if failed:
        return failed[0][1], f"rank {failed[0][0]} exited {failed[0][1]}"
    if len(codes) < ranks:
        return 1, f"{ranks - len(codes)} of {ranks} ranks left no exit code"
    return 0, f"all {ranks} ranks exited 0"


def ssh_probe(host: str, job_id: str, program: str) -> tuple[int, dict[str, int]] | None:
    argv = ["ssh", "-T", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
            "-o", "ConnectTimeout=5", host, f"python3 - probe {job_id}"]  # fmt: skip
    try:
        proc = subprocess.run(argv, input=program, capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_probe(proc.stdout) if proc.returncode == 0 else None


def probe_all(hosts: list[str], job_id: str, program: str) -> tuple[int, dict[str, int], list[str]]:
    """(live processes on all hosts, rank -> code, hosts that did not answer)."""
    alive, codes, silent = 0, {}, []
    with ThreadPoolExecutor(max_workers=min(32, max(1, len(hosts)))) as pool:
        results = list(pool.map(lambda h: ssh_probe(h, job_id, program), hosts))
    for host, result in zip(hosts, results, strict=True):
        if result is None:
            silent.append(host)
            continue
        alive += result[0]
        codes.update(result[1])
    return alive, codes, silent


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (ended, not yet reaped by the session) is not running
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    return True


def end_launcher(pid: int, grace_s: float = 5.0) -> None:
    """SIGTERM to mpirun's process group (its own pid when it leads none), SIGKILL after grace."""
    target = -pid if os.getpgid(pid) == pid else pid
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(OSError):
            os.kill(target, sig)
        deadline = time.monotonic() + grace_s
        while running(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not running(pid):
            return


def watch(job_id: str, pid: int, ranks: int, grace: float, rc_file: str, hosts: list[str],
          program: str, interval: float = 1.0) -> int:  # fmt: skip
    next_probe: float | None = None
    backoff = grace
    while running(pid):
        time.sleep(interval)
        if job_processes(job_id):  # ranks live here: the job runs (its ranks are everywhere)
            next_probe, backoff = None, grace
            continue
        now = time.monotonic()
        if next_probe is None:
            next_probe = now + grace
            continue
        if now < next_probe or not running(pid):
            continue
        alive, codes, silent = probe_all(hosts, job_id, program)
        # Every rank must have noted its exit code: a job still starting (no rank alive yet, no
        # code either) or a rank killed with its wrapper is never taken for an ended job.
        if alive or silent or len(codes) < ranks or not running(pid):
            backoff = min(backoff * 2, MAX_BACKOFF_S)
            next_probe = time.monotonic() + backoff
            continue
        code, why = job_exit_code(codes, ranks)
        with open(rc_file + ".tmp", "w") as fh:
            fh.write(f"{code}\n")
        os.replace(rc_file + ".tmp", rc_file)
        print(
            f"mpictl: watchdog: every rank of job {job_id} has ended ({why}) but mpirun had not "
            f"exited {grace:g} s later (OpenMPI's exit race); ending it on every node, exit code "
            f"{code}",
            file=sys.stderr,
            flush=True,
        )
        end_launcher(pid)
        return 0
    return 0


def main(argv: list[str]) -> int:
    usage = (
        "usage: job_ranks.py cleanup|probe JOB_ID | watch JOB_ID PID RANKS GRACE RC_FILE HOST..."
    )
    if len(argv) == 2 and argv[0] == "cleanup" and argv[1]:
        found, left = end_job(argv[1])
        print(found, left)
        return 0
    if len(argv) == 2 and argv[0] == "probe" and argv[1]:
        print(probe_line(argv[1]))
        return 0
    if len(argv) >= 6 and argv[0] == "watch":
        with open(__file__) as fh:
            program = fh.read()
        job_id, pid, ranks, grace, rc_file, *hosts = argv[1:]
        return watch(job_id, int(pid), int(ranks), float(grace), rc_file, hosts, program)
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
