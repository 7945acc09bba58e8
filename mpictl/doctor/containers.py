"""Doctor's checks of the containers role where the inventory enables it (``containers_enabled``):
enroot, and pyxis where Slurm runs, the same version on every node, and a container that starts
on each as the MPI user (the probe's ``containers``: an image of a marker, unpacked and started)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mpictl.doctor.nodes import differs
from mpictl.doctor.report import Check
from mpictl.inventory import Cluster, flag


def enabled(cluster: Cluster) -> bool:
    """Whether the inventory turns the containers role on for the head."""
    return flag((cluster.head.vars or {}).get("containers_enabled", False))


def checks(data: Mapping[str, Mapping[str, Any]], provision: str, with_pyxis: bool) -> list[Check]:
    fix = f"{provision} (containers role)"
    probed = {n: d.get("containers") or {} for n, d in data.items()}
    out = differs("enroot version", {n: c.get("enroot") for n, c in probed.items()}, fix, True)
    if with_pyxis:
        out += differs("pyxis version", {n: c.get("pyxis") for n, c in probed.items()}, fix, True)
    failed = {n: c.get("start") for n, c in probed.items() if c.get("start") != "ok"}
    for name, why in failed.items():
        detail = why or "not probed"
        out.append(Check("container start", name, False, detail, fix))
    if not failed:
        out.append(Check("container start", "all", True, "an image unpacked and started"))
    return out
