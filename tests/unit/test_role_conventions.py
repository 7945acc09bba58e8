"""Every role follows the project's conventions; these checks fail on the first role that drifts.

- layout: defaults/, tasks/main.yml, meta/argument_specs.yml, README.md, molecule/default/
- meta/argument_specs.yml (entry point ``main``) lists exactly the keys of defaults/main.yml, and
  the role's preflight validates it (the component playbooks skip the check at the entry)
- role variables carry the role's prefix; every defaults key is documented in the README
- modules are called by FQCN (or are the role's own, in library/); every command/shell task
  says ``changed_when``; registered results are named ``__<role prefix>*``
- a task that copies or reads the cluster private key is ``no_log``
- templates rendered onto nodes start with ``{{ ansible_managed | comment }}``
- values several roles share live only in roles/cluster_defaults (literal strings, which the
  mpictl CLI reads as its fallbacks); a role that mentions one declares that role as a dependency
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.loader import load

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir())
# The one home of the values several roles share (no tasks/: the per-role tests above skip it).
CLUSTER_DEFAULTS = ROOT / "roles" / "cluster_defaults"
# Every role but cluster_defaults (roles are the folders with a meta/main.yml).
OTHER_ROLES = sorted(
    p
    for p in (ROOT / "roles").iterdir()
    if (p / "meta" / "main.yml").is_file() and p != CLUSTER_DEFAULTS
)

# Variable prefixes per role (default: "<role>_"). The MPI user's name (mpi_user) and the
# hostfile's path (mpi_hostfile_path) are cluster_defaults', not ssh_mesh's or hostfile's.
PREFIXES: dict[str, tuple[str, ...]] = {
    "ssh_mesh": ("mpi_ssh_", "mpi_user_"),
    "mpi_environment": ("mpi_env_",),
    "hostfile": ("mpi_hostfile_",),
    "cluster_defaults": ("mpi_",),
}

# Keys of a task that are not its module.
TASK_KEYWORDS = {
    "name",
    "when",
    "loop",
    "loop_control",
    "with_items",
    "with_dict",
    "with_fileglob",
    "register",
    "changed_when",
    "failed_when",
    "become",
    "become_user",
    "become_method",
    "delegate_to",
    "delegate_facts",
    "run_once",
    "tags",
    "vars",
    "notify",
    "no_log",
    "ignore_errors",
    "ignore_unreachable",
    "until",
    "retries",
    "delay",
    "args",
    "environment",
    "check_mode",
    "diff",
    "throttle",
    "any_errors_fatal",
    "async",
    "poll",
    "listen",
    "timeout",
    "block",
    "rescue",
    "always",
    "local_action",
    "connection",
    "module_defaults",
    "debugger",
}
COMMAND_MODULES = {
    "ansible.builtin.command",
    "ansible.builtin.shell",
    "ansible.builtin.raw",
    "ansible.builtin.script",
}


def role_ids(roles: list[Path]) -> list[str]:
    return [r.name for r in roles]


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text()) if path.exists() else None


def iter_tasks(items: Any) -> Iterator[dict[str, Any]]:
    for item in items or []:
        if not isinstance(item, dict):
            continue
        yield item
        for section in ("block", "rescue", "always"):
            if section in item:
                yield from iter_tasks(item[section])


def task_files(role: Path) -> list[Path]:
    return sorted((role / "tasks").rglob("*.yml")) + sorted((role / "handlers").rglob("*.yml"))


def module_of(task: dict[str, Any]) -> str | None:
    keys = [k for k in task if k not in TASK_KEYWORDS]
    return keys[0] if keys else None


@pytest.mark.parametrize("role", ROLES, ids=role_ids(ROLES))
def test_layout(role: Path) -> None:
    for rel in (
        "defaults/main.yml",
        "tasks/main.yml",
        "meta/argument_specs.yml",
        "meta/main.yml",
        "README.md",
        "molecule/default/molecule.yml",
    ):
        assert (role / rel).is_file(), f"{role.name}: {rel} is missing"


@pytest.mark.parametrize("role", ROLES, ids=role_ids(ROLES))
def test_argument_specs_mirror_defaults(role: Path) -> None:
    defaults = load_yaml(role / "defaults" / "main.yml") or {}
    specs = load_yaml(role / "meta" / "argument_specs.yml") or {}
    options = specs["argument_specs"]["main"].get("options") or {}
    assert sorted(options) == sorted(defaults), f"{role.name}: argument_specs and defaults differ"


@pytest.mark.parametrize("role", ROLES, ids=role_ids(ROLES))
def test_variables_carry_the_role_prefix_and_are_documented(role: Path) -> None:
    defaults = load_yaml(role / "defaults" / "main.yml") or {}
    prefixes = PREFIXES.get(role.name, (f"{role.name}_",))
    readme = (role / "README.md").read_text()
    for key in defaults:
        assert key.startswith(prefixes), f"{role.name}: variable {key} lacks prefix {prefixes}"
        assert key in readme, f"{role.name}: variable {key} is not documented in README.md"
    internal = load_yaml(role / "vars" / "main.yml") or {}
    for key in internal:
        assert key.startswith("_"), f"{role.name}: vars/main.yml key {key} is not internal (_*)"


@pytest.mark.parametrize("role", ROLES, ids=role_ids(ROLES))
def test_tasks_use_fqcn_and_command_tasks_declare_changed_when(role: Path) -> None:
    for path in task_files(role):
        for task in iter_tasks(load_yaml(path)):
            if any(k in task for k in ("block", "include_tasks", "import_tasks")):
                continue
            module = module_of(task)
            where = f"{path.relative_to(ROOT)}: task {task.get('name')!r}"
            assert module is not None, f"{where}: no module"
            local = (role / "library" / f"{module}.py").is_file()
            assert "." in module or local, f"{where}: module {module} is not an FQCN"
            assert task.get("name"), f"{where}: task has no name"
            if module in COMMAND_MODULES:
                assert "changed_when" in task, f"{where}: {module} without changed_when"
            register = task.get("register")
            if register:
                prefixes = ("__" + role.name + "_",) + tuple(
                    "__" + p for p in PREFIXES.get(role.name, ())
                )
                assert str(register).startswith(prefixes), (
                    f"{where}: register {register} is not one of {prefixes}*"
                )


# Variables whose value is, or points at, a secret whose content a task might read or copy.
SECRETS = ("mpi_ssh_key_path", "slurm_munge_key_path")
CONTENT_MODULES = {"ansible.builtin.copy", "ansible.builtin.slurp", "ansible.builtin.template"}


@pytest.mark.parametrize("role", ROLES, ids=role_ids(ROLES))
def test_tasks_that_carry_a_secret_are_no_log(role: Path) -> None:
    """A task that copies or reads a private key must not log it (copy's diff, slurp's content)."""

    # the secret's name, not followed by ".pub" (as in "{{ key }}.pub" or key ~ '.pub')
    private = re.compile(r"\b(" + "|".join(SECRETS) + r")\b(?!\s*(\}\})?\s*~?\s*['\"]?\.pub)")
    for path in task_files(role):
        for task in iter_tasks(load_yaml(path)):
            module = module_of(task)
            args = task.get(module) if isinstance(task.get(module), dict) else {}
            # what a content module copies or reads, and any file lookup in any argument
            text = " ".join(str(args.get(k, "")) for k in ("src", "content"))
            text = text if module in CONTENT_MODULES else ""
            text += " ".join(str(v) for v in args.values() if "lookup(" in str(v))
            if private.search(text):
                where = f"{path.relative_to(ROOT)}: task {task.get('name')!r}"
                assert task.get("no_log") is True, f"{where}: handles a secret without no_log"


@pytest.mark.parametrize("role", ROLES, ids=role_ids(ROLES))
def test_templates_start_with_ansible_managed(role: Path) -> None:
    for template in sorted((role / "templates").rglob("*.j2")):
        first = template.read_text().lstrip().splitlines()[0]
        assert "ansible_managed" in first and "comment" in first, (
            f"{template.relative_to(ROOT)}: first line must be {{{{ ansible_managed | comment }}}}"
        )


# --- values several roles share: roles/cluster_defaults ------------------------------------------

# The names the mpictl CLI reads (head's inventory variables, else cluster_defaults' file).
SHARED_NAMES = {"mpi_user", "mpi_cluster_venv", "mpi_hostfile_path", "mpi_tools_dir", "mpi_bin_dir",
                "mpi_health_program", "mpi_monitoring_config"}  # fmt: skip


def shared_defaults() -> dict[str, Any]:
    return load_yaml(CLUSTER_DEFAULTS / "defaults" / "main.yml") or {}


def yaml_files(role: Path, *folders: str) -> list[Path]:
    return [p for folder in folders for p in sorted((role / folder).rglob("*.yml"))]


def dependency_names(role: Path) -> list[str]:
    meta = load_yaml(role / "meta" / "main.yml") or {}
    names = []
    for dep in meta.get("dependencies") or []:
        names.append(str(dep.get("role") or dep.get("name")) if isinstance(dep, dict) else str(dep))
    return names


def test_cluster_defaults_layout() -> None:
    """Defaults only (no tasks), every variable documented, the names the CLI reads."""
    for rel in ("defaults/main.yml", "meta/main.yml", "README.md"):
        assert (CLUSTER_DEFAULTS / rel).is_file(), f"cluster_defaults: {rel} is missing"
    assert not (CLUSTER_DEFAULTS / "tasks").exists(), "cluster_defaults: defaults only, no tasks/"
    assert dependency_names(CLUSTER_DEFAULTS) == [], "cluster_defaults: depends on no role"
    defaults = shared_defaults()
    assert set(defaults) == SHARED_NAMES, f"cluster_defaults: {sorted(defaults)} != {SHARED_NAMES}"
    readme = (CLUSTER_DEFAULTS / "README.md").read_text()
    for key in defaults:
        assert key.startswith(PREFIXES["cluster_defaults"]), f"cluster_defaults: {key} prefix"
        assert f"`{key}`" in readme, f"cluster_defaults: {key} is not documented in README.md"


def test_cluster_defaults_are_literal_strings() -> None:
    """The CLI reads defaults/main.yml as plain YAML, without templating: no Jinja, no non-str."""
    for key, value in shared_defaults().items():
        assert isinstance(value, str), f"cluster_defaults: {key} is not a string: {value!r}"
        assert not re.search(r"\{\{|\{%|\{#", value), (
            f"cluster_defaults: {key} has Jinja ({value!r}); the CLI does not template it"
        )


@pytest.mark.parametrize("role", OTHER_ROLES, ids=role_ids(OTHER_ROLES))
def test_roles_mentioning_a_shared_value_depend_on_cluster_defaults(role: Path) -> None:
    """A role that reads a shared value loads it through meta/main.yml's dependencies."""
    names = re.compile(r"\b(" + "|".join(sorted(shared_defaults())) + r")\b")
    for path in yaml_files(role, "tasks", "handlers", "vars", "defaults") + sorted(
        (role / "templates").rglob("*")
    ):
        if not path.is_file():
            continue
        found = names.search(path.read_text())
        if found:
            assert "cluster_defaults" in dependency_names(role), (
                f"{path.relative_to(ROOT)} uses {found.group(1)} but {role.name}/meta/main.yml"
                " does not list cluster_defaults in its dependencies"
            )


