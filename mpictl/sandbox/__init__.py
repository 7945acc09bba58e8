"""The local sandbox cluster: podman containers that behave like SSH-reachable Debian nodes.

An inventory such as ``inventories/sandbox/`` describes the sandbox: group vars ``sandbox_name``
(prefix of the containers and name of the podman network) and ``sandbox_subnet``; per host of
``mpi_nodes`` an ``ansible_port`` (published on 127.0.0.1) and a ``sandbox_ip`` on that network.

``up`` builds the node image when missing (debootstrap + ``podman import``, tagged by the hash of
the recipe in ``mpictl/data/sandbox/``), creates the network and one container per node, puts the
per-sandbox controller key into root's ``authorized_keys``, pins the nodes' host keys (read over
``podman exec``) in ``<state>/sandbox/<name>/known_hosts`` and waits until SSH answers. ``down``
removes that sandbox's containers and network and nothing else. ``status`` reports every node.

Library code: no printing; failures raise :class:`SandboxError` (or :class:`InventoryError` for a
bad inventory) with a one-line message.

This package holds the public operations (``up``, ``down``, ``status``, ``plan``,
``clone_inventory``) and re-exports the names callers use; the parts live in ``spec`` (inventory
-> :class:`SandboxSpec`), ``host`` (cgroup mode, runtime, Debian mirror), ``image`` (the node
image), ``podman`` (podman calls, container and network arguments, labels) and ``ssh`` (keys,
pinned host keys, waiting for SSH).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpictl import paths
from mpictl.errors import SandboxError
from mpictl.sandbox import podman, ssh
from mpictl.sandbox.host import (
    LOWERED_ULIMITS,
    Runtime,
    cgroup_mode,
    choose_runtime,
    debian_mirror,
    parse_deb822_mirror,
    parse_sources_list_mirror,
)
from mpictl.sandbox.image import (
    BUILD_TIMEOUT_S,
    IMAGE_REPO,
    RECIPE_DIR,
    ensure_image,
    image_exists,
    image_tag,
    recipe_hash,
)
from mpictl.sandbox.podman import (
    LABEL_CONFIG,
    LABEL_NODE,
    LABEL_RUNTIME,
    LABEL_SANDBOX,
    config_label,
    hosts_text,
    mac_for_ip,
    network_create_args,
    node_run_args,
)
from mpictl.sandbox.spec import SandboxNode, SandboxSpec, read_sandbox, spec_from_vars
from mpictl.sandbox.ssh import (
    NODE_BOOT_WAIT_S,
    NODE_READY,
    SSH_WAIT_S,
    ensure_key,
    known_hosts_lines,
    pinned_by_port,
    ssh_check_args,
)

__all__ = [
    "BUILD_TIMEOUT_S",
    "CUDA_PATH",
    "NODE_READY",
    "NODE_BOOT_WAIT_S",
    "IMAGE_REPO",
    "LABEL_CONFIG",
    "LABEL_NODE",
    "LABEL_RUNTIME",
    "LABEL_SANDBOX",
    "LOWERED_ULIMITS",
    "RECIPE_DIR",
    "SSH_WAIT_S",
    "NodeState",
    "Runtime",
    "SandboxNode",
    "SandboxSpec",
    "cgroup_mode",
    "choose_runtime",
    "clone_inventory",
    "config_label",
    "debian_mirror",
    "down",
    "ensure_image",
    "ensure_key",
    "image_exists",
    "image_tag",
    "known_hosts_lines",
    "mac_for_ip",
    "network_create_args",
    "node_run_args",
    "parse_deb822_mirror",
    "parse_sources_list_mirror",
    "pinned_by_port",
    "plan",
    "read_sandbox",
    "removed",
    "hosts_text",
    "recipe_hash",
    "spec_from_vars",
    "ssh_check_args",
    "status",
    "up",
]

CUDA_PATH = Path("/usr/local/cuda")


@dataclass(frozen=True)
class NodeState:
    """One sandbox node as ``status``/``up`` report it.

    ``state`` is ``running``, ``stopped`` or ``missing``; ``action`` says what ``up`` did to it
    (``created``, ``recreated``, ``started``, ``unchanged``, and ``hosts updated`` for a kept node
    whose /etc/hosts it rewrote; ``removed`` for a node no longer in the inventory, listed after
    the others) and is empty for ``status``.
    """

    name: str
    container: str
    state: str
    ssh_port: int
    ip: str
    action: str = ""


def clone_inventory(
    dst: Path, name: str, subnet: str, port_base: int, count: int | None = None
) -> Path:
    """Copy ``inventories/sandbox`` to ``dst`` as an independent sandbox.

    Hosts keep their names (``count``: ``node1``..``node<count>`` instead, the head still
    ``node1``); ``sandbox_name`` and ``sandbox_subnet`` are replaced, and host i gets
    ``ansible_port`` ``port_base + i`` and ``sandbox_ip`` ``.11 + i`` of ``subnet``. Tests,
    benchmarks and parallel users run such copies side by side with the default sandbox.
    """
    import yaml

    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(paths.sandbox_inventory(), dst)
    group_vars = dst / "group_vars" / "all.yml"
    text = group_vars.read_text()
    text = re.sub(r"(?m)^sandbox_name:.*$", f"sandbox_name: {name}", text)
    text = re.sub(r"(?m)^sandbox_subnet:.*$", f"sandbox_subnet: {subnet}", text)
    group_vars.write_text(text)
    hosts_file = dst / "hosts.yml"
    data = yaml.safe_load(hosts_file.read_text())
    prefix = subnet.rsplit(".", 1)[0]
    hosts = data["all"]["children"]["mpi_nodes"]["hosts"]
    if count is not None:
        if not 1 <= count <= 200:
            raise SandboxError(f"a sandbox has 1..200 nodes, not {count}")
        hosts = {f"node{i + 1}": {} for i in range(count)}
        data["all"]["children"]["mpi_nodes"]["hosts"] = hosts
    for index, host in enumerate(hosts):
        hosts[host]["ansible_port"] = port_base + index
        hosts[host]["sandbox_ip"] = f"{prefix}.{11 + index}"
    hosts_file.write_text(yaml.safe_dump(data, sort_keys=False))
    return dst


def status(inventory: Path) -> list[NodeState]:
    """Every node of the sandbox with its container state."""
    spec = read_sandbox(inventory)
    return _status(spec, podman.containers(spec.name))


def _status(
    spec: SandboxSpec,
    found: Mapping[str, Mapping[str, Any]],
    actions: Mapping[str, str] | None = None,
) -> list[NodeState]:
    return [
        NodeState(
            name=node.name,
            container=spec.container(node),
            state=podman.container_state(found.get(spec.container(node))),
            ssh_port=node.ssh_port,
            ip=node.ip,
            action=(actions or {}).get(node.name, ""),
        )
        for node in spec.nodes
    ]


def removed(spec: SandboxSpec, found: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The sandbox's containers whose node is no longer in the inventory."""
    names = {spec.container(node) for node in spec.nodes}
    return sorted(c for c in found if c not in names)


