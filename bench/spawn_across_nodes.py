"""Benchmark: how reliably MPI_Comm_spawn places children on other nodes (issue 23, item 4).

python bench/spawn_across_nodes.py [-i INVENTORY] [--runs 6] [--hosts node2,node3]

Two programs, each run RUNS times through `mpictl run --timeout 90` (a spawn that hangs ends
there, exit 124, and is counted as a hang):
  self    one parent on the head spawns 2 children on HOSTS (MPI.COMM_SELF.Spawn)
  world   3 parents, one per node, spawn 2 children on HOSTS collectively (COMM_WORLD.Spawn,
          root 0), merge the intercommunicator and allreduce over all 5 processes
Reports each program's exit codes and how many runs gave the right answer; writes
bench/out/spawn_across_nodes.json. Needs a provisioned cluster of at least 3 nodes with mpi4py
(the sandbox; `mpictl run --oversubscribe` lets the children share the nodes' slots).
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import write_result  # noqa: E402 - after the path that finds it

PROGRAM = """\
import sys
from mpi4py import MPI

parent = MPI.Comm.Get_parent()
if parent == MPI.COMM_NULL:
    mode, hosts = sys.argv[1], sys.argv[2]
    info = MPI.Info.Create()
    info.Set("host", hosts)
    comm = MPI.COMM_SELF if mode == "self" else MPI.COMM_WORLD
    child = comm.Spawn(sys.executable, args=[__file__], maxprocs=2, info=info, root=0)
    merged = child.Merge(high=False)
    print("SPAWN-RESULT", merged.Get_size(), merged.allreduce(1), flush=True)
else:
    merged = parent.Merge(high=True)
    merged.allreduce(1)
merged.Free()
(parent if parent != MPI.COMM_NULL else child).Disconnect()
"""
# world: 3 parents + 2 children; self: each of the 1 parent + 2 children
WANT = {"self": "SPAWN-RESULT 3 3", "world": "SPAWN-RESULT 5 5"}
PARENTS = {"self": 1, "world": 3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-i", "--inventory", type=Path, default=ROOT / "inventories" / "sandbox")
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--hosts", default="node2,node3", help="where the children go")
    args = parser.parse_args()
    result: dict[str, Any] = {"runs": args.runs, "hosts": args.hosts, "programs": {}}
    with tempfile.TemporaryDirectory(prefix="mpictl-spawn-") as work:
        (Path(work) / "spawn.py").write_text(PROGRAM)
        for mode in ("self", "world"):
            codes, right, lines = collections.Counter(), 0, []
            for i in range(args.runs):
                argv = [sys.executable, "-m", "mpictl", "run", "-i", str(args.inventory)]
                argv += ["-np", str(PARENTS[mode]), "--oversubscribe", "--timeout", "90"]
                argv += ["--workdir", work, "--", "python", "spawn.py", mode, args.hosts]
                proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
                out = (proc.stdout + proc.stderr).replace("\0", "")
                codes[str(proc.returncode)] += 1
                right += WANT[mode] in out
                lines += [
                    re.sub(r"^\[[^\]]*\] ", "", ln)  # without the [node:pid] prefix
                    for ln in out.splitlines()
                    if "ERROR" in ln or "lost comm" in ln
                ]
                print(f"{mode} #{i + 1}: rc={proc.returncode}", file=sys.stderr)
            result["programs"][mode] = {
                "exit_codes": dict(codes),
                "right_answer_runs": right,
                "hangs_ended_by_timeout": codes.get("124", 0),
                "error_lines": sorted(set(lines))[:5],
            }
    write_result("spawn_across_nodes", result)


if __name__ == "__main__":
    main()
