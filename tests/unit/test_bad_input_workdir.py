"""Bad input to ``mpictl run --workdir DIR [--exclude P]... [--max-workdir-size SIZE]``, as a
careless or hostile user gives it (the harness: :mod:`tests.unit.hostile`).

Every case is refused with exit 2 and one line that names the directory, file or pattern
(escaped), before any process or node: a missing, unreadable or looping directory, ``/`` or one
that holds the home directory, a pattern git would not take, an ignore file that is not UTF-8, a
size that is not a size, a tree over the cap, which is checked from sizes before any file is read
(a 200 GiB sparse file is refused without being opened). A FIFO in the tree is left out without
being opened, and non-UTF-8 names are selected, not a crash.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.hostile import Hostile, Outcome, watch_opens


@pytest.fixture(autouse=True)
def no_hang() -> Iterator[None]:
    """A case that blocks (on a FIFO) fails instead of hanging the run."""

    def alarm(*_: Any) -> None:
        raise TimeoutError("blocked for 60 s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def tree(hostile: Hostile, name: str = "proj", **files: str) -> Path:
    root = hostile.root / name
    root.mkdir()
    (root / "train.py").write_text("print('train')\n")
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def run(hostile: Hostile, directory: object, *options: str, says: tuple[str, ...] = ()) -> Outcome:
    argv = ("run", "-i", str(hostile.inventory), "--workdir", str(directory), *options)
    return hostile.refused(*argv, "--", "true", says=says)


def deny(monkeypatch: pytest.MonkeyPatch, name: str, what: str = "open") -> None:
    """``os.<what>`` fails with EACCES for a path whose last part is ``name`` (root reads
    everything, so the denial is faked)."""
    real = getattr(os, what)

    def fake(path: Any, *a: Any, **kw: Any) -> Any:
        if os.path.basename(os.fsdecode(path)) == name:
            raise PermissionError(13, "Permission denied", os.fsdecode(path))
        return real(path, *a, **kw)

    monkeypatch.setattr(os, what, fake)


def test_the_spies_see_a_workdir_run_that_gets_through(hostile: Hostile) -> None:
    # the control case: a good tree goes on to rsync/ssh to the head (the shims fail them)
    got = hostile.call(
        "run", "-i", str(hostile.inventory), "--workdir", str(tree(hostile)), "--", "true"
    )
    assert not got.traceback and got.code != 2, got.describe()
    assert any(line.startswith(("ssh ", "rsync ")) for line in got.shim_calls), got.describe()


def test_a_missing_directory_a_file_and_a_looping_link(hostile: Hostile) -> None:
    run(hostile, hostile.root / "nope", says=("no such directory", "nope"))
    (hostile.root / "file").write_text("x")
    run(hostile, hostile.root / "file", says=("not a directory",))
    (hostile.root / "loop").symlink_to("loop")
    run(hostile, hostile.root / "loop", says=("Too many levels of symbolic links",))
    run(hostile, "/dev/null", says=("/dev/null: not a directory",))
    run(hostile, "x" * 5000, says=("File name too long",))


def test_root_and_the_home_directory_are_refused(hostile: Hostile) -> None:
    (hostile.home / "proj").mkdir()
    run(hostile, "/", says=("--workdir /: the root directory",))
    run(hostile, hostile.home, says=("holds your home directory",))
    run(hostile, hostile.home.parent, says=("holds your home directory",))
    run(hostile, "~", says=("--workdir ~: holds your home directory",))


def test_a_path_with_control_characters_is_shown_escaped_on_one_line(hostile: Hostile) -> None:
    odd = hostile.root / "a\nb\x1b]0;pwned\x07"
    got = run(hostile, odd, says=("a\\nb\\x1b]0;pwned\\x07: no such directory",))
    assert len(got.err_lines) == 1 and "\x1b" not in got.err


def test_an_unreadable_dir(hostile: Hostile, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tree(hostile)
    real = os.access
    monkeypatch.setattr(
        os, "access", lambda p, m, **kw: False if os.fsdecode(p) == str(root) else real(p, m, **kw)
    )
    run(hostile, root, says=("--workdir", "readable"))


def test_an_unreadable_subdir(hostile: Hostile, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tree(hostile, **{"sub/locked/a.py": "x"})
    deny(monkeypatch, "locked", "scandir")
    run(hostile, root, says=(f"cannot read {root / 'sub' / 'locked'}: Permission denied",))


def test_an_unreadable_file_or_ignore_file(
    hostile: Hostile, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tree(hostile, **{"secret.py": "x", ".mpictlignore": "*.log\n"})
    deny(monkeypatch, "secret.py")
    run(hostile, root, says=(f"cannot read {root / 'secret.py'}: Permission denied",))
    deny(monkeypatch, ".mpictlignore")
    run(hostile, root, says=(f"cannot read {root / '.mpictlignore'}: Permission denied",))


@pytest.mark.parametrize("size", ["0", "-1", "abc", "1e9999", "nan", "1.5.5", "0.1", "", "1G\n"])
def test_a_size_that_is_not_a_size(hostile: Hostile, size: str) -> None:
    root = tree(hostile)
    run(hostile, root, "--max-workdir-size", size, says=("--max-workdir-size ",))


@pytest.mark.parametrize(
    ("pattern", "says"),
    [
        ("\\", "--exclude '\\': not a gitignore pattern"),
        ("!", "--exclude '!': not a gitignore pattern"),
        ("[z-a]", "--exclude '[z-a]': not a gitignore pattern"),
        ("secret.env\n", "--exclude 'secret.env\\n': a pattern is one line of text"),
    ],
)
def test_an_exclude_git_would_not_take(hostile: Hostile, pattern: str, says: str) -> None:
    run(hostile, tree(hostile), "--exclude", "*.log", "--exclude", pattern, says=(says,))


def test_exclude_without_workdir(hostile: Hostile) -> None:
    hostile.refused(
        "run", "-i", str(hostile.inventory), "--exclude", "*.log", "--", "true",
        says=("--exclude applies to --workdir",),
    )  # fmt: skip


def test_an_ignore_file_that_is_not_utf8_or_holds_a_bad_pattern(hostile: Hostile) -> None:
    root = tree(hostile, **{"sub/x.py": "x"})
    ignore = root / "sub" / ".mpictlignore"
    ignore.write_bytes(b"*.log\n\xff\xfe secret\n")
    run(hostile, root, says=(f"{ignore} is not UTF-8 text",))
    ignore.write_text("*.log\nkeys\\\n")
    run(hostile, root, says=(f"{ignore} line 2: 'keys\\' is not a gitignore pattern",))
    ignore.write_text("!\n")
    run(hostile, root, says=("line 1: '!' is not a gitignore pattern",))
    with ignore.open("wb") as fh:
        fh.truncate(200 * 1024**3)  # sparse: refused by its size, never read
    run(hostile, root, says=("too large for an ignore file",))


def test_the_size_cap_refuses_a_200_gib_sparse_file_without_opening_it(
    hostile: Hostile, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tree(hostile)
    big = root / "data" / "huge.bin"
    big.parent.mkdir()
    big.touch()
    os.truncate(big, 200 * 1024**3)  # costs no disk
    opened = watch_opens(monkeypatch, big)
    started = time.monotonic()
    run(hostile, root, "--max-workdir-size", "1M", says=("at least 200.0 GiB", "1.0 MiB cap"))
    assert time.monotonic() - started < 30  # generous: it reads no content at all
    assert str(big) not in opened and not [p for p in opened if p.startswith(str(root))]


def test_a_fifo_in_the_tree_is_not_opened_and_does_not_block(hostile: Hostile) -> None:
    root = tree(hostile)
    os.mkfifo(root / "pipe")
    os.mkfifo(root / ".mpictlignore")
    (root / "zz.bin").write_bytes(b"x" * 2048)
    # refused by the cap after the walk passed both FIFOs
    run(hostile, root, "--max-workdir-size", "1K", says=("at least 2.0 KiB",))
    # and without a cap in the way, it goes on to the head (the shims)
    got = hostile.call("run", "-i", str(hostile.inventory), "--workdir", str(root), "--", "true")
    assert not got.traceback and got.shim_calls, got.describe()


def test_non_utf8_names_are_no_crash_and_are_named_escaped(
    hostile: Hostile, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tree(hostile)
    raw = os.fsencode(root)
    for name in (b"caf\xe9.py", b"\xff\xfe.log", b"a\nb.py"):
        Path(os.fsdecode(raw + b"/" + name)).write_bytes(b"x")
    got = hostile.call("run", "-i", str(hostile.inventory), "--workdir", str(root), "--", "true")
    assert not got.traceback and got.code != 2 and got.shim_calls, got.describe()
    hostile.shim_log.unlink()
    deny(monkeypatch, os.fsdecode(b"caf\xe9.py"))
    got = run(hostile, root, says=("cannot read", "caf\\udce9.py: Permission denied"))
    assert len(got.err_lines) == 1
