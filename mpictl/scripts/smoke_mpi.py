"""mpictl smoke suite, MPI part: run under mpirun with mpi4py, on every rank.

Each test computes the values every rank must end up with, checks them on every rank, gathers
(rank, host, errors, time) on rank 0, and rank 0 prints one JSON line per test:

  {"suite": "mpi", "test": ..., "ranks": N, "hosts": [...], "ok": bool, "time_s": t,
   "failures": [{"rank": r, "host": h, "error": "..."}]}

A test only passes when its ranks ran on at least two distinct hosts (MPI.Get_processor_name), so
a pass proves that the traffic crossed nodes; on a cluster of one node (``mpictl smoke`` sets
``MPICTL_SMOKE_MIN_HOSTS=1``) its ranks on that node are enough. Needs only mpi4py (buffers are
array.array).
Installed on the nodes by the mpi_jobs role (/opt/mpictl/share/jobs/smoke_mpi.py).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from array import array
from collections.abc import Callable

from mpi4py import MPI

COMM = MPI.COMM_WORLD
# Distinct hosts a test's ranks must span: 2 (the traffic crossed nodes), 1 on a one-node cluster.
MIN_HOSTS = max(1, int(os.environ.get("MPICTL_SMOKE_MIN_HOSTS", "2") or 2))
RANK = COMM.Get_rank()
SIZE = COMM.Get_size()
HOST = MPI.Get_processor_name()
N = 10  # elements per rank, as in the classic examples


def close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def compare(label: str, got: array | list[float], want: list[float]) -> list[str]:
    got_list = list(got)
    if len(got_list) != len(want):
        return [f"{label}: got {len(got_list)} values, want {len(want)}"]
    for i, (g, w) in enumerate(zip(got_list, want, strict=True)):
        if not close(g, w):
            return [f"{label}: element {i} is {g!r}, want {w!r}"]
    return []


def test_point_to_point() -> list[str]:
    """Rank 0 sends a distinct array to every other rank, each sends one back."""
    errors: list[str] = []
    if RANK == 0:
        for peer in range(1, SIZE):
            COMM.Send(array("d", [peer * 1000.0 + i for i in range(N)]), dest=peer, tag=11)
        for peer in range(1, SIZE):
            buf = array("d", [0.0] * N)
            COMM.Recv(buf, source=peer, tag=12)
            errors += compare(f"reply of rank {peer}", buf, [peer + i * 0.5 for i in range(N)])
    else:
        buf = array("d", [0.0] * N)
        COMM.Recv(buf, source=0, tag=11)
        errors += compare("received from rank 0", buf, [RANK * 1000.0 + i for i in range(N)])
        COMM.Send(array("d", [RANK + i * 0.5 for i in range(N)]), dest=0, tag=12)
    return errors


def linspace(n: int) -> list[float]:
    return [i * 3.14 / (n - 1) for i in range(n)]


def test_broadcast() -> list[str]:
    buf = array("d", linspace(N)) if RANK == 0 else array("d", [0.0] * N)
    COMM.Bcast(buf, root=0)
    return compare("broadcast data", buf, linspace(N))


def test_scatter() -> list[str]:
    send = array("d", [float(i + 1) for i in range(SIZE * N)]) if RANK == 0 else None
    recv = array("d", [0.0] * N)
    COMM.Scatter(send, recv, root=0)
    return compare("scattered chunk", recv, [float(RANK * N + i + 1) for i in range(N)])


def test_gather() -> list[str]:
    send = array("d", [float(RANK * N + i + 1) for i in range(N)])
    recv = array("d", [0.0] * (SIZE * N)) if RANK == 0 else None
    COMM.Gather(send, recv, root=0)
    if RANK != 0:
        return []
    return compare("gathered array", recv, [float(i + 1) for i in range(SIZE * N)])


def _reduce(op: MPI.Op, want: float) -> list[str]:
    send = array("d", [float(RANK)])
    recv = array("d", [0.0]) if RANK == 0 else None
    COMM.Reduce(send, recv, op=op, root=0)
    return compare("reduced value", recv, [want]) if RANK == 0 else []


def test_reduce_sum() -> list[str]:
    return _reduce(MPI.SUM, float(SIZE * (SIZE - 1) // 2))


def test_reduce_max() -> list[str]:
    return _reduce(MPI.MAX, float(SIZE - 1))


def test_allreduce() -> list[str]:
    send = array("d", [float(RANK + i) for i in range(N)])
    total = array("d", [0.0] * N)
    top = array("d", [0.0] * N)
    COMM.Allreduce(send, total, op=MPI.SUM)
    COMM.Allreduce(send, top, op=MPI.MAX)
    base = SIZE * (SIZE - 1) // 2
    return compare("allreduce sum", total, [float(base + SIZE * i) for i in range(N)]) + compare(
        "allreduce max", top, [float(SIZE - 1 + i) for i in range(N)]
    )


TESTS: list[tuple[str, Callable[[], list[str]]]] = [
    ("point_to_point", test_point_to_point),
    ("broadcast", test_broadcast),
    ("scatter", test_scatter),
    ("gather", test_gather),
    ("reduce_sum", test_reduce_sum),
    ("reduce_max", test_reduce_max),
    ("allreduce", test_allreduce),
]


def run(name: str, fn: Callable[[], list[str]], hosts: list[str]) -> bool:
    COMM.Barrier()
    start = MPI.Wtime()
    try:
        errors = fn()
    except Exception as exc:  # noqa: BLE001 - reported as this rank's failure
        errors = [f"{type(exc).__name__}: {exc}"]
        traceback.print_exc(file=sys.stderr)
    elapsed = MPI.Wtime() - start
    results = COMM.gather((RANK, HOST, errors, elapsed), root=0)
    if RANK != 0:
        return True
    assert results is not None
    failures = [{"rank": r, "host": h, "error": "; ".join(e)} for r, h, e, _ in results if e]
    distinct = sorted(set(hosts))
    if len(distinct) < MIN_HOSTS:
        failures.append(
            {
                "rank": None,
                "host": distinct[0] if distinct else "",
                "error": "every rank ran on one host: the test did not cross nodes",
            }
        )
    record = {
        "suite": "mpi",
        "test": name,
        "ranks": SIZE,
        "hosts": distinct,
        "ok": not failures,
        "time_s": round(max(t for _, _, _, t in results), 6),
        "failures": failures,
    }
    print(json.dumps(record), flush=True)
    return not failures


def main() -> int:
    hosts = COMM.allgather(HOST)
    if RANK == 0:
        print(
            json.dumps(
                {
                    "suite": "mpi",
                    "event": "start",
                    "ranks": SIZE,
                    "rank_hosts": hosts,
                    "library": MPI.Get_library_version().split("\0")[0].splitlines()[0].strip(),
                }
            ),
            flush=True,
        )
    ok = True
    for name, fn in TESTS:
        ok = run(name, fn, hosts) and ok
    ok = bool(COMM.allreduce(int(ok), op=MPI.MIN)) if SIZE > 1 else ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
