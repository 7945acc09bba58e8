"""What an inventory says about its sandbox: :class:`SandboxSpec` and how it is read.

The sandbox variables (``sandbox_name``, ``sandbox_subnet``, optionally ``sandbox_shared_dir``,
and per host of ``mpi_nodes`` an ``ansible_port``, a ``sandbox_ip`` and optionally a
``sandbox_os``) are read raw through
Ansible's inventory API, without templating, so they must be literal values;
:func:`spec_from_vars` validates them whole (a value with a final newline is refused, not cut)
before any of them reaches podman. :meth:`SandboxSpec.lock_keys` names what ``up`` and ``down``
lock: the sandbox and its nodes as ``provision`` keys them (``127.0.0.1:<port>``).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpictl import inputs, paths
from mpictl.errors import InventoryError
from mpictl.inputs import quoted, shown

#: Sandbox and host names: they become container, network and host names (matched whole).
_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,40}")
#: Where podman publishes every node's ssh port (``podman run -p 127.0.0.1:<port>:22``).
PUBLISHED_ON = "127.0.0.1"


#: The Debian releases a sandbox node can run (``sandbox_os``, per host or group): bookworm
#: (Debian 12, the default) and trixie (Debian 13: GCC 14 and Python 3.13, the toolchain
#: generation of Ubuntu 24.04, whose archive this project's machines cannot reach).
SANDBOX_OSES = ("bookworm", "trixie")
DEFAULT_OS = "bookworm"


@dataclass(frozen=True)
class SandboxNode:
    name: str
    ssh_port: int
    ip: str
    os: str = DEFAULT_OS


@dataclass(frozen=True)
class SandboxSpec:
    """What an inventory says about its sandbox."""

    name: str
    subnet: str
    nodes: tuple[SandboxNode, ...]
    # sandbox_shared_dir: where every node mounts one host directory (a shared filesystem, as a
    # site's NFS or Lustre would be; "" none)
    shared: str = ""

    def shared_host_dir(self) -> Path:
        """The host directory behind ``shared``: every node's view of it is this one directory."""
        return self.state_dir() / "shared"

    def container(self, node: SandboxNode | str) -> str:
        host = node if isinstance(node, str) else node.name
        return f"{self.name}-{host}"

    def state_dir(self) -> Path:
        return paths.state_dir() / "sandbox" / self.name

    def key_path(self) -> Path:
        return self.state_dir() / "id_ed25519"

    def known_hosts_path(self) -> Path:
        return self.state_dir() / "known_hosts"

    def lock_keys(self) -> list[str]:
        """The keys ``mpictl.lock`` holds for ``up``/``down``: the sandbox (its network and
        containers) and each node as ``provision`` keys it, so neither runs beside the other."""
        nodes = [f"{PUBLISHED_ON}:{node.ssh_port}" for node in self.nodes]
        return [f"sandbox:{self.name}", *nodes]


def _literal(value: Any, *, where: str, var: str) -> Any:
    if isinstance(value, str) and ("{{" in value or "{%" in value):
        raise InventoryError(
            f"{where}: {var} must be a literal value, not a template ({quoted(value)})"
        )
    return value


def read_sandbox(inventory: Path) -> SandboxSpec:
    """Read the sandbox description of ``inventory`` through Ansible's inventory API."""
    inventory = Path(inventory)
    if not inventory.exists():
        raise InventoryError(f"{shown(inventory)}: no such inventory file or directory")
    from ansible.errors import AnsibleError
    from ansible.vars.manager import VariableManager

    # the same quiet loading (parse failures are errors, Ansible's warnings captured) as
    # `mpictl.inventory`; raw variables here, since the sandbox needs only literal ones
    from mpictl.inventory import load_manager

    loader, inv = load_manager(inventory)
    try:
        variables = VariableManager(loader=loader, inventory=inv)
        group = inv.groups.get("mpi_nodes")
        hosts = group.get_hosts() if group is not None else []
        if not hosts:
            raise InventoryError(f"{inventory}: group mpi_nodes is missing or has no hosts")
        host_vars = {h.name: variables.get_vars(host=h) for h in hosts}
    except AnsibleError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InventoryError(f"{shown(inventory)}: {shown(first)}") from None
    return spec_from_vars(inventory, [h.name for h in hosts], host_vars)


