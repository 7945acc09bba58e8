"""NVIDIA's nccl-tests as the job side uses them, pure: the command line of one measurement and
its result table read back.

The ``nccl_tests`` role installs the binaries (``all_reduce_perf``, ``sendrecv_perf``, ...) and
puts their directory on every node's PATH, so a job names them without a path. Every test prints
the same table (``size count type redop root``, then time, algbw, busbw and ``#wrong`` out of
place and in place) and ``# Avg bus bandwidth : X``; the rows are read by their columns, the
tags mpirun puts in front of them already removed (:func:`mpictl.ranks.untagged`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

SENDRECV = "sendrecv_perf"
ALL_REDUCE = "all_reduce_perf"

# size count type redop root | time algbw busbw #wrong (out of place) | the same in place
_NUMBER = r"[-+0-9.eE]+|N/A"
ROW = re.compile(
    rf"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)\s+({_NUMBER})\s+({_NUMBER})\s+({_NUMBER})"
    rf"\s+({_NUMBER})(?:\s|$)"
)
AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([-+0-9.eE]+)")
OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(\w*)")


@dataclass(frozen=True)
class Row:
    """One size of a sweep, out of place (the figures a benchmark reports)."""

    bytes: int
    type: str
    time_us: float
    algbw_GBps: float
    busbw_GBps: float
    wrong: int | None  # None: the test ran without checking (-c 0 prints N/A)
    line: str = ""  # the row as printed


@dataclass
class Table:
    rows: list[Row] = field(default_factory=list)
    avg_busbw_GBps: float | None = None
    out_of_bounds: int | None = None

    @property
    def largest(self) -> Row | None:
        return max(self.rows, key=lambda r: r.bytes) if self.rows else None

    @property
    def wrong(self) -> int:
        """Wrong elements over the sweep (out of place; ``-c 1`` counts them per row)."""
        return sum(r.wrong or 0 for r in self.rows)

    @property
    def failed_check(self) -> str:
        """Why the results are wrong ("" when they are not): wrong elements, or sizes whose
        check failed ("Out of bounds values" counts them)."""
        parts = []
        if self.wrong:
            parts.append(f"{self.wrong} wrong elements received")
        if self.out_of_bounds:
            parts.append(f"{self.out_of_bounds} sizes out of bounds")
        return ", ".join(parts)


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("nan")


def parse(lines: Iterable[str]) -> Table:
    """The table in the lines one rank printed (rank 0's: it prints for everybody)."""
    table = Table()
    for line in lines:
        if m := ROW.match(line):
            size, _count, dtype, _redop, _root, time_us, algbw, busbw, wrong = m.groups()
            table.rows.append(
                Row(
                    bytes=int(size),
                    type=dtype,
                    time_us=_float(time_us),
                    algbw_GBps=_float(algbw),
                    busbw_GBps=_float(busbw),
                    wrong=None if wrong == "N/A" else int(_float(wrong)),
                    line=line.strip(),
                )
            )
        elif m := AVG.match(line):
            table.avg_busbw_GBps = _float(m.group(1))
        elif m := OUT_OF_BOUNDS.match(line):
            table.out_of_bounds = int(m.group(1))
    return table


def command(
    program: str, min_bytes: int, max_bytes: int, *, iters: int = 20, warmup: int = 5
) -> list[str]:
    """One rank's command: one GPU per rank (``-g 1``), sizes doubling from ``min_bytes`` to
    ``max_bytes``, results checked (``-c 1``: a wrong element is a failure, not a figure)."""
    return [
        program,
        "-b", str(min_bytes), "-e", str(max_bytes), "-f", "2",
        "-g", "1", "-n", str(iters), "-w", str(warmup), "-c", "1",
    ]  # fmt: skip
