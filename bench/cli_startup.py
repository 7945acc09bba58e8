"""Benchmark: wall time of `mpictl --help` (target < 0.3 s; Ansible is imported lazily).

python bench/cli_startup.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def measure(runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "mpictl", "--help"], check=True, stdout=subprocess.DEVNULL
        )
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    times = measure(args.runs)
    median = statistics.median(times)
    print(f"mpictl --help: median {median:.3f} s, min {min(times):.3f} s over {args.runs} runs")
    print(f"target < 0.300 s: {'met' if median < 0.3 else 'NOT met'}")


if __name__ == "__main__":
    main()
