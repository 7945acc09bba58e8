"""Benchmark: do `mpictl run --torch` jobs that finished exit 0 on a loaded machine (issue 23, 10)?

python bench/torch_exit.py [-i INVENTORY] [--runs 20] [--load 2] [--np 3]

Runs the issue's three-line gloo allreduce script, which never calls destroy_process_group(),
RUNS times with the torch wrapper's teardown turned off (`-x MPICTL_TORCH_TEARDOWN=0`: the
wrapper as it was before) and RUNS times as mpictl ships it, while LOAD busy processes keep the
controller's cores (which the sandbox nodes share) busy. Reports each mode's exit codes and how
many runs printed gloo's "terminate called without an active exception"; writes
bench/out/torch_exit.json. Needs a provisioned cluster with PyTorch in the cluster venv (the
sandbox after scripts/demo.sh; default inventory inventories/sandbox).
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import write_result  # noqa: E402 - after the path that finds it

SCRIPT = (
    "import torch, torch.distributed as dist\n"
    "dist.init_process_group('gloo')\n"
    "t = torch.ones(1); dist.all_reduce(t); print('sum', int(t.item()))\n"
)
ABORT = "terminate called without an active exception"


def burn() -> None:
    while True:
        pass


def one_run(inventory: Path, np: int, teardown: bool) -> dict[str, Any]:
    argv = [sys.executable, "-m", "mpictl", "run", "-i", str(inventory), "-np", str(np)]
    argv += ["--oversubscribe", "--torch", "--timeout", "300"]
    if not teardown:
        argv += ["-x", "MPICTL_TORCH_TEARDOWN=0"]
    argv += ["--", "python", "-c", SCRIPT]
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=400)
    out = proc.stdout + proc.stderr
    return {
        "rc": proc.returncode,
        "seconds": round(time.monotonic() - start, 1),
        "ranks_done": out.count(f"sum {np}"),
        "aborted": ABORT in out,
        "tail": out.strip().splitlines()[-3:] if proc.returncode else [],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-i", "--inventory", type=Path, default=ROOT / "inventories" / "sandbox")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--load", type=int, default=2, help="busy processes on the controller")
    parser.add_argument("--np", type=int, default=3)
    args = parser.parse_args()

    burners = [multiprocessing.Process(target=burn, daemon=True) for _ in range(args.load)]
    for b in burners:
        b.start()
    result: dict[str, Any] = {"runs": args.runs, "load": args.load, "np": args.np, "modes": {}}
    try:
        for mode, teardown in (("teardown off (the wrapper before)", False), ("mpictl", True)):
            runs = []
            for i in range(args.runs):
                runs.append(one_run(args.inventory, args.np, teardown))
                r = runs[-1]
                print(f"{mode} #{i + 1}: rc={r['rc']} {r['seconds']}s", file=sys.stderr)
            result["modes"][mode] = {
                "exit_codes": dict(collections.Counter(str(r["rc"]) for r in runs)),
                "aborted_runs": sum(r["aborted"] for r in runs),
                "all_ranks_finished_runs": sum(r["ranks_done"] == args.np for r in runs),
                "mean_seconds": round(sum(r["seconds"] for r in runs) / len(runs), 1),
                "failures": [r for r in runs if r["rc"]][:3],
            }
    finally:
        for b in burners:
            b.terminate()
    write_result("torch_exit", result)


if __name__ == "__main__":
    main()
