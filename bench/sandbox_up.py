"""Benchmark: `mpictl sandbox up` cold (node image build), fresh (image cached) and warm.

python bench/sandbox_up.py [--cold] [--runs N]

Runs its own 3-node sandbox (``mpictl-bench``, 10.89.39.0/24, ports 2191-2193) with state in a
temporary directory and removes it at the end. ``--cold`` first untags the node image so that
`up` rebuilds it (debootstrap + podman import); containers of other sandboxes keep running on the
old image, which is removed afterwards only if nothing uses it.

  cold   image build + network + containers + keys + SSH wait
  fresh  image cached, no containers yet (what a test session or Molecule `create` pays)
  warm   every node already running (a second `up`)
  down   remove containers and network
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAME = "mpictl-bench"
SUBNET = "10.89.39.0/24"
PORT_BASE = 2191


def clone_inventory(dst: Path) -> Path:
    from mpictl.sandbox import clone_inventory as clone

    return clone(dst, NAME, SUBNET, PORT_BASE)


def mpictl(*args: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "mpictl", *args], env=env, cwd=ROOT, capture_output=True, text=True
    )
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"mpictl {' '.join(args)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return elapsed


def image_id(tag: str) -> str | None:
    proc = subprocess.run(
        ["podman", "image", "inspect", "--format", "{{.Id}}", tag], capture_output=True, text=True
    )
    return proc.stdout.strip() if proc.returncode == 0 else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold", action="store_true", help="rebuild the node image first")
    parser.add_argument("--runs", type=int, default=3, help="fresh/warm repetitions")
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    from mpictl.sandbox import image_tag

    tag = image_tag()
    with tempfile.TemporaryDirectory(prefix="mpictl-bench-") as tmp:
        inventory = str(clone_inventory(Path(tmp) / "inv"))
        env = {**os.environ, "MPICTL_STATE_DIR": str(Path(tmp) / "state")}
        mpictl("sandbox", "down", "-i", inventory, env=env)
        figures: dict[str, list[float]] = {"fresh": [], "warm": [], "down": []}
        try:
            if args.cold:
                old = image_id(tag)
                if old:
                    subprocess.run(["podman", "untag", tag], check=True)
                figures["cold"] = [mpictl("sandbox", "up", "-i", inventory, env=env)]
                if old and old != image_id(tag):  # fails harmlessly while others still use it
                    subprocess.run(["podman", "rmi", old], capture_output=True)
                figures["warm"].append(mpictl("sandbox", "up", "-i", inventory, env=env))
                figures["down"].append(mpictl("sandbox", "down", "-i", inventory, env=env))
            for _ in range(args.runs):
                figures["fresh"].append(mpictl("sandbox", "up", "-i", inventory, env=env))
                figures["warm"].append(mpictl("sandbox", "up", "-i", inventory, env=env))
                figures["down"].append(mpictl("sandbox", "down", "-i", inventory, env=env))
        finally:
            mpictl("sandbox", "down", "-i", inventory, env=env)
    print(f"mpictl sandbox up, 3 nodes, image {tag} ({os.cpu_count()} CPUs)")
    for label in ("cold", "fresh", "warm", "down"):
        times = figures.get(label)
        if times:
            print(
                f"  {label:<6} median {statistics.median(times):6.2f} s"
                f"  min {min(times):6.2f} s  max {max(times):6.2f} s  ({len(times)} runs)"
            )


if __name__ == "__main__":
    main()
