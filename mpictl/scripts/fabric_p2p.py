"""Point-to-point bandwidth and latency between pairs of nodes, in rounds (``mpictl fabric``).

Run with one rank per node: ``fabric_p2p.py SCHEDULE SIZE SECONDS``. SCHEDULE is JSON, a list of
rounds, each a list of ``[i, j]`` rank pairs in which no rank appears twice (mpictl's round-robin
schedule). In every round each pair measures, at the same time as the other pairs of the round:

- bandwidth i -> j, then j -> i: a window of non-blocking sends of SIZE bytes, repeated for about
  SECONDS, closed by a one-byte acknowledgement (the OSU method); the receiver checks the last
  window's bytes against the pattern the sender wrote, so a wrong transfer fails the pair;
- latency: 8-byte ping-pong, half the round trip.

Ranks in no pair wait in a barrier that sleeps between polls (a busy-polling one would take a
core from the pairs measuring); it ends the round. Rank 0 prints one JSON line per rank
(``{"rank", "host"}``) and one per pair: ``{"round", "a", "b", "ab_Bps", "ba_Bps",
"latency_s", "bytes", "ok", "error"}``. Needs only mpi4py and the standard library.
"""

from __future__ import annotations

import json
import sys
import time

from mpi4py import MPI

WINDOW = 16
PINGS = 200
MAX_ITERS = 10_000
TAG_DATA, TAG_ACK, TAG_COUNT, TAG_PING = 11, 12, 13, 14


def pattern(size: int, a: int, b: int) -> bytearray:
    """SIZE bytes that differ per pair and per position (a wrong or torn transfer shows)."""
    seed = (a * 31 + b * 17) % 251
    block = bytes((seed + i) % 251 for i in range(251))
    return bytearray((block * (size // 251 + 1))[:size])


def _window_send(comm: MPI.Comm, buf: bytearray, peer: int) -> None:
    MPI.Request.Waitall([comm.Isend(buf, dest=peer, tag=TAG_DATA) for _ in range(WINDOW)])


def _window_recv(comm: MPI.Comm, bufs: list[bytearray], peer: int) -> None:
    MPI.Request.Waitall([comm.Irecv(b, source=peer, tag=TAG_DATA) for b in bufs])


def send_side(comm: MPI.Comm, peer: int, size: int, seconds: float, want: bytearray) -> float:
    """Bytes per second from this rank to ``peer``."""
    ack = bytearray(1)
    start = time.perf_counter()
    _window_send(comm, want, peer)  # one window times the link: how many fill SECONDS
    comm.Recv(ack, source=peer, tag=TAG_ACK)
    first = max(time.perf_counter() - start, 1e-9)
    iters = max(1, min(MAX_ITERS, int(seconds / first)))
    comm.send(iters, dest=peer, tag=TAG_COUNT)
    start = time.perf_counter()
    for _ in range(iters):
        _window_send(comm, want, peer)
    comm.Recv(ack, source=peer, tag=TAG_ACK)
    elapsed = time.perf_counter() - start
    return iters * WINDOW * size / elapsed


def recv_side(comm: MPI.Comm, peer: int, size: int, want: bytearray) -> bool:
    """Receive the sender's windows; True when the last window holds exactly its pattern."""
    bufs = [bytearray(size) for _ in range(WINDOW)]
    _window_recv(comm, bufs, peer)
    comm.Send(bytearray(1), dest=peer, tag=TAG_ACK)
    iters = comm.recv(source=peer, tag=TAG_COUNT)
    for b in bufs:
        b[:] = bytes(size)
    for _ in range(iters):
        _window_recv(comm, bufs, peer)
    comm.Send(bytearray(1), dest=peer, tag=TAG_ACK)
    return all(b == want for b in bufs)


def latency(comm: MPI.Comm, peer: int, first: bool) -> float:
    buf = bytearray(8)
    for i in range(PINGS + 10):
        if i == 10:
            start = time.perf_counter()
        if first:
            comm.Send(buf, dest=peer, tag=TAG_PING)
            comm.Recv(buf, source=peer, tag=TAG_PING)
        else:
            comm.Recv(buf, source=peer, tag=TAG_PING)
            comm.Send(buf, dest=peer, tag=TAG_PING)
    return (time.perf_counter() - start) / PINGS / 2


def measure_pair(
    comm: MPI.Comm, a: int, b: int, size: int, seconds: float
) -> dict[str, object] | None:
    """This rank's part of pair (a, b); the result on rank a, None on rank b."""
    rank = comm.Get_rank()
    peer = b if rank == a else a
    ab_want, ba_want = pattern(size, a, b), pattern(size, b, a)
    if rank == a:
        ab = send_side(comm, peer, size, seconds, ab_want)
        ba_ok = recv_side(comm, peer, size, ba_want)
    else:
        ab_ok = recv_side(comm, peer, size, ab_want)
        ba = send_side(comm, peer, size, seconds, ba_want)
    lat = latency(comm, peer, first=rank == a)
    if rank == b:
        comm.send({"ab_ok": ab_ok, "ba_Bps": ba, "latency_s": lat}, dest=a, tag=TAG_COUNT)
        return None
    other = comm.recv(source=b, tag=TAG_COUNT)
    errors = []
    if not other["ab_ok"]:
        errors.append(f"{a}->{b}: wrong bytes received")
    if not ba_ok:
        errors.append(f"{b}->{a}: wrong bytes received")
    return {
        "a": a,
        "b": b,
        "ab_Bps": ab,
        "ba_Bps": other["ba_Bps"],
        "latency_s": (lat + other["latency_s"]) / 2,
        "bytes": size,
        "ok": not errors,
        "error": "; ".join(errors),
    }


def settle(comm: MPI.Comm) -> None:
    """A barrier that sleeps between polls: a rank with no pair this round must not take CPU
    from the pairs measuring (MPI's blocking barrier busy-polls)."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(0.001)


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("usage: fabric_p2p.py SCHEDULE SIZE SECONDS", file=sys.stderr)
        return 2
    schedule = json.loads(argv[1])
    size, seconds = int(argv[2]), float(argv[3])
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    hosts = comm.gather(MPI.Get_processor_name(), root=0)
    if rank == 0:
        for r, host in enumerate(hosts or []):
            print(json.dumps({"rank": r, "host": host}), flush=True)
    for number, pairs in enumerate(schedule):
        mine = None
        for a, b in pairs:
            if rank in (a, b):
                mine = measure_pair(comm, a, b, size, seconds)
        settle(comm)  # ranks done early (or with no pair) wait without spinning a core
        results = comm.gather(mine, root=0)
        if rank == 0:
            for rec in results or []:
                if rec is not None:
                    print(json.dumps({"round": number, **rec}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
