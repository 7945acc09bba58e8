"""The sandbox's podman side: the one way podman is called, the ``podman run`` and ``network
create`` arguments of a sandbox (pure), and reading back its labelled containers and network.

Every container carries ``io.mpictl.sandbox=<name>`` (membership), ``io.mpictl.node``,
``io.mpictl.runtime`` (how to call podman on it again) and ``io.mpictl.config`` (a hash of what
the inventory and ``--cuda`` decide, so ``up`` knows whether to recreate it).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mpictl.errors import SandboxError
from mpictl.sandbox.host import Runtime
from mpictl.sandbox.spec import DEFAULT_OS, SandboxNode, SandboxSpec

LABEL_SANDBOX = "io.mpictl.sandbox"
LABEL_NODE = "io.mpictl.node"
LABEL_RUNTIME = "io.mpictl.runtime"
LABEL_CONFIG = "io.mpictl.config"

# --------------------------------------------------------------------------------------------
# Command construction (pure)


def network_create_args(spec: SandboxSpec) -> list[str]:
    return [
        "network",
        "create",
        "--subnet",
        spec.subnet,
        "--label",
        f"{LABEL_SANDBOX}={spec.name}",
        spec.name,
    ]


def mac_for_ip(ip: str) -> str:
    """A locally administered unicast MAC address derived from an IPv4 address."""
    return "02:6d:" + ":".join(f"{b:02x}" for b in ipaddress.IPv4Address(ip).packed)


def node_run_args(
    spec: SandboxSpec,
    node: SandboxNode,
    runtime: Runtime,
    image: str,
    cuda: Path | None = None,
    *,
    legacy_peers: bool = False,
) -> list[str]:
    """The ``podman run`` arguments (after the global ones) that create ``node``.

    The other nodes' names (``--add-host``) are not part of the configuration label: a node
    added to or removed from the inventory leaves the others running (``up`` rewrites their
    ``/etc/hosts``, :func:`hosts_text`). ``legacy_peers``: the label as containers made before
    that carry it (the peers hashed in), which ``up`` still accepts as unchanged."""
    options: list[str] = [
        "--hostname",
        node.name,
        "--network",
        spec.name,
        "--ip",
        node.ip,
        "-p",
        f"127.0.0.1:{node.ssh_port}:22",
        # MPI needs more shared memory than the 64 MiB default, and CMA (process_vm_readv)
        # single-copy transfers between ranks need ptrace; ping needs raw sockets.
        "--shm-size",
        "1g",
        "--cap-add",
        "SYS_PTRACE",
        "--cap-add",
        "NET_RAW",
        # systemd is PID 1 (the image's entrypoint is /sbin/init), as on a real machine: podman
        # mounts the tmpfs and cgroup fs it needs and stops the node with SIGRTMIN+3.
        "--systemd",
        "always",
        *runtime.run_args,
    ]
    peers = [
        a for o in spec.nodes if o.name != node.name for a in ("--add-host", f"{o.name}:{o.ip}")
    ]
    if legacy_peers:
        options += peers
    if spec.shared:  # one host directory in every node: the sandbox's shared filesystem
        options += ["-v", f"{spec.shared_host_dir()}:{spec.shared}"]
    if cuda is not None:
        real = cuda.resolve()
        options += ["-v", f"{real}:{cuda}:ro"]
        if real != cuda:
            options += ["-v", f"{real}:{real}:ro"]
    # The config label covers what the inventory and --cuda decide, not the image: a newer image
    # recipe is used by nodes created from then on, running nodes are left alone.
    # A node's Debian release is part of its configuration (another release: another node); the
    # default release adds nothing, so the labels of existing bookworm nodes stay as they were.
    labelled = options if node.os == DEFAULT_OS else [*options, f"os={node.os}"]
    config = hashlib.sha256("\0".join(labelled).encode()).hexdigest()[:16]
    # A fixed MAC per address (derived from it, so not part of the label): a recreated node
    # answers at once instead of after the host's stale neighbour (ARP) entry for its address
    # expires (~30 s of connect timeouts).
    options += ["--mac-address", mac_for_ip(node.ip)]
    if not legacy_peers:
        options += peers
    return [
        "run",
        "-d",
        "--name",
        spec.container(node),
        "--label",
        f"{LABEL_SANDBOX}={spec.name}",
        "--label",
        f"{LABEL_NODE}={node.name}",
        "--label",
        f"{LABEL_RUNTIME}={runtime.name}",
        "--label",
        f"{LABEL_CONFIG}={config}",
        *options,
        image,
    ]


def hosts_text(current: str, own: str, subnet: str, peers: Mapping[str, str]) -> str:
    """A node's ``/etc/hosts`` with the sandbox's other nodes as ``peers`` says (name -> ip).
    Where its entries in the sandbox's subnet already are those (in whatever order podman wrote
    them: its ``--add-host`` lines come first), the text is returned as it is. Otherwise lines of
    other addresses in the subnet go (a removed or renamed node), the node's own line, the
    gateway's (``host.containers.internal``) and everything else stay, and the peers come last."""
    net = ipaddress.ip_network(subnet, strict=False)
    kept, seen = [], set()
    for line in current.splitlines():
        fields = line.split("#", 1)[0].split()
        try:
            address = ipaddress.ip_address(fields[0]) if fields else None
        except ValueError:
            address = None
        inside = address is not None and address in net and address != net.network_address + 1
        if inside and own not in fields[1:]:
            seen.add((fields[0], tuple(fields[1:])))
            continue
        kept.append(line)
    if seen == {(ip, (name,)) for name, ip in peers.items()}:
        return current
    return "\n".join([*kept, *(f"{ip}\t{name}" for name, ip in peers.items())]) + "\n"


