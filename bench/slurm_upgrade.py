"""Benchmark: moving a running Slurm cluster to another build with `mpictl provision` (issue 38).

python bench/slurm_upgrade.py -i INVENTORY -e @VARS [--flag=--disable-debug] [--job-seconds 300]

On a cluster provisioned with Slurm (``slurm_enabled``) from VARS (the sources file the tests and
the demo use, ``<cache>/sources/test-sources.yml``): submits a detached Slurm job that runs for
five minutes on every node (``--job-seconds``: it must outlive the provision), then provisions
the slurm component again with one more configure flag (a second build of the same vendored
source: the only other build to be had where Slurm 26.05.5's source cannot be fetched), and
reports

- whether slurmctld (on the controller) restarted before every slurmd (SchedMD's order for an
  upgrade), from systemd's ActiveEnterTimestampMonotonic on each node;
- whether the job kept running through the restarts and ended with exit code 0;
- whether Slurm's state survived: the job id is still known to slurmctld, sinfo lists every node;
- the provision's wall time and the compile it made.

Writes JSON to bench/out/slurm_upgrade.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import write_result  # noqa: E402
from mpictl.inventory import load_inventory  # noqa: E402
from tests.integration.nodes import ssh  # noqa: E402


def mpictl(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mpictl", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=timeout)  # fmt: skip


def started(node: object, unit: str) -> int:
    proc = ssh(node, f"systemctl show -p ActiveEnterTimestampMonotonic --value {unit}")  # type: ignore[arg-type]
    return int(proc.stdout.strip() or 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-i", "--inventory", required=True)
    parser.add_argument("-e", "--extra-vars", required=True, help="@VARS of the first provision")
    parser.add_argument("--flag", default="--disable-debug")
    parser.add_argument("--job-seconds", type=int, default=300,
                        help="how long the job runs: longer than the provision")  # fmt: skip
    args = parser.parse_args()
    cluster = load_inventory(args.inventory)
    head = cluster.head
    before = {n.name: started(n, "slurmd") for n in cluster.nodes}
    job = mpictl("run", "-i", args.inventory, "--launcher", "slurm", "--detach", "--ppn", "1",
                 "--", "sh", "-c", f"sleep {args.job_seconds}; hostname")  # fmt: skip
    if job.returncode != 0:
        sys.exit(f"could not submit the job: {job.stderr}")
    job_id = job.stdout.strip().split()[-1]
    time.sleep(5)
    extra = json.dumps({"slurm_configure_extra_flags": [args.flag]})
    start = time.monotonic()
    run = mpictl("provision", "-i", args.inventory, "-e", args.extra_vars, "-e", extra,
                 "--tags", "slurm")  # fmt: skip
    wall = time.monotonic() - start
    ctld = started(head, "slurmctld")
    after = {n.name: started(n, "slurmd") for n in cluster.nodes}
    running = ssh(head, "squeue -h -o '%i %T'").stdout.split()
    logs = mpictl("jobs", "logs", "-f", job_id, timeout=600)
    shown = json.loads(mpictl("jobs", "show", job_id).stdout or "{}")
    sinfo = ssh(head, "sinfo -N -h -o '%N %T'").stdout.split()
    result = {
        "provision_rc": run.returncode,
        "provision_s": round(wall, 1),
        "compiled": "Compile Slurm on the builder node" in run.stdout,
        "slurmctld_restarted_first": all(ctld < after[n] for n in after) and ctld > 0,
        "slurmd_restarted": {n: after[n] > before[n] for n in after},
        "job_running_after_provision": "RUNNING" in running,
        "job_exit_code": shown.get("exit_code"),
        "job_output": logs.stdout.strip().splitlines()[-3:],
        "sinfo_after": sinfo,
    }
    write_result("slurm_upgrade", result)


if __name__ == "__main__":
    main()
