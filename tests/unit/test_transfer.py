"""What ``run --workdir`` actually moves (mpictl.transfer, scripts/mesh_spread.py): real rsync
with the real command lines, over a fake ``ssh`` (tests/unit/fake_nodes.py: every host a
directory, its home). What the selection leaves out
must never arrive (nor stay from an earlier run), every node must end with the head's tree, a
node that failed must not send, and an unchanged tree must move nothing."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from mpictl import programs, transfer, workdir
from mpictl.errors import JobError
from tests.unit import fake_nodes
from tests.unit.fake_nodes import FakeHead, snapshot

pytestmark = pytest.mark.skipif(shutil.which("rsync") is None, reason="needs rsync")

NODES = ["n1", "n2", "n3", "n4", "n5"]


@pytest.fixture
def nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``$NODES`` with an empty home per host (head, n1..n5), the fake ssh first on PATH."""
    return fake_nodes.install(tmp_path, monkeypatch, ["head", *NODES])


def fake_head(tmp_path: Path) -> FakeHead:
    return FakeHead(node=fake_nodes.node("head"), user="mpi", key=tmp_path / "key")


def write(root: Path, rel: str, text: str = "x", mode: int = 0o644) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A tree whose ignored names hold rsync's wildcard characters, with links in and out."""
    root = tmp_path / "proj"
    write(root, ".mpictlignore", "*.log\nbuild/\ndata\\[1\\].bin\nx\\*y.txt\n")
    write(root, "train.py", "print('train')\n", 0o755)
    write(root, "sub/model.py", "W = 1\n")
    write(root, "data1.bin", "d" * 5000)  # "[1]" unescaped would match this name
    write(root, "data[1].bin", "ignored")
    write(root, "xzy.txt", "kept")  # "*" unescaped would match this name
    write(root, "x*y.txt", "ignored")
    write(root, "backslash.txt", "kept")
    write(root, "back\\slash.txt", "ignored by --exclude")
    write(root, "cfg.txt", "kept")
    write(root, "run.log", "ignored")
    write(root, "build/out.o", "ignored")
    (root / "empty").mkdir()
    (root / "latest").symlink_to("sub/model.py")
    (root / "subdir").symlink_to("sub")
    outside = tmp_path / "secrets"
    write(outside, "key", "SECRET")
    (root / "secrets").symlink_to(outside)  # a directory outside
    (root / "cfg*").symlink_to(outside / "key")  # a file outside; "*" would match cfg.txt
    return root


EXCLUDES = ["back?slash.txt"]
KEPT = {
    ".mpictlignore",
    "train.py",
    "sub",
    "sub/model.py",
    "data1.bin",
    "xzy.txt",
    "backslash.txt",
    "cfg.txt",
    "empty",
    "latest",
    "subdir",
}


def test_the_selection_is_what_arrives_and_nothing_else_stays(
    nodes: Path, project: Path, tmp_path: Path
) -> None:
    head = fake_head(tmp_path)
    sel = workdir.select(project, EXCLUDES)
    assert {"data[1].bin", "x*y.txt", "back\\slash.txt", "run.log", "build/"} <= set(sel.ignored)
    assert sorted(sel.unsafe_links) == ["cfg*", "secrets"]
    rel = workdir.remote_dir(sel.root)
    dest = nodes / "head" / rel

    stats = transfer.send_to_head(head, sel, rel)
    got = snapshot(dest)
    assert set(got) == KEPT
    assert got == {k: v for k, v in snapshot(project).items() if k in KEPT}  # content, modes
    assert got["latest"] == ("L", "sub/model.py") and got["subdir"] == ("L", "sub")
    assert not any(b"SECRET" in v[-1] for v in got.values() if v[0] == "F")
    assert (stats.files, stats.content_bytes) == (len(sel.files), sel.total_bytes)
    assert stats.content_bytes > 5000 and stats.sent_bytes > 0

    again = transfer.send_to_head(head, workdir.select(project, EXCLUDES), rel)
    assert (again.files, again.content_bytes) == (0, 0)
    assert snapshot(dest) == got

    # a file deleted at the source, one newly ignored, one left on the head by hand: all gone
    (project / "cfg.txt").unlink()
    write(project, ".mpictlignore", (project / ".mpictlignore").read_text() + "xzy.txt\n")
    write(dest, "stale.txt")
    write(project, "new.py", "new")
    third = transfer.send_to_head(head, workdir.select(project, EXCLUDES), rel)
    assert set(snapshot(dest)) == (KEPT - {"cfg.txt", "xzy.txt"}) | {"new.py"}
    assert third.files == 2  # new.py and the changed .mpictlignore


