"""doctor's node health (issue 27, part 3): the health program of the ``health`` role
(``mpictl/scripts/node_health.py`` at ``mpi_health_program``) on every node, run as Slurm runs it:
as root, through Ansible's privileged connection (one ad hoc run, :mod:`mpictl.runner`), never as
the MPI user. :func:`collect` runs it; :func:`checks` (pure) turns its JSON into one check per
node: its failed checks with their lines, or healthy with the warnings it gave."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

from mpictl import runner
from mpictl.doctor.report import Check
from mpictl.inventory import Cluster, flag
from mpictl.settings import ClusterSettings

CHECK = "node health"
#: after a repair: what the operator runs
ACK = "repair it; after a GPU reset or replacement, run `{program} --ack-xid` on the node"


def enabled(cluster: Cluster) -> bool:
    """The health role installs the program (``health_enabled``, true unless the head says no)."""
    return flag((cluster.head.vars or {}).get("health_enabled", True))


def collect(cluster: Cluster, settings: ClusterSettings) -> dict[str, Any]:
    """node name -> the program's JSON (a dict), or a one-line string saying why there is none."""
    result = runner.run_module(
        cluster.source,
        ",".join(n.name for n in cluster.nodes),
        "ansible.builtin.command",
        f"{shlex.quote(settings.health_program)} --json",
    )
    out: dict[str, Any] = {}
    for r in result.task_results():
        res: Mapping[str, Any] = r.result
        if r.status == "unreachable":
            out[r.host] = f"unreachable: {str(res.get('msg', '')).strip()[:200]}"
            continue
        try:
            data = json.loads(str(res.get("stdout", "")))
        except ValueError:
            data = None
        if isinstance(data, dict) and res.get("rc") in (0, 1):
            out[r.host] = data
        else:
            why = str(res.get("stderr") or res.get("msg") or "").strip().splitlines()
            out[r.host] = f"exit {res.get('rc')}: {why[0][:200] if why else 'no output'}"
    return out


def checks(
    cluster: Cluster, health: Mapping[str, Any], settings: ClusterSettings, provision: str
) -> list[Check]:
    """One check per node from what :func:`collect` found."""
    out = []
    for node in cluster.nodes:
        got = health.get(node.name)
        if not isinstance(got, dict):
            why = f"{settings.health_program} did not run: {got or 'no answer'}"
            out.append(Check(CHECK, node.name, False, why, provision))
            continue
        failed = [f"{c}: {d}" for c, d in got.get("failed", [])]
        warned = [f"{c}: {d}" for c, d in got.get("warnings", [])]
        if failed:
            detail = "; ".join(failed) + (f" (warnings: {'; '.join(warned)})" if warned else "")
            fix = ACK.format(program=settings.health_program)
            out.append(Check(CHECK, node.name, False, detail, fix))
        else:
            detail = "healthy" + (f" (warnings: {'; '.join(warned)})" if warned else "")
            out.append(Check(CHECK, node.name, True, detail))
    return out
