"""What ``run --workdir`` selects (mpictl.workdir): git's ignore rules from ``.mpictlignore`` at
any depth and ``--exclude``, ``.git/`` left out by default, symlinks out of the tree never
followed, the size cap and bad directories as one-line usage errors, the digest, the remote
path. A wrong answer here sends secrets or a whole dataset, or misses the code the job runs."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from mpictl import workdir
from mpictl.errors import UsageError
from mpictl.inputs import quoted
from tests.unit.hostile import watch_opens


def write(root: Path, rel: str, text: str = "x", mode: int | None = None) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mode is not None:
        path.chmod(mode)
    return path


def usage_error(directory: object, **kw: object) -> str:
    with pytest.raises(UsageError) as err:
        workdir.select(directory, **kw)  # type: ignore[arg-type]
    message = str(err.value)
    assert "\n" not in message, message
    return message


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A project with ignore files at two levels, a .git dir, an ignored build dir."""
    root = tmp_path / "proj"
    write(root, ".mpictlignore", "*.log\nbuild/\n*.dat\n!data.dat\n")
    write(root, "train.py", "print('hi')\n")
    write(root, "run.log")
    write(root, "data.dat")
    write(root, "other.dat")
    write(root, "build/x.o")
    write(root, "build/deep/y.o")
    write(root, ".git/config")
    write(root, ".git/objects/ab/cdef")
    write(root, "sub/.mpictlignore", "!keep.log\n*.tmp\ndata.dat\n")
    write(root, "sub/keep.log")
    write(root, "sub/other.log")
    write(root, "sub/t.tmp")
    write(root, "sub/data.dat")
    write(root, "sub/code.py")
    write(root, "sib/keep.log")
    write(root, "sib/t.tmp")
    write(root, "sib/data.dat")
    return root


def test_root_and_nested_ignore_files_deeper_wins(tree: Path) -> None:
    sel = workdir.select(tree)
    assert sorted(sel.files) == [
        ".mpictlignore",
        "data.dat",  # root's negation
        "sib/data.dat",  # root's negation still applies below it
        "sib/t.tmp",  # sub's *.tmp does not reach a sibling
        "sub/.mpictlignore",
        "sub/code.py",
        "sub/keep.log",  # sub's !keep.log beats root's *.log
        "train.py",
    ]
    assert sorted(sel.ignored) == [
        ".git/",
        "build/",
        "other.dat",
        "run.log",
        "sib/keep.log",  # sub's negation does not reach a sibling
        "sub/data.dat",  # sub's ignore beats root's negation
        "sub/other.log",
        "sub/t.tmp",
    ]
    assert sorted(sel.dirs) == ["sib", "sub"]
    assert sel.unsafe_links == [] and sel.links == []
    assert sel.left_out == sorted(sel.ignored)


def test_exclude_patterns_are_gitignore_patterns_relative_to_the_dir(tree: Path) -> None:
    sel = workdir.select(tree, excludes=["*.py", "/sib/"])
    assert "train.py" not in sel.files and "sub/code.py" not in sel.files
    assert "train.py" in sel.ignored and "sub/code.py" in sel.ignored
    assert "sib/" in sel.ignored and not any(f.startswith("sib/") for f in sel.files)
    assert "sub/keep.log" in sel.files  # the ignore files still apply


def test_git_dir_is_left_out_unless_a_pattern_re_includes_it(tree: Path) -> None:
    assert not any(f.startswith(".git/") for f in workdir.select(tree).files)
    sel = workdir.select(tree, excludes=["!.git/"])
    assert {".git/config", ".git/objects/ab/cdef"} <= set(sel.files)
    assert ".git/" not in sel.ignored


def test_an_ignored_directory_is_not_descended_into(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a sparse 64 MiB file inside it counts for nothing against a 1 MiB cap
    with (tree / "build" / "huge.bin").open("wb") as fh:
        fh.truncate(64 * 1024**2)
    scanned: list[str] = []
    real = os.scandir

    def spy(path: object = ".") -> object:
        scanned.append(os.fspath(path))  # type: ignore[arg-type]
        return real(path)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "scandir", spy)
    sel = workdir.select(tree, max_bytes=1024**2)
    assert str(tree / "sub") in scanned  # the spy sees os.walk's reads
    assert not [p for p in scanned if "build" in p or ".git" in p]
    assert not any(f.startswith("build/") for f in sel.files)


