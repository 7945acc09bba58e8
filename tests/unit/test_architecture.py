"""The module map of docs/ARCHITECTURE.md is the import contract, and it holds: every import
between mpictl modules (lazy and TYPE_CHECKING ones too) is one the table allows, the graph has
no cycle, the house has at most MAX_FLOOR floors, and no module passes ~400 lines without saying
why in its docstring.

A module's floor is 1 + the highest floor among the mpictl modules it imports (none: floor 1),
every import counted, lazy ones included, but those under ``if TYPE_CHECKING:`` (a type the
module reads, never a module it runs). 17 floors at 348f3bc (19 by the time the trust wave
ended), 13 since: ``ui`` takes its table rows from its callers, ``iperf`` is its own module
below ``bench`` and ``fabric``, ``submit`` no longer imports ``jobops`` (``ranks`` writes the
per-rank files), ``settings`` no longer imports ``transport``, ``executor`` reads the plan's
type only."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "mpictl"
DOC = ROOT / "docs" / "ARCHITECTURE.md"
MAX_FLOOR = 13
MAX_LINES = 420  # "~400": a module this long must give its reason in a docstring line "Size:"


def modules() -> dict[str, Path]:
    """Dotted name below ``mpictl`` ("" for the package itself) -> file. Node programs
    (``scripts/``) and data are not modules of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).with_suffix("").parts
        if rel[0] in ("scripts", "data"):
            continue
        out[".".join(rel[:-1] if rel[-1] == "__init__" else rel)] = path
    return out


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def imports(name: str, path: Path, known: set[str], *, typing: bool = True) -> set[str]:
    """The mpictl modules ``name`` imports (dotted names below ``mpictl``); without those under
    ``if TYPE_CHECKING:`` when ``typing`` is false."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    tree = ast.parse(path.read_text())
    if not typing:
        for node in ast.walk(tree):
            if _type_checking(node):
                node.body = []  # type: ignore[attr-defined]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bases = [a.name for a in node.names]
            names: list[str] = []
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                parts = parts[: len(parts) - node.level + 1]
                bases = [".".join(["mpictl", *parts, *([node.module] if node.module else [])])]
            else:
                bases = [node.module or ""]
            names = [a.name for a in node.names]
        else:
            continue
        for base in bases:
            if base != "mpictl" and not base.startswith("mpictl."):
                continue
            inner = base.removeprefix("mpictl").removeprefix(".")
            subs = [f"{inner}.{n}".lstrip(".") for n in names]
            hits = [s for s in subs if s in known]
            found |= set(hits) if hits else {inner}
    found.discard(name)
    return found


def graph(*, typing: bool = True) -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(name, path, set(mods), typing=typing) for name, path in mods.items()}


def floors(deps: dict[str, set[str]]) -> dict[str, int]:
    out: dict[str, int] = {}

    def floor(name: str) -> int:
        if name not in out:
            out[name] = 1 + max((floor(d) for d in deps[name] if d in deps), default=0)
        return out[name]

    for name in deps:
        floor(name)
    return out


def longest_chain(deps: dict[str, set[str]]) -> list[str]:
    level = floors(deps)
    name = max(level, key=lambda n: (level[n], n))
    chain = [name]
    while below := sorted(d for d in deps[name] if d in deps and level[d] == level[name] - 1):
        name = below[0]
        chain.append(name)
    return chain


def group(name: str) -> str:
    """The row of the module map a module belongs to (a package's modules share its row)."""
    return name.split(".")[0] if name else "mpictl"


def documented() -> dict[str, set[str] | None]:
    """module -> modules it may import (None: any), from the table of ARCHITECTURE.md."""
    rows: dict[str, set[str] | None] = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        allowed = set(re.findall(r"`([\w.]+)`", cells[2]))
        for name in re.findall(r"`([\w.]+)`", cells[0]):
            rows[name] = None if cells[2] == "any" else allowed
    return rows


def test_every_module_has_a_row_in_the_module_map() -> None:
    rows = documented()
    missing = sorted({group(m) for m in modules()} - set(rows) - {"mpictl", "__main__"})
    assert not missing, f"docs/ARCHITECTURE.md's module map lacks {missing}"


def test_imports_follow_the_module_map() -> None:
    rows = documented()
    wrong = []
    for name, deps in graph().items():
        allowed = rows.get(group(name))
        if allowed is None:
            continue
        for dep in deps:
            if group(dep) != group(name) and group(dep) not in allowed | {"mpictl"}:
                wrong.append(f"{name or 'mpictl'} imports {dep}")
    assert not wrong, "imports the module map does not allow: " + "; ".join(sorted(wrong))


def test_the_import_graph_has_no_cycle() -> None:
    deps = graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(deps.get(node, ())):
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt) :] + [nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(deps):
        if node not in state:
            visit(node)


def test_the_house_has_at_most_max_floor_floors() -> None:
    deps = graph(typing=False)
    chain = longest_chain(deps)
    assert len(chain) <= MAX_FLOOR, f"{len(chain)} floors: " + " -> ".join(
        c or "mpictl" for c in chain
    )


def test_floors_count_lazy_imports_and_leave_out_type_checking_ones(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from mpictl import c\n"
        "def f():\n    from mpictl import b\n"
    )
    (tmp_path / "b.py").write_text("from mpictl import c\n")
    (tmp_path / "c.py").write_text("import json\n")
    known = {"a", "b", "c"}
    deps = {n: imports(n, tmp_path / f"{n}.py", known, typing=False) for n in known}
    assert deps == {"a": {"b"}, "b": {"c"}, "c": set()}
    assert floors(deps) == {"a": 3, "b": 2, "c": 1}
    assert longest_chain(deps) == ["a", "b", "c"]


def test_no_module_is_long_without_a_reason() -> None:
    long = []
    for path in modules().values():
        lines = len(path.read_text().splitlines())
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if lines > MAX_LINES and not re.search(r"^Size:", doc, re.M):
            long.append(f"mpictl/{path.relative_to(PACKAGE)} ({lines} lines)")
    assert not long, "modules over ~400 lines without a 'Size:' reason: " + ", ".join(long)


def test_the_checks_see_a_cycle_and_a_forbidden_import(tmp_path: Path) -> None:
    """The parser finds lazy, relative and TYPE_CHECKING imports (else the checks prove nothing)."""
    src = tmp_path / "m.py"
    src.write_text(
        "from typing import TYPE_CHECKING\n"
        "from mpictl import jobs\n"
        "if TYPE_CHECKING:\n    from mpictl.planner import LaunchPlan\n"
        "def f():\n    import mpictl.remote\n    from .podman import run\n"
    )
    known = {"jobs", "planner", "remote", "sandbox.podman"}
    assert imports("sandbox.m", src, known) == {"jobs", "planner", "remote", "sandbox.podman"}


def code_files() -> list[Path]:
    """Every Python module and node program: mpictl/ (scripts/ included), the roles' files/ and
    library/, playbooks/files/ (a package's ``__init__`` is the package, not a file to name)."""
    found = [p for p in PACKAGE.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    found = [p for p in found if p.suffix in (".py", ".sh") or p.parent.name == "scripts"]
    for pattern in ("roles/*/files/*", "roles/*/library/*", "playbooks/files/*"):
        found += [p for p in ROOT.glob(pattern) if p.is_file()]
    return sorted(p for p in found if p.name != "__init__.py")


def test_every_module_and_node_program_is_unique_by_file_name() -> None:
    by_name: dict[str, list[str]] = {}
    for path in code_files():
        by_name.setdefault(path.name, []).append(path.relative_to(ROOT).as_posix())
    twice = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not twice, twice
    assert len(by_name) > 90  # the walk finds them (103 when this test was written)


def test_the_launchers_plans_are_peers_on_the_neutral_plan() -> None:
    deps = graph()
    plans = {"mpirun_plan", "slurm_plan"}
    for name in plans:
        assert "planner" in deps[name], name
        assert not deps[name] & (plans - {name}), f"{name} imports {deps[name] & plans}"
    assert not deps["planner"] & plans  # the neutral plan knows no launcher
