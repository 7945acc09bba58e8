"""Benchmark: the MPI smoke suite over UCX (``mpi_transport: ucx``) against OpenMPI's own TCP
(``mpi_transport: tcp``, pml ob1), on the same provisioned cluster, alternating (issue 24).

python bench/transport_smoke.py [-i INVENTORY] [--runs N]

For each run and transport: the wall time of ``mpictl smoke --suite mpi`` and each test's time as
the suite reports it (rank 0's ``time_s``, the slowest rank). The transports alternate run by run
so that a machine that gets busier does not favour one. The inventory (default: the sandbox) must
be provisioned (``bash scripts/demo.sh`` leaves it so); on the sandbox UCX runs over its tcp
transport (no HCA), so this compares the two software stacks on the same TCP links, not a fabric.

Writes JSON to bench/out/transport_smoke.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import write_result  # noqa: E402
from mpictl import paths  # noqa: E402

TRANSPORTS = ("ucx", "tcp")


def with_transport(inventory: Path, transport: str, where: Path) -> Path:
    """A copy of the inventory (a directory, or the directory of a file) with mpi_transport set
    for every node (group_vars/mpi_nodes.yml)."""
    source = inventory if inventory.is_dir() else inventory.parent
    target = where / transport
    shutil.copytree(source, target)
    group_vars = target / "group_vars"
    group_vars.mkdir(exist_ok=True)
    extra = group_vars / "mpi_nodes.yml"
    data = yaml.safe_load(extra.read_text()) if extra.exists() else {}
    extra.write_text(yaml.safe_dump({**(data or {}), "mpi_transport": transport}))
    return target if inventory.is_dir() else target / inventory.name


def smoke(inventory: Path) -> dict[str, Any]:
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "mpictl", "smoke", "-i", str(inventory), "--suite", "mpi", "--json"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    wall = time.monotonic() - start
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        return {"ok": False, "wall_s": wall, "error": (proc.stderr or proc.stdout)[-300:]}
    tests = {r["test"]: r.get("time_s") for r in report.get("results", []) if r.get("test")}
    return {"ok": bool(report.get("ok")), "wall_s": round(wall, 2), "tests": tests}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-i", "--inventory", type=Path, default=paths.sandbox_inventory())
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    runs: dict[str, list[dict[str, Any]]] = {t: [] for t in TRANSPORTS}
    with tempfile.TemporaryDirectory() as tmp:
        inventories = {t: with_transport(args.inventory, t, Path(tmp)) for t in TRANSPORTS}
        for _ in range(args.runs):
            for t in TRANSPORTS:
                runs[t].append(smoke(inventories[t]))
    summary = {}
    for t, results in runs.items():
        good = [r for r in results if r["ok"]]
        tests = sorted({name for r in good for name in r["tests"]})
        summary[t] = {
            "ok_runs": f"{len(good)}/{len(results)}",
            "wall_s_median": statistics.median(r["wall_s"] for r in good) if good else None,
            "test_s_median": {
                name: statistics.median(r["tests"][name] for r in good if r["tests"].get(name))
                for name in tests
            },
        }
    write_result("transport_smoke", {"inventory": str(args.inventory), "runs": runs,
                                     "summary": summary})  # fmt: skip
    return 0 if all(r["ok"] for rs in runs.values() for r in rs) else 1


if __name__ == "__main__":
    sys.exit(main())
