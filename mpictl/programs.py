"""Programs that run on the nodes, shipped as files in ``mpictl/scripts/`` (package data).

Each is a real file, linted (ruff; shellcheck for shell) and unit-tested on its own; the job side
sends its text over SSH (as a ``bash -c``/``python3 -c`` argument or on stdin) instead of keeping
it in a Python string.
"""

from __future__ import annotations

import functools
from importlib import resources


@functools.cache
def source(name: str) -> str:
    """The text of ``mpictl/scripts/<name>``."""
    return (resources.files("mpictl") / "scripts" / name).read_text()