def plan(
    spec: SandboxSpec,
    found: Mapping[str, Mapping[str, Any]],
    runtime: Runtime,
    image: str | Callable[[str], str],
    cuda: Path | None = None,
    host_cuda: Path | None = None,
) -> list[tuple[SandboxNode, str, list[str]]]:
    """What ``up`` does to each node: ``unchanged``, ``started``, ``created`` or ``recreated``.

    A node whose container exists with the same configuration label is left alone (started when
    stopped; the other nodes' names are not its configuration: ``up`` rewrites its
    ``/etc/hosts``); one whose configuration differs (ports, addresses) is recreated, and so is
    one without the CUDA mount when ``cuda`` asks for it. Without ``cuda``, a node that has the
    mount of ``host_cuda`` keeps it: a plain ``up`` never takes CUDA away from running nodes.
    """
    steps = []
    for node in spec.nodes:
        own = image(node.os) if callable(image) else image
        run_args = node_run_args(spec, node, runtime, own, cuda)
        mounts = [cuda] + ([host_cuda] if cuda is None and host_cuda is not None else [])
        accepted = {
            config_label(node_run_args(spec, node, runtime, own, mount, legacy_peers=legacy))
            for mount in mounts
            for legacy in (False, True)
        }
        entry = found.get(spec.container(node))
        if entry is None:
            action = "created"
        elif (entry.get("Labels") or {}).get(LABEL_CONFIG) not in accepted:
            action = "recreated"
        elif podman.container_state(entry) == "running":
            action = "unchanged"
        else:
            action = "started"
        steps.append((node, action, run_args))
    return steps


