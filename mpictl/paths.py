"""Where mpictl finds its playbooks and keeps its state.

The project root holds ``playbooks/``, ``roles/`` and ``ansible.cfg``; the state directory
(default ``<root>/.mpictl``, override with ``MPICTL_STATE_DIR``) holds runner artifacts, the fact
cache, the cluster SSH key, sandbox keys and job records. The artifact cache (default
``<state>/cache``, override with ``MPICTL_CACHE_DIR``) holds source tarballs and built artifacts.
"""

from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    env = os.environ.get("MPICTL_ROOT")
    if env:
        return Path(env).resolve()
    return Path(__file__).resolve().parent.parent


def state_dir() -> Path:
    env = os.environ.get("MPICTL_STATE_DIR")
    return Path(env).resolve() if env else project_root() / ".mpictl"


def cache_dir() -> Path:
    env = os.environ.get("MPICTL_CACHE_DIR")
    return Path(env).resolve() if env else state_dir() / "cache"


def facts_dir() -> Path:
    return state_dir() / "facts"


def runs_dir() -> Path:
    return state_dir() / "runs"


def jobs_dir() -> Path:
    return state_dir() / "jobs"


def sandbox_inventory() -> Path:
    return project_root() / "inventories" / "sandbox"


def playbook(name: str) -> Path:
    return project_root() / "playbooks" / name
