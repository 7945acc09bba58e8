"""Locks are the nodes': two inventories that describe the same machines (a directory inventory
and the file inside it, a copy, a grown inventory) exclude each other on the nodes they share;
disjoint node sets do not; the lock files live under the state dir only."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mpictl import lock
from mpictl.errors import LockError, UsageError
from mpictl.hostnames import endpoint
from mpictl.inventory import load_inventory
from tests.unit.hostile import as_unprivileged

HOSTS = """\
mpi_nodes:
  hosts:
{hosts}
  vars: {{mpi_slots: 1}}
"""


def inventory(path: Path, *nodes: str, directory: bool = False) -> Path:
    """An inventory of ``nodes`` (``name=host:port``); ``directory``: a directory inventory
    (``hosts.yml`` inside, group vars beside it)."""
    lines = []
    for spec in nodes:
        name, _, where = spec.partition("=")
        host, _, port = where.rpartition(":")
        lines.append(f"    {name}: {{ansible_host: '{host}', ansible_port: {port}}}")
    text = HOSTS.format(hosts="\n".join(lines))
    if directory:
        path.mkdir(parents=True)
        (path / "group_vars").mkdir()
        (path / "group_vars" / "all.yml").write_text("site: lab\n")
        (path / "hosts.yml").write_text(text)
        return path
    path.write_text(text)
    return path


def keys(path: Path) -> list[str]:
    return load_inventory(path).endpoints


def test_a_directory_inventory_and_the_file_inside_it_lock_the_same_nodes(tmp_path: Path) -> None:
    site = inventory(tmp_path / "site", "a=10.0.0.1:22", "b=10.0.0.2:22", directory=True)
    with (
        lock.hold(keys(site), "provision", source=site),
        pytest.raises(LockError) as caught,
        lock.hold(keys(site / "hosts.yml"), "provision"),
    ):
        pass
    message = str(caught.value)
    assert message.startswith("another mpictl provision is running on node 10.0.0.1:22 (pid ")
    assert f"pid {os.getpid()}, since " in message
    assert message.endswith(f", inventory {site}); wait for it to finish")


def test_a_copy_with_other_names_and_spellings_locks_the_same_nodes(tmp_path: Path) -> None:
    # Other inventory names, upper case, an IPv6 address spelt longer: the same machines.
    first = inventory(tmp_path / "a.yml", "a=gpu1.example.com:22", "b=2001:db8::1:22")
    copy = inventory(tmp_path / "b.yml", "x=GPU1.Example.COM:22", "y=2001:db8:0:0::1:22")
    assert keys(first) == keys(copy) == ["gpu1.example.com:22", "[2001:db8::1]:22"]
    with (
        lock.hold(keys(first)),
        pytest.raises(LockError, match=r"running on node \[2001:db8::1\]:22"),
        lock.hold(keys(copy)),
    ):
        pass


def test_disjoint_nodes_do_not_conflict_and_a_superset_does(tmp_path: Path) -> None:
    old = inventory(tmp_path / "old.yml", "a=10.0.0.1:22", "b=10.0.0.2:22")
    other = inventory(tmp_path / "other.yml", "c=10.0.0.3:22", "d=10.0.0.2:2222")
    grown = inventory(tmp_path / "grown.yml", "c=10.0.0.3:22", "b=10.0.0.2:22", "e=10.0.0.5:22")
    with lock.hold(keys(old), "provision") as held:
        with lock.hold(keys(other), "provision"):
            pass  # the same host on another port is another node
        with (
            pytest.raises(LockError, match=r"running on node 10\.0\.0\.2:22 "),
            lock.hold(keys(grown), "provision"),
        ):
            pass
        assert len(held) == 2
    with lock.hold(keys(grown)):  # released on leaving
        pass


def test_a_conflict_lets_go_of_the_nodes_taken_before_it(tmp_path: Path) -> None:
    # Sorted order: 10.0.0.1 is taken, 10.0.0.2 is held elsewhere; 10.0.0.1 must be free again.
    with lock.hold(["10.0.0.2:22"], "sandbox up"):
        with (
            pytest.raises(LockError, match="another mpictl sandbox up is running on node"),
            lock.hold(["10.0.0.2:22", "10.0.0.1:22"]),
        ):
            pass
        with lock.hold(["10.0.0.1:22"]):
            pass


def test_lock_files_are_under_the_state_dir_only(tmp_path: Path, isolated_state: Path) -> None:
    inv = inventory(tmp_path / "inv.yml", "a=10.0.0.1:22", "b=10.0.0.2:22")
    before = {p for p in tmp_path.rglob("*") if not p.is_relative_to(isolated_state)}
    with lock.hold(keys(inv), source=inv) as held:
        assert all(p.parent == isolated_state.resolve() / "locks" for p in held)
        assert [p.name.startswith("node-") and p.suffix == ".lock" for p in held] == [True, True]
        assert "10.0.0.1" not in "".join(p.name for p in held)  # no user text in a file name
    after = {p for p in tmp_path.rglob("*") if not p.is_relative_to(isolated_state)}
    assert after == before


def test_a_state_dir_that_cannot_hold_locks_is_one_usage_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("MPICTL_STATE_DIR", str(blocker / "state"))
    with pytest.raises(UsageError) as caught, lock.hold(["10.0.0.1:22"]):
        pass
    assert str(caught.value) == (
        f"locks: the state dir '{blocker}/state' (MPICTL_STATE_DIR) cannot be used: {blocker} "
        "is a file, not a directory; set MPICTL_STATE_DIR to a directory you can write"
    )


def test_a_read_only_state_dir_is_one_usage_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    if os.geteuid() == 0:  # root writes into any directory: the case runs as nobody
        as_unprivileged(request.node.nodeid)
        return
    state = tmp_path / "ro"
    (state / "locks").mkdir(parents=True)
    (state / "locks").chmod(0o500)
    monkeypatch.setenv("MPICTL_STATE_DIR", str(state))
    try:
        with pytest.raises(UsageError) as caught, lock.hold(["10.0.0.1:22"]):
            pass
    finally:
        (state / "locks").chmod(0o700)
    assert str(caught.value).startswith(f"locks: the state dir '{state}' (MPICTL_STATE_DIR)")
    assert "permission denied" in str(caught.value)


def test_a_string_is_not_a_list_of_keys() -> None:
    with pytest.raises(TypeError), lock.hold("10.0.0.1:22"):  # type: ignore[arg-type]
        pass


@pytest.mark.parametrize(
    ("host", "port", "key"),
    [
        ("Node1.Example.com", 22, "node1.example.com:22"),
        ("10.0.0.1", 2222, "10.0.0.1:2222"),
        ("::1", 22, "[::1]:22"),
        ("0:0:0:0:0:0:0:1", 22, "[::1]:22"),
        ("2001:DB8::A", 1, "[2001:db8::a]:1"),
        ("gpu_01", 22, "gpu_01:22"),
    ],
)
def test_endpoint_has_one_spelling(host: str, port: int, key: str) -> None:
    assert endpoint(host, port) == key
