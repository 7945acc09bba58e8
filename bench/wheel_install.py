"""Benchmark: mpictl as an installed tool. Wheel size, `pip install` of the wheel into an empty
venv with the dependencies in pip's cache, and `mpictl --help` from that install (median of 10,
target < 0.3 s), run from a directory outside the clone.

python bench/wheel_install.py [--runs N]

The integration test tests/integration/test_installed.py builds and installs the wheel with the
same functions.
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


def build_wheel(out_dir: Path) -> Path:
    """``pip wheel`` of the checkout (its build backend, isolated): the one mpictl wheel."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out_dir), str(ROOT)],
        check=True,
        capture_output=True,
    )
    wheels = sorted(out_dir.glob("mpictl-*.whl"))
    if len(wheels) != 1:
        raise RuntimeError(f"expected one mpictl wheel in {out_dir}, found {wheels}")
    return wheels[0]


def clean_env(**extra: str) -> dict[str, str]:
    """The environment minus anything that would put the checkout or its venv on the path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if p and not p.startswith(str(ROOT))
    )
    env.update(extra)
    return env


def install(venv: Path, wheel: Path) -> float:
    """A new venv at ``venv`` with ``wheel`` installed; the seconds ``pip install`` took."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True, env=clean_env())
    start = time.perf_counter()
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
        check=True,
        capture_output=True,
        env=clean_env(),
    )
    return time.perf_counter() - start


def help_times(venv: Path, runs: int, cwd: Path) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(
            [str(venv / "bin" / "mpictl"), "--help"],
            check=True,
            stdout=subprocess.DEVNULL,
            cwd=cwd,
            env=clean_env(),
        )
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mpictl-wheel-") as tmp:
        base = Path(tmp)
        wheel = build_wheel(base / "dist")
        install(base / "warm-cache", wheel)  # fills pip's cache with the dependencies
        seconds = install(base / "venv", wheel)
        times = help_times(base / "venv", args.runs, base)
        size_kib = wheel.stat().st_size / 1024
    median = statistics.median(times)
    print(f"wheel: {wheel.name}, {size_kib:.0f} KiB")
    print(f"pip install into an empty venv (dependencies cached): {seconds:.1f} s")
    print(
        f"mpictl --help from the install: median {median:.3f} s, min {min(times):.3f} s "
        f"over {args.runs} runs (target < 0.300 s: {'met' if median < 0.3 else 'NOT met'})"
    )


if __name__ == "__main__":
    main()
