"""Each rank's own output, from a job's output as its launcher tags it.

Under mpirun (``--tag-output``) a job's output holds lines such as ``[1,2]<stdout>: text``: job
1, rank 2, its stdout; lines mpirun prints itself carry no tag and belong to no rank. Under
Slurm (``srun --label``) a line is ``2: text``, stdout and stderr alike (srun does not say
which): they count as the rank's stdout. ``jobs logs --rank N`` and
``run --output-dir`` read ranks from there, so every job has them, attached or detached.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from mpictl import jobs
from mpictl.errors import UsageError

_TAG = re.compile(r"^\[(\d+),(?P<rank>\d+)\]<(?P<stream>stdout|stderr|stddiag)>: ?")
_LABEL = re.compile(r"^ *(?P<rank>\d+): ?")  # srun --label
TAGS = {"mpirun": _TAG, "slurm": _LABEL}


def split(text: str, launcher: str = "mpirun") -> dict[int, dict[str, list[str]]]:
    """rank -> stream ("stdout"/"stderr") -> its lines (with their newlines), in order."""
    out: dict[int, dict[str, list[str]]] = {}
    tag = TAGS[launcher]
    for line in _lines(text):
        m = tag.match(line)
        if not m:
            continue
        stream = "stderr" if m.groupdict().get("stream") in ("stderr", "stddiag") else "stdout"
        streams = out.setdefault(int(m.group("rank")), {"stdout": [], "stderr": []})
        streams[stream].append(line[m.end() :])
    return out


def untagged(text: str, launcher: str = "mpirun") -> str:
    """The job's output with every rank's tag removed (lines without one, such as the
    launcher's own, kept as they are)."""
    tag = TAGS[launcher]
    return "\n".join(tag.sub("", line) for line in text.splitlines())


def _lines(text: str) -> list[str]:
    """Lines as mpirun tags them: ended by a newline only (a progress bar's carriage returns
    stay inside the line)."""
    parts = text.split("\n")
    return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def of_rank(
    text: str,
    rank: int,
    ranks: int,
    streams: Sequence[str] = ("stdout", "stderr"),
    launcher: str = "mpirun",
) -> str:
    """What rank ``rank`` printed (stdout then stderr lines, each in order); UsageError for a
    rank the job did not have."""
    if not 0 <= rank < ranks:
        raise UsageError(f"--rank {rank}: the job had {ranks} rank(s) (0..{ranks - 1})")
    mine = split(text, launcher).get(rank, {})
    return "".join(line for s in streams for line in mine.get(s, []))


def write_dir(text: str, directory: Path, ranks: int, launcher: str = "mpirun") -> list[Path]:
    """``directory/rank.N/stdout`` and ``stderr`` for every rank of the job (empty files for a
    rank that printed nothing); the files written."""
    by_rank = split(text, launcher)
    written = []
    width = len(str(max(ranks - 1, 0)))
    for rank in range(ranks):
        folder = directory / f"rank.{rank:0{width}d}"
        folder.mkdir(parents=True, exist_ok=True)
        for stream in ("stdout", "stderr"):
            path = folder / stream
            path.write_text("".join(by_rank.get(rank, {}).get(stream, [])))
            written.append(path)
    return written


def write_rank_files(record: jobs.JobRecord) -> None:
    """Per-rank files of a finished job into its ``--output-dir`` (when it asked for one)."""
    directory = record.extra.get("output_dir")
    if directory and record.status != jobs.RUNNING and record.output_path.exists():
        try:
            write_dir(
                jobs.output_text(record), Path(directory), record.ranks, jobs.launcher_of(record)
            )
        except OSError as exc:  # checked writable at submit; the job's result still stands
            current = jobs.load(record.id)
            current.extra["output_dir_error"] = f"{directory}: {exc.strerror}"
            jobs.save(current)
