"""mpictl smoke suite, Horovod part: run under mpirun on every rank (horovod.torch).

Same JSON line format as smoke_mpi.py ("suite": "horovod"): allreduce (sum of the ranks),
broadcast (every rank ends with rank 0's tensor), allgather (every rank's row, in rank order).
Each rank checks the computed expected values; rank 0 reports. A test passes only when its ranks
ran on at least two distinct hosts (``MPICTL_SMOKE_MIN_HOSTS``, set to 1 by ``mpictl smoke`` on a
cluster of one node). Tensors live on the rank's GPU (cuda:LOCAL_RANK mod GPUs) where
PyTorch sees one and Horovod has NCCL operations, else on the CPU; the start line says which.
Installed by the mpi_jobs role.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable

import horovod.torch as hvd
import torch

# Distinct hosts a test's ranks must span: 2 (the traffic crossed nodes), 1 on a one-node cluster.
MIN_HOSTS = max(1, int(os.environ.get("MPICTL_SMOKE_MIN_HOSTS", "2") or 2))

N = 8
# Where the tensors live: the rank's GPU when PyTorch sees one and Horovod has NCCL operations
# (so the suite runs Horovod's GPU path), else the CPU. Set in main() after hvd.init().
DEVICE = torch.device("cpu")


def pick_device() -> torch.device:
    if torch.cuda.is_available() and torch.cuda.device_count() and hvd.nccl_built():
        device = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
        torch.cuda.set_device(device)
        return device
    return torch.device("cpu")


def test_allreduce(rank: int, size: int) -> list[str]:
    out = hvd.allreduce(
        torch.tensor([float(rank)] * N, device=DEVICE), op=hvd.Sum, name="smoke.allreduce"
    )
    want = float(size * (size - 1) // 2)
    bad = [v for v in out.tolist() if abs(v - want) > 1e-6]
    return [f"allreduce sum is {bad[0]}, want {want}"] if bad else []


def test_broadcast(rank: int, size: int) -> list[str]:
    tensor = torch.arange(N, dtype=torch.float32, device=DEVICE) * (rank + 1)
    out = hvd.broadcast(tensor, root_rank=0, name="smoke.broadcast")
    want = [float(i) for i in range(N)]
    return [] if out.tolist() == want else [f"broadcast got {out.tolist()}, want {want}"]


def test_allgather(rank: int, size: int) -> list[str]:
    row = torch.tensor([[float(rank), float(rank * 10)]], device=DEVICE)
    out = hvd.allgather(row, name="smoke.allgather")
    want = [[float(r), float(r * 10)] for r in range(size)]
    return [] if out.tolist() == want else [f"allgather got {out.tolist()}, want {want}"]


TESTS: list[tuple[str, Callable[[int, int], list[str]]]] = [
    ("hvd_allreduce", test_allreduce),
    ("hvd_broadcast", test_broadcast),
    ("hvd_allgather", test_allgather),
]


def main() -> int:
    global DEVICE
    hvd.init()
    DEVICE = pick_device()
    rank, size = hvd.rank(), hvd.size()
    host = socket.gethostname()
    hosts = hvd.allgather_object(host)
    if rank == 0:
        print(
            json.dumps(
                {
                    "suite": "horovod",
                    "event": "start",
                    "ranks": size,
                    "rank_hosts": hosts,
                    "device": DEVICE.type,
                    "library": f"horovod {hvd.__version__ if hasattr(hvd, '__version__') else ''}",
                }
            ),
            flush=True,
        )
    ok = True
    for name, fn in TESTS:
        start = time.perf_counter()
        try:
            errors = fn(rank, size)
        except Exception as exc:  # noqa: BLE001 - reported as this rank's failure
            errors = [f"{type(exc).__name__}: {exc}"]
            traceback.print_exc(file=sys.stderr)
        elapsed = time.perf_counter() - start
        results = hvd.allgather_object((rank, host, errors, elapsed))
        failures = [{"rank": r, "host": h, "error": "; ".join(e)} for r, h, e, _ in results if e]
        distinct = sorted(set(hosts))
        if len(distinct) < MIN_HOSTS:
            failures.append(
                {
                    "rank": None,
                    "host": distinct[0],
                    "error": "every rank ran on one host: the test did not cross nodes",
                }
            )
        ok = ok and not failures
        if rank == 0:
            record = {
                "suite": "horovod",
                "test": name,
                "ranks": size,
                "hosts": distinct,
                "ok": not failures,
                "time_s": round(max(t for *_, t in results), 6),
                "failures": failures,
            }
            print(json.dumps(record), flush=True)
    hvd.shutdown()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