@pytest.mark.parametrize("role", OTHER_ROLES, ids=role_ids(OTHER_ROLES))
def test_no_role_redefines_a_shared_value(role: Path) -> None:
    """cluster_defaults is the one home: no role defaults (or fixes) a copy of its values."""
    shared = set(shared_defaults())
    for path in yaml_files(role, "defaults", "vars"):
        data = load_yaml(path) or {}
        copies = sorted(shared & set(data)) if isinstance(data, dict) else []
        assert not copies, (
            f"{path.relative_to(ROOT)} defines {copies}: they belong to roles/cluster_defaults"
        )


# --- tags: every component play carries its own tag (kubespray style) -----------------------------

PLAYBOOKS = ROOT / "playbooks"
# The plays that run whatever --tags selects: the validation and the preflight (checks first).
ALWAYS_PLAYBOOKS = ("validate.yml", "preflight.yml", "record.yml", "failures.yml")
COMPONENT_PLAYBOOKS = sorted(
    p for p in PLAYBOOKS.glob("*.yml") if p.name not in (*ALWAYS_PLAYBOOKS, "site.yml")
)
IMPORT_KEYS = ("ansible.builtin.import_playbook", "import_playbook")


def own_plays(playbook: Path) -> list[dict[str, Any]]:
    """The plays written in ``playbook`` itself (its imports left out)."""
    entries = load_yaml(playbook) or []
    return [e for e in entries if not any(k in e for k in IMPORT_KEYS)]


