"""``mpictl run --workdir DIR``: the user's code and data, the same tree at one path on every node.

What is sent is decided here, on the controller, with git's ignore rules: ``.mpictlignore`` files
(gitignore syntax, UTF-8, at any depth, deeper files win) and ``--exclude`` patterns (gitignore
syntax, relative to DIR; ``.git/`` is excluded unless a pattern re-includes it). A symlink that
points inside DIR travels as a symlink; one that points outside (or nowhere: a loop) is never
followed and never sent. Sockets, FIFOs and devices are left out without being opened.

Bad input is refused with one line before anything is sent: a pattern git would not take, an
ignore file that is not UTF-8 text, ``/`` or a directory holding the user's home, a tree over the
size cap. The cap is checked while walking, from ``lstat`` sizes, before any file is read: a
200 GB (sparse) file is refused at once, not hashed. Only then is the selection hashed: its digest
(sha256 over every path, mode and content; a name with a newline or a leading ``"`` is written
JSON-quoted, so no name can forge another entry) is what the job record keeps.

rsync then moves exactly that selection (:mod:`mpictl.transfer`): the list of selected paths,
NUL-separated (:func:`rsync_files`), is what it sends; the left-out paths as NUL-separated,
anchored, escaped exclude rules (:func:`rsync_filter`) only decide what is deleted on the head.
Names are bytes end to end (non-UTF-8 names travel as they are). The path on the nodes is
``~/.mpictl/workdirs/<name>-<hash of DIR's absolute path>`` of the MPI user: stable per DIR, so a
second run moves only what changed.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mpictl.errors import UsageError
from mpictl.inputs import quoted, shown

IGNORE_FILE = ".mpictlignore"
MAX_IGNORE_FILE = 1024**2  # an ignore file is a list of patterns, not data
DEFAULT_EXCLUDES = (".git/",)
DEFAULT_MAX_BYTES = 2 * 1024**3
REMOTE_BASE = ".mpictl/workdirs"  # relative to the MPI user's home on every node
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


@dataclass
class Selection:
    """What of DIR is sent: relative paths (POSIX), and what was left out and why."""

    root: Path
    files: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)  # symlinks kept (they point inside DIR)
    dirs: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # by .mpictlignore/--exclude ("dir/" form)
    unsafe_links: list[str] = field(default_factory=list)  # point outside DIR: never sent
    total_bytes: int = 0
    digest: str = ""

    @property
    def left_out(self) -> list[str]:
        return sorted(self.ignored + self.unsafe_links)


def human_size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GiB"


def parse_size(text: str) -> int:
    """``2G``, ``500M``, ``1.5GiB``, ``1048576``: bytes, at least 1 (UsageError otherwise)."""
    m = re.fullmatch(r" *(\d+(?:\.\d+)?) *([kmgt]?)(i?b)? *", text.lower(), re.ASCII)
    size = float(m.group(1)) * 1024 ** " kmgt".index(m.group(2) or " ") if m else math.nan
    if not math.isfinite(size) or size < 1:
        raise UsageError(
            f"--max-workdir-size {quoted(text)}: expected a size such as 2G, 500M or bytes"
        )
    return int(size)


def _compile(lines: Sequence[str]) -> Any:
    import pathspec

    return pathspec.GitIgnoreSpec.from_lines(list(lines))


def _spec(lines: Sequence[str], bad: Any) -> Any:
    """The lines as one gitignore spec; ``bad(index, line)`` raises for the first line pathspec
    refuses (a trailing backslash, a lone ``!``, a range such as ``[z-a]``)."""
    try:
        return _compile(lines)
    except (ValueError, re.error):
        pass
    for index, line in enumerate(lines):
        try:
            _compile([line])
        except (ValueError, re.error):
            bad(index, line)
    raise AssertionError("unreachable: a spec that fails has a line that fails")  # pragma: no cover


def check_excludes(excludes: Sequence[str]) -> Any:
    """``--exclude`` patterns as a gitignore spec; UsageError naming the pattern git would not
    take (or one that is not one line: git reads patterns line by line)."""
    for pattern in excludes:
        if "\n" in pattern or "\r" in pattern or "\0" in pattern:
            raise UsageError(f"--exclude {quoted(pattern)}: a pattern is one line of text")

    def bad(_: int, line: str) -> None:
        raise UsageError(f"--exclude {quoted(line)}: not a gitignore pattern")

    return _spec(excludes, bad)


class _Rules:
    """gitignore rules, in git's precedence: the command line's patterns (``--exclude``) first,
    then the ignore files, deepest first, then the defaults (``.git/``), which an ignore file
    may re-include."""

    def __init__(self, excludes: Sequence[str]) -> None:
        self.command_line = check_excludes(excludes)
        self.specs: list[tuple[str, Any]] = [("", _compile(DEFAULT_EXCLUDES))]

    def enter(self, rel_dir: str, directory: Path) -> None:
        path = directory / IGNORE_FILE
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise _cannot_read(path, exc) from None
        if not stat.S_ISREG(info.st_mode):  # a link, a FIFO, a directory: not read
            return
        if info.st_size > MAX_IGNORE_FILE:
            raise UsageError(
                f"--workdir: {shown(path)} is {human_size(info.st_size)}: too large for an "
                f"ignore file (at most {human_size(MAX_IGNORE_FILE)})"
            )
        try:
            data = _read(path, MAX_IGNORE_FILE)
        except OSError as exc:
            raise _cannot_read(path, exc) from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UsageError(
                f"--workdir: {shown(path)} is not UTF-8 text (byte {exc.start}): an ignore file "
                "holds gitignore patterns"
            ) from None
        lines = [line.removesuffix("\r") for line in text.split("\n")]

        def bad(index: int, line: str) -> None:
            raise UsageError(
                f"--workdir: {shown(path)} line {index + 1}: {quoted(line)} is not a gitignore "
                "pattern"
            )

        self.specs.append((rel_dir, _spec(lines, bad)))

    def ignored(self, rel: str, is_dir: bool) -> bool:
        """The first level with a matching rule decides (its last matching rule, as in git)."""
        result = self.command_line.check_file(rel + "/" if is_dir else rel)
        if result.include is not None:
            return bool(result.include)
        for base, spec in reversed(self.specs):
            if base and not rel.startswith(base + "/"):
                continue
            inner = rel[len(base) + 1 :] if base else rel
            result = spec.check_file(inner + "/" if is_dir else inner)
            if result.include is not None:
                return bool(result.include)
        return False


def _read(path: Path, limit: int) -> bytes:
    """At most ``limit`` bytes of a regular file, never through a link, never blocking."""
    fd = os.open(path, _READ)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        chunks, left = [], limit
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _inside(root: Path, link: Path) -> bool:
    """The link leads to DIR or below it (a loop leads nowhere: not inside)."""
    try:
        os.stat(link)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return False
    target = os.path.realpath(link)
    return target == str(root) or target.startswith(str(root) + os.sep)


def _root(directory: str | Path) -> Path:
    """DIR, resolved; UsageError for what cannot be a workdir."""
    text = os.fspath(directory)
    if not text:
        raise UsageError("--workdir '': expected a directory")
    path = Path(text).expanduser()
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise UsageError(f"--workdir {shown(text)}: no such directory") from None
    except OSError as exc:
        raise UsageError(f"--workdir {shown(text)}: {exc.strerror}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise UsageError(f"--workdir {shown(text)}: not a directory")
    if not os.access(path, os.R_OK | os.X_OK):
        raise UsageError(f"--workdir {shown(text)}: permission denied")
    root = Path(os.path.realpath(path))
    if root == Path(root.anchor):
        raise UsageError(
            f"--workdir {shown(text)}: the root directory; give the directory of the job's code "
            "and data"
        )
    home = _home()
    if home is not None and (home == root or root in home.parents):
        raise UsageError(
            f"--workdir {shown(text)}: holds your home directory ({shown(home)}, with its keys "
            "and credentials); give the directory of the job's code and data"
        )
    return root


def _home() -> Path | None:
    try:
        home = Path(os.path.realpath(Path.home()))
    except (KeyError, RuntimeError, OSError):
        return None
    return None if home == Path(home.anchor) else home


def _cannot_read(path: Any, exc: OSError) -> UsageError:
    """The one line for a file or directory of the tree that cannot be read."""
    return UsageError(f"--workdir: cannot read {shown(path)}: {exc.strerror}")


def _too_large(directory: str | Path, size: int, max_bytes: int) -> UsageError:
    return UsageError(
        f"--workdir {shown(os.fspath(directory))}: at least {human_size(size)} to send, over the "
        f"{human_size(max_bytes)} cap (raise --max-workdir-size, or leave files out with "
        f"{IGNORE_FILE} or --exclude)"
    )


def _field(text: str, also: str = "") -> bytes:
    """A name in a digest entry: its bytes, or JSON-quoted when it holds a newline, starts with
    ``"`` or holds one of ``also`` (so that no name reads as another entry or field)."""
    if "\n" in text or text.startswith('"') or any(c in text for c in also):
        return json.dumps(text).encode()
    return os.fsencode(text)


