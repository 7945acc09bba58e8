"""Benchmark: a no-change re-run of the whole site.yml on a provisioned cluster (issue 4).

python bench/noop_rerun.py [-i INVENTORY] [-e @VARS] [--runs N]

Provisions the inventory (default: the sandbox) N times (default 3) with nothing to change and
reports, per run, the wall time of mpictl's provision call and the changed count; then the
median and, for the median run, where the time went: seconds per play and the slowest tasks,
from the run's events. Target: <= 30 s with changed=0. The cluster must already be provisioned
with the same variables (``bash scripts/demo.sh`` leaves the sandbox that way; pass the vars file
it used, ``<cache>/sources/test-sources.yml``). A run that changes something is reported, not
hidden: its figure is not a no-change figure.

python bench/noop_rerun.py --from-run RUN_DIR

gives the same breakdown for one finished run (an ansible-runner directory under
``<state>/runs/``), e.g. the integration tests' second provision.

Writes JSON to bench/out/noop_rerun.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import write_result  # noqa: E402
from bench.openmpi_build_once import load_run  # noqa: E402

TARGET_S = 30.0


def breakdown(events: list[dict[str, Any]], top: int = 8) -> dict[str, Any]:
    """Seconds per play and the slowest tasks: each task lasts until the next task or play
    starts (the linear strategy runs one task on all hosts at a time)."""
    marks = [
        (datetime.fromisoformat(e["created"]).timestamp(), e["event"], e.get("event_data", {}))
        for e in events
        if e.get("event")
        in ("playbook_on_play_start", "playbook_on_task_start", "playbook_on_stats")
    ]
    plays: dict[str, float] = defaultdict(float)
    tasks: list[tuple[float, str]] = []
    play = ""
    for (start, kind, data), (end, _, _) in zip(marks, marks[1:], strict=False):
        if kind == "playbook_on_play_start":
            play = str(data.get("play", ""))
            continue
        if kind == "playbook_on_task_start":
            plays[play] += end - start
            tasks.append((end - start, str(data.get("task", ""))))
    tasks.sort(reverse=True)
    return {
        "plays_s": {name: round(s, 1) for name, s in plays.items()},
        "slowest_tasks_s": [[name, round(s, 2)] for s, name in tasks[:top]],
        "task_starts": len(tasks),
    }


def report(result: dict[str, Any]) -> None:
    write_result("noop_rerun", result)
    met = result["wall_s"] <= TARGET_S and result["changed"] == 0
    print(
        f"no-change re-run target <= {TARGET_S:.0f} s and changed=0: {'met' if met else 'NOT met'}"
    )


def from_run(run_dir: Path) -> None:
    wall_s, events, changed = load_run(run_dir)
    report(
        {
            "source": str(run_dir),
            "wall_s": round(wall_s, 1),
            "changed": changed,
            **breakdown(events),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-i", "--inventory", type=Path, default=ROOT / "inventories" / "sandbox")
    parser.add_argument("-e", "--extra-vars", action="append", default=[])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--from-run", type=Path)
    args = parser.parse_args()
    if args.from_run:
        from_run(args.from_run)
        return

    from mpictl import provision

    extravars = provision.parse_extravars(args.extra_vars)
    runs = []
    for _ in range(max(1, args.runs)):
        _, result = provision.provision(args.inventory, extravars=extravars)
        if not result.ok:
            raise SystemExit(f"provision failed: rc={result.rc} {result.private_data_dir}")
        runs.append(
            {
                "wall_s": round(result.duration_s, 1),
                "changed": sum(s.changed for s in result.stats.values()),
                "run_dir": str(result.private_data_dir),
                "events": result.events,
            }
        )
    median = sorted(runs, key=lambda r: r["wall_s"])[len(runs) // 2]
    report(
        {
            "source": f"{args.inventory}, {len(runs)} runs",
            "walls_s": [r["wall_s"] for r in runs],
            "changed_per_run": [r["changed"] for r in runs],
            "wall_s": statistics.median(r["wall_s"] for r in runs),
            "changed": max(r["changed"] for r in runs),
            "median_run": median["run_dir"],
            **breakdown(median["events"]),
        }
    )


if __name__ == "__main__":
    main()
