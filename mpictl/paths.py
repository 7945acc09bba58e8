"""Where mpictl finds its Ansible content and keeps its state.

**Ansible content** (``playbooks/``, ``roles/``, ``filter_plugins/``, ``inventories/sandbox/``,
``ansible.cfg``) is found through ``importlib.resources``: an installed wheel carries it inside
the package as ``mpictl/_ansible/``; an editable install or a clone imports mpictl from the
checkout, whose top-level folders are the content. ``MPICTL_ROOT`` overrides both.

**State** (runner artifacts, the fact cache, the cluster SSH key, sandbox keys, job records) lives
in ``$MPICTL_STATE_DIR``, default ``$XDG_STATE_HOME/mpictl`` (``~/.local/state/mpictl``); the
**artifact cache** (sources, built artifacts) in ``$MPICTL_CACHE_DIR``, default
``$XDG_CACHE_HOME/mpictl`` (``~/.cache/mpictl``). Nothing is ever written under the install.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

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
