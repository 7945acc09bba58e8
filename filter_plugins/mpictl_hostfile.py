"""Ansible filters backed by the mpictl package, so roles and the CLI share one code path."""

from __future__ import annotations

from typing import Any


def mpictl_hostfile(hosts: list[str], hostvars: Any, fmt: str = "openmpi") -> str:
    """Render the hostfile for ``hosts`` from ``hostvars`` in ``fmt`` (no header)."""
    from mpictl.hostfile import entries_from_hostvars, render

    return render(entries_from_hostvars(hosts, hostvars), fmt)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"mpictl_hostfile": mpictl_hostfile}
