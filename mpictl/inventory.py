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

The contract is checked on what Ansible will use: each host's variables with the ``-e`` variables
merged over them (extra vars win over every inventory variable, as in Ansible), templated with the
inventory's variables and the cached facts, and for the connection the variable Ansible reads
last (``ansible_ssh_host`` over ``ansible_host``, likewise port and user). Checked: the names
above, ``ansible_port`` (1..65535), ``ansible_user`` and ``ansible_become_user`` (login names),
``mpi_slots`` (1..4096), ``mpi_network_interface``, ``mpi_user``, the key file, interpreter and
shell (one word each, no leading ``-``), the ssh argument variables (they must parse); two nodes
with the same ``ansible_host:port`` are refused. ``-e`` may not set the variables that give ssh
its options or programs, nor the connection (:data:`NOT_FROM_EXTRA_VARS`): those belong in the
inventory, which the job side reads too, and an inventory template in one of them may not take a
part from ``-e`` (:meth:`_Contract.unmoved`). A ``-e`` value is checked as written, never
templated here, and an inventory template reads it as data that is never rendered (a lookup
would run a program before the run), so a template given with ``-e`` for a checked variable is
refused. Inventory templates see the variables, the cached facts, ``groups``, ``group_names``
and ``inventory_hostname(_short)``, not ``hostvars``.

