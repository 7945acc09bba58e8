"""The horovod role's controller-side pack program (``_horovod_pack_program``): the packages a
node lacks, named by the node's own answer, become one tar of root-owned 0644 members, and a
name that is not a wheel of the set's folder is refused before anything is written."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = yaml.safe_load((ROOT / "roles" / "horovod" / "vars" / "main.yml").read_text())[
    "_horovod_pack_program"
]


def pack(out: Path, src: Path, *names: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, str(out), str(src), *names],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_the_named_wheels_become_one_archive_of_root_owned_0644_members(tmp_path: Path) -> None:
    src = tmp_path / "set"
    src.mkdir()
    for name, body in (("a-1.whl", b"aa"), ("b-2.whl", b"bbb"), ("c-3.whl", b"c")):
        (src / name).write_bytes(body)
        (src / name).chmod(0o600)
    out = tmp_path / "scratch" / "x.tar"
    out.parent.mkdir()
    proc = pack(out, src, "a-1.whl", "b-2.whl")
    assert proc.returncode == 0, proc.stderr
    with tarfile.open(out) as tar:
        members = tar.getmembers()
        assert [(m.name, m.size, m.mode, m.uname, m.isfile()) for m in members] == [
            ("a-1.whl", 2, 0o644, "root", True),
            ("b-2.whl", 3, 0o644, "root", True),
        ]
        assert tar.extractfile("b-2.whl").read() == b"bbb"  # type: ignore[union-attr]
    assert sorted(p.name for p in out.parent.iterdir()) == ["x.tar"]  # no half-written file


@pytest.mark.parametrize("name", ["../x.whl", "sub/x.whl", ".hidden.whl", "x.tar", ""])
def test_a_name_that_is_not_a_wheel_of_the_folder_is_refused(tmp_path: Path, name: str) -> None:
    (tmp_path / "set").mkdir()
    out = tmp_path / "x.tar"
    proc = pack(out, tmp_path / "set", name)
    assert proc.returncode != 0 and "not a package of" in proc.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == [tmp_path / "set"]
