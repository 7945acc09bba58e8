"""Options and helpers the command modules share (``cli``, ``cli_jobs``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from mpictl import paths

InventoryOpt = Annotated[
    Path | None,
    typer.Option(
        "--inventory",
        "-i",
        help="Ansible inventory (file, directory or script). Default: the sandbox inventory.",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]
LauncherOpt = Annotated[
    str,
    typer.Option(
        "--launcher",
        help="mpirun (on the head, the hostfile's nodes) or slurm (sbatch + srun --mpi=pmix).",
    ),
]


def inventory_path(value: Path | None) -> Path:
    return value if value is not None else paths.sandbox_inventory()


def echo_stream(stream: str, line: str) -> None:
    """Print a job's line on our stdout or stderr, as the job printed it."""
    out = sys.stdout if stream == "stdout" else sys.stderr
    out.write(line)
    out.flush()
