"""The cluster's short path (playbooks/validate.yml, playbooks/record.yml): the controller's side.

``mpictl_state_inputs`` digests what a run's desired state is made of, one digest per component:
mpictl's own Ansible content, the variables of every node of the play that the component reads
(inventory, group_vars, extra vars; facts and run-time internals left out), the facts the roles
render from, the digests of the components it builds against (DEPENDS) and the content of the
controller files the roles install from (the cluster key, the munge key). Each node keeps, per
component, the digest its last successful run was made with (playbooks/files/
mpictl_node_state.py); a component whose digest, node environment and signed items all still
match is skipped on the short path. So a change to Slurm's variables runs the slurm play again
and leaves the others on the short path.

Which variables a component reads (``component_variables``): those its role declares
(``meta/argument_specs.yml``), those of other roles its role's files or its own playbook name,
and every variable no component's role declares or that the shared playbooks and the filters
name (``mpi_*`` of cluster_defaults, ``build_once_*``, anything the inventory adds): a variable
is left out of a component's digest only where nothing the component runs can read it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

# Where mpictl's Ansible content lives, relative to the playbooks' parent, and what else there is
# read by the roles: ansible.cfg (its ansible_managed header), and the mpictl package (the job
# side's programs that mpi_jobs installs, the modules the filters import): beside the content in
# a clone (mpictl/), its parent in an installed wheel (mpictl/_ansible/..).
CONTENT_DIRS = ("playbooks", "roles", "filter_plugins")
CONTENT_FILES = ("ansible.cfg",)
SKIPPED_PARTS = {"__pycache__", "molecule", ".pytest_cache", "_ansible"}
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
    try:
        return f"<{type(value).__name__}> {value}"  # a date, a vaulted value: by its text
    except Exception:  # an undefined variable's marker may refuse to render
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


def package_dir(root: Path) -> Path | None:
    """The mpictl package whose programs the roles install (see CONTENT_DIRS); None where the
    content was copied without it."""
    for candidate in (root / "mpictl", root.parent):
        if (candidate / "__init__.py").is_file():
            return candidate
    return None


def content_digest(root: str) -> str:
    """sha256 over mpictl's Ansible content and package (file names and bytes)."""
    digest = hashlib.sha256()
    base = Path(root).resolve()
    tops = [(base / top, top) for top in CONTENT_DIRS]
    package = package_dir(base)
    if package is not None:
        tops.append((package, "mpictl"))
    files = [(base / name, name) for name in CONTENT_FILES if (base / name).is_file()]
    for top, label in tops:
        for path in sorted(top.rglob("*")):
            relative = path.relative_to(top)
            skipped = SKIPPED_PARTS & set(relative.parts) or path.suffix == ".pyc"
            if path.is_file() and not skipped:
                files.append((path, f"{label}/{relative}"))
    for path, label in files:
        digest.update(f"{label}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def file_digest(path: str) -> str:
    try:
        return hashlib.sha256(Path(path).expanduser().read_bytes()).hexdigest()
    except OSError:
        return "absent"


# The facts the roles render from (slots, slurm.conf, hostfiles, known_hosts names): the cache
# refreshes them once a day, and a node whose facts changed takes the long path once.
FACT_KEYS = (
    "architecture",
    "distribution",
    "distribution_version",
    "kernel",
    "hostname",
    "fqdn",
    "nodename",
    "processor_vcpus",
    "processor_count",
    "processor_cores",
    "processor_threads_per_core",
    "memtotal_mb",
    "default_ipv4",
    "all_ipv4_addresses",
)


def node_facts(variables: Mapping[str, Any]) -> dict[str, Any]:
    facts = variables.get("ansible_facts") or {}
    return {key: plain(facts.get(key)) for key in FACT_KEYS}


def controller_files(variables: Mapping[str, Any]) -> list[str]:
    """The files on the controller the roles install from: the cluster key, the munge key (their
    role defaults, under mpictl_state_dir), and Horovod's own patches."""
    state = str(variables.get("mpictl_state_dir", ""))
    files = [
        str(variables.get("mpi_ssh_key_path") or f"{state}/cluster_ssh/id_ed25519"),
        str(variables.get("slurm_munge_key_path") or f"{state}/munge/munge.key"),
    ]
    return files + [str(p) for p in variables.get("horovod_patches") or []]


# Each component (the tag of its play in site.yml) and its role.
COMPONENT_ROLES = {
    "ssh": "ssh_mesh",
    "environment": "mpi_environment",
    "hostfile": "hostfile",
    "ucx": "ucx",
    "ucc": "ucc",
    "openmpi": "openmpi",
    "mpi4py": "mpi4py",
    "nccl": "nccl",
    "nccl_tests": "nccl_tests",
    "horovod": "horovod",
    "jobs": "mpi_jobs",
    "health": "health",
    "monitoring": "monitoring",
    "slurm": "slurm",
    "containers": "containers",
}
# The playbooks every component's run goes through (their variables are every component's).
SHARED_PLAYBOOKS = ("site.yml", "validate.yml", "preflight.yml", "failures.yml", "record.yml")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _words(paths: Iterable[Path]) -> set[str]:
    out: set[str] = set()
    for path in paths:
        try:
            out.update(_WORD.findall(path.read_text(errors="replace")))
        except OSError:
            continue
    return out


def _role_files(role_dir: Path) -> list[Path]:
    return sorted(
        p for p in role_dir.rglob("*")
        if p.is_file() and p.suffix != ".md" and not SKIPPED_PARTS & set(p.parts)
    )  # fmt: skip


@functools.cache
def component_variables(root: str) -> tuple[dict[str, frozenset[str]], frozenset[str]]:
    """(for each component, the role variables it reads; the variables every component reads
    although a role declares them): from the roles' argument specs and the words of the roles',
    playbooks' and filters' files under ``root`` (mpictl's content)."""
    import yaml

    base = Path(root)
    declared: dict[str, str] = {}  # variable -> the role that declares it
    for path in sorted(base.glob("roles/*/meta/argument_specs.yml")):
        data = yaml.safe_load(path.read_text()) or {}
        for entry in (data.get("argument_specs") or {}).values():
            for name in (entry or {}).get("options") or {}:
                declared.setdefault(str(name), path.parts[-3])
    roles = set(COMPONENT_ROLES.values())
    owned = {name for name, role in declared.items() if role in roles}
    shared = owned & _words(
        [base / "playbooks" / name for name in SHARED_PLAYBOOKS]
        + sorted((base / "filter_plugins").glob("*.py"))
    )
    reads = {}
    for component, role in COMPONENT_ROLES.items():
        own = {name for name in owned if declared[name] == role}
        files = _role_files(base / "roles" / role) + [base / "playbooks" / f"{component}.yml"]
        reads[component] = frozenset(own | (owned & _words(files)))
    return reads, frozenset(shared)


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def mpictl_state_inputs(
    hostvars: Mapping[str, Mapping[str, Any]],
    hosts: Iterable[str],
    playbook_dir: str,
    variables: Mapping[str, str] | None = None,
) -> dict[str, dict[str, str]]:
    """The digests of this run's inputs for the nodes ``hosts`` (playbooks in ``playbook_dir``),
    per component: ``variables`` (content, the variables it reads, facts, its dependencies') and
    ``inputs`` (that and the controller files).

    At the end of a run, pass the run's first ``variables`` back: the files are digested again
    (the run may have made the keys), the variables not (roles add facts of their own as they
    run, which the next run does not start with)."""
    hosts = sorted(hosts)
    if not variables:
        root = str((Path(playbook_dir) / "..").resolve())
        reads, shared = component_variables(root)
        owned = frozenset().union(*reads.values()) - shared
        content = content_digest(root)
        every = {host: node_vars(hostvars[host]) for host in hosts}
        facts = {host: node_facts(hostvars[host]) for host in hosts}
        own: dict[str, str] = {}
        for component in COMPONENT_ROLES:
            mine = reads[component]
            seen = {
                host: {k: v for k, v in values.items() if k not in owned or k in mine}
                for host, values in every.items()
            }
            own[component] = _digest({"content": content, "nodes": seen, "facts": facts})
        variables = {
            c: _digest([own[c]] + [own[d] for d in DEPENDS.get(c, ())]) for c in COMPONENT_ROLES
        }
    files = sorted({path for host in hosts for path in controller_files(hostvars[host])})
    on_disk = _digest({path: file_digest(path) for path in files})
    return {
        "variables": dict(variables),
        "inputs": {c: _digest([v, on_disk]) for c, v in variables.items()},
    }


def mpictl_selected_components(
    components: Iterable[str], run_tags: Iterable[str], skip_tags: Iterable[str]
) -> list[str]:
    """The components (each play's tag is its component's name) that a run with these tags runs."""
    run, skip = set(run_tags), set(skip_tags)
    everything = not run or bool({"all", "tagged"} & run)  # every component play is tagged
    if skip & {"all", "tagged"}:
        return []
    return [c for c in components if (everything or c in run) and c not in skip]


# What a component builds against on the nodes, directly or through another (each list is
# closed: OpenMPI builds against UCX and UCC, so whatever builds against OpenMPI names them
# too): where one of them is not converged, the component runs (a new OpenMPI install means
# mpi4py and Horovod are checked again).
DEPENDS = {
    "ucc": ("ucx",),
    "openmpi": ("ucx", "ucc"),
    "mpi4py": ("ucx", "ucc", "openmpi"),
    "nccl_tests": ("ucx", "ucc", "openmpi", "nccl"),
    "horovod": ("ucx", "ucc", "openmpi", "mpi4py", "nccl"),
    "slurm": ("ucx", "ucc", "openmpi"),  # Slurm's mpi/pmix is built against OpenMPI's PMIx
    "containers": ("ucx", "ucc", "openmpi", "slurm"),  # pyxis against the slurm role's Slurm
}


def mpictl_converged_everywhere(per_node: Iterable[Iterable[str] | None]) -> list[str]:
    """The components converged on every node (a node without a probe result has none), less
    those whose dependencies (DEPENDS) are not."""
    sets = [set(c or ()) for c in per_node]
    both = set.intersection(*sets) if sets else set()
    return sorted(c for c in both if all(d in both for d in DEPENDS.get(c, ())))


def mpictl_with_dependencies(components: Iterable[str]) -> list[str]:
    """``components`` and every component they build against (DEPENDS), in site.yml's order."""
    wanted = set(components)
    for component in list(wanted):
        wanted.update(DEPENDS.get(component, ()))
    return [c for c in COMPONENT_ROLES if c in wanted]


def mpictl_probed_facts_changed(hosts: Iterable[str], hostvars: Mapping[str, Any]) -> list[str]:
    """The hosts whose GPU count or RDMA ports from this run's probe (``__mpictl_node_state``)
    are not the cached facts ``mpi_gpu_count`` and ``mpi_rdma_ports``."""
    out = []
    for host in hosts:
        variables = hostvars[host]
        probed = json.loads(variables["__mpictl_node_state"]["stdout"])
        if str(variables.get("mpi_gpu_count", "")) != str(probed["gpus"]) or list(
            variables.get("mpi_rdma_ports") or []
        ) != list(probed.get("rdma") or []):
            out.append(host)
    return out


def mpictl_stale_facts(hosts: Iterable[str], hostvars: Mapping[str, Any]) -> list[str]:
    """The hosts whose cached facts describe another machine than the one this run's probe
    (``__mpictl_node_state``) reached: another machine id, OS or version, or an ed25519 host key
    the node no longer has (a re-imaged or replaced node behind the same name)."""
    out = []
    for host in hosts:
        variables = hostvars[host]
        probed = json.loads(variables["__mpictl_node_state"]["stdout"])
        who = probed.get("identity") or {}
        facts = variables.get("ansible_facts") or {}
        if not facts.get("machine_id"):
            continue  # nothing cached yet: gathered fresh this run
        keys = {line.split()[-1] for line in probed.get("host_keys") or [] if line.split()}
        cached_key = facts.get("ssh_host_key_ed25519_public")
        # os-release's VERSION_ID is the release ("12"); Ansible's version may be the point
        # release ("12.12", from /etc/debian_version): the same release either way.
        version, release = str(facts.get("distribution_version", "")), who.get("os_version", "")
        if (
            (who.get("machine_id") and who["machine_id"] != facts.get("machine_id"))
            or (who.get("os") and who["os"] != str(facts.get("distribution", "")).lower())
            or (release and version != release and not version.startswith(release + "."))
            or (cached_key and keys and cached_key not in keys)
        ):
            out.append(host)
    return out


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "mpictl_state_inputs": mpictl_state_inputs,
            "mpictl_with_dependencies": mpictl_with_dependencies,
            "mpictl_selected_components": mpictl_selected_components,
            "mpictl_converged_everywhere": mpictl_converged_everywhere,
            "mpictl_probed_facts_changed": mpictl_probed_facts_changed,
            "mpictl_stale_facts": mpictl_stale_facts,
        }
