"""The figures of a bench/gpu_node.sh run, read from its step logs (results.txt, results.json).

python bench/gpu_results.py OUT_DIR

The logs are `mpictl run` output: every line a rank printed carries OpenMPI's tag
(``[1,0]<stdout>: ``). The ranks' stdout is read through :mod:`mpictl.ranks`, which owns that
tag, so nccl-tests' table and its ``Avg bus bandwidth`` line are found as they were printed.
Kept: bench/device_buffers.c's JSON lines of ``device-mpictl.log``, ``device-ucx.log`` and
``device-ob1.log`` (all sizes in results.json; 8 bytes and 256 MiB in results.txt), the JSON lines
of ``torch-nccl.log`` (``"check"``) and ``horovod-gpu.log``
(``"allreduce"``), the last three rows of the tables of ``all-reduce-perf.log`` and
``sendrecv-perf.log`` and their average bus bandwidth.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mpictl import nccl_tests as nccl_table  # noqa: E402 - after the path that finds it
from mpictl import ranks  # noqa: E402


def rank_lines(path: Path) -> list[str]:
    """What the job's ranks printed on stdout, rank by rank, without mpirun's tags ([] when the
    step left no log)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    by_rank = ranks.split(text)
    return [line.rstrip("\n") for r in sorted(by_rank) for line in by_rank[r]["stdout"]]


def json_lines(lines: list[str], key: str) -> list[dict[str, Any]]:
    out = []
    for line in lines:
        start = line.find("{")
        if start < 0 or f'"{key}"' not in line:
            continue
        try:
            out.append(json.loads(line[start:]))
        except json.JSONDecodeError:
            continue
    return out


def nccl_tests(lines: list[str]) -> dict[str, Any]:
    """nccl-tests' table (read by :mod:`mpictl.nccl_tests`, as bench and fabric read it)."""
    table = nccl_table.parse(lines)
    rows = [
        {
            "bytes": r.bytes,
            "type": r.type,
            "time_us": r.time_us,
            "algbw_GBps": r.algbw_GBps,
            "busbw_GBps": r.busbw_GBps,
            "wrong": r.wrong,
            "line": r.line,
        }
        for r in table.rows
    ]
    return {"rows": rows, "avg_busbw_GBps": table.avg_busbw_GBps}


#: bench/device_buffers.c runs: mpictl's own transport, pml ucx, and the ob1 baseline (no UCC)
DEVICE_RUNS = ("device-mpictl", "device-ucx", "device-ob1")
#: the sizes the issue's targets name: 8 bytes (latency) and 256 MiB (bandwidth)
DEVICE_SIZES = (8, 256 << 20)


def device_buffers(lines: list[str]) -> dict[str, Any]:
    """What ran (the header line) and the allreduce/sendrecv rows of one device_buffers run."""
    rows = json_lines(lines, "op")
    header = json_lines(lines, "devices")
    return {"ran": header[0] if header else None, "rows": rows}


def collect(out: Path) -> dict[str, Any]:
    return {
        "device_buffers": {
            run: device_buffers(rank_lines(out / f"{run}.log")) for run in DEVICE_RUNS
        },
        "torch_nccl": json_lines(rank_lines(out / "torch-nccl.log"), "check"),
        "horovod_gpu": json_lines(rank_lines(out / "horovod-gpu.log"), "allreduce"),
        "all_reduce_perf": nccl_tests(rank_lines(out / "all-reduce-perf.log")),
        "sendrecv_perf": nccl_tests(rank_lines(out / "sendrecv-perf.log")),
    }


def text(results: dict[str, Any]) -> str:
    lines = []
    for run, got in results.get("device_buffers", {}).items():
        if got["ran"] is not None:
            lines.append(f"{run}: {json.dumps(got['ran'])}")
        lines += [f"{run}: {json.dumps(r)}" for r in got["rows"] if r.get("bytes") in DEVICE_SIZES]
    lines += [json.dumps(r) for r in results["torch_nccl"] + results["horovod_gpu"]]
    for name in ("all_reduce_perf", "sendrecv_perf"):
        perf = results[name]
        lines += [row["line"] for row in perf["rows"][-3:]]
        if perf["avg_busbw_GBps"] is not None:
            lines.append(f"# Avg bus bandwidth    : {perf['avg_busbw_GBps']}")
    return "\n".join(lines) + ("\n" if lines else "")


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print(
            "usage: gpu_results.py OUT_DIR (a bench/gpu_node.sh output directory)", file=sys.stderr
        )
        return 2
    out = Path(argv[0])
    results = collect(out)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "results.txt").write_text(text(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
