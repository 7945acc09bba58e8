#!/usr/bin/env python3
"""A one-host Slurm for tests, called as ``sbatch``, ``scontrol``, ``scancel`` or ``srun``
(symlinks to this file). Jobs live in ``$FAKE_SLURM_DIR``: ``sbatch --parsable`` runs the
script in a session of its own on this host (the batch host) and prints the id; ``scontrol show
job -o ID`` prints its JobState/ExitCode/BatchHost/NodeList like slurmctld, ``scancel`` ends
its session (CANCELLED), ``srun`` runs its command as rank 0 with an ``0: `` label. A job id in
``$FAKE_SLURM_DIR/forgotten`` is unknown to scontrol (slurmctld's MinJobAge has passed)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

BASE = Path(os.environ.get("FAKE_SLURM_DIR", "/tmp/fake-slurm"))
HOST = socket.gethostname().split(".")[0]


def job_file(job: str) -> Path:
    return BASE / f"{job}.json"


def load(job: str) -> dict:
    return json.loads(job_file(job).read_text())


def state_of(job: str) -> tuple[str, str]:
    info = load(job)
    if info.get("cancelled"):
        return "CANCELLED", "0:15"
    try:
        os.kill(info["pid"], 0)
    except ProcessLookupError:
        rc_file = BASE / f"{job}.rc"
        rc = int(rc_file.read_text()) if rc_file.exists() else 1
        return ("COMPLETED" if rc == 0 else "FAILED"), f"{rc}:0"
    return "RUNNING", "0:0"


def sbatch(args: list[str]) -> int:
    script = Path(args[-1])
    BASE.mkdir(parents=True, exist_ok=True)
    if (BASE / "refuse").exists():
        print(
            "sbatch: error: Batch job submission failed: "
            "Requested node configuration is not available",
            file=sys.stderr,
        )
        return 1
    job = str(len(list(BASE.glob("*.json"))) + 100)
    rc_file = BASE / f"{job}.rc"
    env = {**os.environ, "SLURM_JOB_ID": job, "SLURM_JOB_NODELIST": HOST}
    wrapper = f"bash {script}; echo $? > {rc_file}"
    proc = subprocess.Popen(
        ["bash", "-c", wrapper],
        env=env,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    job_file(job).write_text(json.dumps({"pid": proc.pid}))
    print(job if "--parsable" in args else f"Submitted batch job {job}")
    return 0


def scontrol(args: list[str]) -> int:
    if args[:2] == ["show", "hostnames"]:
        print("\n".join(args[2].split(",")))
        return 0
    job = args[-1]
    forgotten = BASE / "forgotten"
    if not job_file(job).exists() or (forgotten.exists() and job in forgotten.read_text().split()):
        print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
        return 1
    state, code = state_of(job)
    print(
        f"JobId={job} JobName=x JobState={state} Reason=None ExitCode={code} "
        f"NodeList={HOST} BatchHost={HOST} NumNodes=1"
    )
    return 0


def scancel(args: list[str]) -> int:
    job = args[-1]
    info = load(job)
    info["cancelled"] = True
    job_file(job).write_text(json.dumps(info))
    with contextlib.suppress(ProcessLookupError):
        os.killpg(info["pid"], signal.SIGTERM)
    return 0


def srun(args: list[str]) -> int:
    command = [a for a in args if not a.startswith("--")]
    env = {**os.environ, "SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0"}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write("0: " + line.decode())
        sys.stdout.flush()
    return proc.wait()


def main() -> int:
    name = Path(sys.argv[0]).name
    return {"sbatch": sbatch, "scontrol": scontrol, "scancel": scancel, "srun": srun}[name](
        sys.argv[1:]
    )


if __name__ == "__main__":
    sys.exit(main())