def spec_from_vars(
    inventory: Path, hosts: Sequence[str], host_vars: Mapping[str, Mapping[str, Any]]
) -> SandboxSpec:
    """Validate the raw variables of the ``mpi_nodes`` hosts into a :class:`SandboxSpec`."""
    first = host_vars[hosts[0]]
    inv = shown(inventory)
    for var in ("sandbox_name", "sandbox_subnet"):
        if first.get(var) is None:
            raise InventoryError(f"{inv}: {var} is not set (not a sandbox inventory)")
    name = _literal(first.get("sandbox_name"), where=inv, var="sandbox_name")
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise InventoryError(
            f"{inv}: sandbox_name must be lower-case letters, digits, '.', '_' or '-', at most "
            f"41, starting with a letter or digit (got {quoted(name)})"
        )
    subnet_raw = _literal(first.get("sandbox_subnet"), where=inv, var="sandbox_subnet")
    try:
        if not isinstance(subnet_raw, str) or subnet_raw != subnet_raw.strip():
            raise ValueError(subnet_raw)
        subnet = ipaddress.ip_network(subnet_raw, strict=True)
    except ValueError:
        raise InventoryError(
            f"{inv}: sandbox_subnet must be a network such as 10.89.42.0/24 "
            f"(got {quoted(subnet_raw)})"
        ) from None
    if not isinstance(subnet, ipaddress.IPv4Network) or subnet.num_addresses < 8:
        raise InventoryError(f"{inv}: sandbox_subnet must be an IPv4 network of /29 or wider")
    gateway = next(subnet.hosts())
    shared = _literal(first.get("sandbox_shared_dir", ""), where=inv, var="sandbox_shared_dir")
    if shared != "" and not inputs.is_node_path(shared):
        raise InventoryError(
            f"{inv}: sandbox_shared_dir must be '' or an absolute path of plain characters "
            f"(got {quoted(shared)})"
        )
    nodes: list[SandboxNode] = []
    ports: dict[int, str] = {}
    ips: dict[str, str] = {}
    for host in hosts:
        hv = host_vars[host]
        where = f"{inv}: host {shown(host)}"
        same = (("sandbox_name", name), ("sandbox_subnet", subnet_raw))
        for var, value in (*same, ("sandbox_shared_dir", shared)):
            if hv.get(var, "") != value:
                raise InventoryError(f"{where}: {var} differs from the other nodes'")
        if not _NAME_RE.fullmatch(host):
            raise InventoryError(f"{where}: host name unusable as a container host name")
        port_raw = _literal(hv.get("ansible_port"), where=where, var="ansible_port")
        port = _port(port_raw)
        if port is None:
            raise InventoryError(
                f"{where}: ansible_port must be a port 1024..65535 (got {quoted(port_raw)})"
            )
        if port in ports:
            raise InventoryError(f"{where}: ansible_port {port} is also used by {ports[port]}")
        ip_raw = _literal(hv.get("sandbox_ip"), where=where, var="sandbox_ip")
        try:
            if not isinstance(ip_raw, str) or ip_raw != ip_raw.strip():
                raise ValueError(ip_raw)
            ip = ipaddress.ip_address(ip_raw)
        except ValueError:
            raise InventoryError(
                f"{where}: sandbox_ip must be an IPv4 address (got {quoted(ip_raw)})"
            ) from None
        if ip not in subnet or ip in (subnet.network_address, subnet.broadcast_address, gateway):
            raise InventoryError(
                f"{where}: sandbox_ip {ip} is not a usable address of {subnet} "
                f"({gateway} is the gateway)"
            )
        if str(ip) in ips:
            raise InventoryError(f"{where}: sandbox_ip {ip} is also used by {ips[str(ip)]}")
        os_raw = _literal(hv.get("sandbox_os", DEFAULT_OS), where=where, var="sandbox_os")
        if os_raw not in SANDBOX_OSES:
            raise InventoryError(
                f"{where}: sandbox_os must be one of {', '.join(SANDBOX_OSES)} "
                f"(got {quoted(os_raw)})"
            )
        ports[port] = host
        ips[str(ip)] = host
        nodes.append(SandboxNode(name=host, ssh_port=port, ip=str(ip), os=str(os_raw)))
    return SandboxSpec(name=name, subnet=str(subnet), nodes=tuple(nodes), shared=str(shared))


def _port(value: Any) -> int | None:
    """A published port, 1024..65535, from an int or ASCII digits only (``'²'``, ``2222.5``,
    ``True`` and ``' 2222'`` are refused); None otherwise."""
    number = inputs.number(value)
    return number if number is not None and 1024 <= number <= 65535 else None