def up(inventory: Path, *, cuda: bool = False) -> list[NodeState]:
    """Bring the sandbox up (idempotent): image, network, containers, keys; wait for SSH."""
    spec = read_sandbox(inventory)
    cuda_path: Path | None = None
    if cuda:
        if not CUDA_PATH.is_dir():
            raise SandboxError(f"--cuda: {CUDA_PATH} does not exist on this host")
        cuda_path = CUDA_PATH
    runtime = choose_runtime()
    found = podman.containers(spec.name)
    host_cuda = CUDA_PATH if CUDA_PATH.is_dir() else None
    steps = plan(
        spec, found, runtime, lambda release: image_tag(release=release), cuda_path, host_cuda
    )
    # only the images of containers to be made: running nodes keep theirs
    for release in sorted({n.os for n, action, _ in steps if action in ("created", "recreated")}):
        ensure_image(release=release)
    podman.ensure_network(spec)
    if spec.shared:  # world-writable with the sticky bit, as /tmp: every node's users write there
        spec.shared_host_dir().mkdir(parents=True, exist_ok=True)
        spec.shared_host_dir().chmod(0o1777)
    key = ensure_key(spec)
    pubkey = key.with_suffix(".pub").read_text()

    actions: dict[str, str] = {}
    gone = {
        c: (found[c].get("Labels") or {}).get(podman.LABEL_NODE, c) for c in removed(spec, found)
    }
    for container in gone:  # before any node is made: a removed node may free an address
        podman.remove_container(container, podman.entry_runtime(found[container]))
    for node, action, run_args in steps:
        container = spec.container(node)
        entry = found.get(container)
        actions[node.name] = action
        if action == "unchanged":
            continue
        if action == "started" and entry is not None:
            podman.run(
                ["start", container],
                runtime=podman.entry_runtime(entry),
                what=f"starting {container}",
            )
            continue
        if action == "recreated" and entry is not None:
            podman.remove_container(container, podman.entry_runtime(entry))
        proc = podman.run(run_args, runtime=runtime, check=False)
        if proc.returncode != 0:
            podman.run(["rm", "-f", "-t", "0", container], runtime=runtime, check=False)
            hint = ""
            if runtime.name == "default" and "rlimit" in proc.stderr:
                hint = " (this host needs MPICTL_SANDBOX_RUNTIME=runc: lowered ulimits)"
            raise SandboxError(f"creating {container}: {podman.last_line(proc.stderr)}{hint}")

    # A node left alone that already lets the key in under its pinned host keys needs nothing
    # more (the warm path: one SSH login per node). Every other node gets the key put into
    # root's authorized_keys and its host keys read over `podman exec` and pinned.
    try:
        pinned = pinned_by_port(spec.known_hosts_path().read_text())
    except OSError:
        pinned = {}
    kept = [n for n, action, _ in steps if action == "unchanged" and n.ssh_port in pinned]
    errors = ssh.login_once(spec, kept) if kept else {}
    kept = [n for n in kept if not errors[n.name]]
    fresh = [n for n in spec.nodes if n not in kept]

    found = podman.containers(spec.name) if fresh else found
    with ThreadPoolExecutor(max_workers=max(1, len(fresh))) as pool:
        host_keys = dict(
            zip(
                [n.name for n in fresh],
                pool.map(
                    lambda node: ssh.authorize_and_read_host_keys(
                        spec.container(node),
                        podman.entry_runtime(found[spec.container(node)]),
                        pubkey,
                    ),
                    fresh,
                ),
                strict=True,
            )
        )
    lines: list[str] = []
    for node in spec.nodes:
        if node.name not in host_keys:
            lines += pinned[node.ssh_port]
            continue
        node_lines = known_hosts_lines(node.ssh_port, host_keys[node.name])
        if not node_lines:
            raise SandboxError(f"{spec.container(node)}: no SSH host keys found")
        lines += node_lines
    ssh.write_private(spec.known_hosts_path(), "\n".join(lines) + "\n")
    ssh.wait_for_ssh(spec, fresh, SSH_WAIT_S)
    # nodes kept (and restarted: podman rewrites /etc/hosts from their creation) learn of the
    # nodes added and forget the removed ones
    for node, action, _ in steps:
        if action in ("unchanged", "started"):
            runtime_of = podman.entry_runtime(found[spec.container(node)])
            if podman.sync_hosts(spec, node, runtime_of) and action == "unchanged":
                actions[node.name] = "hosts updated"
    states = _status(spec, podman.containers(spec.name), actions)
    return states + [
        NodeState(name=name, container=c, state="missing", ssh_port=0, ip="", action="removed")
        for c, name in gone.items()
    ]


def down(inventory: Path) -> list[str]:
    """Remove the sandbox's containers and network (image and keys stay); returns what went."""
    spec = read_sandbox(inventory)
    members = sorted(podman.containers(spec.name).items())
    with ThreadPoolExecutor(max_workers=max(1, len(members))) as pool:
        list(
            pool.map(
                lambda item: podman.remove_container(item[0], podman.entry_runtime(item[1])),
                members,
            )
        )
    removed = [f"container {container}" for container, _ in members]
    net = podman.network(spec.name)
    if net is not None and podman.network_labels(net).get(LABEL_SANDBOX) == spec.name:
        podman.run(["network", "rm", spec.name], what=f"removing network {spec.name}")
        removed.append(f"network {spec.name}")
    return removed
