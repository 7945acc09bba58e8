"""The cluster's short path (playbooks/validate.yml, playbooks/record.yml): the controller's side.

``mpictl_state_inputs`` digests what a run's desired state is made of: mpictl's own Ansible
content, the variables of every node of the play (inventory, group_vars, extra vars; facts and
run-time internals left out) and the content of the controller files the roles install from
(the cluster key, the munge key). Each node keeps the digest its last successful run was made
with (playbooks/files/mpictl_node_state.py); a component whose digest, node environment and
signed items all still match is skipped on the short path.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

# Where mpictl's Ansible content lives, relative to the playbooks' parent.
CONTENT_DIRS = ("playbooks", "roles", "filter_plugins")
SKIPPED_PARTS = {"__pycache__", "molecule", ".pytest_cache"}
# ansible_* names that say how a node is reached (its address is in its host keys and hostfile);
# every other ansible_* name is a fact or a run-time value.
CONNECTION_VARS = {"ansible_host", "ansible_port", "ansible_user", "ansible_connection"}
# Magic variables that name where this run reads from, not what it writes, and mpictl's switch
# of the short path itself (a run without it must find the record a run with it wrote).
RUN_VARS = {
    "inventory_dir",
    "inventory_file",
    "playbook_dir",
    "omit",
    "hostvars",
    "environment",
    "mpictl_short_path",
}


def plain(value: Any) -> Any:
    """value as JSON-ready data; an undefined variable becomes a marker, not an error."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return f"<{type(value).__name__}>"


def node_vars(variables: Mapping[str, Any]) -> dict[str, Any]:
    """The variables of one node that describe its desired state."""
    facts = variables.get("ansible_facts") or {}
    out = {}
    for name in variables:
        if name.startswith("_") or name in RUN_VARS or name in facts:
            continue
        if name.startswith("ansible_") and name not in CONNECTION_VARS:
            continue
        out[name] = plain(variables[name])
    return out


def content_digest(root: str) -> str:
    """sha256 over mpictl's Ansible content below root (file names and bytes)."""
    digest = hashlib.sha256()
    base = Path(root)
    for top in CONTENT_DIRS:
        for path in sorted((base / top).rglob("*")):
            if not path.is_file() or SKIPPED_PARTS & set(path.parts) or path.suffix == ".pyc":
                continue
            digest.update(f"{path.relative_to(base)}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def file_digest(path: str) -> str:
    try:
        return hashlib.sha256(Path(path).expanduser().read_bytes()).hexdigest()
    except OSError:
        return "absent"


def mpictl_state_inputs(
    hostvars: Mapping[str, Mapping[str, Any]],
    hosts: Iterable[str],
    content_root: str,
    controller_files: Iterable[str] = (),
) -> str:
    """The digest of this run's inputs for the nodes ``hosts``."""
    hosts = sorted(hosts)
    data = {
        "content": content_digest(content_root),
        "nodes": {host: node_vars(hostvars[host]) for host in hosts},
        "files": {path: file_digest(path) for path in sorted(set(controller_files)) if path},
    }
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def mpictl_selected_components(
    components: Iterable[str], run_tags: Iterable[str], skip_tags: Iterable[str]
) -> list[str]:
    """The components (each play's tag is its component's name) that a run with these tags runs."""
    run, skip = set(run_tags), set(skip_tags)
    everything = not run or "all" in run
    return [c for c in components if (everything or c in run) and c not in skip]


def mpictl_converged_everywhere(per_node: Iterable[Iterable[str] | None]) -> list[str]:
    """The components converged on every node (a node without a probe result has none)."""
    sets = [set(c or ()) for c in per_node]
    return sorted(set.intersection(*sets)) if sets else []


def mpictl_gpu_count_changed(hosts: Iterable[str], hostvars: Mapping[str, Any]) -> list[str]:
    """The hosts whose GPU count from this run's probe (``__mpictl_node_state``) is not the cached
    fact ``mpi_gpu_count``."""
    out = []
    for host in hosts:
        variables = hostvars[host]
        probed = json.loads(variables["__mpictl_node_state"]["stdout"])["gpus"]
        if str(variables.get("mpi_gpu_count", "")) != str(probed):
            out.append(host)
    return out


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "mpictl_state_inputs": mpictl_state_inputs,
            "mpictl_selected_components": mpictl_selected_components,
            "mpictl_converged_everywhere": mpictl_converged_everywhere,
            "mpictl_gpu_count_changed": mpictl_gpu_count_changed,
        }
