"""``mpictl cache``: the artifact cache as something to move, read and prune.

The cache (``$MPICTL_CACHE_DIR``, :func:`mpictl.paths.cache_dir`) holds what ``build_once``
built: ``artifacts/<component>/<fingerprint>.<ext>``, its ``.sha256`` (written last: an artifact
without one is incomplete and never used) and, from mpictl 0.1 on, its ``.json`` (what the
fingerprint was made of: component, inputs such as the version, OS release, architecture,
compiler). It also holds ``sources/`` and ``wheels/`` (downloads).

- :func:`entries` lists the complete artifacts; :func:`export` packs some or all of them into
  one ``.tar.gz`` with a manifest (each file's sha256); :func:`import_archive` unpacks such a
  file into the cache, refusing any member that is not a plain file under ``artifacts/`` (an
  absolute path, ``..``, a link, a device), any file whose sha256 is not the manifest's, and,
  given the cluster it is for, any artifact built for an OS or architecture none of its nodes
  runs (a staging machine that built for another cluster); :func:`prune` removes old entries.

Nothing is written until the whole archive has been checked: an import either takes every
artifact or none.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from mpictl import paths
from mpictl.errors import UsageError
from mpictl.inputs import quoted, shown

MANIFEST = "mpictl-cache.json"
FORMAT = 1
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Entry:
    component: str
    fingerprint: str
    path: Path  # the artifact
    size: int
    mtime: float
    sha256: str
    meta: Mapping[str, Any]  # the fingerprint's parts ({} for an artifact cached before 0.1)

    @property
    def version(self) -> str:
        inputs = self.meta.get("inputs") or {}
        return str(inputs.get("version") or "-") if isinstance(inputs, Mapping) else "-"

    @property
    def platform(self) -> str:
        parts = [self.meta.get("os"), self.meta.get("arch")]
        compiler = self.meta.get("compiler")
        text = " ".join(str(p) for p in parts if p)
        return f"{text}, cc {compiler}" if compiler else (text or "-")

    def files(self) -> list[Path]:
        """The artifact, its checksum and (where written) its description."""
        extra = [Path(f"{self.path}.json")] if Path(f"{self.path}.json").is_file() else []
        return [self.path, Path(f"{self.path}.sha256"), *extra]


def artifacts_dir(cache: Path | None = None) -> Path:
    return (cache or paths.cache_dir()) / "artifacts"


def entries(cache: Path | None = None) -> list[Entry]:
    """Every complete artifact in the cache, by component then age."""
    root = artifacts_dir(cache)
    out: list[Entry] = []
    for component in paths.entries(root, "the artifact cache") if root.is_dir() else []:
        folder = root / component
        if not folder.is_dir():
            continue
        for name in sorted(os.listdir(folder)):
            path = folder / name
            if name.endswith((".sha256", ".json", ".part")) or not path.is_file():
                continue
            recorded = Path(f"{path}.sha256")
            if not recorded.is_file():
                continue  # incomplete: the role writes the checksum last
            words = recorded.read_text(errors="replace").split()
            meta: dict[str, Any] = {}
            described = Path(f"{path}.json")
            if described.is_file():
                try:
                    meta = json.loads(described.read_text())
                except ValueError:
                    meta = {}
            st = path.stat()
            out.append(Entry(component, name.split(".", 1)[0], path, st.st_size, st.st_mtime,
                             words[0] if words else "", meta))  # fmt: skip
    return sorted(out, key=lambda e: (e.component, -e.mtime))


def select(found: Sequence[Entry], components: Iterable[str]) -> list[Entry]:
    wanted = list(dict.fromkeys(components))
    known = {e.component for e in found}
    unknown = [c for c in wanted if c not in known]
    if unknown:
        have = ", ".join(sorted(known)) or "none"
        raise UsageError(
            f"cache: no artifact of {', '.join(map(quoted, unknown))} (cached: {have})"
        )
    return [e for e in found if not wanted or e.component in wanted]


def export(target: Path, components: Iterable[str] = (), cache: Path | None = None) -> list[Entry]:
    """Pack the chosen artifacts (all by default) with a manifest into ``target`` (.tar.gz)."""
    chosen = select(entries(cache), components)
    if not chosen:
        raise UsageError(
            f"cache: nothing to export: {shown(artifacts_dir(cache))} holds no artifact"
        )
    if not target.name.endswith((".tar.gz", ".tgz")):
        raise UsageError(f"cache export {shown(target)}: give a file name ending in .tar.gz")
    if target.exists() and not target.is_file():
        raise UsageError(f"cache export {shown(target)}: not a file")
    manifest = {
        "format": FORMAT,
        "created": time.time(),
        "artifacts": [
            {
                "component": e.component,
                "fingerprint": e.fingerprint,
                "file": e.path.name,
                "sha256": e.sha256,
                "size": e.size,
                "meta": dict(e.meta),
            }  # fmt: skip
            for e in chosen
        ],
    }
    tmp = target.with_name(target.name + ".part")
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            data = json.dumps(manifest, indent=1).encode()
            info = tarfile.TarInfo(MANIFEST)
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
            tar.addfile(info, io.BytesIO(data))
            for entry in chosen:
                for path in entry.files():
                    tar.add(path, arcname=f"artifacts/{entry.component}/{path.name}",
                            recursive=False)  # fmt: skip
        tmp.replace(target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UsageError(f"cache export {shown(target)}: {exc.strerror or exc}") from None
    return chosen


def _member_problem(member: tarfile.TarInfo) -> str:
    """Why ``member`` may not be unpacked into the cache ("" when it may)."""
    name = member.name
    pure = PurePosixPath(name)
    if pure.is_absolute() or name.startswith("/"):
        return "is an absolute path"
    if ".." in pure.parts:
        return "leaves the cache (..)"
    if member.issym() or member.islnk():
        return "is a link"
    if not (member.isfile() or member.isdir()):
        return "is not a plain file"
    if (
        member.isfile()
        and name != MANIFEST
        and (len(pure.parts) != 3 or pure.parts[0] != "artifacts")
    ):
        return "is not an artifact (artifacts/<component>/<file>)"
    return ""


def _platforms(nodes: Sequence[Mapping[str, Any]]) -> set[tuple[str, str]]:
    """(OS release as build_once names it, architecture) of each node's cached facts."""
    out = set()
    for facts in nodes:
        release = facts.get("ansible_distribution_release")
        if release in (None, "", "NA"):
            release = facts.get("ansible_distribution_version", "")
        out.add((f"{facts.get('ansible_distribution', '')} {release}",
                 str(facts.get("ansible_architecture", ""))))  # fmt: skip
    return out


