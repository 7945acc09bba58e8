"""Checks of each node's own stack from its probe: SSH from the head, the non-interactive
environment and the login shells' one, the cluster venv, identical versions and build
fingerprints, the job tools."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import Any

from mpictl import remote
from mpictl.doctor.report import Check
from mpictl.inventory import Cluster
from mpictl.settings import ClusterSettings

REQUIRED = ("openmpi", "mpi4py", "mpi4py_library")
VERSION_KEYS = ("openmpi", "mpi4py", "mpi4py_library", "horovod", "torch", "tensorflow", "nccl")
# Compared only where some node has it: a cluster without TensorFlow gets no line for it.
OPTIONAL_KEYS = ("tensorflow",)
# Versions that must also agree across OS releases, by their public part (a local suffix such as
# torch's "+cpu" left out): MPI's processes and Horovod's ranks of one job talk to each other. The
# rest (builds, the Python packages of each OS's venv, mpi4py's library string, which names the
# builder) is compared within each OS release only: a cluster upgraded node by node has one
# build per release (roles/build_once).
CLUSTER_WIDE_KEYS = ("openmpi", "mpi4py", "horovod", "nccl")


def differs(label: str, values: Mapping[str, Any], fix: str, required: bool = False) -> list[Check]:
    """One check: every node holds the same value (absent everywhere is fine unless required)."""
    present = {n: v for n, v in values.items() if v is not None}
    if not present:
        return [
            Check(label, "all", not required, "not installed on any node", fix if required else "")
        ]
    counts = Counter(str(v) for v in present.values())
    majority, _ = counts.most_common(1)[0]
    odd = [n for n, v in values.items() if v is None or str(v) != majority]
    if not odd:
        return [Check(label, "all", True, majority)]
    out = []
    for n in odd:
        have = "missing" if values[n] is None else str(values[n])
        out.append(Check(label, n, False, f"{have}; other nodes: {majority}", fix))
    return out


def _probe_json(out: remote.NodeOutput) -> dict[str, Any] | None:
    for line in reversed(out.stdout.splitlines()):
        try:
            parsed = json.loads(line)
        except ValueError:
            continue
        return parsed if isinstance(parsed, dict) else None
    return None


def ssh_checks(
    cluster: Cluster, probes: Mapping[str, remote.NodeOutput], provision: str
) -> tuple[list[Check], dict[str, dict[str, Any]]]:
    """SSH head -> every node, and the probe data of the nodes that answered."""
    head = cluster.head.name
    checks: list[Check] = []
    data: dict[str, dict[str, Any]] = {}
    for node in cluster.nodes:
        out = probes.get(node.name)
        if out is None or out.rc == 255:
            why = out.error if out is not None else "no answer"
            checks.append(
                Check(
                    "ssh from head",
                    node.name,
                    False,
                    f"ssh {node.address} from {head} (BatchMode, strict host keys): {why}",
                    f"start the node; {provision} (ssh_mesh: cluster key, pinned host keys)",
                )
            )
            continue
        parsed = _probe_json(out)
        if parsed is None:
            checks.append(
                Check(
                    "ssh from head",
                    node.name,
                    False,
                    f"logged in, but the probe failed: {out.error}",
                    "check that python3 is installed on the node",
                )
            )
            continue
        checks.append(
            Check("ssh from head", node.name, True, f"{head} -> {node.address} as MPI user")
        )
        data[node.name] = parsed
    return checks, data


def _login_problems(shell: str, seen: Any, d: Mapping[str, Any], venv_bin: str) -> list[str]:
    """What ``<shell> -l`` lacks: the rules of the non-interactive check, the cluster venv's bin,
    and the same mpirun as a non-interactive session finds."""
    if not isinstance(seen, Mapping):
        return [f"{shell} -l: no answer"]
    if seen.get("error"):
        return [f"{shell} -l: {seen['error']}"]
    path = str(seen.get("path") or "").split(":")
    libs = str(seen.get("ld_library_path") or "").split(":")
    problems = []
    if not seen.get("mpirun"):
        problems.append(f"{shell} -l: mpirun not in PATH")
    elif d.get("mpirun") and seen["mpirun"] != d["mpirun"]:
        problems.append(
            f"{shell} -l: mpirun is {seen['mpirun']}, non-interactive SSH has {d['mpirun']}"
        )
    prefix = d.get("openmpi_prefix")
    if prefix and f"{prefix}/bin" not in path:
        problems.append(f"{shell} -l: PATH lacks {prefix}/bin")
    if prefix and f"{prefix}/lib" not in libs:
        problems.append(f"{shell} -l: LD_LIBRARY_PATH lacks {prefix}/lib")
    if venv_bin not in path:
        problems.append(f"{shell} -l: PATH lacks {venv_bin}")
    return problems


def login_checks(
    data: Mapping[str, Mapping[str, Any]], settings: ClusterSettings, provision: str
) -> list[Check]:
    """PATH / LD_LIBRARY_PATH of login shells (``bash -l``, ``sh -l``; what ``su -``, ``sudo -i``
    and an interactive login see): Debian's /etc/profile resets PATH, /etc/profile.d/mpictl.sh
    puts the cluster's directories back. A probe without ``login`` (an older one) is not checked."""
    checks: list[Check] = []
    fix = f"{provision} (mpi_environment writes /etc/profile.d/mpictl.sh)"
    venv_bin = settings.venv_python.rsplit("/", 1)[0]
    for name, d in data.items():
        login = d.get("login")
        if not isinstance(login, Mapping) or not login:
            continue
        problems = [
            p for shell in sorted(login) for p in _login_problems(shell, login[shell], d, venv_bin)
        ]
        shells = " and ".join(f"{shell} -l" for shell in sorted(login))
        first = login[sorted(login)[0]]
        detail = "; ".join(problems) or (
            f"{shells}: mpirun {first.get('mpirun')}, PATH={first.get('path')} "
            f"LD_LIBRARY_PATH={first.get('ld_library_path') or ''}"
        )
        checks.append(Check("login shell env", name, not problems, detail, fix if problems else ""))
    return checks


