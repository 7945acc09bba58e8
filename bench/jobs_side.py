"""Benchmark: `mpictl run --workdir` and `--detach` on a provisioned cluster.

python bench/jobs_side.py [-i INVENTORY] [--mib 200] [--files 1000] [--runs 5]

- workdir: a tree of FILES random files, MIB MiB in all, synced to every node of the inventory
  by `mpictl run --workdir TREE -- true`: the first sync, then a no-change second sync (target
  < 2 s), with the file content the controller sent in each (rsync's --stats, kept in the job
  record) and what the head sent on to the others.
- detach: wall time from `mpictl run --detach -- sleep 30` to the job id on stdout (median of
  RUNS); each job is cancelled afterwards.

State: MPICTL_STATE_DIR as for any mpictl command (the cluster must be provisioned with it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def mpictl(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "mpictl", *args], capture_output=True, text=True, cwd=ROOT
    )
    if proc.returncode != 0:
        sys.exit(f"mpictl {' '.join(args)} failed: {proc.stderr.strip()[-400:]}")
    return proc


def make_tree(root: Path, mib: int, files: int) -> None:
    size = mib * 1024 * 1024 // files
    for i in range(files):
        folder = root / f"part{i // 100:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"shard{i:04d}.bin").write_bytes(os.urandom(size))


def job_record(stderr: str) -> dict:
    line = next(x for x in stderr.splitlines() if x.startswith("mpictl: job "))
    return json.loads(mpictl("jobs", "show", line.split()[2]).stdout)


def sync_once(inventory: str, tree: Path) -> tuple[float, dict]:
    start = time.perf_counter()
    proc = mpictl("run", "-i", inventory, "--workdir", str(tree), "--", "true")
    wall = time.perf_counter() - start
    return wall, job_record(proc.stderr)["extra"]["workdir"]


def describe(label: str, wall: float, meta: dict) -> str:
    controller = meta["controller"]
    onward = sum(f["stats"]["sent_bytes"] for f in meta["fanout"])
    return (
        f"{label}: sync {meta['seconds']:.2f} s (whole run {wall:.2f} s); controller sent "
        f"{controller['sent_bytes'] / 2**20:.1f} MiB ({controller['files']} files' content), "
        f"nodes sent on {onward / 2**20:.1f} MiB in {len(meta['fanout'])} transfer(s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-i", "--inventory", default=str(ROOT / "inventories" / "sandbox"))
    parser.add_argument("--mib", type=int, default=200)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mpictl-bench-workdir-") as tmp:
        tree = Path(tmp) / "tree"
        make_tree(tree, args.mib, args.files)
        first = sync_once(args.inventory, tree)
        second = sync_once(args.inventory, tree)
    print(f"workdir of {args.mib} MiB in {args.files} files:")
    print("  " + describe("first", *first))
    print("  " + describe("no-change", *second))
    print(f"  no-change target < 2 s: {'met' if second[1]['seconds'] < 2 else 'NOT met'}")
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        proc = mpictl("run", "-i", args.inventory, "--detach", "--", "sleep", "30")
        times.append(time.perf_counter() - start)
        mpictl("jobs", "cancel", proc.stdout.strip())
    print(
        f"detach: job id after median {statistics.median(times):.2f} s "
        f"(min {min(times):.2f}, max {max(times):.2f}, {args.runs} runs)"
    )


if __name__ == "__main__":
    main()