def sync_hosts(spec: SandboxSpec, node: SandboxNode, runtime: Runtime) -> bool:
    """Rewrite ``node``'s ``/etc/hosts`` in place (podman bind-mounts it) where the other nodes
    changed since it was created; whether it was rewritten."""
    container = spec.container(node)
    current = run(["exec", container, "cat", "/etc/hosts"], runtime=runtime,
                  what=f"reading /etc/hosts of {container}").stdout  # fmt: skip
    peers = {o.name: o.ip for o in spec.nodes if o.name != node.name}
    wanted = hosts_text(current, node.name, spec.subnet, peers)
    if wanted == current:
        return False
    run(["exec", "-i", container, "sh", "-c", "cat > /etc/hosts"], runtime=runtime,
        stdin=wanted, what=f"writing /etc/hosts of {container}")  # fmt: skip
    return True


def config_label(run_args: Sequence[str]) -> str:
    prefix = f"{LABEL_CONFIG}="
    return next(a[len(prefix) :] for a in run_args if a.startswith(prefix))


# --------------------------------------------------------------------------------------------
# Calling podman


def last_line(text: str) -> str:
    """The last non-empty line of a tool's output: the one-line reason of a failure."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "(no message)"


def run(
    args: Sequence[str],
    *,
    runtime: Runtime | None = None,
    stdin: str | None = None,
    check: bool = True,
    what: str = "",
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """``podman [runtime options] args``; a timeout, or a failure when ``check``, raises."""
    exe = shutil.which("podman")
    if exe is None:
        raise SandboxError("podman is not installed (the sandbox runs nodes as podman containers)")
    cmd = [exe, *(runtime.global_args if runtime else ()), *args]
    try:
        proc = subprocess.run(
            cmd, input=stdin, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise SandboxError(
            f"{what or 'podman ' + args[0]}: timed out after {timeout:.0f} s"
        ) from None
    if check and proc.returncode != 0:
        raise SandboxError(f"{what or 'podman ' + ' '.join(args[:2])}: {last_line(proc.stderr)}")
    return proc


def containers(name: str) -> dict[str, dict[str, Any]]:
    """Containers labelled as members of sandbox ``name``, by container name."""
    proc = run(
        ["ps", "-a", "--filter", f"label={LABEL_SANDBOX}={name}", "--format", "json"],
        what="podman ps",
    )
    found: dict[str, dict[str, Any]] = {}
    for entry in json.loads(proc.stdout or "[]") or []:
        labels = entry.get("Labels") or {}
        if labels.get(LABEL_SANDBOX) != name:
            continue
        names = entry.get("Names") or []
        if names:
            found[names[0]] = entry
    return found


def container_state(entry: Mapping[str, Any] | None) -> str:
    """``running``, ``stopped`` or ``missing`` for an entry of :func:`containers` (or None)."""
    if entry is None:
        return "missing"
    return "running" if str(entry.get("State", "")).lower() == "running" else "stopped"


def entry_runtime(entry: Mapping[str, Any]) -> Runtime:
    """The runtime a container was created with (its label), to call podman on it again."""
    labels = entry.get("Labels") or {}
    return Runtime("runc" if labels.get(LABEL_RUNTIME) == "runc" else "default")


def remove_container(container: str, runtime: Runtime) -> None:
    args = ["rm", "-f", "-t", "2", container]
    # A node that stops by itself while podman stops it fails the first try ("could not be
    # stopped: ... container state improper: stopped"); it is stopped then, so once more.
    if run(args, runtime=runtime, check=False).returncode != 0:
        run(args, runtime=runtime, what=f"removing {container}")


def network(name: str) -> dict[str, Any] | None:
    """``podman network inspect`` of ``name``, or None when there is no such network."""
    proc = run(["network", "inspect", name], check=False)
    if proc.returncode != 0:
        return None
    data = json.loads(proc.stdout or "[]")
    return data[0] if data else None


def network_labels(net: Mapping[str, Any]) -> Mapping[str, str]:
    return net.get("labels") or net.get("Labels") or {}


def _network_subnets(net: Mapping[str, Any]) -> list[str]:
    return [str(s.get("subnet")) for s in net.get("subnets") or []]


def ensure_network(spec: SandboxSpec) -> None:
    """Create the sandbox's network, or check that the existing one is it, on its subnet."""
    net = network(spec.name)
    if net is None:
        run(network_create_args(spec), what=f"creating network {spec.name}")
        return
    if network_labels(net).get(LABEL_SANDBOX) != spec.name:
        raise SandboxError(f"podman network {spec.name} exists but is not this sandbox's network")
    if spec.subnet not in _network_subnets(net):
        raise SandboxError(
            f"podman network {spec.name} has subnet {', '.join(_network_subnets(net))}, the "
            f"inventory says {spec.subnet}; run `mpictl sandbox down` first"
        )