@pytest.mark.parametrize("playbook", COMPONENT_PLAYBOOKS, ids=lambda p: p.name)
def test_every_component_play_carries_exactly_its_tag(playbook: Path) -> None:
    """playbooks/openmpi.yml's play: ``tags: [openmpi]``, so site.yml --tags openmpi and the
    component playbook alone both honour it."""
    plays = own_plays(playbook)
    assert plays, f"{playbook.name}: no play of its own"
    for play in plays:
        assert play.get("tags") == [playbook.stem], (
            f"{playbook.name}: play {play.get('name')!r} has tags {play.get('tags')!r},"
            f" want [{playbook.stem}]"
        )


@pytest.mark.parametrize("name", ALWAYS_PLAYBOOKS)
def test_validation_and_preflight_plays_are_always(name: str) -> None:
    for play in own_plays(PLAYBOOKS / name):
        assert play.get("tags") == ["always"], f"{name}: play {play.get('name')!r} not [always]"


def test_site_yml_imports_every_component_tag_and_no_import_adds_tags() -> None:
    from mpictl.provision import play_tags

    assert sorted(play_tags(PLAYBOOKS / "site.yml")) == sorted(p.stem for p in COMPONENT_PLAYBOOKS)
    assert own_plays(PLAYBOOKS / "site.yml") == [], "site.yml only imports"
    for entry in load_yaml(PLAYBOOKS / "site.yml"):
        assert "tags" not in entry, "site.yml: the tags live on the plays, not on the imports"


