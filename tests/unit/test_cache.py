"""``mpictl cache``: list, export, import (checked whole: members, checksums, platform) and prune,
on a cache laid out as build_once leaves it; and the CLI's one-line refusals."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from mpictl import cache, cli
from mpictl.errors import UsageError
from tests.unit.hostile import Hostile

BOOKWORM = {"os": "Debian bookworm", "arch": "x86_64", "compiler": "12.2.0"}


def put(root: Path, component: str, body: bytes, meta: dict[str, Any] | None = None,
        age_days: float = 0, complete: bool = True) -> Path:  # fmt: skip
    """An artifact as build_once caches it: the file, its .json, then its .sha256."""
    digest = hashlib.sha256(body).hexdigest()
    fingerprint = hashlib.sha256(component.encode() + body).hexdigest()
    folder = root / "artifacts" / component
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{fingerprint}.tar.gz"
    path.write_bytes(body)
    if meta is not None:
        Path(f"{path}.json").write_text(json.dumps({"name": component, **meta}))
    if complete:
        Path(f"{path}.sha256").write_text(f"{digest}  {path.name}\n")
    when = time.time() - age_days * 86400
    os.utime(path, (when, when))
    return path


def openmpi_meta(version: str = "5.0.7", **platform: str) -> dict[str, Any]:
    return {"inputs": {"version": version}, **BOOKWORM, **platform}


def test_list_shows_complete_artifacts_with_what_they_were_built_for(tmp_path: Path) -> None:
    put(tmp_path, "openmpi", b"ompi", openmpi_meta())
    put(tmp_path, "ucx", b"ucx-old")  # cached before .json existed
    put(tmp_path, "nccl", b"half", openmpi_meta(), complete=False)  # interrupted: never listed
    found = cache.entries(tmp_path)
    assert [(e.component, e.version, e.platform) for e in found] == [
        ("openmpi", "5.0.7", "Debian bookworm x86_64, cc 12.2.0"),
        ("ucx", "-", "-"),
    ]
    assert found[0].sha256 == hashlib.sha256(b"ompi").hexdigest() and found[0].size == 4


def test_export_then_import_on_another_machine_with_nothing_compiled(tmp_path: Path) -> None:
    here, there = tmp_path / "staging", tmp_path / "airgap"
    put(here, "openmpi", b"ompi" * 1000, openmpi_meta())
    put(here, "ucx", b"ucx", openmpi_meta("1.22.0"))
    archive = tmp_path / "cluster.tar.gz"
    assert len(cache.export(archive, ["openmpi"], here)) == 1
    nodes = [{"ansible_distribution": "Debian", "ansible_distribution_release": "bookworm",
              "ansible_architecture": "x86_64"}]  # fmt: skip
    done = cache.import_archive(archive, there, nodes)
    assert [d["component"] for d in done] == ["openmpi"]
    (moved,) = cache.entries(there)
    assert moved.path.read_bytes() == b"ompi" * 1000 and moved.version == "5.0.7"
    assert not list((there / "artifacts").glob(".import-*"))  # the staging dir is gone


def test_an_artifact_for_another_platform_is_refused_in_one_line(tmp_path: Path) -> None:
    here = tmp_path / "gpu-staging"
    put(here, "openmpi", b"ompi", openmpi_meta(os="Ubuntu noble", compiler="13.3.0"))
    archive = tmp_path / "x.tar.gz"
    cache.export(archive, cache=here)
    nodes = [{"ansible_distribution": "Debian", "ansible_distribution_release": "bookworm",
              "ansible_architecture": "x86_64"}]  # fmt: skip
    with pytest.raises(UsageError) as caught:
        cache.import_archive(archive, tmp_path / "c", nodes)
    message = str(caught.value)
    assert "was built for Ubuntu noble x86_64, which no node of the cluster runs" in message
    assert "(Debian bookworm x86_64)" in message and "\n" not in message
    assert not (tmp_path / "c" / "artifacts" / "openmpi").exists()


def evil(tmp_path: Path, name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> Path:
    """A cache archive with one good artifact and one hostile member."""
    here = tmp_path / "src"
    put(here, "openmpi", b"ompi", openmpi_meta())
    archive = tmp_path / "evil.tar.gz"
    cache.export(archive, cache=here)
    with tarfile.open(archive) as tar:
        members = [(m, tar.extractfile(m).read() if m.isfile() else b"") for m in tar.getmembers()]  # type: ignore[union-attr]
    with tarfile.open(archive, "w:gz") as tar:
        for member, data in members:
            tar.addfile(member, io.BytesIO(data))
        bad = tarfile.TarInfo(name)
        bad.type, bad.linkname, bad.size = kind, link, 0 if link else 3
        tar.addfile(bad, None if link else io.BytesIO(b"bad"))
    return archive


@pytest.mark.parametrize(
    ("name", "kind", "link", "why"),
    [
        ("/etc/cron.d/x", tarfile.REGTYPE, "", "is an absolute path"),
        ("artifacts/../../escape", tarfile.REGTYPE, "", "leaves the cache (..)"),
        ("artifacts/openmpi/link", tarfile.SYMTYPE, "/etc/shadow", "is a link"),
        ("artifacts/openmpi/hard", tarfile.LNKTYPE, "artifacts/x", "is a link"),
        ("artifacts/openmpi/fifo", tarfile.FIFOTYPE, "", "is not a plain file"),
        ("elsewhere.txt", tarfile.REGTYPE, "", "is not an artifact"),
    ],
)
def test_a_member_that_leaves_the_cache_is_refused_and_nothing_imported(
    tmp_path: Path, name: str, kind: bytes, link: str, why: str
) -> None:
    archive = evil(tmp_path, name, kind, link)
    target = tmp_path / "target"
    with pytest.raises(UsageError, match="nothing was imported") as caught:
        cache.import_archive(archive, target)
    assert why in str(caught.value)
    assert cache.entries(target) == []


def test_a_changed_artifact_is_refused_by_its_checksum(tmp_path: Path) -> None:
    here = tmp_path / "src"
    put(here, "openmpi", b"ompi", openmpi_meta())
    archive = tmp_path / "a.tar.gz"
    cache.export(archive, cache=here)
    with tarfile.open(archive) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]  # type: ignore[union-attr]
    with tarfile.open(archive, "w:gz") as tar:
        for member, data in members:
            if member.name.endswith(".tar.gz"):
                data = b"evil"
                member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    with pytest.raises(UsageError, match="has sha256 .* the manifest says"):
        cache.import_archive(archive, tmp_path / "t")
    assert cache.entries(tmp_path / "t") == []


def test_prune_by_age_and_by_count(tmp_path: Path) -> None:
    put(tmp_path, "openmpi", b"new", openmpi_meta("5.0.8"))
    put(tmp_path, "openmpi", b"old", openmpi_meta("5.0.6"), age_days=40)
    put(tmp_path, "ucx", b"ucx", openmpi_meta("1.22.0"), age_days=40)
    assert [e.version for e in cache.prune(older_than_days=30, dry_run=True, cache=tmp_path)] == [
        "5.0.6", "1.22.0",
    ]  # fmt: skip
    assert len(cache.entries(tmp_path)) == 3  # a dry run removes nothing
    gone = cache.prune(keep=1, cache=tmp_path)
    assert [(e.component, e.version) for e in gone] == [("openmpi", "5.0.6")]
    assert [(e.component, e.version) for e in cache.entries(tmp_path)] == [
        ("openmpi", "5.0.8"), ("ucx", "1.22.0"),
    ]  # fmt: skip
    with pytest.raises(UsageError, match="--older-than DAYS and/or --keep N"):
        cache.prune(cache=tmp_path)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["import", "/nonexistent/x.tar.gz"], "no such file"),
        (["export", "out.zip"], "nothing to export"),
        (["prune"], "--older-than DAYS and/or --keep N"),
        (["prune", "--keep", "-1"], "--keep must be 0 or more"),
    ],
)
def test_the_cli_refuses_bad_input_in_one_line(
    hostile: Hostile, args: list[str], says: str
) -> None:
    hostile.refused("cache", *args, says=(says,))


def test_the_cli_lists_and_exports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MPICTL_CACHE_DIR", str(tmp_path / "cache"))
    put(tmp_path / "cache", "openmpi", b"ompi", openmpi_meta())
    assert cli.main(["cache", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["version"] == "5.0.7"
    out = tmp_path / "o.tar.gz"
    assert cli.main(["cache", "export", str(out), "-c", "openmpi"]) == 0 and out.is_file()
    assert cli.main(["cache", "export", str(out), "-c", "nccl"]) == 2
    assert "no artifact of 'nccl' (cached: openmpi)" in capsys.readouterr().err
