"""Doctor's containers checks from node probes (mpictl/doctor/containers.py)."""

from __future__ import annotations

from typing import Any

from mpictl.doctor import containers

OK = {"enroot": "4.1.2", "pyxis": "0.24.0", "start": "ok"}


def names_of(checks: list[Any]) -> list[tuple[str, str, bool]]:
    return [(c.check, c.node, c.ok) for c in checks]


def test_the_same_versions_and_a_container_on_every_node_pass() -> None:
    data = {n: {"containers": dict(OK)} for n in ("node1", "node2")}
    assert names_of(containers.checks(data, "provision", True)) == [
        ("enroot version", "all", True),
        ("pyxis version", "all", True),
        ("container start", "all", True),
    ]


def test_another_version_and_a_container_that_does_not_start_name_the_node() -> None:
    data: dict[str, dict[str, Any]] = {
        "node1": {"containers": dict(OK)},
        "node2": {"containers": dict(OK)},
        "node3": {"containers": {**OK, "enroot": "3.5.0", "start": "enroot start: denied"}},
    }
    checks = containers.checks(data, "mpictl provision -i inv", True)
    failed = [(c.check, c.node, c.detail) for c in checks if not c.ok]
    assert failed == [
        ("enroot version", "node3", "3.5.0; other nodes: 4.1.2"),
        ("container start", "node3", "enroot start: denied"),
    ]
    assert all("containers role" in c.fix for c in checks if not c.ok)


def test_without_slurm_no_pyxis_line_and_a_node_without_enroot_fails() -> None:
    data = {
        "node1": {"containers": dict(OK)},
        "node2": {"containers": {"enroot": None, "pyxis": None, "start": "no enroot on the PATH"}},
    }
    got = names_of(containers.checks(data, "p", False))
    assert got == [
        ("enroot version", "node2", False),
        ("container start", "node2", False),
    ]
