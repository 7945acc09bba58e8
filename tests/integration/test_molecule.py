"""Every role's Molecule scenario runs its full sequence (create, converge, idempotence, verify,
destroy) on a sandbox of its own. The artifact cache is the integration session's, so the
scenarios of the build roles install what the session already built instead of compiling.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.nodes import ROOT

SCENARIOS = sorted(p.parents[2] for p in (ROOT / "roles").glob("*/molecule/default/molecule.yml"))


#: Scenarios whose builds are all fingerprints of their own, none of which the session sandbox
#: builds: waiting for the session's first provision would only move their compiles to the end of
#: the run, so they start at once, beside it (what they compile fills the CPU the provision's
#: Ansible phases leave idle). ucx: UCX with the verbs transports (its ``ucx_rdma: enabled``) and
#: OpenMPI against that UCX without UCC.
OWN_BUILDS = frozenset({"ucx"})


def installs_builds(role: Path) -> bool:
    """The scenario installs what the session's first provision builds (its converge runs a
    role that builds through build_once, its own or one it applies first): it waits for that
    provision (``warm_cache``) instead of compiling the same fingerprints again. The others
    (build_once's own scenario builds a dummy of its own, OWN_BUILDS theirs) start at once."""
    if role.name in OWN_BUILDS:
        return False
    converge = (role / "molecule" / "default" / "converge.yml").read_text()
    roles = {p.name for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir()}
    used = {role.name} | (set(re.findall(r"[a-z0-9_]+", converge)) & roles)
    return role.name != "build_once" and any(
        "name: build_once" in path.read_text()
        for name in used
        for path in (ROOT / "roles" / name / "tasks").glob("*.yml")
    )


@pytest.mark.parametrize("role", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_molecule_scenario(role: Path, tmp_path: Path, it_state: Path, request: Any) -> None:
    if installs_builds(role):
        request.getfixturevalue("warm_cache")
    env = {**os.environ, "MPICTL_STATE_DIR": str(tmp_path / "state")}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    proc = subprocess.run(
        ["molecule", "test"],
        cwd=role,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"molecule test of {role.name} failed:\n{log[-6000:]}"
    for step in ("converge", "idempotence", "verify"):
        assert f"{step}: Executed: Successful" in _plain(log), f"{role.name}: {step} did not run"


def _plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text).replace("➜ ", "")
