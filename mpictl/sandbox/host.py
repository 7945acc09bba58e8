"""What the host running the sandbox is like: its cgroup mode (hence the podman runtime the nodes
run under) and the Debian mirror its apt uses (the node image is debootstrapped from it).

The parsers take the text they parse, so tests need no particular host.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from mpictl.errors import SandboxError

#: Limits that a runc container on a cgroup-v1/hybrid host may set (they can only be lowered there).
LOWERED_ULIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096")


@dataclass(frozen=True)
class Runtime:
    """How podman runs the nodes on this host.

    ``name`` is ``runc`` on a cgroup-v1/hybrid host (crun refuses hybrid mode there, and podman's
    raised default rlimits fail with EPERM, hence the lowered ulimits) and ``default`` elsewhere
    (podman's own runtime and limits).
    """

    name: str

    @property
    def global_args(self) -> tuple[str, ...]:
        return ("--runtime", "runc") if self.name == "runc" else ()

    @property
    def run_args(self) -> tuple[str, ...]:
        return LOWERED_ULIMITS if self.name == "runc" else ()


def cgroup_mode(mounts: str) -> str:
    """``unified`` (pure cgroup v2), ``hybrid`` (v1 + v2 side by side) or ``legacy`` (v1)."""
    fstype_at: dict[str, str] = {}
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) >= 3:
            fstype_at[fields[1]] = fields[2]
    if fstype_at.get("/sys/fs/cgroup") == "cgroup2":
        return "unified"
    if "cgroup2" in (
        fstype_at.get("/sys/fs/cgroup/unified"),
        fstype_at.get("/sys/fs/cgroup/unified/"),
    ):
        return "hybrid"
    return "legacy"


def choose_runtime(mounts: str | None = None, env: Mapping[str, str] | None = None) -> Runtime:
    """runc + lowered ulimits on cgroup-v1/hybrid hosts, podman's defaults on cgroup v2.

    ``MPICTL_SANDBOX_RUNTIME=runc|default`` overrides the detection.
    """
    env = os.environ if env is None else env
    forced = env.get("MPICTL_SANDBOX_RUNTIME", "").strip()
    if forced:
        if forced not in ("runc", "default"):
            raise SandboxError(
                f"MPICTL_SANDBOX_RUNTIME must be 'runc' or 'default' (got {forced!r})"
            )
        return Runtime(forced)
    if mounts is None:
        try:
            mounts = Path("/proc/self/mounts").read_text()
        except OSError:
            mounts = ""
    return Runtime("default" if cgroup_mode(mounts) == "unified" else "runc")


def parse_deb822_mirror(text: str) -> str | None:
    """First Debian archive URI (not the security archive) of a deb822 ``.sources`` file."""
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[:1].isspace():
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        if "deb" not in fields.get("types", "").split():
            continue
        if fields.get("enabled", "yes").lower() == "no":
            continue
        suites = fields.get("suites", "").split()
        if not suites or all("security" in s for s in suites):
            continue
        for uri in fields.get("uris", "").split():
            if uri.startswith(("http://", "https://", "file:/")) and "security" not in uri:
                return uri
    return None


def parse_sources_list_mirror(text: str) -> str | None:
    """First Debian archive URI (not the security archive) of a one-line-style sources.list."""
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if not fields or fields[0] != "deb":
            continue
        rest = fields[1:]
        if rest and rest[0].startswith("["):
            while rest and not rest[0].endswith("]"):
                rest = rest[1:]
            rest = rest[1:]
        if len(rest) >= 2 and "security" not in rest[0] and "security" not in rest[1]:
            return rest[0]
    return None


def debian_mirror(env: Mapping[str, str] | None = None, root: Path = Path("/")) -> str:
    """The Debian mirror this host's apt uses (``MPICTL_DEBIAN_MIRROR`` overrides)."""
    env = os.environ if env is None else env
    if env.get("MPICTL_DEBIAN_MIRROR"):
        return env["MPICTL_DEBIAN_MIRROR"]
    apt = root / "etc" / "apt"
    candidates: list[tuple[Path, Callable[[str], str | None]]] = [
        (apt / "sources.list.d" / "debian.sources", parse_deb822_mirror),
        *((p, parse_deb822_mirror) for p in sorted((apt / "sources.list.d").glob("*.sources"))),
        (apt / "sources.list", parse_sources_list_mirror),
        *((p, parse_sources_list_mirror) for p in sorted((apt / "sources.list.d").glob("*.list"))),
    ]
    for path, parse in candidates:
        try:
            text = path.read_text()
        except OSError:
            continue
        uri = parse(text)
        if uri:
            return uri
    raise SandboxError(
        "no Debian mirror found in /etc/apt/sources.list(.d); set MPICTL_DEBIAN_MIRROR to one"
    )
