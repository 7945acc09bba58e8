"""``mpictl doctor`` on a cluster with Slurm (``slurm_enabled`` true on the head): munge and
slurmd running on every node, every node's munge credential decoding on the head (the same key),
every node registered and usable in ``sinfo``, ``srun -w <nodes> hostname`` answering from every
node that answers ssh from the head (a node that does not is left out of the allocation and
named), and ``srun --mpi=list`` offering pmix. The node side is the probe's ``slurm`` section
(``scripts/doctor_probe.py``); the head side is ``scripts/doctor_slurm.py``. :func:`checks` is
pure."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from mpictl import paths, programs, remote
from mpictl.doctor.report import Check
from mpictl.inventory import Cluster, flag

HEAD_PROGRAM = "doctor_slurm.py"
USABLE = ("idle", "mixed", "allocated", "completing")


#: the start of every reason the node health program gives Slurm (mpictl/scripts/node_health.py)
HEALTH_MARK = "mpictl-health:"


def enabled(cluster: Cluster) -> bool:
    """Whether the inventory turns Slurm on for the head (``slurm_enabled``)."""
    return flag((cluster.head.vars or {}).get("slurm_enabled", False))


def ask_head(
    head: remote.HeadSSH,
    cluster: Cluster,
    data: Mapping[str, dict[str, Any]],
    reachable: Sequence[str],
) -> dict[str, Any]:
    """Run the head's side with the credentials the nodes made; {} when it could not run.
    srun asks only ``reachable``, the nodes ssh from the head logged in to (whether or not
    their probe then answered): an allocation on a node that is gone stays until Slurm notices
    it down, and then holds that node once it is back."""
    creds = {
        name: d["slurm"]["credential"]
        for name, d in data.items()
        if (d.get("slurm") or {}).get("credential")
    }
    srun_nodes = [name for name in cluster.names if name in set(reachable)]
    spec = {"nodes": cluster.names, "srun_nodes": srun_nodes, "credentials": creds}
    proc = head.run_python(programs.source(HEAD_PROGRAM), [json.dumps(spec)], timeout=180)
    line = remote.last_line(proc.stdout)
    try:
        return dict(json.loads(line)) if proc.returncode == 0 and line else {}
    except ValueError:
        return {}


def _fix(provision: str) -> str:
    """``run `mpictl provision -i INV --tags slurm` (slurm role)``."""
    command = provision.rstrip("`") if provision.endswith("`") else provision
    return f"{command} --tags slurm{'`' if provision.endswith('`') else ''} (slurm role)"


def node_checks(
    cluster: Cluster, data: Mapping[str, dict[str, Any]], result: Mapping[str, Any], provision: str
) -> list[Check]:
    out = []
    states = result.get("sinfo") or {}
    reasons = result.get("reasons") or {}
    munge = result.get("munge") or {}
    for node in cluster.nodes:
        probe = (data.get(node.name) or {}).get("slurm")
        if probe is None:
            continue  # unreachable: the ssh check names it
        down = [u for u in ("munge", "slurmd") if probe.get(u) != "active"]
        out.append(
            Check(
                "slurm daemons",
                node.name,
                not down,
                ", ".join(f"{u} is {probe.get(u)}" for u in down) or "munge and slurmd active",
                _fix(provision) if down else "",
            )
        )
        why = probe.get("munge_error") or munge.get(node.name, "no answer from the head")
        out.append(
            Check(
                "munge key",
                node.name,
                not why,
                f"its credential does not decode on {cluster.head.name}: {why}"
                if why
                else f"same key as {cluster.head.name}",
                _fix(provision) if why else "",
            )
        )
        state = states.get(node.name)
        ok = state is not None and state.rstrip("*~#!%$@^-") in USABLE and "*" not in state
        reason = reasons.get(node.name, "")
        if ok:
            fix = ""
        elif reason.startswith(HEALTH_MARK):
            # drained by the node health program: it resumes the node once the checks pass
            fix = "repair what the reason names: the next health check resumes the node"
        else:
            fix = (
                f"start slurmd there: {_fix(provision)}; then "
                f"`scontrol update nodename={node.name} state=resume` if it stays down"
            )
        out.append(
            Check(
                "slurm node state",
                node.name,
                ok,
                (f"sinfo: {state}" + (f" ({reason})" if reason else ""))
                if state
                else "not registered with slurmctld (absent from sinfo)",
                fix,
            )
        )
    return out


@functools.cache
def release_table() -> dict[str, Any]:
    """The slurm role's table of releases (``roles/slurm/vars/main.yml``: the newest patch of
    each series, the security releases): the preflight's warning and doctor's read one file."""
    data = yaml.safe_load((paths.roles_dir() / "slurm" / "vars" / "main.yml").read_text()) or {}
    return {
        "newest": dict(data.get("_slurm_newest_patch") or {}),
        "security": list(data.get("_slurm_security_releases") or []),
    }


def _release_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdecimal() else -1 for p in version.split("."))


def release_check(line: str, table: Mapping[str, Any], provision: str) -> Check | None:
    """A warning (the check passes: the cluster works) when the head's Slurm (``sinfo
    --version``: "slurm 26.05.3") is older than the newest patch of its series the role knows,
    naming the security releases since; None when it is current or unknown."""
    words = line.split()
    if len(words) != 2 or not words[0].startswith("slurm"):
        return None
    version = words[1]
    newest = table["newest"].get(".".join(version.split(".")[:2]))
    if not newest or _release_key(version) >= _release_key(newest):
        return None
    fixed = [
        r for r in table["security"] if _release_key(str(r["release"])) > _release_key(version)
    ]
    cves = ", ".join(c for r in fixed for c in r.get("cves", []))
    since = f": {', '.join(str(r['release']) for r in fixed)} fixed {cves}" if fixed else ""
    return Check(
        "slurm release",
        "all",
        True,
        f"WARNING: Slurm {version} is older than {newest}, the newest patch release of its "
        f"series{since}",
        f"set slurm_version: {newest} (roles/slurm/README.md), then {_fix(provision)}",
    )


def cluster_checks(cluster: Cluster, result: Mapping[str, Any], provision: str) -> list[Check]:
    srun = result.get("srun") or {}
    answered = set(srun.get("hosts") or [])
    asked = set(srun.get("asked", cluster.names))
    missing = [n.name for n in cluster.nodes if n.name not in answered]
    unasked = [n for n in missing if n not in asked]
    detail = f"answered: {', '.join(sorted(answered)) or 'none'}"
    if unasked:
        detail += f"; not asked (no ssh from the head): {', '.join(unasked)}"
    if srun.get("error"):
        detail += f"; srun: {srun['error']}"
    # a node left out only for want of ssh gets that check's fix, not Slurm's
    fix = (
        _fix(provision)
        if set(missing) - set(unasked)
        else (f"start {', '.join(unasked)} (see the check ssh from head)" if unasked else "")
    )
    plugins = result.get("mpi") or []
    release = release_check(str(result.get("version") or ""), release_table(), provision)
    return ([release] if release else []) + [
        Check(
            "srun on every node",
            ", ".join(missing) if missing else "all",
            not missing,
            detail,
            fix,
        ),
        Check(
            "srun --mpi=list has pmix",
            cluster.head.name,
            "pmix" in plugins,
            f"plugins: {', '.join(plugins) or 'none'}",
            ""
            if "pmix" in plugins
            else f"the slurm role builds Slurm against OpenMPI's PMIx: {_fix(provision)}",
        ),
    ]


def checks(
    cluster: Cluster, data: Mapping[str, dict[str, Any]], result: Mapping[str, Any], provision: str
) -> list[Check]:
    """The Slurm checks from the probes' ``slurm`` sections and the head's answers (pure)."""
    if not result:
        return [
            Check(
                "slurm on the head",
                cluster.head.name,
                False,
                "could not ask Slurm on the head (sinfo/srun did not run)",
                _fix(provision),
            )
        ]
    return node_checks(cluster, data, result, provision) + cluster_checks(
        cluster, result, provision
    )
