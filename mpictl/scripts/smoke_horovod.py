"""mpictl smoke suite, Horovod part: run under mpirun on every rank, once per framework Horovod
was built for (argument: ``pytorch``, the default, or ``tensorflow``).

Same JSON line format as smoke_mpi.py ("suite": "horovod"): allreduce (sum of the ranks),
broadcast (every rank ends with rank 0's tensor), allgather (every rank's row, in rank order),
named hvd_* under PyTorch (horovod.torch) and hvd_tf_* under TensorFlow (horovod.tensorflow).
Each rank checks the computed expected values; rank 0 reports. A test passes only when its ranks
ran on at least two distinct hosts (``MPICTL_SMOKE_MIN_HOSTS``, set to 1 by ``mpictl smoke`` on a
cluster of one node). Tensors live on the rank's GPU (LOCAL_RANK mod GPUs) where the framework
sees one and Horovod has NCCL operations, else on the CPU; the start line says which.
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
from typing import Any

# Distinct hosts a test's ranks must span: 2 (the traffic crossed nodes), 1 on a one-node cluster.
MIN_HOSTS = max(1, int(os.environ.get("MPICTL_SMOKE_MIN_HOSTS", "2") or 2))
FRAMEWORKS = ("pytorch", "tensorflow")

N = 8


class Torch:
    """horovod.torch's collectives on lists of floats."""

    prefix = "hvd_"

    def __init__(self) -> None:
        import horovod.torch as hvd
        import torch

        self.hvd, self.torch = hvd, torch
        hvd.init()
        self.device = torch.device("cpu")
        if torch.cuda.is_available() and torch.cuda.device_count() and hvd.nccl_built():
            self.device = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
            torch.cuda.set_device(self.device)
        self.device_type = self.device.type

    def tensor(self, values: list[Any]) -> Any:
        return self.torch.tensor(values, dtype=self.torch.float32, device=self.device)

    def allreduce(self, values: list[Any], name: str) -> list[Any]:
        return self.hvd.allreduce(self.tensor(values), op=self.hvd.Sum, name=name).tolist()

    def broadcast(self, values: list[Any], name: str) -> list[Any]:
        return self.hvd.broadcast(self.tensor(values), root_rank=0, name=name).tolist()

    def allgather(self, values: list[Any], name: str) -> list[Any]:
        return self.hvd.allgather(self.tensor(values), name=name).tolist()


class TensorFlow:
    """horovod.tensorflow's collectives (eager) on lists of floats."""

    prefix = "hvd_tf_"

    def __init__(self) -> None:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up chatter
        import horovod.tensorflow as hvd
        import tensorflow as tf

        self.hvd, self.tf = hvd, tf
        hvd.init()
        gpus = tf.config.list_physical_devices("GPU")
        self.device_type = "cpu"
        if gpus and hvd.nccl_built():
            gpu = gpus[hvd.local_rank() % len(gpus)]
            tf.config.set_visible_devices(gpu, "GPU")
            tf.config.experimental.set_memory_growth(gpu, True)
            self.device_type = "cuda"
        self.device = "/GPU:0" if self.device_type == "cuda" else "/CPU:0"

    def tensor(self, values: list[Any]) -> Any:
        with self.tf.device(self.device):
            return self.tf.constant(values, dtype=self.tf.float32)

    def allreduce(self, values: list[Any], name: str) -> list[Any]:
        return self.hvd.allreduce(self.tensor(values), op=self.hvd.Sum, name=name).numpy().tolist()

    def broadcast(self, values: list[Any], name: str) -> list[Any]:
        return self.hvd.broadcast(self.tensor(values), root_rank=0, name=name).numpy().tolist()

    def allgather(self, values: list[Any], name: str) -> list[Any]:
        return self.hvd.allgather(self.tensor(values), name=name).numpy().tolist()


def test_allreduce(fw: Any, rank: int, size: int) -> list[str]:
    out = fw.allreduce([float(rank)] * N, "smoke.allreduce")
    want = float(size * (size - 1) // 2)
    bad = [v for v in out if abs(v - want) > 1e-6]
    return [f"allreduce sum is {bad[0]}, want {want}"] if bad else []


def test_broadcast(fw: Any, rank: int, size: int) -> list[str]:
    out = fw.broadcast([float(i * (rank + 1)) for i in range(N)], "smoke.broadcast")
    want = [float(i) for i in range(N)]
    return [] if out == want else [f"broadcast got {out}, want {want}"]


def test_allgather(fw: Any, rank: int, size: int) -> list[str]:
    out = fw.allgather([[float(rank), float(rank * 10)]], "smoke.allgather")
    want = [[float(r), float(r * 10)] for r in range(size)]
    return [] if out == want else [f"allgather got {out}, want {want}"]


TESTS: list[tuple[str, Callable[[Any, int, int], list[str]]]] = [
    ("allreduce", test_allreduce),
    ("broadcast", test_broadcast),
    ("allgather", test_allgather),
]


def main(argv: list[str]) -> int:
    framework = argv[0] if argv else "pytorch"
    if framework not in FRAMEWORKS or len(argv) > 1:
        print(f"usage: smoke_horovod.py [{'|'.join(FRAMEWORKS)}]", file=sys.stderr)
        return 2
    fw = Torch() if framework == "pytorch" else TensorFlow()
    hvd = fw.hvd
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
                    "framework": framework,
                    "device": fw.device_type,
                    "library": f"horovod {hvd.__version__ if hasattr(hvd, '__version__') else ''}",
                }
            ),
            flush=True,
        )
    ok = True
    for base, fn in TESTS:
        name = fw.prefix + base
        start = time.perf_counter()
        try:
            errors = fn(fw, rank, size)
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
    sys.exit(main(sys.argv[1:]))