def test_a_failed_send_names_the_head_and_rsync(
    nodes: Path, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAIL_HOSTS", "head")
    sel = workdir.select(project, EXCLUDES)
    with pytest.raises(JobError) as err:
        transfer.send_to_head(fake_head(tmp_path), sel, workdir.remote_dir(sel.root))
    message = str(err.value)
    assert message.startswith(f"head: sending {sel.root} failed (rsync exit ")
    assert "Connection refused" in message and "\n" not in message


def test_parse_stats_reads_rsync_figures() -> None:
    text = (
        "Number of files: 12 (reg: 9, dir: 3)\n"
        "Number of regular files transferred: 1,234\n"
        "Total file size: 99,999 bytes\n"
        "Total transferred file size: 1,048,576 bytes\n"
        "Total bytes sent: 2,000\n"
    )
    assert transfer.parse_stats(text) == transfer.RsyncStats(1234, 1048576, 2000)
    assert transfer.parse_stats("") == transfer.RsyncStats(0, 0, 0)


def test_the_fanout_program_is_package_data() -> None:
    path = Path(__file__).resolve().parents[2] / "mpictl" / "scripts" / "mesh_spread.py"
    assert programs.source("mesh_spread.py") == path.read_text()


def run_fanout(nodes: Path, rel: str, hosts: list[str]) -> dict[str, Any]:
    """scripts/mesh_spread.py as transfer.spread runs it: ``python3 - SPEC`` on the head."""
    spec = transfer.fanout_spec(rel, hosts, timeout=60)
    data: dict[str, Any] = fake_nodes.run_program("mesh_spread.py", spec, nodes / "head")
    return data


def seed_head(nodes: Path, project: Path, rel: str) -> dict[str, tuple[Any, ...]]:
    shutil.copytree(project, nodes / "head" / rel, symlinks=True)
    for name in ("secrets", "cfg*"):
        (nodes / "head" / rel / name).unlink()
    return snapshot(nodes / "head" / rel)


def test_fanout_reaches_every_node_in_rounds_and_mirrors_the_head(
    nodes: Path, project: Path
) -> None:
    rel = ".mpictl/workdirs/proj-0123456789"
    tree = seed_head(nodes, project, rel)
    write(nodes / "n3" / rel, "stale.txt")  # left from an earlier run: n3 mirrors the head
    data = run_fanout(nodes, rel, NODES)
    assert data["home"] == str(nodes / "head")
    records = data["transfers"]
    assert all(r["rc"] == 0 for r in records), records
    assert sorted(r["to"] for r in records) == NODES
    for name in NODES:
        assert snapshot(nodes / name / rel) == tree, name
    # rounds: a node sends only once it holds the tree, and the head sends once per round
    # (ceil(log2(6)) = 3 rounds for the head and 5 nodes), the nodes send the rest
    holders = {"head"}
    for r in records:
        assert r["from"] in holders, (r["from"], r["to"])
        holders.add(r["to"])
    from_head = [r for r in records if r["from"] == "head"]
    assert len(from_head) == 3
    assert {r["from"] for r in records} - {"head"}
    files = sum(1 for v in tree.values() if v[0] == "F")
    for r in records:
        assert transfer.parse_stats(r["stdout"]).files == files
    log = (nodes / "ssh.log").read_text().splitlines()
    assert len(log) == 5 + (5 - 3)  # one rsync per node, plus the login to each other sender
    assert all("BatchMode=yes" in line and "StrictHostKeyChecking=yes" in line for line in log)

    again = run_fanout(nodes, rel, NODES)["transfers"]
    assert all(r["rc"] == 0 for r in again)
    assert [transfer.parse_stats(r["stdout"]).content_bytes for r in again] == [0] * 5


def test_fanout_reports_a_failed_node_and_never_sends_from_it(
    nodes: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rel = ".mpictl/workdirs/proj-0123456789"
    tree = seed_head(nodes, project, rel)
    monkeypatch.setenv("FAIL_HOSTS", "n1")  # the first node reached: a sender in round 2
    records = run_fanout(nodes, rel, NODES)["transfers"]
    failed = [r for r in records if r["rc"] != 0]
    assert [r["to"] for r in failed] == ["n1"]
    assert "Connection refused" in failed[0]["stderr"]
    assert "n1" not in {r["from"] for r in records}
    assert not (nodes / "n1" / rel).exists()
    for name in NODES[1:]:
        assert snapshot(nodes / name / rel) == tree, name


def test_a_node_whose_sender_failed_gets_one_more_try_from_the_head(
    nodes: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one retry rule of scripts/mesh_spread.py (as for build artifacts): n1 received the
    tree but cannot send it on; the nodes it was to serve get it from the head."""
    rel = ".mpictl/workdirs/proj-0123456789"
    tree = seed_head(nodes, project, rel)
    monkeypatch.setenv("FAIL_FROM", "n1")
    records = run_fanout(nodes, rel, NODES)["transfers"]
    from_n1 = [r for r in records if r["from"] == "n1"]
    assert from_n1 and all(r["rc"] != 0 for r in from_n1), records
    last = {r["to"]: r for r in records}  # the last record of a node is its outcome
    assert all(last[n]["rc"] == 0 for n in NODES), records
    assert {last[r["to"]]["from"] for r in from_n1} == {"head"}
    for name in NODES:
        assert snapshot(nodes / name / rel) == tree, name


def test_sync_puts_the_selection_at_one_path_on_every_node(
    nodes: Path, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    head = fake_head(tmp_path)
    sel = workdir.select(project, EXCLUDES)
    report = transfer.sync(head, sel, ["head", *NODES])
    rel = workdir.remote_dir(sel.root)
    assert report.path == f"{nodes / 'head'}/{rel}"
    assert (report.local, report.digest) == (str(project), sel.digest)
    assert (report.files, report.bytes) == (len(sel.files), sel.total_bytes)
    assert report.left_out == sel.left_out
    assert sorted(f["to"] for f in report.fanout) == NODES  # the head is not sent to itself
    expected = snapshot(nodes / "head" / rel)
    assert set(expected) == KEPT
    for name in NODES:
        assert snapshot(nodes / name / rel) == expected, name
    assert report.moved_content == 6 * sel.total_bytes
    assert report.to_json()["moved_content"] == report.moved_content

    second = transfer.sync(head, workdir.select(project, EXCLUDES), ["head", *NODES])
    assert second.moved_content == 0 and second.controller.files == 0

    monkeypatch.setenv("FAIL_HOSTS", "n4")
    (nodes / "n4" / rel / "train.py").unlink()
    with pytest.raises(JobError) as err:
        transfer.sync(head, workdir.select(project, EXCLUDES), ["head", *NODES])
    assert str(err.value).startswith("the workdir did not reach n4 (from ")
    assert "Connection refused" in str(err.value)


INJECTED = "a\n+ secret.env\n- x.log"  # a name that is three lines of an rsync filter


def test_a_file_name_cannot_add_rsync_rules(nodes: Path, tmp_path: Path) -> None:
    # issue 22, security defect 2: with the left-out paths as newline-separated rules, this
    # name (itself ignored, by *.log) added "+ secret.env" and secret.env reached every node
    root = tmp_path / "proj"
    write(root, ".mpictlignore", "secret.env\n*.log\n")
    write(root, "secret.env", "SECRET")
    write(root, "x.log", "log")
    write(root, INJECTED, "injected")
    write(root, "train.py", "print()")
    sel = workdir.select(root)
    assert sorted(sel.ignored) == sorted([INJECTED, "secret.env", "x.log"])
    rel = workdir.remote_dir(sel.root)
    dest = nodes / "head" / rel
    transfer.send_to_head(fake_head(tmp_path), sel, rel)
    assert not (dest / "secret.env").exists()
    assert set(snapshot(dest)) == {".mpictlignore", "train.py"}
    # the same name, kept, arrives as one file with its content
    write(root, ".mpictlignore", "secret.env\n")
    sel = workdir.select(root)
    transfer.send_to_head(fake_head(tmp_path), sel, rel)
    got = snapshot(dest)
    assert set(got) == {".mpictlignore", "train.py", "x.log", INJECTED}
    assert got[INJECTED][-1] == b"injected" and not (dest / "secret.env").exists()


ODD = [
    INJECTED,
    "+ plus",
    "- minus",
    "! bang",
    "#hash",
    ";semi",
    " lead",
    "trail ",
    "back\\slash",
    "wild*[1]?",
    "cr\rx",
    "tab\tx",
    "--opt",
    "\\",
    os.fsdecode(b"caf\xe9"),
    os.fsdecode(b"\xff\xfe"),
]


def test_odd_names_arrive_exactly_as_selected_and_left_out_ones_never(
    nodes: Path, tmp_path: Path
) -> None:
    # every odd name twice: kept as it is, and left out with a ".env" suffix (*.env ignored);
    # the head holds stale copies of both, and of the ignored files' names in a kept dir
    root = tmp_path / "proj"
    write(root, ".mpictlignore", "*.env\n")
    for name in ODD:
        write(root, name, f"new {name!r}")
        write(root, name + ".env", "SECRET")
        write(root, f"d/{name}", "new")
        write(root, f"d/{name}.env", "SECRET")
    sel = workdir.select(root)
    assert len(sel.ignored) == 2 * len(ODD)
    rel = workdir.remote_dir(sel.root)
    dest = nodes / "head" / rel
    for name in ODD:
        write(dest, name, "old")
        write(dest, name + ".env", "stale SECRET")
        write(dest, f"d/{name}.env", "stale SECRET")
    stats = transfer.send_to_head(fake_head(tmp_path), sel, rel)
    got = snapshot(dest)
    assert set(got) == set(sel.files + sel.dirs + sel.links)
    assert got == {k: v for k, v in snapshot(root).items() if k in got}  # content and modes
    assert not any(b"SECRET" in v[-1] for v in got.values() if v[0] == "F")
    assert (stats.files, stats.content_bytes) == (len(sel.files), sel.total_bytes)


def test_what_is_sent_is_the_selection_not_the_tree_at_send_time(
    nodes: Path, tmp_path: Path
) -> None:
    root = tmp_path / "proj"
    write(root, "a.py")
    write(root, "x/inner.py")  # a directory on the head, a file in the new selection
    write(root, "y", "file")  # and the other way round
    head, rel = fake_head(tmp_path), workdir.remote_dir(root.resolve())
    dest = nodes / "head" / rel
    transfer.send_to_head(head, workdir.select(root), rel)
    shutil.rmtree(root / "x")
    write(root, "x", "now a file")
    (root / "y").unlink()
    write(root, "y/inner.py", "now a dir")
    sel = workdir.select(root)
    write(root, "late.py", "created after the selection")  # not in it: not sent
    transfer.send_to_head(head, sel, rel)
    got = snapshot(dest)
    assert set(got) == {"a.py", "x", "y", "y/inner.py"}
    assert got["x"][-1] == b"now a file" and got["y/inner.py"][-1] == b"now a dir"
