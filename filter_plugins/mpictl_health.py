"""Ansible filters of the health role, backed by the mpictl package (one code path with the CLI)."""

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


def mpictl_health_ports(lines: Any) -> dict[str, float]:
    """The RDMA ports a node's health expects ACTIVE, from its cached ``mpi_rdma_ports`` lines:
    its active rails (front-end NICs left out, as jobs leave them out), each at the highest rate
    of the rails (a rail that trained lower at provision is expected at its family's rate)."""
    from mpictl import rdma

    if not isinstance(lines, list):
        return {}
    rails = rdma.rails(rdma.parse_ports(str(line) for line in lines))
    top = max((p.rate_gbit or 0.0 for p in rails), default=0.0)
    return {f"{p.device}/{p.port}": top for p in rails}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"mpictl_health_ports": mpictl_health_ports}
