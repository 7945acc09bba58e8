"""The cluster's members as the last full provision left them, and what a run changed in them:
``node4: new``, ``node2: replaced``, ``node5: removed``.

The record is ``<state>/members/<id>.json``, one per inventory (``id``: the first 16 hex digits
of the sha256 of its resolved path), ``{"inventory": PATH, "nodes": {NAME: [HOST KEY, ...]}}``
with each node's public host keys (type and key) as every run's node probe reads them over
Ansible's connection (``playbooks/files/mpictl_node_state.py``, the short path's probe). A node
is *new* when the record lacks it, *removed* when the inventory lacks it, *replaced* when its
host keys are not the recorded ones (re-imaged under the same name: the operator re-admitted it,
since Ansible's strict host key checking stops a run at a changed key).

Only a successful ``site.yml`` run over every node (no ``--limit``, ``--tags``, ``--skip-tags``
or ``--check``) compares and writes: a partial run says nothing and leaves the record, so the
next full run reports what changed since the last one. A node the probe did not answer for keeps
its recorded keys. The first full run of an inventory writes the record and reports nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpictl import paths, runner
from mpictl.errors import MpictlError

#: The node probe of every run (playbooks/validate.yml); its JSON answer has ``host_keys``.
PROBE_TASK = "Count the node's GPUs and find the components still as its last run left them"
NEW, REPLACED, REMOVED = "new", "replaced", "removed"


@dataclass(frozen=True)
class Change:
    node: str
    what: str  # NEW, REPLACED or REMOVED

    def __str__(self) -> str:
        return f"{self.node}: {self.what}"


def record_path(inventory: Path) -> Path:
    digest = hashlib.sha256(str(inventory.resolve()).encode()).hexdigest()[:16]
    return paths.state_dir() / "members" / f"{digest}.json"


def load(inventory: Path) -> dict[str, list[str]] | None:
    """The recorded members (name -> host keys); None when there is no readable record."""
    try:
        data = json.loads(record_path(inventory).read_text(encoding="utf-8"))
        nodes = data["nodes"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(nodes, dict):
        return None
    return {str(k): [str(x) for x in v] for k, v in nodes.items() if isinstance(v, list)}


def host_keys_of(result: runner.RunResult) -> dict[str, list[str]]:
    """Each node's host keys as this run's node probe read them (a node it did not answer for:
    none)."""
    out: dict[str, list[str]] = {}
    for r in result.task_results(PROBE_TASK):
        try:
            keys = json.loads(str(r.result.get("stdout") or "")).get("host_keys")
        except (ValueError, AttributeError):
            continue
        if r.status == "ok" and isinstance(keys, list):
            out[r.host] = sorted(str(k) for k in keys)
    return out


def changes(
    before: Mapping[str, Sequence[str]], names: Iterable[str], keys: Mapping[str, Sequence[str]]
) -> list[Change]:
    """What changed from ``before`` to the inventory's ``names`` (in their order, then the
    removed ones in the record's), given the host keys this run read (``keys``)."""
    names = list(names)
    out = []
    for name in names:
        if name not in before:
            out.append(Change(name, NEW))
        elif before[name] and name in keys and sorted(keys[name]) != sorted(before[name]):
            out.append(Change(name, REPLACED))
    out.extend(Change(name, REMOVED) for name in before if name not in names)
    return out


def update(
    inventory: Path, names: Sequence[str], result: runner.RunResult, *, full_run: bool
) -> list[Change]:
    """After a provision: the changes since the recorded members, and the record rewritten, when
    the run was a successful full one (``full_run``: site.yml, no limit, tags or check); else
    nothing is compared or written."""
    if not (full_run and result.ok):
        return []
    before = load(inventory)
    keys = host_keys_of(result)
    found = [] if before is None else changes(before, names, keys)
    recorded = before or {}
    nodes = {n: list(keys.get(n) or recorded.get(n) or []) for n in names}
    _write(record_path(inventory), {"inventory": str(inventory.resolve()), "nodes": nodes})
    return found


def _write(path: Path, data: Mapping[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        raise MpictlError(
            f"cannot write the cluster's member record {path}: {exc.strerror}"
        ) from None