def env_checks(
    data: Mapping[str, Mapping[str, Any]], settings: ClusterSettings, provision: str
) -> list[Check]:
    """PATH / LD_LIBRARY_PATH of a non-interactive session, then of login shells, and the cluster
    venv."""
    checks: list[Check] = []
    env_fix = f"{provision} (mpi_environment writes PATH/LD_LIBRARY_PATH to /etc/environment)"
    for name, d in data.items():
        problems = []
        if not d.get("mpirun"):
            problems.append("mpirun not in PATH")
        if not d.get("prted"):
            problems.append("prted not in PATH")
        prefix = d.get("openmpi_prefix")
        if prefix:
            if f"{prefix}/bin" not in d.get("path", "").split(":"):
                problems.append(f"PATH lacks {prefix}/bin")
            if f"{prefix}/lib" not in d.get("ld_library_path", "").split(":"):
                problems.append(f"LD_LIBRARY_PATH lacks {prefix}/lib")
        detail = "; ".join(problems) or f"PATH={d.get('path')} LD_LIBRARY_PATH=" + str(
            d.get("ld_library_path") or ""
        )
        checks.append(
            Check("non-interactive env", name, not problems, detail, env_fix if problems else "")
        )
    checks += login_checks(data, settings, provision)
    # the cluster venv (mpi4py, Horovod, the smoke/bench programs run with it)
    for name, d in data.items():
        if not d.get("venv"):
            checks.append(
                Check(
                    "cluster venv",
                    name,
                    False,
                    f"{settings.venv_python} is missing or broken",
                    f"{provision} (mpi4py role: cluster venv)",
                )
            )
    return checks


