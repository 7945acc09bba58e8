"""Benchmark: OpenMPI's exit race and mpictl's watchdog, as a user meets them.

python bench/exit_race.py [-i INVENTORY] [--runs 300] [--watchdog on|off] [--launcher mpirun|slurm]

Runs `mpictl run -np 3 --ppn 1 -- true` RUNS times in a row on a provisioned cluster (the
sandbox by default) and reports the wall time of each (median, p90, p99, max), how many runs the
watchdog ended (its `mpictl: watchdog:` line) and how many hung: a run that had not ended after
`--timeout 60` (exit 124). With `--watchdog off` (MPICTL_WATCHDOG_GRACE=off) mpirun runs bare, to
show that the race is still there. With `--launcher slurm` the ranks start under srun (no PRRTE).
A run that fails otherwise (any other exit code) stops the benchmark; `--until-hangs N` stops
after N hangs (for the loop with the watchdog off).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import write_result  # noqa: E402 - after the path that finds it

TIMEOUT_S = 60


def one(inventory: str, launcher: str, env: dict[str, str]) -> tuple[float, int, str]:
    """(seconds, exit code, what it printed on stderr) of one run."""
    argv = [sys.executable, "-m", "mpictl", "run", "-i", inventory, "--launcher", launcher,
            "-np", "3", "--ppn", "1", "--timeout", str(TIMEOUT_S), "--", "true"]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    took = time.perf_counter() - start
    return took, proc.returncode, proc.stderr


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-i", "--inventory", default=str(ROOT / "inventories" / "sandbox"))
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--watchdog", choices=("on", "off"), default="on")
    parser.add_argument("--launcher", choices=("mpirun", "slurm"), default="mpirun")
    parser.add_argument("--until-hangs", type=int, default=0,
                        help="stop after this many hangs (0: run them all)")  # fmt: skip
    args = parser.parse_args()
    env = dict(os.environ)
    if args.watchdog == "off":
        env["MPICTL_WATCHDOG_GRACE"] = "off"
    times: list[float] = []
    hangs = acted = 0
    for n in range(1, args.runs + 1):
        took, rc, stderr = one(args.inventory, args.launcher, env)
        times.append(took)
        acted += "mpictl: watchdog:" in stderr
        if rc == 124:
            hangs += 1
        elif rc != 0:
            sys.exit(f"run {n}: exit {rc} (not a hang): stopping; it said:\n{stderr[-3000:]}")
        if n % 25 == 0:
            print(f"{n} runs: {hangs} hung, watchdog acted {acted}", file=sys.stderr)
        if args.until_hangs and hangs >= args.until_hangs:
            break
    result = {
        "command": "mpictl run -np 3 --ppn 1 -- true",
        "launcher": args.launcher,
        "watchdog": args.watchdog,
        "runs": len(times),
        "hangs": hangs,
        "watchdog_acted": acted,
        "median_s": round(statistics.median(times), 2),
        "p90_s": round(quantile(times, 0.9), 2),
        "p99_s": round(quantile(times, 0.99), 2),
        "max_s": round(max(times), 2),
    }
    write_result(f"exit_race_{args.launcher}_{args.watchdog}", result)


if __name__ == "__main__":
    main()
