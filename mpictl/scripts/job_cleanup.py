"""End what is left of one job on this node: ``python3 - JOB_ID`` (run by ``mpictl run``).

Every process whose environment carries ``MPICTL_JOB_ID=<JOB_ID>`` (the ranks, and anything they
started) gets SIGTERM, then SIGKILL. Prints ``<found> <left>``: how many such processes there
were, and how many are still there afterwards (0 when the node is clean). Standard library only:
it runs with the node's system python3, as the MPI user, who can signal only their own processes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time


def job_processes(job_id: str, proc: str = "/proc") -> list[int]:
    """PIDs (other than this one) whose environment holds MPICTL_JOB_ID=<job_id>."""
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


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0]:
        print("usage: job_cleanup.py JOB_ID", file=sys.stderr)
        return 2
    found, left = end_job(argv[0])
    print(found, left)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
