"""``mpictl provision``: validate the input, then run ``playbooks/site.yml`` (or one of
mpictl's other playbooks).

Input is refused before anything runs: a playbook that is not a file of ``playbooks/``, a tag
that no play of the chosen playbook carries, a ``--limit`` that is empty or holds whitespace, a bad
``-e`` value, an inventory that breaks the contract with the ``-e`` variables merged over it
(:func:`mpictl.inventory.load_inventory`). Only then are the nodes locked (one lock per
``ansible_host:port``, :mod:`mpictl.lock`) and ansible-runner started. The valid tags are read
from the playbook files themselves (the ``tags`` of each play, following ``import_playbook``), so
the plays are their one source.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

from mpictl import lock, paths, role_vars, runner
from mpictl.errors import MpictlError, UsageError
from mpictl.inputs import quoted, shown
from mpictl.inventory import Cluster, load_inventory

# The tag of the validation and preflight plays: Ansible runs them whatever --tags selects.
ALWAYS = "always"
IMPORT_KEYS = ("ansible.builtin.import_playbook", "import_playbook")


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
                first = shown(str(exc).splitlines()[0])
                raise UsageError(f"-e {quoted(pair)}: not valid YAML: {first}") from None
            if not isinstance(data, dict):
                raise UsageError(f"-e {quoted(pair)}: expected a mapping of variables")
            out.update(data)
            continue
        try:
            words = shlex.split(pair)
        except ValueError as exc:
            raise UsageError(f"-e {quoted(pair)}: {exc}") from None
        for word in words or [pair]:
            key, sep, value = word.partition("=")
            if not sep or not key.isidentifier():
                raise UsageError(
                    f"-e expects key=value with a variable name as key, got {quoted(pair)}"
                )
            out[key] = value
    return out


def check_limit(limit: str | None) -> str | None:
    """``--limit`` as Ansible takes it (hosts, groups, patterns joined by ``,`` or ``:``): not
    empty (an empty limit means every node), no whitespace or control character, no leading
    ``-``."""
    if limit is None:
        return None
    if not limit or any(not c.isprintable() or c.isspace() for c in limit):
        raise UsageError(
            f"--limit {quoted(limit)}: give host or group names (or patterns) joined by ',', "
            "without spaces; an empty --limit would mean every node"
        )
    if limit.startswith("-"):
        raise UsageError(f"--limit {quoted(limit)}: a pattern does not start with '-'")
    return limit


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
    """Check the playbook, the tags, the limit and the inventory contract with ``extravars``
    merged (nothing touched on bad input), lock the nodes, run the playbook."""
    path = resolve_playbook(playbook)
    if tags is not None or skip_tags is not None:
        valid = list(play_tags(path))
        tags = check_tags("--tags", tags, valid)
        skip_tags = check_tags("--skip-tags", skip_tags, valid)
    limit = check_limit(limit)
    cluster = load_inventory(inventory, extravars=extravars)
    # every role and cluster variable a host sets, before ansible-runner starts (the validation
    # play checks the same with the same code under plain ansible-playbook)
    role_vars.check_cluster({n.name: n.vars for n in cluster.nodes}, paths.roles_dir())
    with lock.hold(cluster.endpoints, "provision", source=inventory):
        result = runner.run_playbook(
            path,
            inventory,
            limit=limit,
            tags=tags,
            skip_tags=skip_tags,
            extravars=extravars,
            check=check,
            on_event=on_event,
        )
    return cluster, result


def playbook_names() -> list[str]:
    """The playbooks ``--playbook`` accepts: the names of the files in ``playbooks/``."""
    return sorted(p.name for p in paths.playbooks_dir().glob("*.yml") if p.is_file())


def resolve_playbook(name: str) -> Path:
    """``name`` as one of mpictl's playbooks; anything else (a path, a missing file) is refused."""
    names = playbook_names()
    if name not in names:
        raise UsageError(f"unknown playbook {quoted(name)} (valid: {', '.join(names)})")
    return paths.playbook(name)


def play_tags(playbook: Path) -> dict[str, list[str]]:
    """Tag -> names of the plays that carry it, in the order the plays run; ``always`` (the
    validation and preflight plays, which run with any tag) is left out."""
    out: dict[str, list[str]] = {}
    for name, tags in iter_plays(playbook):
        for tag in tags:
            if tag != ALWAYS and name not in out.setdefault(tag, []):
                out[tag].append(name)
    return out


def iter_plays(playbook: Path, inherited: tuple[str, ...] = ()) -> Iterator[tuple[str, list[str]]]:
    """(name, tags) of every play of ``playbook``, ``import_playbook`` followed; the tags of an
    import apply to the plays it imports, as in Ansible."""
    for entry in _load_plays(playbook):
        tags = [*inherited, *_tag_list(entry.get("tags"))]
        target = next((entry[k] for k in IMPORT_KEYS if k in entry), None)
        if target is None:
            yield str(entry.get("name", "")), tags
        else:
            yield from iter_plays(playbook.parent / str(target), tuple(tags))


def check_tags(option: str, value: str | None, valid: Collection[str]) -> str | None:
    """``value`` (``a,b``) split at commas, each tag one of ``valid``; the tags joined again for
    ansible-playbook, or None when the option was not given."""
    if value is None:
        return None
    tags = [t.strip() for t in value.split(",") if t.strip()]
    choices = ", ".join(sorted(valid)) or "none"
    if not tags:
        raise UsageError(f"{option} needs a tag (valid: {choices})")
    for tag in tags:
        if tag not in valid:
            raise UsageError(f"unknown tag {quoted(tag)} in {option} (valid: {choices})")
    return ",".join(dict.fromkeys(tags))


def _load_plays(playbook: Path) -> list[dict[str, Any]]:
    import yaml

    try:
        data = yaml.safe_load(playbook.read_text())
    except (OSError, yaml.YAMLError) as exc:
        first = (getattr(exc, "strerror", None) or str(exc)).splitlines()[0]
        raise MpictlError(f"cannot read the plays of {playbook}: {first}") from None
    return [e for e in data or [] if isinstance(e, dict)]


def _tag_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [t.strip() for t in value.split(",") if t.strip()]
    return [str(t) for t in value or []]


def _vars_file(path: Path) -> dict[str, Any]:
    import yaml

    where = f"-e @{shown(path)}"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{where}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{where}: not UTF-8 text") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"{where}: not valid YAML: {shown(str(exc).splitlines()[0])}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{where}: expected a mapping of variables")
    return data
