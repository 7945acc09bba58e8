"""iperf3 between nodes, driven from the head (``scripts/iperf_driver.py``: a server on B, a
client on A, every pair of a round at once): ``mpictl bench``'s link limit and ``mpictl
fabric``'s TCP column."""

from __future__ import annotations

import json
from collections.abc import Sequence

from mpictl import programs, remote
from mpictl.errors import JobError

IPERF_PORT = 5201
IPERF_SECONDS = 3
IPERF_DRIVER = "iperf_driver.py"  # runs on the head: iperf3 server on B, client on A


def parse_iperf(text: str) -> float:
    """Receiver throughput of an ``iperf3 -J`` run, in GB/s."""
    data = json.loads(text)
    if data.get("error"):
        raise JobError(f"iperf3: {data['error']}")
    end = data.get("end", {})
    bits = (end.get("sum_received") or end.get("sum") or {}).get("bits_per_second")
    if not bits:
        raise JobError("iperf3 reported no throughput")
    return float(bits) / 8 / 1e9


def measure_links(
    head: remote.HeadSSH,
    pairs: Sequence[tuple[str, str]],
    *,
    port: int = IPERF_PORT,
    timeout: float = 150,
) -> list[float | str]:
    """iperf3 A -> B for every pair at once (disjoint pairs: one round), from the head: each
    pair's receiver throughput in GB/s, or why it has none ("did not run: ...", "failed: ...").
    A JobError when the head does not answer."""
    args = [str(port), str(IPERF_SECONDS), *(h for pair in pairs for h in pair)]
    proc = head.run_watched(programs.source(IPERF_DRIVER), args, timeout=timeout)
    by_pair = {(str(r.get("a")), str(r.get("b"))): r for r in remote.json_lines(proc.stdout)}
    out: list[float | str] = []
    for pair in pairs:
        rec = by_pair.get(pair)
        if rec is None:
            out.append(f"did not run: {remote.last_line(proc.stderr) or f'exit {proc.returncode}'}")
            continue
        try:
            out.append(parse_iperf(rec["stdout"]))
        except JobError as exc:  # iperf3's own error, from its JSON
            out.append(f"failed: {exc}")
        except (ValueError, KeyError):
            out.append(
                f"failed: {str(rec.get('stderr', '')).strip()[-200:]} "
                "(is iperf3 installed? `mpictl provision`, mpi_jobs role)"
            )
    return out
