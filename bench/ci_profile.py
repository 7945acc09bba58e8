"""Benchmark: where a run of the test suite (`.ci/run`, `bash scripts/test.sh`) spent its time.

python bench/ci_profile.py LOG [--top N]

LOG is everything `.ci/run` printed (stdout and stderr together). scripts/test.sh runs two
pytest processes side by side, each with ``--durations=40 --durations-min=5``: the session
sandbox's tests, and the tests with sandboxes of their own (Molecule's scenarios among them),
printed after ``=== the tests with sandboxes of their own``. For each process this reports its
wall time and test count (pytest's summary line), the seconds of its slowest tests summed per
test module (Molecule: per scenario) and its N slowest items; and the run's total when the log
ends with the ``rc=... total=...`` line the measuring wrapper appends.

The figures of issue 37 (the suite's profile before and after) come from this. Only items of at
least 5 s are listed by pytest, so a module's sum is a lower bound.

Writes JSON to bench/out/ci_profile.json.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

_ITEM = re.compile(r"^\s*(?P<s>[0-9.]+)s (?P<phase>setup|call|teardown)\s+(?P<id>\S.*)$")
# pytest's last line: "=== 122 passed ... in 3896.38s (1:04:56) ===" (-v), or bare (-q)
_SUMMARY = re.compile(
    r"^(?:=+ )?(?P<text>\d+ (?:passed|failed)\b.*\bin (?P<s>[0-9.]+)s\b.*?)(?: =+)?$"
)
_TOTAL = re.compile(r"^rc=(?P<rc>-?\d+) total=(?P<s>\d+)$")
_BESIDE = "=== the tests with sandboxes of their own"
_FAST = "=== lint and the unit tests"


def _group(nodeid: str) -> str:
    path, _, rest = nodeid.partition("::")
    module = Path(path).stem
    if module == "test_molecule":
        scenario = re.search(r"\[(.+?)\]", rest)
        return f"molecule[{scenario.group(1)}]" if scenario else module
    return module


def parse(text: str) -> dict[str, Any]:
    """The profile of one `.ci/run` log: per process (``session``, ``beside``), its items, the
    sums per module and its summary; and the run's total where the log has it."""
    out: dict[str, Any] = {"processes": {}, "total_s": None, "rc": None}
    section = "session"
    for line in text.splitlines():
        if line.startswith(_BESIDE):
            section = "beside"
            continue
        if line.startswith(_FAST):
            section = "fast"
            continue
        proc = out["processes"].setdefault(section, {"items": [], "summary": None, "wall_s": None})
        if match := _ITEM.match(line):
            proc["items"].append(
                {"s": float(match["s"]), "phase": match["phase"], "id": match["id"].strip()}
            )
        elif match := _SUMMARY.match(line):
            proc["summary"], proc["wall_s"] = match["text"], float(match["s"])
        elif match := _TOTAL.match(line.strip()):
            out["rc"], out["total_s"] = int(match["rc"]), int(match["s"])
    for name in list(out["processes"]):
        proc = out["processes"][name]
        if not proc["items"] and proc["summary"] is None:
            del out["processes"][name]
            continue
        sums: dict[str, float] = defaultdict(float)
        for item in proc["items"]:
            sums[_group(item["id"])] += item["s"]
        proc["modules"] = dict(sorted(sums.items(), key=lambda kv: -kv[1]))
    return out


def report(profile: dict[str, Any], top: int) -> str:
    lines = []
    if profile["total_s"] is not None:
        lines.append(f"run: rc={profile['rc']}, {profile['total_s']} s")
    for name, proc in profile["processes"].items():
        lines.append(f"\n{name}: {proc['summary'] or '(no pytest summary)'}")
        for module, seconds in proc.get("modules", {}).items():
            lines.append(f"  {seconds:8.1f}  {module}")
        lines.append(f"  slowest {top}:")
        for item in sorted(proc["items"], key=lambda i: -i["s"])[:top]:
            lines.append(f"  {item['s']:8.1f}  {item['phase']:<8} {item['id']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args(argv)
    try:
        text = args.log.read_text(errors="replace")
    except OSError as exc:
        print(f"ci_profile: cannot read {args.log}: {exc.strerror}", file=sys.stderr)
        return 2
    profile = parse(text)
    if not profile["processes"]:
        print(f"ci_profile: {args.log} holds no pytest durations or summary", file=sys.stderr)
        return 2
    print(report(profile, args.top))
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    (out / "ci_profile.json").write_text(json.dumps(profile, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
