"""Programs that run on the nodes, shipped as files in ``mpictl/scripts/`` (package data).

Each is a real file, linted (ruff; shellcheck for shell) and unit-tested on its own; the job side
sends its text over SSH (as a ``bash -c``/``python3 -c`` argument or on stdin) instead of keeping
it in a Python string.

A program travels alone, so code several programs share (``hca_ports.py``: the one reader of the
RDMA ports in sysfs) is written once and put in place of each user's line
``# mpictl-include: NAME`` by :func:`source` (and by :func:`expand`, which the filter
``mpictl_program`` applies to the programs the playbooks and roles send or install).
"""

from __future__ import annotations

import functools
import re
from importlib import resources

INCLUDE = re.compile(r"^# mpictl-include: ([\w.-]+)[ \t]*$", re.MULTILINE)


def _raw(name: str) -> str:
    return (resources.files("mpictl") / "scripts" / name).read_text()


def expand(text: str) -> str:
    """``text`` with each ``# mpictl-include: NAME`` line replaced by ``mpictl/scripts/NAME``
    (one level: an included file includes nothing)."""
    return INCLUDE.sub(lambda m: _raw(m.group(1)).rstrip("\n"), text)


@functools.cache
def source(name: str) -> str:
    """The text of ``mpictl/scripts/<name>``, its includes in place."""
    return expand(_raw(name))
