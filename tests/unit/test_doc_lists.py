"""The lists docs/ARCHITECTURE.md repeats from the playbooks, held equal to their source: the
order of the roles in ``site.yml`` (the preflight play runs every role's checks in that order) and
the tags ``mpictl provision --tags`` accepts (``provision.play_tags``)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from mpictl import provision

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = (ROOT / "docs" / "ARCHITECTURE.md").read_text()


def paragraph(starting: str) -> str:
    start = ARCHITECTURE.index(starting)
    end = ARCHITECTURE.find("\n\n", start)
    return ARCHITECTURE[start:end]


def preflight_roles() -> list[str]:
    (play,) = yaml.safe_load((ROOT / "playbooks" / "preflight.yml").read_text())
    return [
        task["ansible.builtin.include_role"]["name"]
        for task in play["tasks"]
        if "ansible.builtin.include_role" in task
    ]


def test_the_role_order_is_the_preflight_plays() -> None:
    order = paragraph("Order in `site.yml`")
    after = order.split("preflight play →", 1)[1]
    named = re.findall(r"`([a-z0-9_]+)`", after.split("failures play", 1)[0])
    assert named == preflight_roles()
    # every role folder with tasks is one of them, but the two that are not components
    roles = {p.parent.parent.name for p in (ROOT / "roles").glob("*/tasks/main.yml")}
    assert roles - set(named) == {"build_once", "cluster_defaults"} & roles


def test_the_tag_list_is_the_tags_provision_accepts() -> None:
    bullet = paragraph("- **Tags**").split("), on the play", 1)[0]
    named = re.findall(r"`([a-z0-9_]+)`", bullet.split("name of its playbook", 1)[1])
    assert named == list(provision.play_tags(ROOT / "playbooks" / "site.yml"))


def test_the_inventory_contract_table_names_every_declared_cluster_variable() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Inventory contract") :]
    start = section.index("| name |")
    table = section[start : section.index("\n\n", start)]
    named = set()
    for row in table.splitlines()[2:]:
        names, kind = row.split("|")[1:3]
        if kind.strip() != "group":
            named |= set(re.findall(r"`(mpi_[a-z0-9_]+)`", names))
    specs = yaml.safe_load(
        (ROOT / "roles" / "cluster_defaults" / "meta" / "argument_specs.yml").read_text()
    )
    declared = set(specs["argument_specs"]["main"]["options"])
    # mpi_address is the inventory's own (inventory.load_inventory checks it), not a role's
    assert named == declared | {"mpi_address"}