Size: the loader (Ansible's API, the fact cache, variables merged as Ansible merges them) and the
contract's checks of every variable belong together; both read the same merged view.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mpictl import inputs, paths, role_vars
from mpictl.errors import InventoryError, UsageError
from mpictl.hostnames import NOT_A_HOST, NOT_AN_ADDRESS, endpoint, host_problem
from mpictl.inputs import quoted, shown

NODES_GROUP = "mpi_nodes"
HEAD_GROUP = "mpi_head"
MAX_SLOTS = inputs.MAX_SLOTS
#: Variables that hold ssh's own options: they must parse as a command line (the job side splits
#: ``ansible_ssh_common_args`` with shlex, as Ansible does).
ARGS_VARS = (
    "ansible_ssh_args",
    "ansible_ssh_common_args",
    "ansible_ssh_extra_args",
    "ansible_scp_extra_args",
    "ansible_sftp_extra_args",
)
#: Variables whose value is one word of a command line (a path: Ansible quotes it, so spaces are
#: fine): no control character, no leading ``-`` (it would be read as an option).
WORD_VARS = (
    "ansible_ssh_executable",
    "ansible_scp_executable",
    "ansible_sftp_executable",
    "ansible_ssh_private_key_file",
    "ansible_private_key_file",
    "ansible_shell_executable",
)
#: ``-e`` may not set these: they hand ssh options or programs (ProxyCommand, a PKCS#11 library,
#: another ssh) or replace the connection itself. A site sets them in its inventory, where the
#: job side (which never sees ``-e``) reads them too.
NOT_FROM_EXTRA_VARS = (
    *ARGS_VARS,
    "ansible_ssh_executable",
    "ansible_scp_executable",
    "ansible_sftp_executable",
    "ansible_ssh_pkcs11_provider",
    "ansible_control_path",
    "ansible_control_path_dir",
    "ansible_connection",
)
#: The only Ansible variables (``ansible_*``) that ``-e`` may set: where and as whom the
#: connection goes, become, the remote Python, timeouts. The rest (host key checking, ssh's
#: options, programs and control sockets, paramiko's proxy command, the connection plugin, ...)
#: could weaken or replace the connection: a site sets them in its inventory.
FROM_EXTRA_VARS = (
    "ansible_host",
    "ansible_port",
    "ansible_user",
    "ansible_ssh_host",
    "ansible_ssh_port",
    "ansible_ssh_user",
    "ansible_private_key_file",
    "ansible_ssh_private_key_file",
    "ansible_python_interpreter",
    "ansible_shell_executable",
    "ansible_become",
    "ansible_become_user",
    "ansible_become_method",
    "ansible_become_password",
    "ansible_become_pass",
    "ansible_password",
    "ansible_ssh_pass",
    "ansible_timeout",
    "ansible_ssh_timeout",
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


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
    local: bool = False  # ansible_connection: local (the controller's own machine)
    vars: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    facts: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def endpoint(self) -> str:
        """Where ssh reaches the node: ``host:port`` in one spelling (``hostnames.endpoint``)."""
        return endpoint(self.ssh_host or self.name, self.ssh_port)


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
        raise InventoryError(
            f"{shown(self.source)}: unknown host {quoted(name)} (not in group {NODES_GROUP})"
        )

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    @property
    def endpoints(self) -> list[str]:
        """Every node's ``host:port`` (what the node locks are keyed on)."""
        return [n.endpoint for n in self.nodes]

    def require_slots(self) -> list[tuple[Node, int]]:
        """Every node with its slot count; an error naming the first node without one."""
        out = []
        for node in self.nodes:
            if node.slots is None:
                raise InventoryError(
                    f"{node.name}: mpi_slots is not set and no facts are cached for it "
                    f"(run `mpictl provision` first, or set mpi_slots in {shown(self.source)})"
                )
            out.append((node, node.slots))
        return out

    @property
    def total_slots(self) -> int:
        return sum(slots for _, slots in self.require_slots())


def flag(value: Any) -> bool:
    """An inventory variable read as Ansible's ``bool`` filter reads it (what the roles' ``when:
    x | bool`` decide): true, yes, on, 1 (any case) and True are true, everything else false."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1")
    return value is True or value == 1


def check_extravars(extravars: Mapping[str, Any]) -> dict[str, Any]:
    """The ``-e`` variables, each name a variable name, none of :data:`NOT_FROM_EXTRA_VARS` and
    no other ``ansible_*`` than :data:`FROM_EXTRA_VARS`; their values are checked with the
    inventory (:func:`load_inventory`)."""
    for name in extravars:
        if not inputs.fullmatch(inputs.ENV_NAME, name):
            raise UsageError(
                f"-e: {quoted(name)} is not a variable name (letters, digits and '_', not "
                "starting with a digit)"
            )
        if name in NOT_FROM_EXTRA_VARS or (
            name.startswith("ansible_") and name not in FROM_EXTRA_VARS
        ):
            raise UsageError(
                f"-e: {name} cannot be set with -e (of Ansible's own variables, -e sets only where "
                "and as whom the connection goes, become, the remote Python and timeouts): set it "
                "in the inventory"
            )
        odd = _not_plain(extravars[name])
        if odd is not None:
            raise UsageError(
                f"-e: {name}: {quoted(odd)} ({type(odd).__name__}) cannot be passed to Ansible: "
                "values are strings, numbers, booleans, null, lists and mappings with string "
                "keys (quote it for a string)"
            )
    return dict(extravars)


def _not_plain(value: Any) -> Any:
    """The first part of ``value`` that JSON cannot carry to ansible-runner (a YAML date,
    binary, set, a mapping key that is not a string), or None."""
    if value is None or isinstance(value, (str, int, float)):
        return None
    if isinstance(value, list):
        return next((odd for odd in map(_not_plain, value) if odd is not None), None)
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return key
            odd = _not_plain(item)
            if odd is not None:
                return odd
        return None
    return value


def parse_slots(host: str, value: Any) -> int:
    """``mpi_slots`` as an integer 1..:data:`MAX_SLOTS`, or an InventoryError naming host and
    variable."""
    number = inputs.number(value)
    if number is None or not 1 <= number <= MAX_SLOTS:
        raise InventoryError(
            f"{shown(host)}: mpi_slots must be a positive integer up to {MAX_SLOTS}, "
            f"got {quoted(value)}"
        )
    return number


class _Contract:
    """The checks of one host's variables: each returns the value as the node will use it, or
    raises an InventoryError naming the inventory, the host, the variable (``(-e)`` when the
    value came from ``-e``) and the value."""

    def __init__(
        self,
        path: Path,
        name: str,
        variables: Mapping[str, Any],
        extra: Mapping[str, Any],
        loader: Any,
        base: Mapping[str, Any] | None = None,
    ) -> None:
        self.path, self.name, self.variables, self.extra, self.loader = (
            path,
            name,
            variables,
            extra,
            loader,
        )
        self.base = variables if base is None else base  # the same without the -e variables
        self.where = f"{shown(path)}: host {quoted(name)}"

    def get(self, var: str) -> Any:
        """The templated value of ``var``, None when unset (Ansible skips a None value). A value
        given with ``-e`` is taken as written: never templated here."""
        if var in self.extra:
            return self.extra[var]
        return _template(self.loader, self.variables, self.variables.get(var))

    def unmoved(self, var: str, value: Any) -> None:
        """``var`` reaches ssh's command line: an inventory template must not take a part of it
        from ``-e`` (``-o ProxyJump={{ jump }}`` with ``-e jump='x -oProxyCommand=...'``)."""
        if var in self.extra or var not in self.base:
            return
        if _template(self.loader, self.base, self.base.get(var)) != value:
            raise self.fail(
                var,
                value,
                "-e changes it through the inventory's template: ssh's options and programs "
                "come from the inventory alone",
            )

    def last(self, *names: str) -> tuple[str, Any]:
        """(variable, value) of the last of ``names`` that is set: the one Ansible's ssh
        connection reads (``ansible_host`` then ``ansible_ssh_host``)."""
        found: tuple[str, Any] = (names[0], None)
        for var in names:
            if self.variables.get(var) is not None:
                found = (var, self.get(var))
        return found

    def fail(self, var: str, value: Any, why: str) -> InventoryError:
        label = f"{var} (-e)" if var in self.extra else var
        return InventoryError(f"{self.where}: {label} {quoted(value)}: {why}")

    def name_and_host(self) -> str:
        if host_problem(self.name, underscore=True):
            raise InventoryError(f"{self.where}: {NOT_A_HOST}")
        var, host = self.last("ansible_host", "ansible_ssh_host")
        if host is None:
            return self.name
        if host_problem(host, underscore=True):
            raise self.fail(var, host, NOT_A_HOST)
        return str(host)

    def address(self) -> str:
        raw = self.variables.get("mpi_address")
        if raw is None or raw == "":
            if host_problem(self.name):
                raise InventoryError(
                    f"{self.where}: the name is its default mpi_address, which other nodes "
                    "resolve, and '_' is not valid in a DNS name: set mpi_address (a DNS name or "
                    "an IP address)"
                )
            return self.name
        address = self.get("mpi_address")
        if host_problem(address):
            raise self.fail("mpi_address", address, NOT_AN_ADDRESS)
        return str(address)

    def port(self) -> int:
        var, value = self.last("ansible_port", "ansible_ssh_port")
        if value is None:
            return 22
        number = inputs.number(value)
        if number is None or not 1 <= number <= 65535:
            raise self.fail(var, value, "not a port (an integer 1..65535)")
        return number

    def login(self, *names: str) -> str | None:
        var, value = self.last(*names)
        if value is not None and not inputs.fullmatch(inputs.LOGIN_NAME, value):
            raise self.fail(
                var,
                value,
                f"not a login name ({inputs.LOGIN_RULE})",
            )
        return value

    def slots(self) -> int | None:
        value = self.get("mpi_slots")
        if value is None:
            return None
        number = inputs.number(value)
        if number is None or not 1 <= number <= MAX_SLOTS:
            raise self.fail("mpi_slots", value, f"not a slot count (an integer 1..{MAX_SLOTS})")
        return number

    def checked(self, var: str, rule: Any) -> Any:
        """``var`` through one of :mod:`mpictl.inputs`' rules (``rule(what, value)``)."""
        value = self.get(var)
        if value is None:
            return None
        label = f"{var} (-e)" if var in self.extra else var
        try:
            return rule(f"{self.where}: {label}", value)
        except UsageError as exc:
            raise InventoryError(str(exc)) from None

    def words(self) -> None:
        """The key file, ssh's programs, the remote shell and Python: each one word of a command
        line (a path may hold spaces: Ansible quotes it), never an option."""
        for var in (*WORD_VARS, "ansible_python_interpreter"):
            value = self.get(var)
            if value is None:
                continue
            if not isinstance(value, str) or not value or _CONTROL.search(value):
                raise self.fail(var, value, "must be a path (a string without control characters)")
            if value.startswith("-"):
                raise self.fail(var, value, "must not start with '-' (ssh would read an option)")
            self.unmoved(var, value)

    def ssh_args(self) -> str:
        for var in ARGS_VARS:
            value = self.get(var)
            if value is None:
                continue
            if not isinstance(value, str):
                raise self.fail(var, value, "must be a string of ssh options")
            try:
                shlex.split(value)
            except ValueError as exc:
                raise self.fail(var, value, f"does not parse as a command line ({exc})") from None
            self.unmoved(var, value)
        common = self.get("ansible_ssh_common_args")
        return common if isinstance(common, str) else ""


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
            raise InventoryError(
                f"{shown(source)}: cannot parse inventory: {shown(reason)}"
            ) from None
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
                f"{shown(source)}: cannot read the variables of host {quoted(host.name)}: "
                f"{shown(reason)}"
            ) from None


def _template(loader: Any, variables: Mapping[str, Any], value: Any) -> Any:
    if not (isinstance(value, str) and "{{" in value):
        return value
    from ansible.template import Templar

    try:
        return Templar(loader=loader, variables=dict(variables)).template(value)
    except Exception:  # noqa: BLE001 - an untemplatable value is reported as it is
        return value


def _never_templated(extra: Mapping[str, Any]) -> dict[str, Any]:
    """The ``-e`` values as data a template may read but never render (ansible-core before 2.19
    would render a lookup in them while the inventory is checked)."""
    try:
        from ansible.utils.unsafe_proxy import wrap_var
    except ImportError:  # pragma: no cover - removed in a later ansible-core
        return dict(extra)
    return {name: wrap_var(value) for name, value in extra.items()}


def _transport(what: str, value: Any) -> str:
    """``mpi_transport`` by its declared rule (auto, ucx or tcp, any case): role_vars, the one
    checker of cluster variables, as settings reads it on the head."""
    spec = role_vars.load_specs(paths.roles_dir())["mpi_transport"]
    why, done = role_vars.converted(spec, value)
    if why:
        raise UsageError(f"{what}: {quoted(value)} {why}")
    return str(done)


def _interface(what: str, value: Any) -> str:
    """``mpi_network_interface``: unset when empty, else an interface name."""
    return "" if value == "" else inputs.interface_name(what, value)


def load_inventory(
    source: Path | str | None = None,
    facts_dir: Path | None = None,
    *,
    extravars: Mapping[str, Any] | None = None,
) -> Cluster:
    """Load ``source`` (default: the sandbox inventory) into a Cluster, checking the contract on
    every node's variables with ``extravars`` (``-e``) merged over them."""
    extra = check_extravars(extravars or {})
    path = Path(source) if source is not None else paths.sandbox_inventory()
    if not path.exists():
        raise InventoryError(f"{shown(path)}: inventory not found")
    loader, manager = load_manager(path)
    variables = _InventoryVars(loader, manager)
    cached = _FactCache(facts_dir or paths.facts_dir())
    groups = manager.get_groups_dict()
    names = groups.get(NODES_GROUP) or []
    if not names:
        raise InventoryError(f"{shown(path)}: group '{NODES_GROUP}' is missing or empty")

    nodes: list[Node] = []
    seen: dict[str, str] = {}
    ends: dict[str, str] = {}
    for name in names:
        host = manager.get_host(name)
        own = variables.get(host)
        hostvars = {**own, **extra}
        facts = cached.get(name)
        # What an inventory template may use besides variables and cached facts (no hostvars).
        context = {
            "groups": groups,
            "group_names": sorted(g.name for g in host.get_groups() if g.name != "all"),
            "inventory_hostname": name,
            "inventory_hostname_short": name.split(".")[0],
        }
        base = {**facts, **own, **context}
        merged = {**facts, **own, **_never_templated(extra), **context}
        check = _Contract(path, name, merged, extra, loader, base=base)
        ssh_host = check.name_and_host()
        address = check.address()
        for label in {name.lower(), address.lower()}:
            if label in seen and seen[label] != name:
                raise InventoryError(
                    f"{shown(path)}: duplicate host: {quoted(name)} and {quoted(seen[label])} "
                    f"both resolve to {quoted(label)}"
                )
            seen[label] = name
        port = check.port()
        reached = endpoint(ssh_host, port)
        if reached in ends:
            raise InventoryError(
                f"{shown(path)}: hosts {quoted(ends[reached])} and {quoted(name)} are both "
                f"reached at {shown(reached)} (ansible_host:ansible_port): one machine, one host"
            )
        ends[reached] = name
        user = check.login("ansible_user", "ansible_ssh_user")
        check.login("ansible_become_user")
        raw_slots = check.slots()
        slots, source_of_slots = resolve_slots(name, {**merged, "mpi_slots": raw_slots})
        interface = check.checked("mpi_network_interface", _interface)
        check.checked("mpi_user", inputs.user_name)
        if merged.get("mpi_transport") not in (None, ""):
            check.checked("mpi_transport", _transport)
        check.words()
        common_args = check.ssh_args()
        key = check.last("ansible_private_key_file", "ansible_ssh_private_key_file")[1]
        nodes.append(
            Node(
                name=name,
                address=address,
                slots=slots,
                slots_source=source_of_slots,
                gpus=_positive_int(facts.get("mpi_gpu_count")) or 0 if facts else None,
                vcpus=_positive_int(facts.get("ansible_processor_vcpus")),
                ssh_host=ssh_host,
                ssh_port=port,
                ssh_user=user,
                ssh_key=str(key) if key else None,
                ssh_common_args=common_args,
                interface=interface or None,
                local=str(merged.get("ansible_connection", "")).strip() == "local",
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
                f"{shown(path)}: head {quoted(head_name)} (group {HEAD_GROUP}) is not in group "
                f"{NODES_GROUP}"
            )
        head = by_name[head_name]
    else:
        head = nodes[0]
    return Cluster(source=path, nodes=tuple(nodes), head=head)
