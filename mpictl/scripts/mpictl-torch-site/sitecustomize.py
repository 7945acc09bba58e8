"""Loaded by every Python process that ``mpictl-torch-env`` starts (``mpictl run --torch``): the
wrapper puts this directory first on ``PYTHONPATH``.

It registers one exit handler: a torch.distributed process group that the script left
initialized is destroyed when the interpreter exits, before Python tears its modules down. A
script that never calls ``destroy_process_group()`` (most do not) otherwise exits through the
process group's destructor with its communication threads still running, and gloo's aborts the
rank ("terminate called without an active exception", exit 134) after the script itself
finished. The script's own exit code is kept: the handler never raises.

The ``sitecustomize`` this one shadows (Debian's, a site's own) is run first, as Python would
have run it. Installed by the mpi_jobs role beside the wrapper, from ``mpictl/scripts/``.
"""

from __future__ import annotations

import atexit
import os
import sys


def _run_shadowed() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        folder = os.path.abspath(entry or os.curdir)
        candidate = os.path.join(folder, "sitecustomize.py")
        if folder != here and os.path.isfile(candidate):
            with open(candidate, encoding="utf-8") as handle:
                code = compile(handle.read(), candidate, "exec")
            exec(code, {"__name__": "sitecustomize", "__file__": candidate})  # noqa: S102
            return


def _teardown() -> None:
    """Destroy a process group the script left initialized (quietly: never change the exit)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return
    try:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - at exit, a failed teardown must not become the job's error
        pass


try:
    _run_shadowed()
finally:
    atexit.register(_teardown)
