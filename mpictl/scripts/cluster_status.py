"""What ``mpictl status`` reads on the head (as the MPI user), printed as one JSON object.

``python3 - SPEC_JSON`` with ``{"config": path, "queries": {name: PromQL}, "slurm": bool}`` on
argv. Reads the monitoring role's file at ``config`` (where Prometheus answers, the cluster's
nodes), runs each instant query against Prometheus's HTTP API (``/api/v1/query``) and returns,
per query, ``[[node, value], ...]`` from the series' ``node`` label; with ``slurm``, each node's
state and reason from ``sinfo``. Every failure is a line in the output, never a traceback.
Standard library only.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

TIMEOUT = 10
# Prometheus is on the cluster network: never through a proxy that /etc/environment may set
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def read_config(path: str) -> tuple[dict[str, Any], str]:
    """The monitoring role's file, or {} and why it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}, f"no {path} on the head: the monitoring role is not installed there"
    except (OSError, ValueError) as exc:
        return {}, f"cannot read {path}: {exc}"
    if not isinstance(data, dict) or not isinstance(data.get("prometheus"), str):
        return {}, f"{path} does not say where Prometheus answers"
    return data, ""


def query(url: str, promql: str) -> list[list[Any]]:
    """``[[node, value], ...]`` of one instant query; raises OSError or ValueError."""
    full = f"{url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    with OPENER.open(full, timeout=TIMEOUT) as resp:  # the role's own URL
        body = json.loads(resp.read().decode())
    if body.get("status") != "success":
        raise ValueError(str(body.get("error") or body.get("status")))
    out = []
    for series in body.get("data", {}).get("result", []):
        node = series.get("metric", {}).get("node")
        value = series.get("value") or [None, None]
        if node:
            out.append([node, value[1]])
    return out


def api_error(exc: urllib.error.HTTPError) -> str:
    """The ``error`` Prometheus's API gives with a refused query, else the HTTP reason."""
    try:
        return str(json.loads(exc.read().decode()).get("error") or exc.reason)
    except (OSError, ValueError, AttributeError):
        return str(exc.reason)


def sinfo() -> tuple[dict[str, list[str]], str]:
    """node -> [state, reason] from ``sinfo``, or {} and why not."""
    try:
        p = subprocess.run(
            ["sinfo", "-N", "-h", "-o", "%N|%T|%E"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {}, f"sinfo: {exc}"
    if p.returncode != 0:
        lines = p.stderr.strip().splitlines()
        return {}, f"sinfo: {lines[-1] if lines else f'exit {p.returncode}'}"
    out: dict[str, list[str]] = {}
    for line in p.stdout.splitlines():
        name, _, rest = line.partition("|")
        state, _, reason = rest.partition("|")
        reason = reason.strip()
        out.setdefault(name.strip(), [state.strip(), "" if reason == "none" else reason])
    return out, ""


def main(argv: list[str]) -> int:
    spec = json.loads(argv[1])
    config, error = read_config(spec["config"])
    report: dict[str, Any] = {
        "prometheus": config.get("prometheus", ""),
        "server": config.get("server", ""),
        "nodes": config.get("nodes", []),
        "error": error,
        "results": {},
        "query_errors": {},
    }
    if not error:
        for name, promql in spec.get("queries", {}).items():
            try:
                report["results"][name] = query(config["prometheus"], promql)
            except urllib.error.HTTPError as exc:  # it answered: this query is refused
                report["query_errors"][name] = f"HTTP {exc.code}: {api_error(exc)}"
            except (urllib.error.URLError, TimeoutError) as exc:  # no answer: no more queries
                url = config["prometheus"]
                why = getattr(exc, "reason", None) or exc
                report["error"] = f"Prometheus at {url} does not answer: {why}"
                break
            except (OSError, ValueError) as exc:
                report["query_errors"][name] = str(exc)
    if spec.get("slurm"):
        report["sinfo"], report["sinfo_error"] = sinfo()
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
