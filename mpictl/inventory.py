"""Load any Ansible inventory into typed nodes, through Ansible's own inventory API.

YAML, INI, directories with ``group_vars``/``host_vars`` and dynamic inventory scripts all go
through ``InventoryManager``; nothing here parses inventory files by hand. The contract:

- group ``mpi_nodes`` lists every node; optional group ``mpi_head`` names the head (default: the
  first of ``mpi_nodes``);
- ``mpi_slots`` (ranks per node) defaults to the node's GPU count when it has GPUs, else its vCPU
  count, both from Ansible's fact cache of the last provision;
- ``mpi_address`` is the name other nodes reach a node by (default: its inventory name).
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


def load_cached_facts(host: str, facts_dir: Path | None = None) -> dict[str, Any]:
    """The facts Ansible's jsonfile cache holds for ``host`` ({} when none).

    ansible-core < 2.19 writes ``<dir>/<host>`` holding the facts; 2.19 writes
    ``<dir>/s<N>_<host>`` holding ``{"__payload__": "<the facts as JSON>"}``.
    """
    directory = facts_dir or paths.facts_dir()
    candidates = [directory / host, *directory.glob(f"s[0-9]*_{host}")]
    existing = [p for p in candidates if p.is_file()]
    if not existing:
        return {}
    newest = max(existing, key=lambda p: p.stat().st_mtime)
    try:
        data = json.loads(newest.read_text())
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


def _load_manager(source: Path) -> tuple[Any, Any, Any]:
    os.environ.setdefault("ANSIBLE_DUPLICATE_YAML_DICT_KEY", "error")
    from ansible import constants as C  # noqa: N812
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    C.INVENTORY_UNPARSED_IS_FAILED = True
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
    return loader, manager, VariableManager(loader=loader, inventory=manager)


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
    loader, manager, variables = _load_manager(path)
    groups = manager.get_groups_dict()
    names = groups.get(NODES_GROUP) or []
    if not names:
        raise InventoryError(f"{path}: group '{NODES_GROUP}' is missing or empty")

    nodes: list[Node] = []
    seen: dict[str, str] = {}
    for name in names:
        host = manager.get_host(name)
        hostvars = variables.get_vars(host=host, include_hostvars=False)
        facts = load_cached_facts(name, facts_dir)
        merged = {**facts, **hostvars}
        address = str(_template(loader, merged, hostvars.get("mpi_address") or name))
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
                ssh_host=str(_template(loader, merged, hostvars.get("ansible_host", name))),
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
