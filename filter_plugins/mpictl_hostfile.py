"""Ansible filters backed by the mpictl package, so roles and the CLI share one code path."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

try:
    import mpictl  # noqa: F401
except ImportError:
    # Plain `ansible-playbook` from a checkout, with an Ansible that does not have the mpictl
    # package installed: the package lives beside this directory.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def mpictl_hostfile(hosts: list[str], hostvars: Any, fmt: str = "openmpi") -> str:
    """Render the hostfile for ``hosts`` from ``hostvars`` in ``fmt`` (no header)."""
    from mpictl.hostfile import entries_from_hostvars, render

    return render(entries_from_hostvars(hosts, hostvars), fmt)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"mpictl_hostfile": mpictl_hostfile}
