"""docs/ADDING_A_COMPONENT.md, the checklist of a new component, cannot drift: every repository
path it names exists (``<role>``/``<tag>`` placeholders aside), and every test it names
(``file.py::test_name``, or a ``test_*`` name beside its file in the same cell) is defined."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ADDING_A_COMPONENT.md"
PATH = re.compile(
    r"`((?:roles|playbooks|filter_plugins|docs|mpictl|scripts|tests|bench)/[^`<>]*?)(?:::(\w+))?`"
)
TEST_NAME = re.compile(r"`(test_\w+)`")


def cells() -> list[str]:
    return [
        c for line in DOC.read_text().splitlines() if line.startswith("|") for c in line.split("|")
    ]


def test_every_path_the_checklist_names_exists() -> None:
    named = [(m.group(1), m.group(2)) for cell in cells() for m in PATH.finditer(cell)]
    assert len(named) >= 20, named  # the table was read
    missing = [p for p, _ in named if not (ROOT / p.rstrip("/")).exists()]
    assert not missing, missing


def test_every_test_the_checklist_names_is_defined() -> None:
    found = 0
    for cell in cells():
        files = [ROOT / m.group(1) for m in PATH.finditer(cell) if m.group(1).endswith(".py")]
        wanted = [(ROOT / m.group(1), m.group(2)) for m in PATH.finditer(cell) if m.group(2)]
        wanted += [(f, name) for name in TEST_NAME.findall(cell) for f in files[:1]]
        for file, name in wanted:
            text = file.read_text()
            assert re.search(rf"^(def {name}\(|{name} = )", text, re.M), f"{file.name}: no {name}"
            found += 1
    assert found >= 8, found


def test_the_checks_fail_on_a_missing_path_and_test(tmp_path: Path) -> None:
    # (the patterns themselves: a name that is not there is found missing)
    cell = "`tests/unit/test_nope.py::test_nothing` and `roles/nope/`"
    paths = [m.group(1) for m in PATH.finditer(cell)]
    assert paths == ["tests/unit/test_nope.py", "roles/nope/"]
    assert not (ROOT / paths[0]).exists() and not (ROOT / paths[1]).exists()
