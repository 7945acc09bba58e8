"""The one checker of role and cluster variables: every host's value against its declared spec.

Each role declares its variables in ``roles/<role>/meta/argument_specs.yml`` (type, choices, list
elements); the cluster-wide ones (``mpi_*`` that several roles and the CLI read, and the inventory
contract's ``mpi_slots``, ``mpi_transport``, ...) in ``roles/cluster_defaults/meta/
argument_specs.yml``. :func:`problems` checks each host's variables against them with Ansible's
own argument-spec validator (the types convert exactly as the roles' preflight converts them) and
then against the value rules below, which argument specs cannot say (a range, an absolute path, a
version, a URL, a checksum). It is called twice on every path, before any node is contacted:

- by mpictl (``provision``, ``status``) before ansible-runner or ssh starts, on the variables the
  inventory and ``-e`` set (:func:`check_cluster`);
- by the validation play (``playbooks/validate.yml``, through the ``mpictl_var_problems`` filter)
  when the playbooks run under plain ``ansible-playbook``, on ``hostvars`` (templated).

Where the two split the work: a value holding a Jinja template is the play's to check (mpictl
does not template an inventory); a value whose template needs a node's facts (the
``*_build_jobs`` defaults: ``ansible_processor_vcpus``) is decided only after facts are gathered
and checked by that role's preflight, as before. Role defaults are not checked here (the roles'
own values; a unit test holds every default to its rule). The inventory contract's checks of the
connection (names, addresses, ports, users: :mod:`mpictl.inventory`) stay where they are: they
decide how a node is reached, before any role variable matters.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mpictl.errors import InventoryError
from mpictl.inputs import INTERFACE, USER_NAME, is_node_path, quoted

#: Where a variable is declared when no role declares it (the cluster-wide ones).
CLUSTER_ROLE = "cluster_defaults"

_VERSION = re.compile(r"[0-9]+(\.[0-9A-Za-z]+)*([-+~][0-9A-Za-z.+~-]+)?")
_URL = re.compile(r"(https?|file)://[^\s'\"]+")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_DURATION = re.compile(r"([0-9]+(ms|s|m|h|d|w|y))+")  # Prometheus durations: 15s, 1h30m
_SIZE = re.compile(r"[0-9]+(B|KB|MB|GB|TB|PB|EB)")  # Prometheus sizes: 512MB
_MODE = re.compile(r"0?[0-7]{3,4}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

#: Integer ranges by name (inclusive); ints without one must be >= 0.
RANGES: dict[str, tuple[float, float]] = {
    "mpi_slots": (1, 4096),
    "mpi_link_gbps": (1e-3, 10_000),
    "health_gpus": (-1, 1024),
    "health_max_load_per_cpu": (1e-3, 1e6),
    "mpi_user_uid": (1, 4_294_967_294),
    "mpi_user_gid": (1, 4_294_967_294),
    "slurm_user_uid": (1, 4_294_967_294),
}
#: Ranges by name suffix.
SUFFIX_RANGES: dict[str, tuple[float, float]] = {
    "_port": (1, 65535),
    "_build_jobs": (1, 4096),
    "_timeout": (1, 604_800),
    "_interval": (0, 604_800),  # slurm_health_check_interval: 0 = off
}
#: Paths on the controller (``""`` = not given), not on the nodes.
CONTROLLER_PATHS = {"build_once_cache_dir", "build_once_build_tasks", "mpi_ssh_key_path",
                    "slurm_munge_key_path", "horovod_torch_wheelhouse"}  # fmt: skip
CONTROLLER_SUFFIXES = ("_source_local", "_cython_local")
#: Paths on the nodes, by name suffix (``type: path`` too); ``""`` only where the default is "".
NODE_PATH_SUFFIXES = ("_prefix", "_dir", "_home", "_path", "_file", "_python", "_libdir",
                      "_venv", "_program", "_config", "_marker", "_shell")  # fmt: skip
NODE_PATH_RULE = (
    "an absolute path on the nodes of plain characters (letters, digits and _ . @ % + = : , ~ - /,"
    " without '..')"
)
TYPE_WORDS = {
    "int": "an integer",
    "float": "a number",
    "bool": "a boolean (true or false)",
    "list": "a list",
    "dict": "a mapping",
    "str": "a string",
    "path": "a path",
}
#: Values compared in any case (the CLI lowercases them: ``mpi_transport: TCP``).
CASE_FREE = {"mpi_transport"}
#: Lists that must not be empty.
NON_EMPTY = {"horovod_frameworks"}
_OPTIONS = re.compile(r"[-A-Za-z0-9_. ]*")
#: Rules by name for the string values no suffix covers.
NAMED: dict[str, tuple[str, Callable[[str], bool]]] = {
    "mpi_user": ("a login name (lowercase letters, digits, '_', '-')", USER_NAME.fullmatch),
    "mpi_user_group": ("a group name (lowercase letters, digits, '_', '-')", USER_NAME.fullmatch),
    "mpi_network_interface": (
        "an interface name (up to 15 of A-Z a-z 0-9 _ . @ -)",
        INTERFACE.fullmatch,
    ),  # fmt: skip
    "mpi_hostfile_mode": ("a file mode in octal (0644)", _MODE.fullmatch),
    "monitoring_scrape_interval": ("a Prometheus duration (15s, 1m)", _DURATION.fullmatch),
    "monitoring_retention_time": ("a Prometheus duration (15d)", _DURATION.fullmatch),
    "mpi_shared_dir": (
        "'' or an absolute path on the nodes other than / (" + NODE_PATH_RULE + ")",
        lambda v: v == "" or (v.rstrip("/") != "" and _node_path(v)),
    ),  # fmt: skip
    # enroot's directories: enroot evaluates `$(id -u)` (the user's id) in them, nothing else.
    **{
        f"containers_{what}_path": (
            "an absolute path on the nodes of plain characters, $(id -u) allowed for the user's id",
            lambda v: _node_path(v.replace("$(id -u)", "0")),
        )
        for what in ("runtime", "cache", "data")
    },
    "containers_squash_options": (
        "mksquashfs options: words of letters, digits and - _ . (-comp lzo -noD)",
        _OPTIONS.fullmatch,
    ),  # fmt: skip
    "monitoring_retention_size": (
        "a Prometheus size (512MB, 10GB) or ''",
        lambda v: v == "" or bool(_SIZE.fullmatch(v)),
    ),  # fmt: skip
}


@dataclass(frozen=True)
class Spec:
    """One declared variable: its role, its argument spec (without the default), whether an
    empty string is its default (then "" means "not given")."""

    name: str
    role: str
    option: dict[str, Any]
    empty_ok: bool

    @property
    def where(self) -> str:
        return f"roles/{self.role}/meta/argument_specs.yml"


@functools.cache
def load_specs(roles_dir: Path) -> dict[str, Spec]:
    """Every declared variable of every role under ``roles_dir``."""
    out: dict[str, Spec] = {}
    for path in sorted(roles_dir.glob("*/meta/argument_specs.yml")):
        data = yaml.safe_load(path.read_text()) or {}
        options = ((data.get("argument_specs") or {}).get("main") or {}).get("options") or {}
        for name, option in options.items():
            if name in out:
                raise ValueError(
                    f"{name} is declared by roles {out[name].role} and {path.parts[-3]}"
                )
            kept = {k: v for k, v in option.items() if k in ("type", "choices", "elements")}
            out[name] = Spec(name, path.parts[-3], kept, option.get("default") == "")
    return out


def _number_rule(name: str) -> tuple[float, float]:
    if name in RANGES:
        return RANGES[name]
    for suffix, bounds in SUFFIX_RANGES.items():
        if name.endswith(suffix):
            return bounds
    return (0, float("inf"))


def _string_rule(spec: Spec) -> tuple[str, Callable[[str], bool]] | None:
    name = spec.name
    if name in NAMED:
        return NAMED[name]
    if name in CONTROLLER_PATHS or name.endswith(CONTROLLER_SUFFIXES):
        return ("an absolute path on the controller" + (" or ''" if spec.empty_ok else ""),
                lambda v: (spec.empty_ok and v == "") or _absolute(v))  # fmt: skip
    if spec.option.get("type") == "path" or name.endswith(NODE_PATH_SUFFIXES):
        return (NODE_PATH_RULE + (" or ''" if spec.empty_ok else ""),
                lambda v: (spec.empty_ok and v == "") or _node_path(v))  # fmt: skip
    if name.endswith("_version"):
        return ("a release number (1.22.0, 26.05.3)", _VERSION.fullmatch)
    if name.endswith("_url"):
        return ("an http(s):// or file:// URL", _URL.fullmatch)
    if name.endswith("_sha256"):
        return ("a sha256: 64 lowercase hex digits", _SHA256.fullmatch)
    if name == "monitoring_listen_address":
        return ("auto or an IP address", lambda v: v == "auto" or _ip(v))
    return None


def _absolute(value: str) -> bool:
    return value.startswith("/") and "/../" not in value + "/" and not _CONTROL.search(value)


def _node_path(value: str) -> bool:
    return is_node_path(value.rstrip("/") or "/")


def _ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def templated(value: Any) -> bool:
    """``value`` holds a Jinja template (anywhere inside)."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, Mapping):
        return any(templated(k) or templated(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(templated(v) for v in value)
    return False


def converted(spec: Spec, value: Any) -> tuple[str, Any]:
    """(the rule ``value`` breaks, "" when none; ``value`` as the roles see it: converted to
    the spec's type as Ansible converts it, e.g. the string "a,b" to a list)."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    if spec.name in CASE_FREE and isinstance(value, str):
        value = value.lower()
    result = ArgumentSpecValidator({spec.name: spec.option}).validate({spec.name: value})
    if result.error_messages:
        message = result.error_messages[0]
        if "unable to convert to" in message:  # Ansible's own words name its internals
            return f"must be {TYPE_WORDS.get(spec.option.get('type', 'str'), 'a value')}", value
        return message.replace(f"value of {spec.name} must", "must"), value
    done = result.validated_parameters[spec.name]
    return _rule(spec, done), done


def _rule(spec: Spec, done: Any) -> str:
    kind = spec.option.get("type", "str")
    if kind in ("int", "float") and not isinstance(done, bool):
        low, high = _number_rule(spec.name)
        if not low <= done <= high:
            top = "" if high == float("inf") else f" up to {high:g}"
            return f"must be a number from {low:g}{top}"
    if kind == "list" and spec.name in NON_EMPTY and not done:
        return "must not be empty"
    if kind == "list" and spec.option.get("elements") == "int":
        low, high = _number_rule(spec.name)
        if any(not low <= v <= high for v in done):
            return f"every element must be a number from {low:g}"
    if kind in ("str", "path") and isinstance(done, str):
        rule = _string_rule(spec)
        if rule is not None and not rule[1](done):
            return f"must be {rule[0]}"
    return ""


def _check(spec: Spec, value: Any) -> str:
    return converted(spec, value)[0]


def check(spec: Spec, value: Any, memo: dict[tuple[str, str], str] | None = None) -> str:
    """The rule ``value`` breaks for ``spec`` ("" when none). ``memo`` keeps the answers of
    one pass: hosts of one group share their values, and each is checked once."""
    try:
        key = (spec.name, json.dumps(value, sort_keys=True))
    except (TypeError, ValueError):
        return _check(spec, value)
    if memo is None:
        return _check(spec, value)
    if key not in memo:
        memo[key] = _check(spec, value)
    return memo[key]


def problems(
    hostvars: Mapping[str, Mapping[str, Any]],
    roles_dir: Path,
    *,
    skip_templates: bool = True,
) -> list[str]:
    """One line per variable that breaks its rule: ``host: name 'value': rule (spec file)``, over
    the declared variables each host sets. Values holding a template are skipped when
    ``skip_templates`` (the validation play sees them templated)."""
    specs = load_specs(roles_dir)
    memo: dict[tuple[str, str], str] = {}
    out: list[str] = []
    for host, variables in hostvars.items():
        for name in sorted(set(variables) & set(specs)):
            value = variables[name]
            if skip_templates and templated(value):
                continue
            why = check(specs[name], value, memo)
            if why:
                out.append(f"{host}: {name} {quoted(value)}: {why} ({specs[name].where})")
    return out


def check_cluster(hostvars: Mapping[str, Mapping[str, Any]], roles_dir: Path) -> None:
    """Raise an InventoryError naming the first variable that breaks its rule (and how many
    more there are)."""
    found = problems(hostvars, roles_dir)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise InventoryError(found[0] + more)
