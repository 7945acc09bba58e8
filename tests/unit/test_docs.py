"""The README and the pages under docs/ cannot drift from the CLI or from each other: the
README's command table has one short line for every command and links each to its section of
docs/COMMANDS.md, which has a section for every command and for nothing else; every relative
link of the README and of docs/ names a file that exists and, with ``#anchor``, a heading of it
(GitHub's anchors)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mpictl.cli import app

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
COMMANDS = ROOT / "docs" / "COMMANDS.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def cli_commands() -> set[str]:
    """Every command a user types (`version` is not in the table: it prints the version)."""
    names = {c.name or c.callback.__name__ for c in app.registered_commands}
    return (names - {"version"}) | {g.name for g in app.registered_groups if g.name}


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"(?ms)^```.*?^```", "", page.read_text())
    return {slug(m) for m in re.findall(r"(?m)^#{1,6} (.+)$", text)}


def command_rows() -> list[tuple[str, str, str]]:
    """(command, link, description) of each row of the README's command table."""
    text = README.read_text()
    start = text.index("| command | what it does |")
    table = text[start : text.index("\n\n", start)]
    rows = []
    for row in table.splitlines()[2:]:
        m = re.match(r"\| \[`mpictl ([a-z]+)[^`]*`\]\(([^)]+)\) \| (.+) \|$", row)
        assert m, f"not a command row: {row}"
        rows.append((m.group(1), m.group(2), m.group(3)))
    return rows


def test_the_readme_table_has_every_command_once_in_one_short_line() -> None:
    rows = command_rows()
    assert sorted(name for name, _, _ in rows) == sorted(cli_commands())
    for name, link, text in rows:
        assert link == f"docs/COMMANDS.md#mpictl-{name}", (name, link)
        assert len(text) <= 100, f"{name}: {len(text)} characters; the detail goes in COMMANDS.md"


def test_commands_md_has_a_section_for_every_command_and_no_other() -> None:
    sections = re.findall(r"(?m)^## mpictl ([a-z]+)$", COMMANDS.read_text())
    assert sorted(sections) == sorted(cli_commands())


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_relative_link_names_a_file_and_a_heading_that_exist(page: Path) -> None:
    text = re.sub(r"(?ms)^```.*?^```", "", page.read_text())
    bad = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not bad, f"{page.relative_to(ROOT)}: " + "; ".join(bad)


def test_the_slug_rule_is_githubs() -> None:
    assert slug("Is my fabric right?") == "is-my-fabric-right"
    assert slug("TensorFlow's own distribution: --tf") == "tensorflows-own-distribution---tf"
    assert slug("mpictl run") == "mpictl-run"


def test_the_tag_list_of_commands_md_is_the_tags_provision_accepts() -> None:
    from mpictl import provision

    text = COMMANDS.read_text()
    section = text[text.index("## Tags") :]
    listed = section.split("carries one tag:", 1)[1].split("(`mpictl provision --list-tags`)")[0]
    named = re.findall(r"`([a-z0-9_]+)`", listed)
    assert named == list(provision.play_tags(ROOT / "playbooks" / "site.yml"))
