from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.hostile import Hostile

DATA = Path(__file__).parent / "data"


@pytest.fixture
def data() -> Path:
    return DATA


@pytest.fixture(autouse=True)
def isolated_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every unit test gets its own state dir (fact cache, locks, runs)."""
    state = tmp_path / "state"
    monkeypatch.setenv("MPICTL_STATE_DIR", str(state))
    monkeypatch.delenv("MPICTL_CACHE_DIR", raising=False)
    return state


@pytest.fixture
def hostile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Hostile:
    """A controller with no cluster, every process and write watched (tests/unit/hostile.py)."""
    return Hostile(tmp_path, monkeypatch)
