"""Load any Ansible inventory into typed nodes, through Ansible's own inventory API.

YAML, INI, directories with ``group_vars``/``host_vars`` and dynamic inventory scripts all go
through ``InventoryManager``; nothing here parses inventory files by hand. The contract:

- group ``mpi_nodes`` lists every node; optional group ``mpi_head`` names the head (default: the
  first of ``mpi_nodes``);
- ``mpi_slots`` (ranks per node) defaults to the node's GPU count when it has GPUs, else its vCPU
  count, both from Ansible's fact cache of the last provision;
- ``mpi_address`` is the name other nodes reach a node by (default: its inventory name).

Names end up in hostfiles, known_hosts and ssh command lines, so every node's inventory name,
``ansible_host`` and address is checked while loading, by the rules of :mod:`mpictl.hostnames`
(``_`` is fine in a name and in ``ansible_host``, not in the address other nodes resolve).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mpictl import paths
from mpictl.errors import InventoryError
from mpictl.hostnames import NOT_A_HOST, NOT_AN_ADDRESS, host_problem

NODES_GROUP = "mpi_nodes"
HEAD_GROUP = "mpi_head"


@dataclass(frozen=True)
class Node:
    """One node of the cluster, as the inventory and the fact cache describe it."""

    name: str
    address: str
    slots: int | None
    slots_source: str | None  # "mpi_slots", "gpus", "vcpus" or None when unknown
    gpus: int | None = None
    vcpus: int | None = None
    ssh_host: str = ""
    ssh_port: int = 22
    ssh_user: str | None = None
    ssh_key: str | None = None
    ssh_common_args: str = ""
    interface: str | None = None
    vars: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    facts: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class Cluster:
    """The nodes of ``mpi_nodes`` in inventory order, and which of them is the head."""

    source: Path
    nodes: tuple[Node, ...]
    head: Node

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name or node.address == name:
                return node
        raise InventoryError(f"{self.source}: unknown host '{name}' (not in group {NODES_GROUP})")

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def require_slots(self) -> list[tuple[Node, int]]:
        """Every node with its slot count; an error naming the first node without one."""
        out = []
        for node in self.nodes:
            if node.slots is None:
                raise InventoryError(
                    f"{node.name}: mpi_slots is not set and no facts are cached for it "
                    f"(run `mpictl provision` first, or set mpi_slots in {self.source})"
                )
            out.append((node, node.slots))
        return out

    @property
    def total_slots(self) -> int:
        return sum(slots for _, slots in self.require_slots())


def _check_names(
    path: Path, name: str, hostvars: Mapping[str, Any], address: str, ssh: str
) -> None:
    """The node's inventory name, address and ``ansible_host`` are hosts, or an InventoryError
    naming the host and the bad value: they go into hostfiles and ssh command lines."""
    where = f"{path}: host {name!r}"
    if host_problem(name, underscore=True):
        raise InventoryError(f"{where}: {NOT_A_HOST}")
    if "ansible_host" in hostvars and host_problem(ssh, underscore=True):
        raise InventoryError(f"{where}: ansible_host {str(ssh)!r}: {NOT_A_HOST}")
    if not hostvars.get("mpi_address"):
        if host_problem(address):
            raise InventoryError(
                f"{where}: the name is its default mpi_address, which other nodes resolve, and "
                "'_' is not valid in a DNS name: set mpi_address (a DNS name or an IP address)"
            )
    elif host_problem(address):
        raise InventoryError(f"{where}: mpi_address {str(address)!r}: {NOT_AN_ADDRESS}")


def parse_slots(host: str, value: Any) -> int:
    """``mpi_slots`` as a positive integer, or an InventoryError naming host and variable."""
    if isinstance(value, bool):
        ok = False
    elif isinstance(value, int):
        ok = value > 0
    elif isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
        ok = value > 0
    else:
        ok = False
    if not ok:
        raise InventoryError(f"{host}: mpi_slots must be a positive integer, got {value!r}")
    return int(value)


def _positive_int(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 and not isinstance(value, bool) else None


def resolve_slots(host: str, hostvars: Mapping[str, Any]) -> tuple[int | None, str | None]:
    """Slots of one host from its variables and facts: ``mpi_slots``, else GPUs, else vCPUs.

    ``hostvars`` may be Ansible's hostvars of the host (facts injected) or the inventory vars
    merged with the cached facts; both carry the same keys.
    """
    if hostvars.get("mpi_slots") is not None:
        return parse_slots(host, hostvars["mpi_slots"]), "mpi_slots"
    gpus = _positive_int(hostvars.get("mpi_gpu_count"))
    if gpus:
        return gpus, "gpus"
    vcpus = _positive_int(hostvars.get("ansible_processor_vcpus"))
    if vcpus:
        return vcpus, "vcpus"
    return None, None


class _FactCache:
    """Ansible's jsonfile fact cache, read-only.

    ansible-core < 2.19 writes ``<dir>/<host>`` holding the facts; 2.19 writes
    ``<dir>/s<N>_<host>`` holding ``{"__payload__": "<the facts as JSON, values tagged>"}``.
    """

    def __init__(self, directory: Path) -> None:
        self.files: dict[str, Path] = {}
        try:
            entries = sorted(directory.iterdir(), key=lambda p: p.stat().st_mtime)
        except OSError:
            entries = []
        for path in entries:  # oldest first: the newest file of a host wins
            name = path.name
            head, sep, rest = name.partition("_")
            if sep and head[:1] == "s" and head[1:].isdigit():
                name = rest
            self.files[name] = path

    def get(self, host: str) -> dict[str, Any]:
        path = self.files.get(host)
        if path is None:
            return {}
        try:
            data = json.loads(path.read_text())
            if isinstance(data, dict) and isinstance(data.get("__payload__"), str):
                data = json.loads(data["__payload__"])
        except (OSError, ValueError):
            return {}
        return _untag(data) if isinstance(data, dict) else {}


def _untag(value: Any) -> Any:
    """Strip ansible-core 2.19's data tags (``{"__ansible_type": ..., "value": v}``) off values."""
    if isinstance(value, dict):
        if "__ansible_type" in value and "value" in value:
            return _untag(value["value"])
        return {k: _untag(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_untag(v) for v in value]
    return value


@contextmanager
def _captured_ansible_warnings() -> Iterator[list[str]]:
    """Collect Ansible's warnings (and the parse errors it reports as warnings) quietly.

    Each captured entry is the most specific message available: for a parse failure, the
    innermost cause (e.g. "Found duplicate mapping key 'a'").
    """
    from ansible.utils.display import Display

    captured: list[str] = []
    originals = (Display.warning, Display.error_as_warning)

    def warning(self: Display, msg: str, *args: Any, **kwargs: Any) -> None:
        captured.append(str(msg))

    def error_as_warning(self: Display, msg: Any = None, exception: Any = None, **kw: Any) -> None:
        while exception is not None and exception.__cause__ is not None:
            exception = exception.__cause__
        message = getattr(exception, "message", None) or str(exception or msg)
        captured.append(str(message))

    Display.warning = warning  # type: ignore[method-assign]
    Display.error_as_warning = error_as_warning  # type: ignore[method-assign]
    try:
        yield captured
    finally:
        Display.warning, Display.error_as_warning = originals  # type: ignore[method-assign]


def _first_line(text: str) -> str:
    for line in str(text).splitlines():
        if line.strip():
            return line.strip()
    return str(text).strip()


def load_manager(source: Path) -> tuple[Any, Any]:
    """Ansible's ``(DataLoader, InventoryManager)`` for ``source``, loaded quietly and strictly.

    A source that no plugin parses is an :class:`InventoryError` (with the most telling of
    Ansible's captured warnings as its message), and so are duplicate YAML keys unless
    ``ANSIBLE_DUPLICATE_YAML_DICT_KEY`` says otherwise. :func:`load_inventory` and the sandbox
    (which reads raw variables) both load inventories this way.
    """
    os.environ.setdefault("ANSIBLE_DUPLICATE_YAML_DICT_KEY", "error")
    from ansible import constants as C  # noqa: N812
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    C.INVENTORY_UNPARSED_IS_FAILED = True
    # Plain YAML inventories are the common case: try the yaml plugin before `auto`, which
    # would otherwise load every such file twice.
    enabled = list(C.INVENTORY_ENABLED)
    if "yaml" in enabled and "auto" in enabled and enabled.index("auto") < enabled.index("yaml"):
        enabled.remove("yaml")
        enabled.insert(enabled.index("auto"), "yaml")
        C.INVENTORY_ENABLED = enabled
    loader = DataLoader()
    with _captured_ansible_warnings() as warnings:
        try:
            manager = InventoryManager(loader=loader, sources=[str(source)])
        except AnsibleError as exc:
            detail = next((w for w in warnings if "ailed to parse" not in w), None)
            reason = _first_line(getattr(exc, "message", None) or str(exc))
            if detail:
                reason = _first_line(detail)
            raise InventoryError(f"{source}: cannot parse inventory: {reason}") from None
    return loader, manager


class _InventoryVars:
    """Inventory-level variables of hosts, merged in the order Ansible's VariableManager uses
    (group vars of the inventory and of group_vars/ dirs, then host vars and host_vars/ dirs),
    with the group part computed once per distinct set of groups: thousands of hosts usually
    share a handful of group sets.
    """

    def __init__(self, loader: Any, manager: Any) -> None:
        self.loader = loader
        self.manager = manager
        self._by_groups: dict[tuple[str, ...], dict[str, Any]] = {}

    def _plugins(self, entities: list[Any]) -> dict[str, Any]:
        from ansible.vars.plugins import get_vars_from_inventory_sources

        return get_vars_from_inventory_sources(self.loader, self.manager._sources, entities, "task")

    def _group_vars(self, host: Any) -> dict[str, Any]:
        from ansible.inventory.helpers import get_group_vars, sort_groups
        from ansible.utils.vars import combine_vars

        groups = sort_groups([g for g in host.get_groups() if g.name != "all"])
        key = tuple(g.name for g in groups)
        if key not in self._by_groups:
            all_group = self.manager.groups["all"]
            data: dict[str, Any] = {}
            for part in (
                all_group.get_vars(),
                get_group_vars(groups),
                self._plugins([all_group]),
                self._plugins(groups),
            ):
                data = combine_vars(data, part)
            self._by_groups[key] = data
        return self._by_groups[key]

    def get(self, host: Any) -> dict[str, Any]:
        """The host's variables; a group_vars/host_vars file that does not parse is an
        InventoryError naming the inventory and Ansible's first line of the reason."""
        from ansible.errors import AnsibleError
        from ansible.utils.vars import combine_vars

        try:
            data = combine_vars(self._group_vars(host), host.get_vars())
            return combine_vars(data, self._plugins([host]))
        except AnsibleError as exc:
            reason = _first_line(getattr(exc, "message", None) or str(exc))
            source = ", ".join(self.manager._sources)
            raise InventoryError(
                f"{source}: cannot read the variables of host '{host.name}': {reason}"
            ) from None


def _template(loader: Any, variables: Mapping[str, Any], value: Any) -> Any:
    if not (isinstance(value, str) and "{{" in value):
        return value
    from ansible.template import Templar

    try:
        return Templar(loader=loader, variables=dict(variables)).template(value)
    except Exception:  # noqa: BLE001 - an untemplatable value is reported as it is
        return value


def load_inventory(source: Path | str | None = None, facts_dir: Path | None = None) -> Cluster:
    """Load ``source`` (default: the sandbox inventory) into a Cluster, checking the contract."""
    path = Path(source) if source is not None else paths.sandbox_inventory()
    if not path.exists():
        raise InventoryError(f"{path}: inventory not found")
    loader, manager = load_manager(path)
    variables = _InventoryVars(loader, manager)
    cached = _FactCache(facts_dir or paths.facts_dir())
    groups = manager.get_groups_dict()
    names = groups.get(NODES_GROUP) or []
    if not names:
        raise InventoryError(f"{path}: group '{NODES_GROUP}' is missing or empty")

    nodes: list[Node] = []
    seen: dict[str, str] = {}
    for name in names:
        host = manager.get_host(name)
        hostvars = variables.get(host)
        facts = cached.get(name)
        merged = {**facts, **hostvars}
        address = str(_template(loader, merged, hostvars.get("mpi_address") or name))
        ssh_host = str(_template(loader, merged, hostvars.get("ansible_host", name)))
        _check_names(path, name, hostvars, address, ssh_host)
        for label in {name.lower(), address.lower()}:
            if label in seen and seen[label] != name:
                raise InventoryError(
                    f"{path}: duplicate host: '{name}' and '{seen[label]}' both resolve to "
                    f"'{label}'"
                )
            seen[label] = name
        raw_slots = _template(loader, merged, hostvars.get("mpi_slots"))
        slots, source_of_slots = resolve_slots(name, {**merged, "mpi_slots": raw_slots})
        port = _template(loader, merged, hostvars.get("ansible_port", 22))
        key = hostvars.get("ansible_ssh_private_key_file") or hostvars.get(
            "ansible_private_key_file"
        )
        nodes.append(
            Node(
                name=name,
                address=address,
                slots=slots,
                slots_source=source_of_slots,
                gpus=_positive_int(facts.get("mpi_gpu_count")) or 0 if facts else None,
                vcpus=_positive_int(facts.get("ansible_processor_vcpus")),
                ssh_host=ssh_host,
                ssh_port=int(port) if str(port).isdigit() else 22,
                ssh_user=_template(loader, merged, hostvars.get("ansible_user")),
                ssh_key=str(_template(loader, merged, key)) if key else None,
                ssh_common_args=str(
                    _template(loader, merged, hostvars.get("ansible_ssh_common_args", ""))
                ),
                interface=hostvars.get("mpi_network_interface"),
                vars=hostvars,
                facts=facts,
            )
        )

    head_names = groups.get(HEAD_GROUP) or []
    by_name = {n.name: n for n in nodes}
    if head_names:
        head_name = head_names[0]
        if head_name not in by_name:
            raise InventoryError(
                f"{path}: head '{head_name}' (group {HEAD_GROUP}) is not in group {NODES_GROUP}"
            )
        head = by_name[head_name]
    else:
        head = nodes[0]
    return Cluster(source=path, nodes=tuple(nodes), head=head)
