"""Benchmark: time to the first rank's output, `mpictl run --launcher slurm` next to plain
`mpictl run`, the same job in the same run of the benchmark.

python bench/slurm_launch.py [-i INVENTORY] [--runs 5]

The job is `--ppn 1 -- sh -c 'echo ready; sleep 1'` on every node: the figure is the wall time
from starting `mpictl run` to the first line a rank printed reaching our stdout (the CLI's
own startup, the SSH login, the plan, and for Slurm sbatch, the allocation, srun's PMIx wire-up
and the output's trip from the batch host), and to the command's exit. Runs alternate between
the launchers; medians of RUNS. The cluster must be provisioned with `slurm_enabled: true`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOB = ["--ppn", "1", "--", "sh", "-c", "echo ready; sleep 1"]


def first_output(inventory: str, launcher: str) -> tuple[float, float]:
    """(seconds to the first stdout line, seconds to exit) of one run."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mpictl", "run", "-i", inventory, "--launcher", launcher, *JOB],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    first = None
    for line in proc.stdout:
        if first is None and "ready" in line:
            first = time.perf_counter() - start
    rc = proc.wait()
    total = time.perf_counter() - start
    if rc != 0 or first is None:
        sys.exit(f"mpictl run --launcher {launcher} failed (exit {rc})")
    return first, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-i", "--inventory", default=str(ROOT / "inventories" / "sandbox"))
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    figures: dict[str, list[tuple[float, float]]] = {"mpirun": [], "slurm": []}
    for _ in range(args.runs):
        for launcher in figures:
            figures[launcher].append(first_output(args.inventory, launcher))
    print(f"{'launcher':<10}{'first output (s)':>18}{'exit (s)':>12}   (median of {args.runs})")
    for launcher, runs in figures.items():
        first = statistics.median(f for f, _ in runs)
        total = statistics.median(t for _, t in runs)
        print(f"{launcher:<10}{first:>18.2f}{total:>12.2f}")


if __name__ == "__main__":
    main()