@pytest.mark.parametrize("role", ROLES, ids=role_ids(ROLES))
def test_role_tasks_carry_no_tags(role: Path) -> None:
    """The plays are the one source of tags (mpictl provision --tags checks against them)."""
    for path in task_files(role):
        for task in iter_tasks(load_yaml(path)):
            args = task.get(module_of(task) or "")
            apply = args.get("apply", {}) if isinstance(args, dict) else {}
            assert "tags" not in task and "tags" not in apply, (
                f"{path.relative_to(ROOT)}: task {task.get('name')!r} has tags"
            )


# The component playbooks import their role with rolespec_validate: false (one fork per node and
# play less); the role's preflight is then the one place its argument spec is checked, in
# site.yml's preflight play and when the role's own play runs it.
# (the short path's table of each component's role: filter_plugins/mpictl_state.py)
ROLE_OF_PLAYBOOK = load("mpictl_state", ROOT / "filter_plugins" / "mpictl_state.py").COMPONENT_ROLES
VALIDATE = "ansible.builtin.validate_argument_spec"


@pytest.mark.parametrize("playbook", sorted(ROLE_OF_PLAYBOOK))
def test_a_playbook_that_skips_the_entry_check_has_a_role_preflight_that_validates(
    playbook: str,
) -> None:
    assert sorted(ROLE_OF_PLAYBOOK) == sorted(p.stem for p in COMPONENT_PLAYBOOKS)
    role = ROLE_OF_PLAYBOOK[playbook]
    plays = load_yaml(ROOT / "playbooks" / f"{playbook}.yml")
    imports = [
        task["ansible.builtin.import_role"]
        for play in plays
        for task in iter_tasks(play.get("tasks") or [])
        if "ansible.builtin.import_role" in task
    ]
    assert [i["name"] for i in imports] == [role], f"{playbook}.yml imports {imports}"
    assert all(i.get("rolespec_validate") is False for i in imports)
    assert all("roles" not in play for play in plays), f"{playbook}.yml: roles: validates again"
    preflight = load_yaml(ROOT / "roles" / role / "tasks" / "preflight.yml")
    validations = [t for t in iter_tasks(preflight) if module_of(t) == VALIDATE]
    assert validations, f"{role}: preflight.yml does not validate meta/argument_specs.yml"
    spec = validations[0][VALIDATE]["argument_spec"]
    assert "meta/argument_specs.yml" in spec and ".argument_specs.main.options" in spec
    main = load_yaml(ROOT / "roles" / role / "tasks" / "main.yml")
    includes = [t for t in main if "preflight.yml" in str(t.get("ansible.builtin.include_tasks"))]
    assert includes, f"{role}: tasks/main.yml does not run preflight.yml"
