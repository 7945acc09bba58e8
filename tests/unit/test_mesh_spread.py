"""scripts/mesh_spread.py (build_once's fan-out), run as the role runs it on the seed node
(``python3 - SPEC`` as the MPI user), with every node a directory behind a fake ssh: all nodes end
with the artifact in about log2(N) rounds, a corrupted copy never lands, and a node that cannot be
reached is named while the others still get it."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from tests.unit import fake_nodes

TARGETS = ["n1", "n2", "n3", "n4", "n5"]
DEST = "incoming/openmpi-abc.tar.gz"


@pytest.fixture
def nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    base = fake_nodes.install(tmp_path, monkeypatch, ["seed", *TARGETS])
    for name in TARGETS:
        (base / name / "incoming").mkdir()
    (base / "seed" / "artifact.tar.gz").write_bytes(b"\x1f\x8b" + bytes(range(256)) * 4000)
    return base


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fanout(nodes: Path, hosts: list[str], digest: str | None = None) -> list[dict[str, Any]]:
    spec = {
        "kind": "file",
        "src": "artifact.tar.gz",
        "dest": DEST,
        "sha256": digest or sha(nodes / "seed" / "artifact.tar.gz"),
        "hosts": hosts,
        "connect_timeout": 5,
        "timeout": 60,
    }
    # the role passes absolute paths; here they are relative to the seed
    transfers: list[dict[str, Any]] = fake_nodes.run_program(
        "mesh_spread.py", spec, nodes / "seed", cwd=nodes / "seed"
    )["transfers"]
    return transfers


def test_every_node_gets_the_artifact_in_rounds(nodes: Path) -> None:
    records = fanout(nodes, TARGETS)
    assert all(r["ok"] for r in records), records
    digest = sha(nodes / "seed" / "artifact.tar.gz")
    for name in TARGETS:
        assert sha(nodes / name / DEST) == digest, name
        assert not (nodes / name / (DEST + ".part")).exists()
    holders = {"seed"}
    for r in records:
        assert r["from"] in holders, (r["from"], r["to"])
        holders.add(r["to"])
    # the seed sends once per round: ceil(log2(6)) = 3; the nodes send the other two
    assert len([r for r in records if r["from"] == "seed"]) == 3


def test_a_corrupted_copy_never_lands(nodes: Path) -> None:
    records = fanout(nodes, TARGETS[:2], digest="0" * 64)
    assert [r["ok"] for r in records] == [False, False]
    assert "sha256 mismatch" in records[0]["error"]
    for name in TARGETS[:2]:
        assert not (nodes / name / DEST).exists()
        assert not (nodes / name / (DEST + ".part")).exists()


def test_an_unreachable_node_is_named_and_the_rest_still_get_it(
    nodes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAIL_HOSTS", "n1")
    records = fanout(nodes, TARGETS)
    last = {r["to"]: r for r in records}  # the last record of a node is its outcome
    assert not last["n1"]["ok"] and "Connection refused" in last["n1"]["error"]
    assert all(last[n]["ok"] for n in TARGETS[1:])
    assert all(r["from"] != "n1" for r in records)  # a failed node never sends


def test_a_node_whose_sender_failed_gets_one_more_try_from_the_seed(
    nodes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAIL_FROM", "n1")  # n1 receives, but its own ssh reaches no one
    records = fanout(nodes, TARGETS)
    from_n1 = [r for r in records if r["from"] == "n1"]
    assert from_n1 and not any(r["ok"] for r in from_n1), records
    last = {r["to"]: r for r in records}
    assert all(last[n]["ok"] for n in TARGETS), records
    assert {last[r["to"]]["from"] for r in from_n1} == {"seed"}
    digest = sha(nodes / "seed" / "artifact.tar.gz")
    assert all(sha(nodes / n / DEST) == digest for n in TARGETS)