def import_archive(
    source: Path,
    cache: Path | None = None,
    node_facts: Sequence[Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Check ``source`` whole, then put its artifacts into the cache; the manifest's entries.
    ``node_facts`` (the cached facts of a cluster's nodes) refuses artifacts for an OS release or
    architecture none of them runs."""
    if not source.is_file():
        raise UsageError(f"cache import {shown(source)}: no such file")
    try:
        tar = tarfile.open(source, "r:*")  # noqa: SIM115 - closed by the with below
    except (tarfile.TarError, OSError) as exc:
        raise UsageError(f"cache import {shown(source)}: not a cache archive ({exc})") from None
    root = artifacts_dir(cache)
    with tar, tempfile.TemporaryDirectory(prefix=".import-", dir=_staging(root)) as staging:
        members = tar.getmembers()
        for member in members:
            why = _member_problem(member)
            if why:
                raise UsageError(f"cache import {shown(source)}: member {quoted(member.name)} "
                                 f"{why}; nothing was imported")  # fmt: skip
        manifest = _manifest(tar, source)
        files = {m.name: m for m in members if m.isfile() and m.name != MANIFEST}
        platforms = _platforms(node_facts) if node_facts is not None else None
        for item in manifest:
            name = f"artifacts/{item['component']}/{item['file']}"
            if name not in files or f"{name}.sha256" not in files:
                raise UsageError(
                    f"cache import {shown(source)}: {name} is missing; nothing was imported"
                )
            meta = item.get("meta") or {}
            if platforms is not None and (meta.get("os"), meta.get("arch")) not in platforms:
                have = ", ".join(sorted(" ".join(p) for p in platforms)) or "no cached facts"
                raise UsageError(
                    f"cache import {shown(source)}: {item['component']} "
                    f"{(meta.get('inputs') or {}).get('version', '')} ({item['fingerprint'][:12]}) "
                    f"was built for {meta.get('os') or 'an unknown OS'} {meta.get('arch') or ''}, "
                    f"which no node of the cluster runs ({have}); nothing was imported"
                )
            got = _extract(tar, files[name], Path(staging))
            if got != item.get("sha256"):
                raise UsageError(
                    f"cache import {shown(source)}: {name} has sha256 {got}, the manifest says "
                    f"{item.get('sha256')}; nothing was imported"
                )
            for extra in (f"{name}.sha256", f"{name}.json"):
                if extra in files:
                    _extract(tar, files[extra], Path(staging))
            recorded = Path(staging) / f"{name}.sha256"
            if recorded.read_text().split()[:1] != [got]:
                raise UsageError(f"cache import {shown(source)}: {name}.sha256 does not match it; "
                                 "nothing was imported")  # fmt: skip
        for item in manifest:  # every file checked: now move them in, the checksum last
            folder = root / item["component"]
            folder.mkdir(parents=True, exist_ok=True)
            staged = Path(staging) / "artifacts" / item["component"]
            for suffix in ("", ".json", ".sha256"):
                path = staged / f"{item['file']}{suffix}"
                if path.is_file():
                    os.replace(path, folder / path.name)
    return manifest


def _staging(root: Path) -> Path:
    paths.ensure_dir(root, "the artifact cache")
    return root


def _manifest(tar: tarfile.TarFile, source: Path) -> list[dict[str, Any]]:
    try:
        member = tar.getmember(MANIFEST)
        handle = tar.extractfile(member)
        data = json.loads(handle.read() if handle else b"")
    except (KeyError, ValueError, tarfile.TarError):
        raise UsageError(f"cache import {shown(source)}: no readable {MANIFEST}: not an "
                         "archive of `mpictl cache export`") from None  # fmt: skip
    items = data.get("artifacts") if isinstance(data, dict) else None
    if (
        data.get("format") != FORMAT
        or not isinstance(items, list)
        or not all(
            isinstance(i, dict) and _safe_name(i.get("component")) and _safe_name(i.get("file"))
            for i in items
        )
    ):
        raise UsageError(f"cache import {shown(source)}: {MANIFEST} is not of format {FORMAT}")
    return items


def _safe_name(value: Any) -> bool:
    return isinstance(value, str) and value not in ("", ".", "..") and "/" not in value


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, staging: Path) -> str:
    """Write ``member`` under ``staging`` (its checked name); its sha256."""
    target = staging / member.name
    target.parent.mkdir(parents=True, exist_ok=True)
    handle = tar.extractfile(member)
    if handle is None:
        raise UsageError(f"cache import: {quoted(member.name)} cannot be read")
    digest = hashlib.sha256()
    with target.open("wb") as out:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            out.write(chunk)
    return digest.hexdigest()


def prune(
    older_than_days: float | None = None,
    keep: int | None = None,
    dry_run: bool = False,
    cache: Path | None = None,
) -> list[Entry]:
    """Remove artifacts older than ``older_than_days`` and/or beyond the ``keep`` newest of each
    component; the removed (or, with ``dry_run``, the removable) entries."""
    if older_than_days is None and keep is None:
        raise UsageError("cache prune: say what goes: --older-than DAYS and/or --keep N")
    if older_than_days is not None and not (older_than_days >= 0 and older_than_days < 1e5):
        raise UsageError(f"cache prune: --older-than must be days from 0, got {older_than_days}")
    if keep is not None and keep < 0:
        raise UsageError(f"cache prune: --keep must be 0 or more, got {keep}")
    now = time.time()
    seen: dict[str, int] = {}
    gone = []
    for entry in entries(cache):  # newest first within a component
        seen[entry.component] = seen.get(entry.component, 0) + 1
        old = older_than_days is not None and now - entry.mtime > older_than_days * 86400
        extra = keep is not None and seen[entry.component] > keep
        if old or extra:
            gone.append(entry)
    if not dry_run:
        for entry in gone:
            for path in (Path(f"{entry.path}.sha256"), entry.path, Path(f"{entry.path}.json")):
                path.unlink(missing_ok=True)
    return gone


def wheels_size(cache: Path | None = None) -> int:
    root = (cache or paths.cache_dir()) / "wheels"
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.is_dir() else 0
