"""Benchmark: the GPU proof's phase A, then phase B on a clean state from A's exported cache,
against the GPU stub (issue 37).

python bench/cache_carry.py [--keep]

What a staging machine does for an air-gapped cluster, and what bench/gpu_node.sh does when the
GPU machine that ran phase A is gone (GPU_NODE_PHASES=B, GPU_NODE_IMPORT):

1. Phase A on a 2-node sandbox of its own, CUDA toolkit mounted and the test stub of the driver's
   libcuda on every node (tests/integration/stub_libcuda.py: OpenMPI builds CUDA-aware, the same
   fingerprint as the test suite's sandboxes), with the machine's artifact cache:
   ``provision --tags ssh,environment,hostfile,ucx,ucc,openmpi``, then
   ``mpictl cache export A.tar.gz -c ucx -c ucc -c openmpi``.
2. A clean state: the sandbox destroyed and made again (fresh nodes from the image), a new state
   dir, an empty artifact cache, and OpenMPI's, UCX's and UCC's sources absent on the controller
   (their ``*_source_local`` point at files that do not exist). ``mpictl cache import A.tar.gz``,
   then phase B's first component on top of A's:
   ``provision --tags ssh,environment,hostfile,ucx,ucc,openmpi,mpi4py,jobs``. UCX, UCC and
   OpenMPI must install from the import with nothing compiled; mpi4py compiles against the
   imported OpenMPI (the rest of phase B, NCCL, nccl-tests and Horovod, compiles the same way and
   takes about 15 more minutes on 2 cores: left out here, bench/gpu_node.sh runs it on a GPU
   machine). Then ``mpictl smoke --suite mpi`` on the clean cluster.

Fails (exit 1) where anything of A's compiles in B or the smoke fails. Writes
bench/out/cache_carry.json: each step's seconds, the compile tasks per provision, the archive's
size and members.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import source_vars, write_result  # noqa: E402 - after the path that finds it
from bench.build_times import COMPONENTS  # noqa: E402 - after the path that finds it

PHASE_A = ("ucx", "ucc", "openmpi")  # build_once names: the export, the sources left out
TAGS_A = "ssh,environment,hostfile," + ",".join(PHASE_A)
TAGS_B = TAGS_A + ",mpi4py,jobs"


def compiled(result: Any) -> dict[str, list[str]]:
    """Component -> the hosts its compile task ran on (each build role's 'Compile <Component> on
    the builder node', as bench/build_times.py reads it)."""
    out: dict[str, list[str]] = {}
    for component in COMPONENTS:
        hosts = sorted(
            r.host
            for r in result.task_results(f"Compile {component} on the builder node")
            if r.status in ("ok", "changed")
        )
        if hosts:
            out[component] = hosts
    return out


def mpictl(*args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "mpictl", *args], capture_output=True, text=True, timeout=3600
    )
    return time.monotonic() - start, proc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="bench-carry")
    parser.add_argument("--subnet", default="10.89.80.0/24")
    parser.add_argument("--port-base", type=int, default=2381)
    parser.add_argument("--keep", action="store_true", help="leave the sandbox up")
    args = parser.parse_args()

    from mpictl import provision, sandbox
    from mpictl.sandbox import clone_inventory
    from tests.integration import stub_libcuda

    sources = source_vars()
    work = Path(tempfile.mkdtemp(prefix="mpictl-bench-carry-"))
    inv = clone_inventory(work / "inventory", args.name, args.subnet, args.port_base)
    archive = work / "phase-a.tar.gz"
    seconds: dict[str, float] = {}
    figures: dict[str, Any] = {"archive": str(archive)}

    def up(label: str) -> None:
        start = time.monotonic()
        sandbox.down(inv)
        sandbox.up(inv, cuda=True)
        stub_libcuda.install(inv)
        seconds[label] = round(time.monotonic() - start, 1)

    try:
        # ---- phase A: the machine's cache, the sources on the controller
        os.environ["MPICTL_STATE_DIR"] = str(work / "state-a")
        up("sandbox_a")
        _, a = provision.provision(inv, tags=TAGS_A, extravars=sources)
        seconds["provision_a"] = round(a.duration_s, 1)
        figures["compiled_a"] = compiled(a)
        if not a.ok:
            raise SystemExit(f"phase A failed: {a.private_data_dir}")
        picked = [arg for c in PHASE_A for arg in ("-c", c)]
        took, proc = mpictl("cache", "export", str(archive), *picked)
        seconds["export"] = round(took, 1)
        if proc.returncode != 0:
            raise SystemExit(f"cache export failed: {proc.stderr}")
        with tarfile.open(archive) as tar:
            figures["archive_members"] = sorted(
                m.name for m in tar.getmembers() if m.name.endswith((".tar.gz", ".whl"))
            )
        figures["archive_mb"] = round(archive.stat().st_size / 1e6, 1)

        # ---- a clean state: fresh nodes, state and cache; no source of A's components
        os.environ["MPICTL_STATE_DIR"] = str(work / "state-b")
        os.environ["MPICTL_CACHE_DIR"] = str(work / "cache-b")
        up("sandbox_b")
        # (no -i: fresh nodes have no cached facts yet; an artifact for another OS or compiler
        # would never be picked, its fingerprint holds both)
        took, proc = mpictl("cache", "import", str(archive))
        seconds["import"] = round(took, 1)
        figures["import_said"] = (proc.stdout + proc.stderr).strip()
        if proc.returncode != 0:
            raise SystemExit(f"cache import failed: {proc.stderr}")
        absent = {f"{c}_source_local": str(work / f"{c}-absent.tar.gz") for c in PHASE_A}
        _, b = provision.provision(inv, tags=TAGS_B, extravars={**sources, **absent})
        seconds["provision_b"] = round(b.duration_s, 1)
        figures["compiled_b"] = compiled(b)
        if not b.ok:
            raise SystemExit(f"phase B failed: {b.private_data_dir}")
        took, proc = mpictl("smoke", "-i", str(inv), "--suite", "mpi")
        seconds["smoke_b"] = round(took, 1)
        figures["smoke_b_rc"] = proc.returncode
        figures["smoke_b_tail"] = proc.stdout.strip().splitlines()[-3:]
    finally:
        if not args.keep:
            sandbox.down(inv)
    again = sorted(c for c in figures["compiled_b"] if COMPONENTS[c] in PHASE_A)
    result = {"seconds": seconds, **figures, "phase_a_compiled_in_b": again}
    write_result("cache_carry", result)
    ok = not again and figures["smoke_b_rc"] == 0 and "mpi4py" in figures["compiled_b"]
    print("phase B from A's export, nothing of A's compiled, smoke passed:", "yes" if ok else "NO")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