def os_groups(data: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """OS release -> its nodes, in the probes' order."""
    groups: dict[str, list[str]] = {}
    for name, d in data.items():
        groups.setdefault(str(d.get("os") or "unknown"), []).append(name)
    return groups


def _public(version: Any) -> Any:
    return version.split("+", 1)[0] if isinstance(version, str) else version


def build_checks(data: Mapping[str, Mapping[str, Any]], provision: str) -> list[Check]:
    """Identical versions and build fingerprints within each OS release (all nodes where the
    cluster runs one), the versions of CLUSTER_WIDE_KEYS across releases, and the job side's
    tools."""
    checks: list[Check] = []
    vfix = f"{provision} (build-once reinstalls the cached build where the marker differs)"
    groups = os_groups(data)

    def per_group(label: str, values: Mapping[str, Any], required: bool = False) -> list[Check]:
        if len(groups) == 1:
            return differs(label, values, vfix, required)
        out: list[Check] = []
        for release, names in groups.items():
            group = {n: values[n] for n in names}
            out += differs(f"{label} ({release})", group, vfix, required)
        return out

    for key in VERSION_KEYS:
        values = {n: d.get("versions", {}).get(key) for n, d in data.items()}
        if key in OPTIONAL_KEYS and all(v is None for v in values.values()):
            continue
        checks += per_group(f"{key} version", values, key in REQUIRED)
        if len(groups) > 1 and key in CLUSTER_WIDE_KEYS:
            # a node without it counts as "missing" where another release has it
            public = {n: _public(v) for n, v in values.items()}
            checks += differs(f"{key} version across OS releases", public, vfix)
    marker_paths = sorted({p for d in data.values() for p in d.get("markers", {})})
    for path in marker_paths:
        values = {n: d.get("markers", {}).get(path) for n, d in data.items()}
        checks += per_group(f"fingerprint {path}", values)
        if len(groups) > 1:
            # the build's content differs by release, its presence does not: a component (or a
            # release of it, such as /opt/slurm/26.05.3) missing from a whole release is named
            present = {n: None if v is None else "installed" for n, v in values.items()}
            checks += differs(f"{path} across OS releases", present, vfix)
    if not marker_paths:
        checks.append(Check("fingerprints", "all", False, "no build markers under /opt", vfix))
    tools = sorted({p for d in data.values() for p in d.get("tools", {})})
    missing = {n: [p for p in tools if not d.get("tools", {}).get(p)] for n, d in data.items()}
    for n, paths_missing in missing.items():
        if paths_missing:
            checks.append(
                Check(
                    "job tools",
                    n,
                    False,
                    "missing: " + ", ".join(paths_missing),
                    f"{provision} (mpi_jobs role)",
                )
            )
    if not any(missing.values()):
        checks.append(Check("job tools", "all", True, "job wrappers, smoke and bench programs"))
    return checks


def key_checks(data: Mapping[str, Mapping[str, Any]], provision: str) -> list[Check]:
    """Every node's own key (the MPI user's ~/.ssh/id_ed25519.pub) is admitted by every other
    node's authorized_keys: mpirun's daemons start each other node to node (PRRTE's tree spawn),
    so a node the others do not know fails jobs it takes part in. The usual cause: a node added
    with ``--limit``, which writes the others' authorized_keys only when the play covers every
    node."""
    fix = (
        f"{provision} over every node (a --limit run leaves the other nodes' authorized_keys as "
        "they were)"
    )
    probed = {n: d["ssh_keys"] for n, d in data.items() if isinstance(d.get("ssh_keys"), dict)}
    checks: list[Check] = []
    for name, keys in probed.items():
        own = keys.get("own")
        if not own:
            detail = "the MPI user has no ~/.ssh/id_ed25519.pub"
            checks.append(Check("node keys", name, False, detail, f"{provision} (ssh_mesh)"))
            continue
        strangers = [
            m for m, k in probed.items() if m != name and own not in k.get("authorized", [])
        ]
        if strangers:
            detail = (
                f"its key is not in the MPI user's authorized_keys on {', '.join(strangers)}: "
                f"MPI daemons started from {name} cannot reach them"
            )
            checks.append(Check("node keys", name, False, detail, fix))
    if probed and not checks:  # (a node that did not answer fails its "ssh from head" check)
        detail = (
            f"the key of each of the {len(probed)} nodes that answered is authorized on the others"
        )
        checks.append(Check("node keys", "all", True, detail))
    return checks
