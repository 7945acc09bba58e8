"""``mpictl provision``: validate the inventory, then run ``playbooks/site.yml``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mpictl import lock, paths, runner
from mpictl.errors import UsageError
from mpictl.inventory import Cluster, load_inventory


def parse_extravars(pairs: list[str]) -> dict[str, Any]:
    """``-e`` values as ansible-playbook reads them: ``@file.yml``, an inline YAML/JSON mapping
    (``{"k": [1, 2]}``), or ``k=v [k2=v2 ...]`` whose values stay strings (``-e x=0.30`` is the
    string ``0.30``, not the number 0.3)."""
    import shlex

    import yaml

    out: dict[str, Any] = {}
    for pair in pairs:
        if pair.startswith("@"):
            out.update(_vars_file(Path(pair[1:])))
            continue
        if pair.lstrip().startswith("{"):
            try:
                data = yaml.safe_load(pair)
            except yaml.YAMLError as exc:
                raise UsageError(f"-e {pair}: not valid YAML: {str(exc).splitlines()[0]}") from None
            if not isinstance(data, dict):
                raise UsageError(f"-e {pair}: expected a mapping of variables")
            out.update(data)
            continue
        try:
            words = shlex.split(pair)
        except ValueError as exc:
            raise UsageError(f"-e {pair}: {exc}") from None
        for word in words or [pair]:
            key, sep, value = word.partition("=")
            if not sep or not key.isidentifier():
                raise UsageError(f"-e expects key=value with a variable name as key, got '{pair}'")
            out[key] = value
    return out


def provision(
    inventory: Path,
    *,
    playbook: str = "site.yml",
    limit: str | None = None,
    tags: str | None = None,
    skip_tags: str | None = None,
    extravars: Mapping[str, Any] | None = None,
    check: bool = False,
    on_event: runner.EventHandler | None = None,
) -> tuple[Cluster, runner.RunResult]:
    """Check the inventory contract (nothing touched on bad input), lock, run the playbook."""
    cluster = load_inventory(inventory)
    with lock.hold(inventory):
        result = runner.run_playbook(
            paths.playbook(playbook),
            inventory,
            limit=limit,
            tags=tags,
            skip_tags=skip_tags,
            extravars=extravars,
            check=check,
            on_event=on_event,
        )
    return cluster, result


def _vars_file(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise UsageError(f"-e @{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"-e @{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise UsageError(f"-e @{path}: expected a mapping of variables")
    return data