def select(
    directory: str | Path, excludes: Sequence[str] = (), max_bytes: int = DEFAULT_MAX_BYTES
) -> Selection:
    """What of ``directory`` is sent; UsageError (one line) for a bad pattern, a missing,
    unreadable or too large tree, before anything is sent. Sizes are summed from ``lstat`` while
    walking, so the cap refuses a tree before any file in it is read; the files are hashed
    after."""
    rules = _Rules(excludes)  # the patterns first: they do not depend on the tree
    root = _root(directory)
    sel = Selection(root=root)
    entries: list[tuple[str, str, Any]] = []  # (kind, rel, detail) in digest order
    for kind, rel, detail in _walk(sel, rules):
        entries.append((kind, rel, detail))
        if sel.total_bytes > max_bytes:  # the walk stops there: the tree may hold more
            raise _too_large(directory, sel.total_bytes, max_bytes)
    hasher = hashlib.sha256()
    budget = max_bytes  # a file that grows while it is read cannot pass the cap either
    for kind, rel, detail in entries:
        if kind == "D":
            hasher.update(b"D " + _field(rel) + b"\n")
        elif kind == "L":
            hasher.update(b"L " + _field(rel) + b" " + _field(detail, ' "') + b"\n")
        else:
            path, info = detail
            content, read = _hash(path, info)
            budget -= read
            if budget < 0:
                raise _too_large(directory, max_bytes - budget, max_bytes)
            mode = stat.S_IMODE(info.st_mode)
            hasher.update(b"F " + _field(rel) + f" {mode:o} {content}\n".encode())
    sel.digest = hasher.hexdigest()
    return sel


