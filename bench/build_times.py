"""Benchmark: how long each from-source build takes on this machine (issue 5's figures).

python bench/build_times.py --from-run RUN_DIR
    The build steps of every component built in a finished provision (an ansible-runner
    private data dir under <state>/runs/, e.g. a fresh sandbox's first provision on a cold
    cache): for each of the eight compiled components (UCX, UCC, OpenMPI, mpi4py, NCCL,
    nccl-tests, Horovod, Slurm) the duration of its configure, compile and staging install on the
    builder node and of its fan-out from the seed node ("seconds" keeps the compile alone, NCCL
    with the kernel subset the sandbox and the tests use).

python bench/build_times.py --nccl [--only-funcs SPEC] [--arch 90] [--jobs N]
    NCCL's `make src.build` on this machine, exactly as the nccl role runs it on a builder node
    (CUDA_HOME, NVCC_GENCODE for one architecture, PREFIX), from the source tarball in the
    controller cache: the full build by default, or the ONLY_FUNCS subset. Needs nvcc
    (/usr/local/cuda), no GPU.

Each mode prints its figures and writes JSON to bench/out/.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tarfile
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import write_result  # noqa: E402 - after the path that finds it

#: Component (as its tasks name it) -> its build_once name (the fan-out task names that).
COMPONENTS = {"UCX": "ucx", "UCC": "ucc", "OpenMPI": "openmpi", "mpi4py": "mpi4py", "NCCL": "nccl",
              "nccl-tests": "nccl_tests", "Horovod": "horovod", "Slurm": "slurm",
              "Enroot": "enroot", "Pyxis": "pyxis"}  # fmt: skip
EXTRA_TASKS = {"OpenMPI configure": "Configure OpenMPI on the builder node"}
SUBSET = "AllReduce Sum f32 * *|SendRecv"


def task_seconds(
    events: list[dict[str, Any]], task: str, outcome: str = "runner_on_ok"
) -> dict[str, float]:
    """host -> seconds of ``task`` in a run's events, on the hosts where it ended with
    ``outcome`` (runner_on_ok; runner_on_failed for a compile that failed)."""
    out = {}
    for event in events:
        data = event.get("event_data", {})
        if event.get("event") != outcome or not str(data.get("task", "")).endswith(task):
            continue
        start, end = data.get("start"), data.get("end")
        if start and end:
            seconds = datetime.fromisoformat(end) - datetime.fromisoformat(start)
            out[str(data.get("host"))] = round(seconds.total_seconds(), 1)
    return out


def from_run(run_dir: Path) -> None:
    from bench.openmpi_build_once import load_run  # refuses a run that has not finished

    _, events, _ = load_run(run_dir)
    write_result("build_times_from_run", {"source": str(run_dir.name)} | compile_times(events))


def compile_times(events: list[dict[str, Any]]) -> dict[str, Any]:
    """{"seconds": {component: {host: s} or why none}, "failed": {component: {host: s}}}."""
    tasks = {c: f"Compile {c} on the builder node" for c in COMPONENTS} | EXTRA_TASKS
    result: dict[str, Any] = {"seconds": {}}
    for label, task in tasks.items():
        per_host = task_seconds(events, task)
        failed = task_seconds(events, task, "runner_on_failed")
        if failed:
            # seconds until the compile failed, per host: never a build time
            result.setdefault("failed", {})[label] = failed
        result["seconds"][label] = per_host or (
            "FAILED in this run (see 'failed')"
            if failed
            else "not compiled in this run (cached or skipped)"
        )
    result["steps"] = build_steps(events, tasks)
    return result


def build_steps(events: list[dict[str, Any]], compiles: dict[str, str]) -> dict[str, Any]:
    """{component: {step: seconds}} of the components built in this run: configure, compile and
    install (staging tree) on the builder node, fan-out from the seed node (the longest host of
    each; a step the component does not have, or that did not run, is left out)."""
    steps: dict[str, Any] = {}
    for component, name in COMPONENTS.items():
        tasks = {
            "configure": f"Configure {component} on the builder node",
            "compile": compiles[component],
            "install": f"Install {component} into a staging tree on the builder node",
            "fanout": f"Spread the artifact from the seed node over the SSH mesh for {name}",
        }
        row = {}
        for step, task in tasks.items():
            per_host = task_seconds(events, task)
            if per_host:
                row[step] = max(per_host.values())
        if "compile" in row:
            steps[component] = row
    return steps


def nccl_build(only_funcs: str | None, arch: str, jobs: int) -> None:
    from mpictl import paths

    cuda = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    if not (cuda / "bin" / "nvcc").is_file():
        raise SystemExit(f"no nvcc under {cuda}: NCCL cannot be compiled here")
    tarballs = sorted((paths.cache_dir() / "sources").glob("nvidia-nccl_*.orig.tar.*"))
    if not tarballs:
        raise SystemExit("no NCCL source in the cache: run scripts/fetch-test-sources.sh first")
    gencode = f"-gencode=arch=compute_{arch},code=sm_{arch}"
    with tempfile.TemporaryDirectory(prefix="mpictl-nccl-bench-") as tmp:
        with tarfile.open(tarballs[-1]) as tar:
            tar.extractall(tmp, filter="tar")
        src = next(p for p in Path(tmp).iterdir() if (p / "makefiles").is_dir())
        argv = [
            "make",
            f"-j{jobs}",
            "src.build",
            f"CUDA_HOME={cuda}",
            f"NVCC_GENCODE={gencode}",
            f"PREFIX={tmp}/prefix",
        ] + ([f"ONLY_FUNCS={only_funcs}"] if only_funcs else [])
        print("running:", shlex.join(argv), file=sys.stderr)
        start = time.monotonic()
        with open(Path(tmp) / "build.log", "w") as log:
            proc = subprocess.run(argv, cwd=src, stdout=log, stderr=subprocess.STDOUT)
        seconds = time.monotonic() - start
        if proc.returncode != 0:
            tail = (Path(tmp) / "build.log").read_text(errors="replace").splitlines()[-20:]
            raise SystemExit("NCCL build failed:\n" + "\n".join(tail))
        lib = next((src / "build" / "lib").glob("libnccl.so.*.*"))
        result = {
            "source": tarballs[-1].name,
            "kernels": f"ONLY_FUNCS={only_funcs}" if only_funcs else "all (full build)",
            "gencode": gencode,
            "jobs": jobs,
            "cores": os.cpu_count(),
            "seconds": round(seconds, 1),
            "libnccl_MiB": round(lib.stat().st_size / 2**20, 1),
        }
    write_result("nccl_build_subset" if only_funcs else "nccl_build_full", result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--from-run", type=Path, metavar="RUN_DIR")
    mode.add_argument("--nccl", action="store_true")
    parser.add_argument("--only-funcs", nargs="?", const=SUBSET, default=None)
    parser.add_argument("--arch", default="90")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    if args.from_run:
        from_run(args.from_run)
    else:
        nccl_build(args.only_funcs, args.arch, args.jobs)


if __name__ == "__main__":
    main()
