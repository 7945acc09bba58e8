"""The validation play's check of every role and cluster variable (``mpictl_var_problems``): the
same code mpictl runs before ansible-runner (:mod:`mpictl.role_vars`), on ``hostvars``."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

try:
    import mpictl  # noqa: F401
except ImportError:
    # Plain `ansible-playbook` from a checkout, with an Ansible that does not have the mpictl
    # package installed: the package lives beside this directory.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _plain(value: Any) -> Any:
    """``value`` as plain dicts and lists. Ansible 2.19 hands out lazy containers that render an
    item when it is read; the argument-spec validator deep-copies what it checks, and a lazy
    container's copy takes its templar and every variable it can reach along (seconds a run)."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _declared_values(variables: Any, names: set[str]) -> dict[str, Any]:
    """The declared variables a host sets, templated; one whose template needs what only a node
    has (its facts: undefined here) is left to the roles' preflight, after facts are gathered."""
    out: dict[str, Any] = {}
    for name in names:
        if name not in variables:
            continue
        try:
            out[name] = _plain(variables[name])
        except Exception:  # noqa: BLE001, S112 - an undefined fact: decided after gathering
            continue
    return out


def mpictl_var_problems(hostvars: Any, hosts: list[str], roles_dir: str) -> list[str]:
    """One line per variable of ``hosts`` that breaks its declared rule (none: [])."""
    from mpictl import role_vars

    names = set(role_vars.load_specs(Path(roles_dir)))
    values = {host: _declared_values(hostvars[host], names) for host in hosts}
    return role_vars.problems(values, Path(roles_dir), skip_templates=False)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"mpictl_var_problems": mpictl_var_problems}