def test_symlinks_inside_are_kept_as_links_outside_never_followed(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    write(root, "a.py")
    write(root, "sub/b.py")
    outside = tmp_path / "secrets"
    write(outside, "key", "SECRET")
    sibling = tmp_path / "proj-other"  # shares the prefix "proj"
    write(sibling, "c.py")
    (root / "to_a").symlink_to("a.py")
    (root / "sub" / "up").symlink_to("../a.py")
    (root / "to_sub").symlink_to("sub")  # a link to a directory inside
    (root / "self").symlink_to(".")
    (root / "key").symlink_to(outside / "key")  # a file outside
    (root / "secrets").symlink_to(outside)  # a directory outside
    (root / "sub" / "escape").symlink_to("../../secrets")  # relative, out of the tree
    (root / "prefix").symlink_to(sibling / "c.py")
    (root / "chain").symlink_to("key")  # inside, to a link that leads out
    sel = workdir.select(root)
    assert sorted(sel.links) == ["self", "sub/up", "to_a", "to_sub"]
    assert sorted(sel.unsafe_links) == ["chain", "key", "prefix", "secrets", "sub/escape"]
    assert sorted(sel.files) == ["a.py", "sub/b.py"]  # nothing read through a link
    assert sel.dirs == ["sub"]
    assert set(sel.unsafe_links) <= set(sel.left_out)
    assert sel.total_bytes == 2  # only a.py and sub/b.py


def test_an_ignored_symlink_is_ignored_not_unsafe(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    write(root, ".mpictlignore", "data\n")
    write(tmp_path / "big", "f")
    (root / "data").symlink_to(tmp_path / "big")
    sel = workdir.select(root)
    assert sel.ignored == ["data"] and sel.unsafe_links == []


def test_size_cap_is_refused_with_the_size_and_the_cap(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    write(root, "a.bin", "x" * 1024)
    write(root, "sub/b.bin", "x" * 1024)
    assert workdir.select(root, max_bytes=2048).total_bytes == 2048  # at the cap: fine
    message = usage_error(root, max_bytes=1536)
    assert message.startswith(f"--workdir {root}: at least 2.0 KiB to send, over the 1.5 KiB cap")
    assert "--max-workdir-size" in message
    # the walk stops at the first directory past the cap: the size is a lower bound, said so
    message = usage_error(root, max_bytes=1000)
    assert "at least 1.0 KiB to send, over the 1000 B cap" in message
    # ignored content does not count
    write(root, ".mpictlignore", "sub/\n")
    assert workdir.select(root, max_bytes=1100).total_bytes == 1024 + len("sub/\n")


def test_missing_dir_a_file_and_an_unreadable_dir_are_one_line_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert usage_error(tmp_path / "nope") == f"--workdir {tmp_path / 'nope'}: no such directory"
    file = write(tmp_path, "file.txt")
    assert usage_error(file) == f"--workdir {file}: not a directory"
    # root can read any directory whatever its mode, so the access check is faked
    real = os.access
    denied = tmp_path / "proj"
    denied.mkdir()
    monkeypatch.setattr(
        os, "access", lambda p, m, **kw: False if Path(p) == denied else real(p, m, **kw)
    )
    assert usage_error(denied) == f"--workdir {denied}: permission denied"


def test_an_unreadable_subdirectory_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "proj"
    write(root, "a.py")
    write(root, "locked/b.py")
    real = os.scandir

    def scandir(path: object = ".") -> object:
        if Path(os.fspath(path)).name == "locked":  # type: ignore[arg-type]
            raise PermissionError(13, "Permission denied", os.fspath(path))  # type: ignore[arg-type]
        return real(path)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "scandir", scandir)
    message = usage_error(root)
    assert message == f"--workdir: cannot read {root / 'locked'}: Permission denied"


def test_an_unreadable_ignore_file_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "proj"
    write(root, "sub/.mpictlignore", "*.tmp\n")
    real = os.open

    def fake_open(path: object, flags: int, *a: object, **kw: object) -> int:
        if Path(os.fspath(path)).name == ".mpictlignore":  # type: ignore[arg-type]
            raise PermissionError(13, "Permission denied", os.fspath(path))  # type: ignore[arg-type]
        return real(path, flags, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", fake_open)
    message = usage_error(root)
    assert message == f"--workdir: cannot read {root / 'sub' / '.mpictlignore'}: Permission denied"


def test_digest_follows_content_and_mode_not_ignored_files(tree: Path) -> None:
    first = workdir.select(tree).digest
    assert len(first) == 64 and workdir.select(tree).digest == first  # deterministic
    write(tree, "run.log", "changed")  # ignored
    write(tree, "build/new.o", "new")  # in an ignored dir
    write(tree, "sub/new.tmp", "new")
    assert workdir.select(tree).digest == first
    write(tree, "train.py", "print('bye')\n")
    second = workdir.select(tree).digest
    assert second != first
    (tree / "train.py").chmod(0o755)
    third = workdir.select(tree).digest
    assert third != second
    (tree / "train.py").chmod(0o644)
    assert workdir.select(tree).digest == second  # the mode, not the ctime
    (tree / "train.py").rename(tree / "train2.py")  # same content, another name
    assert workdir.select(tree).digest not in (first, second, third)


def test_digest_follows_a_link_target_and_an_empty_dir(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    write(root, "a")
    write(root, "b")
    (root / "l").symlink_to("a")
    first = workdir.select(root).digest
    (root / "l").unlink()
    (root / "l").symlink_to("b")
    assert workdir.select(root).digest != first
    second = workdir.select(root).digest
    (root / "empty").mkdir()
    assert workdir.select(root).digest != second


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("2G", 2 * 1024**3),
        ("500M", 500 * 1024**2),
        ("1.5GiB", int(1.5 * 1024**3)),
        ("1048576", 1048576),
        ("1K", 1024),
        ("1kb", 1024),
        ("3 MiB", 3 * 1024**2),
        ("1T", 1024**4),
        ("10B", 10),
    ],
)
def test_parse_size(text: str, size: int) -> None:
    assert workdir.parse_size(text) == size


@pytest.mark.parametrize(
    "text",
    [
        *("", "0", "0.0G", "-1G", "abc", "2X", "G", "1.2.3M", "2 G B", "-1", "1e9999", "nan"),
        *("inf", "1.5.5", "0.5", "0.0001K", "1" + "0" * 400, "\u0663M", "\uff11G", "1G\x00"),
    ],
)
def test_parse_size_refuses_what_is_not_a_size(text: str) -> None:
    with pytest.raises(UsageError) as err:
        workdir.parse_size(text)
    assert str(err.value).startswith(f"--max-workdir-size {quoted(text)}: expected a size")


def test_remote_dir_is_stable_per_path_and_tells_same_names_apart(tmp_path: Path) -> None:
    a = tmp_path / "a" / "proj"
    b = tmp_path / "b" / "proj"
    assert workdir.remote_dir(a) == workdir.remote_dir(tmp_path / "a" / "proj")
    assert workdir.remote_dir(a) != workdir.remote_dir(b)
    for path in (a, b):
        rel = workdir.remote_dir(path)
        assert rel.startswith(".mpictl/workdirs/proj-")
        assert "/" not in rel.removeprefix(".mpictl/workdirs/")
    odd = workdir.remote_dir(tmp_path / "my proj;rm -rf")
    assert odd.removeprefix(".mpictl/workdirs/").startswith("my_proj_rm_-rf-")
    assert workdir.remote_dir(Path("/")).startswith(".mpictl/workdirs/root-")


def test_rsync_filter_is_anchored_and_escapes_wildcards(tmp_path: Path) -> None:
    sel = workdir.Selection(
        root=tmp_path, ignored=["build/", "a*b[1]?.txt", "c\\d", "e\\f*"], unsafe_links=["k"]
    )
    assert workdir.rsync_filter(sel).split(b"\0") == [
        b"- /a\\*b\\[1]\\?.txt",
        b"- /build/",
        b"- /c\\d",  # no wildcard: rsync reads the backslash literally
        b"- /e\\\\f\\*",
        b"- /k",
        b"",  # every rule NUL-terminated (rsync --from0)
    ]


def test_rsync_lists_are_nul_terminated_bytes_a_newline_is_part_of_a_name(tmp_path: Path) -> None:
    odd = "a\n+ secret.env\n- x.log"
    sel = workdir.Selection(
        root=tmp_path,
        dirs=["d"],
        files=["#x", ";y", odd, "d/f", os.fsdecode(b"\xff.bin")],
        links=["l"],
        ignored=[odd + ".log"],
    )
    assert workdir.rsync_files(sel).split(b"\0") == [
        b"./#x",  # rsync would skip a line starting with '#' or ';' as a comment
        b"./;y",
        b"./a\n+ secret.env\n- x.log",
        b"./d",
        b"./d/f",
        b"./l",
        b"./\xff.bin",  # non-UTF-8 names as their bytes
        b"",
    ]
    assert workdir.rsync_filter(sel) == b"- /a\n+ secret.env\n- x.log.log\0"


def test_digest_format_of_an_ordinary_tree_is_unchanged(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    write(root, "a", "x", 0o644)
    write(root, "sub/b", "y", 0o755)
    (root / "l").symlink_to("a")

    def sha(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()

    lines = f"D sub\nF a 644 {sha('x')}\nL l a\nF sub/b 755 {sha('y')}\n"
    assert workdir.select(root).digest == sha(lines)


def test_a_name_with_a_newline_cannot_forge_digest_entries(tmp_path: Path) -> None:
    # two files "a" and "b", and one file whose name spells the first entry and the second's
    # start: the old line format hashed both trees to the same bytes
    two = tmp_path / "two"
    write(two, "a", "x", 0o644)
    write(two, "b", "y", 0o644)
    x = hashlib.sha256(b"x").hexdigest()
    one = tmp_path / "one"
    write(one, f"a 644 {x}\nF b", "y", 0o644)
    assert workdir.select(one).digest != workdir.select(two).digest
    # nor a link target with a space, nor a name that starts with a quote
    links, spaces = tmp_path / "links", tmp_path / "spaces"
    (links / "a b").mkdir(parents=True)
    (links / "a b" / "c").symlink_to("d")
    (links / "a").mkdir()
    (spaces / "a b").mkdir(parents=True)
    (spaces / "a").mkdir()
    (spaces / "a" / "b c").symlink_to("d")  # "L a/b c d" both ways without quoting
    assert workdir.select(links).digest != workdir.select(spaces).digest


def test_non_utf8_names_are_selected_hashed_and_ignored_as_bytes(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    raw = os.fsencode(root)
    for name in (b"caf\xe9.py", b"\xff\xfe.log", b"ok.py"):
        (Path(os.fsdecode(raw + b"/" + name))).write_bytes(b"x")
    write(root, ".mpictlignore", "*.log\n")
    sel = workdir.select(root)
    assert sorted(os.fsencode(f) for f in sel.files) == [b".mpictlignore", b"caf\xe9.py", b"ok.py"]
    assert [os.fsencode(f) for f in sel.ignored] == [b"\xff\xfe.log"]
    assert len(sel.digest) == 64


def test_a_non_utf8_ignore_file_and_bad_patterns_are_one_line_errors(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    write(root, "a.py")
    (root / "sub").mkdir()
    (root / "sub" / ".mpictlignore").write_bytes(b"*.log\n\xff\xfe\n")
    message = usage_error(root)
    assert message.startswith(f"--workdir: {root / 'sub' / '.mpictlignore'} is not UTF-8 text")
    (root / "sub" / ".mpictlignore").write_text("*.log\n# ok\nfoo\\\n")
    message = usage_error(root)
    assert message == (
        f"--workdir: {root / 'sub' / '.mpictlignore'} line 3: 'foo\\' is not a gitignore pattern"
    )
    (root / "sub" / ".mpictlignore").write_text("[z-a]\n")
    assert "line 1: '[z-a]' is not a gitignore pattern" in usage_error(root)


@pytest.mark.parametrize(
    ("pattern", "says"),
    [
        ("\\", "--exclude '\\': not a gitignore pattern"),
        ("!", "--exclude '!': not a gitignore pattern"),
        ("[z-a]", "--exclude '[z-a]': not a gitignore pattern"),
        ("secret\n", "--exclude 'secret\\n': a pattern is one line of text"),
        ("a\rb", "--exclude 'a\\rb': a pattern is one line of text"),
    ],
)
def test_an_exclude_git_would_not_take_is_refused_before_the_tree_is_read(
    tmp_path: Path, pattern: str, says: str
) -> None:
    # the patterns are checked first: even a missing directory is not looked at
    assert usage_error(tmp_path / "nope", excludes=["*.log", pattern]) == says


def test_the_cap_is_checked_from_sizes_before_any_file_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "proj"
    write(root, "a.py", "x" * 100)
    big = root / "data" / "huge.bin"
    big.parent.mkdir()
    os.truncate(write(root, "data/huge.bin", ""), 200 * 1024**3)  # sparse: no disk
    write(root, "zz/after.py")
    opened = watch_opens(monkeypatch, big)
    message = usage_error(root, max_bytes=1024**2)
    assert message.startswith(f"--workdir {root}: at least 200.0 GiB to send, over the 1.0 MiB cap")
    assert opened == []  # not even a.py: hashing starts after the walk


def test_a_file_that_grows_past_the_cap_while_hashed_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "proj"
    path = write(root, "log.txt", "x" * 10)
    real = workdir._walk

    def walk(sel: workdir.Selection, rules: object) -> object:
        yield from real(sel, rules)  # type: ignore[arg-type]
        path.write_text("x" * 5000)  # after its size was taken

    monkeypatch.setattr(workdir, "_walk", walk)
    assert "to send, over the 1.0 KiB cap" in usage_error(root, max_bytes=1024)


def test_fifos_sockets_are_left_out_unopened_and_a_swapped_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "proj"
    write(root, "a.py")
    os.mkfifo(root / "pipe")
    os.mkfifo(root / ".mpictlignore")  # not read: reading would block
    sub = root / "sub"
    sub.mkdir()
    os.mkfifo(sub / "fifo.py")
    sel = workdir.select(root)  # returns: nothing blocked on a FIFO
    assert sorted(sel.files) == ["a.py"]
    assert sorted(sel.ignored) == [".mpictlignore", "pipe", "sub/fifo.py"]
    # a file replaced by a FIFO between the walk and the hash: refused, not blocked on
    real = workdir._walk

    def walk(sel: workdir.Selection, rules: object) -> object:
        yield from real(sel, rules)  # type: ignore[arg-type]
        (root / "a.py").unlink()
        os.mkfifo(root / "a.py")

    monkeypatch.setattr(workdir, "_walk", walk)
    assert usage_error(root) == f"--workdir: {root / 'a.py'} changed while it was read; run again"


def test_symlink_loops_are_left_out_and_a_looping_workdir_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    write(root, "a.py")
    (root / "self").symlink_to("self")
    (root / "x").symlink_to("y")
    (root / "y").symlink_to("x")
    sel = workdir.select(root)
    assert sel.files == ["a.py"] and sel.links == []
    assert sorted(sel.unsafe_links) == ["self", "x", "y"]
    (tmp_path / "loop").symlink_to("loop")
    message = usage_error(tmp_path / "loop")
    assert message == f"--workdir {tmp_path / 'loop'}: Too many levels of symbolic links"


def test_root_home_and_what_holds_home_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert usage_error("/").startswith("--workdir /: the root directory")
    home = tmp_path / "home" / "me"
    write(home, "proj/a.py")
    monkeypatch.setenv("HOME", str(home))
    for directory in (home, tmp_path / "home", "~"):
        assert "holds your home directory" in usage_error(directory)
    assert workdir.select(home / "proj").files == ["a.py"]
    assert usage_error("") == "--workdir '': expected a directory"


def test_paths_in_messages_are_escaped(tmp_path: Path) -> None:
    odd = tmp_path / "a\nb\x1b]0;title\x07"
    assert usage_error(odd) == f"--workdir {tmp_path}/a\\nb\\x1b]0;title\\x07: no such directory"
