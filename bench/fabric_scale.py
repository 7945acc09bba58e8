"""Benchmark: the wall time of `mpictl fabric`'s full pair matrix on sandboxes of 3, 6 and 12
nodes (issue 25), and the rounds it took.

python bench/fabric_scale.py [--nodes 3,6,12] [--seconds S] [--no-tcp] [--keep]

For each node count: a sandbox of that many nodes made as `bench/scale.py` makes it (a copy of
the sandbox inventory with its own name, subnet and ports, `mpi_slots: 1`; OpenMPI + mpi4py +
the job tools from the warm artifact cache, NCCL/Horovod/Slurm off), then `mpictl fabric --json`
with the expectation set far below what the links do (`--expect 0.01`: this measures time, not
verdicts) and its wall time from the command's start to its end. Reports per count: the pairs,
the rounds (the schedule's: N-1 for even N, N for odd N), the wall time, the time per round, and
the median of the pairs' slower direction. All nodes share this host's 2 cores, so the pairs of
one round compete for CPU here in a way separate machines do not: the figures bound the schedule's
overhead, not a real fabric's speed. Writes bench/out/fabric_scale.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import write_result  # noqa: E402
from bench.scale import OFF, source_vars, timed_provision  # noqa: E402
from mpictl import paths, sandbox  # noqa: E402


def measure(count: int, args: argparse.Namespace, base: Path) -> dict[str, Any]:
    name = f"mpictl-fabric{count}"
    subnet = f"10.89.{140 + count}.0/24"  # clear of the tests', Molecule's and scale.py's
    os.environ["MPICTL_STATE_DIR"] = str(base / f"{name}-state")
    inv = sandbox.clone_inventory(base / name, name, subnet, 2800 + count * 20, count=count)
    try:
        sandbox.down(inv)
        sandbox.up(inv, cuda=Path("/usr/local/cuda").is_dir())
        fresh = timed_provision(inv, name, {**source_vars(), **OFF})
        command = [sys.executable, "-m", "mpictl", "fabric", "-i", str(inv), "--json"]
        command += ["--expect", "0.01", "--seconds", str(args.seconds)]
        if args.no_tcp:
            command.append("--no-tcp")
        start = time.perf_counter()
        proc = subprocess.run(command, capture_output=True, text=True, timeout=3600)
        wall = time.perf_counter() - start
        if not proc.stdout.strip():
            raise SystemExit(f"fabric on {count} nodes printed nothing: {proc.stderr[-500:]}")
        report = json.loads(proc.stdout)
    finally:
        if not args.keep:
            sandbox.down(inv)
    slower = [p["slower_GBps"] for p in report["pairs"] if p.get("slower_GBps")]
    return {
        "nodes": count,
        "pairs": len(report["pairs"]),
        "rounds": report["rounds"],
        "rounds_expected": count - 1 if count % 2 == 0 else count,
        "wall_s": round(wall, 1),
        "per_round_s": round(wall / report["rounds"], 1),
        "verdicts": sorted({p["verdict"] for p in report["pairs"]}),
        "median_slower_GBps": round(statistics.median(slower), 3) if slower else None,
        "tcp": not args.no_tcp,
        "seconds_per_direction": args.seconds,
        "provision_s": fresh["seconds"],
        "exit": proc.returncode,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="3,6,12")
    parser.add_argument("--seconds", type=float, default=1.0, help="per direction and pair")
    parser.add_argument("--no-tcp", action="store_true", help="skip iperf3")
    parser.add_argument("--keep", action="store_true", help="leave the sandboxes up")
    args = parser.parse_args()
    base = paths.state_dir() / "bench-fabric"
    base.mkdir(parents=True, exist_ok=True)
    rows = []
    for count in (int(n) for n in args.nodes.split(",")):
        rows.append(measure(count, args, base))
        print(json.dumps(rows[-1]), flush=True)
    header = f"{'nodes':>5} {'pairs':>5} {'rounds':>6} {'wall (s)':>9} {'s/round':>8} {'GB/s':>6}"
    print(header)
    for r in rows:
        print(
            f"{r['nodes']:>5} {r['pairs']:>5} {r['rounds']:>6} {r['wall_s']:>9} "
            f"{r['per_round_s']:>8} {r['median_slower_GBps']!s:>6}"
        )
    write_result("fabric_scale", {"runs": rows})


if __name__ == "__main__":
    main()
