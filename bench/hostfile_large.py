"""Benchmark: `mpictl hostfile` on a generated inventory of many hosts (target < 2 s at 2,000).

python bench/hostfile_large.py [--hosts N]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def write_inventory(path: Path, hosts: int) -> None:
    lines = ["all:", "  children:", "    mpi_nodes:", "      hosts:"]
    for i in range(hosts):
        lines.append(
            f"        gpu{i:05d}: {{ansible_host: 10.{i // 65536}.{i // 256 % 256}.{i % 256}, "
            f"mpi_slots: 8}}"
        )
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        inv = Path(tmp) / "hosts.yml"
        write_inventory(inv, args.hosts)
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            out = subprocess.run(
                [sys.executable, "-m", "mpictl", "hostfile", "-i", str(inv)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            times.append(time.perf_counter() - start)
        assert out.count("slots=8") == args.hosts
    best = min(times)
    print(f"mpictl hostfile, {args.hosts} hosts: best {best:.2f} s of {args.runs} runs")
    print(f"target < 2 s: {'met' if best < 2 else 'NOT met'}")


if __name__ == "__main__":
    main()
