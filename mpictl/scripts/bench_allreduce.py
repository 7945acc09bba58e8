"""mpictl bench: MPI_Allreduce (float32 sum) sweep, run under mpirun with mpi4py (no numpy).

Usage: bench_allreduce.py MIN_BYTES MAX_BYTES
For each message size (powers of two from MIN to MAX), rank 0 prints one JSON line:
  {"bytes": B, "iters": k, "time_s": t, "ok": bool, "ranks": n, "hosts": h}
``time_s`` is the mean time of one allreduce, the slowest rank's. ``ok`` checks the result (every
element is n). algbw/busbw are computed on the controller (mpictl.bench).
Installed by the mpi_jobs role (/opt/mpictl/share/jobs/bench_allreduce.py).
"""

from __future__ import annotations

import json
import sys
from array import array

from mpi4py import MPI

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()
BUDGET = 256 * 1024 * 1024  # bytes moved per size (bounds the iterations of small sizes)


def iterations(nbytes: int) -> int:
    return max(3, min(200, BUDGET // max(nbytes, 1) // 8))


def measure(nbytes: int) -> dict[str, object]:
    count = max(1, nbytes // 4)
    send = array("f", [1.0]) * count
    recv = array("f", [0.0]) * count
    COMM.Allreduce(send, recv, op=MPI.SUM)  # warm-up
    ok = recv[0] == SIZE and recv[count - 1] == SIZE
    iters = iterations(nbytes)
    COMM.Barrier()
    start = MPI.Wtime()
    for _ in range(iters):
        COMM.Allreduce(send, recv, op=MPI.SUM)
    elapsed = (MPI.Wtime() - start) / iters
    slowest = COMM.allreduce(elapsed, op=MPI.MAX)
    all_ok = bool(COMM.allreduce(int(ok), op=MPI.MIN))
    return {"bytes": count * 4, "iters": iters, "time_s": slowest, "ok": all_ok}


def main() -> int:
    low, high = int(sys.argv[1]), int(sys.argv[2])
    hosts = sorted(set(COMM.allgather(MPI.Get_processor_name())))
    size = low
    while size <= high:
        result = measure(size)
        if RANK == 0:
            print(json.dumps({**result, "ranks": SIZE, "hosts": hosts}), flush=True)
        size *= 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
