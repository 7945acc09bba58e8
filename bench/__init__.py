"""mpictl's benchmarks (each module says what it measures); their results go to bench/out/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "out"


def write_result(name: str, result: dict[str, Any]) -> None:
    """Write ``result`` as bench/out/<name>.json and print it."""
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
