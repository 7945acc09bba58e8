"""``mpictl run --workdir DIR``: the user's code and data, the same tree at one path on every node.

What is sent is decided here, on the controller, with git's ignore rules: ``.mpictlignore`` files
(gitignore syntax, at any depth, deeper files win) and ``--exclude`` patterns (gitignore syntax,
relative to DIR; ``.git/`` is excluded unless a pattern re-includes it). A symlink that points
inside DIR travels as a symlink; one that points outside is never followed and never sent. The
selection has a size cap (refused with its size before anything is sent) and a digest (sha256
over every path, mode and content) that the job record keeps.

rsync then moves exactly that selection (everything else is excluded by anchored rules, and
deleted on the nodes) over the cluster's own SSH with its pinned host keys: once from the
controller to the head, then from the nodes that hold it to those that do not, in rounds
(``scripts/workdir_fanout.py``), so the controller's upload does not grow with the cluster. The
path on the nodes is ``~/.mpictl/workdirs/<name>-<hash of DIR's absolute path>`` of the MPI user:
stable per DIR, so a second run moves only what changed.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mpictl.errors import UsageError

IGNORE_FILE = ".mpictlignore"
DEFAULT_EXCLUDES = (".git/",)
DEFAULT_MAX_BYTES = 2 * 1024**3
REMOTE_BASE = ".mpictl/workdirs"  # relative to the MPI user's home on every node


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
    """``2G``, ``500M``, ``1.5GiB``, ``1048576``: bytes (UsageError otherwise)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*", text.lower())
    if not m or float(m.group(1)) <= 0:
        raise UsageError(f"--max-workdir-size {text!r}: expected a size such as 2G, 500M or bytes")
    return int(float(m.group(1)) * 1024 ** " kmgt".index(m.group(2) or " "))


class _Rules:
    """gitignore rules, in git's precedence: the command line's patterns (``--exclude``) first,
    then the ignore files, deepest first, then the defaults (``.git/``), which an ignore file
    may re-include."""

    def __init__(self, root: Path, excludes: Sequence[str]) -> None:
        import pathspec

        self._pathspec = pathspec
        self.root = root
        self.command_line = pathspec.GitIgnoreSpec.from_lines(list(excludes))
        self.specs: list[tuple[str, object]] = [
            ("", pathspec.GitIgnoreSpec.from_lines(list(DEFAULT_EXCLUDES)))
        ]

    def enter(self, rel_dir: str, directory: Path) -> None:
        path = directory / IGNORE_FILE
        if path.is_file() and not path.is_symlink():
            try:
                lines = path.read_text().splitlines()
            except OSError as exc:
                raise UsageError(f"--workdir: cannot read {path}: {exc.strerror}") from None
            self.specs.append((rel_dir, self._pathspec.GitIgnoreSpec.from_lines(lines)))

    def ignored(self, rel: str, is_dir: bool) -> bool:
        """The first level with a matching rule decides (its last matching rule, as in git)."""
        result = self.command_line.check_file(rel + "/" if is_dir else rel)
        if result.include is not None:
            return bool(result.include)
        for base, spec in reversed(self.specs):
            if base and not rel.startswith(base + "/"):
                continue
            inner = rel[len(base) + 1 :] if base else rel
            result = spec.check_file(inner + "/" if is_dir else inner)  # type: ignore[attr-defined]
            if result.include is not None:
                return bool(result.include)
        return False


def _inside(root: Path, link: Path) -> bool:
    target = os.path.realpath(link)
    return target == str(root) or target.startswith(str(root) + os.sep)


def select(
    directory: str | Path, excludes: Sequence[str] = (), max_bytes: int = DEFAULT_MAX_BYTES
) -> Selection:
    """What of ``directory`` is sent; UsageError (one line) for a missing, unreadable or too
    large tree, before anything is sent."""
    root = Path(directory).expanduser()
    if not root.exists():
        raise UsageError(f"--workdir {directory}: no such directory")
    if not root.is_dir():
        raise UsageError(f"--workdir {directory}: not a directory")
    if not os.access(root, os.R_OK | os.X_OK):
        raise UsageError(f"--workdir {directory}: permission denied")
    root = root.resolve()
    rules = _Rules(root, excludes)
    sel = Selection(root=root)
    hasher = hashlib.sha256()

    def on_error(exc: OSError) -> None:
        raise UsageError(f"--workdir: cannot read {exc.filename}: {exc.strerror}")

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
                hasher.update(f"D {rel}\n".encode())
        dirnames[:] = kept_dirs
        for name in sorted(filenames):
            _add_file(sel, rules, hasher, base / name, f"{rel_dir}/{name}" if rel_dir else name)
        if sel.total_bytes > max_bytes:
            break
    if sel.total_bytes > max_bytes:  # the walk stopped there: the tree may hold more
        raise UsageError(
            f"--workdir {directory}: at least {human_size(sel.total_bytes)} to send, over the "
            f"{human_size(max_bytes)} cap (raise --max-workdir-size, or leave files out with "
            f"{IGNORE_FILE} or --exclude)"
        )
    sel.digest = hasher.hexdigest()
    return sel


def _add_file(sel: Selection, rules: _Rules, hasher: object, path: Path, rel: str) -> None:
    if path.is_symlink():
        if rules.ignored(rel, is_dir=False):
            sel.ignored.append(rel)
        elif _inside(sel.root, path):
            sel.links.append(rel)
            hasher.update(f"L {rel} {os.readlink(path)}\n".encode())  # type: ignore[attr-defined]
        else:
            sel.unsafe_links.append(rel)
        return
    if rules.ignored(rel, is_dir=False):
        sel.ignored.append(rel)
        return
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            sel.ignored.append(rel)  # sockets, fifos, devices: not code or data
            return
        content = hashlib.sha256()
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                content.update(chunk)
    except OSError as exc:
        raise UsageError(f"--workdir: cannot read {path}: {exc.strerror}") from None
    sel.files.append(rel)
    sel.total_bytes += info.st_size
    mode = stat.S_IMODE(info.st_mode)
    hasher.update(f"F {rel} {mode:o} {content.hexdigest()}\n".encode())  # type: ignore[attr-defined]


def remote_dir(directory: Path) -> str:
    """The path (relative to the MPI user's home) DIR has on every node: stable per DIR."""
    slug = re.sub(r"[^A-Za-z0-9_.-]", "_", directory.name) or "root"
    return f"{REMOTE_BASE}/{slug}-{hashlib.sha256(str(directory).encode()).hexdigest()[:10]}"


def _escape(rel: str) -> str:
    """A path as a literal rsync pattern: rsync reads a backslash as an escape only in a pattern
    that has a wildcard character, so a path without one stays as it is."""
    if not re.search(r"[*?\[]", rel):
        return rel
    return re.sub(r"([*?\[\\])", r"\\\1", rel)


def rsync_filter(sel: Selection) -> str:
    """rsync filter rules that leave out exactly what the selection left out (anchored)."""
    return "".join(f"- /{_escape(rel)}\n" for rel in sel.left_out)
