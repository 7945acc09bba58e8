"""mpictl's benchmarks (each module says what it measures); their results go to bench/out/."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"


def source_vars() -> dict[str, Any]:
    """The test sources in the machine's cache (scripts/fetch-test-sources.sh fetches what is
    missing) and the variables that point the roles at them, as the test suite uses them."""
    import yaml

    from mpictl import paths

    shared_cache = paths.cache_dir()  # MPICTL_CACHE_DIR, else ~/.cache/mpictl
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "fetch-test-sources.sh"), f"{shared_cache}/sources"],
        capture_output=True,
        text=True,
        check=True,
    )
    return yaml.safe_load(Path(out.stdout.strip().splitlines()[-1]).read_text())


def write_result(name: str, result: dict[str, Any]) -> None:
    """Write ``result`` as bench/out/<name>.json and print it."""
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
