"""Where mpictl finds its Ansible content and keeps its state.

**Ansible content** (``playbooks/``, ``roles/``, ``filter_plugins/``, ``inventories/sandbox/``,
``ansible.cfg``) is found through ``importlib.resources``: an installed wheel carries it inside
the package as ``mpictl/_ansible/``; an editable install or a clone imports mpictl from the
checkout, whose top-level folders are the content. ``MPICTL_ROOT`` overrides both.

**State** (runner artifacts, the fact cache, the cluster SSH key, sandbox keys, job records) lives
in ``$MPICTL_STATE_DIR``, default ``$XDG_STATE_HOME/mpictl`` (``~/.local/state/mpictl``); the
**artifact cache** (sources, built artifacts) in ``$MPICTL_CACHE_DIR``, default
``$XDG_CACHE_HOME/mpictl`` (``~/.cache/mpictl``). Nothing is ever written under the install.

A state or cache dir that cannot be used (under a regular file, read-only, unreadable) is one
line that names the dir, what is wrong and the fix (:func:`ensure_dir`, :func:`entries`,
:func:`unusable`), never a traceback.
"""

from __future__ import annotations

import errno
import os
from importlib import resources
from pathlib import Path

from mpictl.errors import UsageError
from mpictl.inputs import quoted, shown

BUNDLE = "_ansible"


def package_dir() -> Path:
    """The directory of the imported ``mpictl`` package."""
    return Path(str(resources.files("mpictl")))


def project_root() -> Path:
    """The root of mpictl's Ansible content (see the module docstring)."""
    env = os.environ.get("MPICTL_ROOT")
    if env:
        return Path(env).resolve()
    bundled = package_dir() / BUNDLE
    if (bundled / "playbooks").is_dir():
        return bundled
    return package_dir().parent


def _xdg(variable: str, fallback: str) -> Path:
    base = os.environ.get(variable)
    if not base or not os.path.isabs(base):  # the XDG spec: relative values are ignored
        base = str(Path.home() / fallback)
    return Path(base) / "mpictl"


def state_dir() -> Path:
    env = os.environ.get("MPICTL_STATE_DIR")
    return Path(env).resolve() if env else _xdg("XDG_STATE_HOME", ".local/state")


def cache_dir() -> Path:
    env = os.environ.get("MPICTL_CACHE_DIR")
    return Path(env).resolve() if env else _xdg("XDG_CACHE_HOME", ".cache")


def facts_dir() -> Path:
    """Ansible's jsonfile fact cache, keyed by host name: one per state dir, shared by every
    inventory run from it (a sub-inventory of a cluster reads its facts). Clusters whose hosts
    share names (node1 in staging and in production) need a state dir each."""
    return state_dir() / "facts"


def runs_dir() -> Path:
    return state_dir() / "runs"


def jobs_dir() -> Path:
    return state_dir() / "jobs"


def sandbox_inventory() -> Path:
    return project_root() / "inventories" / "sandbox"


def playbooks_dir() -> Path:
    return project_root() / "playbooks"


def playbook(name: str) -> Path:
    return playbooks_dir() / name


def roles_dir() -> Path:
    return project_root() / "roles"


def filter_plugins_dir() -> Path:
    return project_root() / "filter_plugins"


def ansible_cfg() -> Path:
    return project_root() / "ansible.cfg"


def _root_of(path: Path) -> tuple[str, Path] | None:
    """The variable and the dir (state or cache) that ``path`` lies in, if any."""
    for variable, root in (("MPICTL_STATE_DIR", state_dir()), ("MPICTL_CACHE_DIR", cache_dir())):
        if path == root or root in path.parents:
            return variable, root
    return None


def _blocker(path: Path) -> Path | None:
    """The first of ``path`` and its parents that exists and is not a directory."""
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return None if candidate.is_dir() else candidate
    return None


def unusable(path: Path, what: str, exc: OSError | None = None) -> UsageError:
    """The one-line error for ``path`` (a dir mpictl keeps ``what`` in) that cannot be created,
    listed or written: the state or cache dir it lies in, what is wrong, and the fix."""
    path = Path(path)
    found = _root_of(path)
    variable, root = found if found else ("MPICTL_STATE_DIR", path)
    where = f"{what}: the {'cache' if variable == 'MPICTL_CACHE_DIR' else 'state'} dir"
    where += f" {quoted(root)}" + (f" ({variable})" if os.environ.get(variable) else "")
    fix = f"set {variable} to a directory you can write"
    blocker = _blocker(path)
    code = exc.errno if exc is not None else errno.EACCES
    if blocker is not None:
        wrong = f"{shown(blocker)} is a file, not a directory"
    elif code in (errno.EACCES, errno.EPERM):
        denied = Path(exc.filename) if exc is not None and exc.filename else path
        wrong = f"permission denied on {shown(denied)}"
        fix = f"fix its permissions (it needs rwx for you), or {fix}"
    elif code == errno.EROFS:
        wrong = f"{shown(path)} is on a read-only file system"
    else:
        wrong = f"{shown(path)}: {shown(exc.strerror if exc is not None else code)}"
    return UsageError(f"{where} cannot be used: {wrong}; {fix}")


def ensure_dir(path: Path, what: str) -> Path:
    """``path`` as a directory this process can write in, created with its parents when missing;
    UsageError (:func:`unusable`: one line naming the state or cache dir, what is wrong and the
    fix) otherwise. ``what`` names what mpictl keeps there ("job records", "locks")."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise unusable(path, what, exc) from None
    if not path.is_dir():  # a dangling symlink, or a file that appeared meanwhile
        raise unusable(path, what)
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        raise unusable(path, what, OSError(errno.EACCES, os.strerror(errno.EACCES), str(path)))
    return path


def nearest_existing(path: Path) -> Path:
    """``path`` itself when it exists (a dangling link counts), else its nearest ancestor that
    does: where a directory to be created would go."""
    probe = Path(os.path.abspath(path))
    while not os.path.lexists(probe) and probe != probe.parent:
        probe = probe.parent
    return probe


def check_dir(path: Path, what: str) -> Path:
    """:func:`ensure_dir` without creating anything: ``path`` is a directory this process can
    write in, or can be created (its nearest existing ancestor is one). For a check before
    anything is written, as ``run`` makes before it contacts the head."""
    path = Path(path)
    probe = nearest_existing(path)
    if not probe.is_dir():
        raise unusable(path, what)
    if not os.access(probe, os.R_OK | os.W_OK | os.X_OK):
        raise unusable(path, what, OSError(errno.EACCES, os.strerror(errno.EACCES), str(probe)))
    return path


def entries(path: Path, what: str) -> list[str]:
    """The names in directory ``path`` (none when it does not exist), sorted; UsageError
    (:func:`unusable`) when it cannot be listed."""
    path = Path(path)
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        if _blocker(path) is not None:
            raise unusable(path, what) from None
        return []
    except OSError as exc:
        raise unusable(path, what, exc) from None