def _walk(sel: Selection, rules: _Rules) -> Iterator[tuple[str, str, Any]]:
    """Every kept entry, in digest order, as the walk finds it: ``("D", rel, None)``,
    ``("L", rel, target)``, ``("F", rel, (path, lstat))``; ``sel`` filled as it goes."""
    root = sel.root

    def on_error(exc: OSError) -> None:
        raise _cannot_read(exc.filename, exc)

    for current, dirnames, filenames in os.walk(root, onerror=on_error):
        base = Path(current)
        rel_dir = base.relative_to(root).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir
        rules.enter(rel_dir, base)
        kept_dirs = []
        for name in sorted(dirnames):
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if (base / name).is_symlink():
                filenames.append(name)  # a link to a directory travels as a link
            elif rules.ignored(rel, is_dir=True):
                sel.ignored.append(rel + "/")
            else:
                kept_dirs.append(name)
                sel.dirs.append(rel)
                yield "D", rel, None
        dirnames[:] = kept_dirs
        for name in sorted(filenames):
            entry = _entry(sel, rules, base / name, f"{rel_dir}/{name}" if rel_dir else name)
            if entry is not None:
                yield entry


def _entry(sel: Selection, rules: _Rules, path: Path, rel: str) -> tuple[str, str, Any] | None:
    try:
        info = os.lstat(path)
        target = os.readlink(path) if stat.S_ISLNK(info.st_mode) else ""
    except OSError as exc:
        raise _cannot_read(path, exc) from None
    if stat.S_ISLNK(info.st_mode):
        if rules.ignored(rel, is_dir=False):
            sel.ignored.append(rel)
        elif _inside(sel.root, path):
            sel.links.append(rel)
            return "L", rel, target
        else:
            sel.unsafe_links.append(rel)
        return None
    if rules.ignored(rel, is_dir=False) or not stat.S_ISREG(info.st_mode):
        sel.ignored.append(rel)  # sockets, fifos, devices: not code or data (never opened)
        return None
    sel.files.append(rel)
    sel.total_bytes += info.st_size
    return "F", rel, (path, info)


def _hash(path: Path, info: os.stat_result) -> tuple[str, int]:
    """sha256 of a file the walk found, and the bytes read; UsageError if it cannot be read or
    is no longer that file."""
    try:
        fd = os.open(path, _READ)
    except OSError as exc:
        raise _cannot_read(path, exc) from None
    content, read = hashlib.sha256(), 0
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino) or not stat.S_ISREG(now.st_mode):
            raise UsageError(f"--workdir: {shown(path)} changed while it was read; run again")
        while chunk := os.read(fd, 1 << 20):
            content.update(chunk)
            read += len(chunk)
    except OSError as exc:
        raise _cannot_read(path, exc) from None
    finally:
        os.close(fd)
    return content.hexdigest(), read


def remote_dir(directory: Path) -> str:
    """The path (relative to the MPI user's home) DIR has on every node: stable per DIR."""
    slug = re.sub(r"[^A-Za-z0-9_.-]", "_", directory.name) or "root"
    return f"{REMOTE_BASE}/{slug}-{hashlib.sha256(str(directory).encode()).hexdigest()[:10]}"


def _escape(rel: str) -> bytes:
    """A path as a literal rsync pattern: rsync reads a backslash as an escape only in a pattern
    that has a wildcard character, so a path without one stays as it is."""
    raw = os.fsencode(rel)
    if not re.search(rb"[*?\[]", raw):
        return raw
    return re.sub(rb"([*?\[\\])", rb"\\\1", raw)


def rsync_filter(sel: Selection) -> bytes:
    """rsync exclude rules (``--from0``: NUL-terminated, so no name can add a rule) for exactly
    what the selection left out, anchored: what is deleted on the head."""
    return b"".join(b"- /" + _escape(rel) + b"\0" for rel in sel.left_out)


def rsync_files(sel: Selection) -> bytes:
    """The selected paths for ``rsync --files-from=- --from0``: every directory, file and link,
    NUL-terminated, each as ``./PATH`` (rsync skips a line that starts with ``#`` or ``;``)."""
    paths = sorted(sel.dirs + sel.files + sel.links)
    return b"".join(b"./" + os.fsencode(rel) + b"\0" for rel in paths)
