"""Metrics (issue 27, part 4) on the provisioned 3-node sandbox, where the sandbox inventory turns
``monitoring_enabled`` on: Prometheus on the head reports every node's exporter up through its
HTTP API, ``mpictl status`` shows every node, an exporter stopped on one node shows that node DOWN,
and the next provision (the short path sees the stopped unit) starts it again."""

from __future__ import annotations

import json
import socket
import struct
import time
from typing import Any

from mpictl.inventory import Cluster
from tests.integration.conftest import describe_failures, provision_run
from tests.integration.nodes import run_cli, ssh
from tests.integration.test_slurm import wait_for

ASK_UP = (
    "python3 -c 'import json, urllib.request, urllib.parse; "
    'c = json.load(open("/etc/mpictl/monitoring.json")); '
    'q = urllib.parse.urlencode({"query": "up{job=\\"node\\"}"}); '
    'u = c["prometheus"] + "/api/v1/query?" + q; '
    "print(urllib.request.urlopen(u, timeout=10).read().decode())'"
)


ASK_TARGETS = (
    "python3 -c 'import json, urllib.request; "
    'c = json.load(open("/etc/mpictl/monitoring.json")); '
    'u = c["prometheus"] + "/api/v1/targets"; '
    "a = json.load(urllib.request.urlopen(u, timeout=10)); "
    'print([(t["labels"].get("node"), t["health"], t["lastScrape"], t["lastError"]) '
    'for t in a["data"]["activeTargets"]])\''
)


def scrape_errors(cluster: Cluster) -> str:
    """Prometheus's view of each target (node, health, last scrape, last error): the message of
    a failed assertion on ``up``."""
    proc = ssh(cluster.head, ASK_TARGETS)
    return proc.stdout.strip() or proc.stderr.strip()


def status_json(cluster: Cluster) -> tuple[int, dict[str, Any], str]:
    proc = run_cli("status", "-i", str(cluster.source), "--json", timeout=180)
    return proc.returncode, json.loads(proc.stdout or "{}"), proc.stderr


def exporters_up(cluster: Cluster, timeout: float = 90) -> dict[str, str | None]:
    """Prometheus's ``up`` of each node's exporter, once every node is up or ``timeout`` passed.

    A node that an earlier test stopped and started again (test_jobs stops node2) is scraped as
    down until Prometheus's next scrape after it booted: up to a scrape interval plus the scrape
    timeout, so the answer is awaited rather than read once."""
    deadline = time.monotonic() + timeout
    while True:
        proc = ssh(cluster.head, ASK_UP)
        assert proc.returncode == 0, proc.stderr
        answer = json.loads(proc.stdout)
        up = {s["metric"].get("node"): s["value"][1] for s in answer["data"]["result"]}
        got = {n: up.get(n) for n in cluster.names}
        if set(got.values()) == {"1"} or time.monotonic() > deadline:
            return got
        time.sleep(3)


def test_prometheus_on_the_head_reports_every_nodes_exporter_up(cluster: Cluster) -> None:
    up = exporters_up(cluster)
    assert up == dict.fromkeys(cluster.names, "1"), (up, scrape_errors(cluster))


def test_exporters_and_prometheus_listen_on_the_cluster_address_only(cluster: Cluster) -> None:
    for node in cluster.nodes:
        proc = ssh(node, "cat /proc/net/tcp")
        listening = {
            (int(port, 16), socket.inet_ntoa(struct.pack("<I", int(address, 16))))
            for address, port, state in (
                (f[1].split(":")[0], f[1].split(":")[1], f[3])
                for f in (line.split() for line in proc.stdout.splitlines()[1:])
            )
            if state == "0A" and int(port, 16) in (9090, 9100)
        }
        ip = str(node.vars.get("sandbox_ip"))
        want = {(9100, ip)} | ({(9090, ip)} if node is cluster.head else set())
        assert listening == want, (node.name, listening)


def test_status_shows_every_node_up_with_its_numbers(cluster: Cluster) -> None:
    up = exporters_up(cluster)
    assert up == dict.fromkeys(cluster.names, "1"), (up, scrape_errors(cluster))
    rc, report, err = status_json(cluster)
    assert rc == 0, err
    rows = {n["node"]: n for n in report["nodes"]}
    assert list(rows) == cluster.names
    for row in rows.values():
        assert row["state"] == "up", row
        assert row["cpus"] and row["mem_total"] and row["load1"] is not None, row
        assert 0 < row["disk_used"] < 1, row
        assert row["slurm"] in ("idle", "mixed", "allocated"), row
    assert report["server"] == cluster.head.name
    # the table as a user reads it
    table = run_cli("status", "-i", str(cluster.source), timeout=180)
    assert table.returncode == 0, table.stderr
    cells = [[c.strip() for c in line.strip("│ ").split("│")] for line in table.stdout.splitlines()]
    for name in cluster.names:
        assert [name, "up"] in [row[:2] for row in cells], table.stdout


def test_a_stopped_exporter_shows_its_node_down_and_provision_starts_it_again(
    cluster: Cluster, source_vars: dict[str, Any]
) -> None:
    node3 = cluster.nodes[2]
    stopped = ssh(node3, "systemctl stop prometheus-node-exporter")
    assert stopped.returncode == 0, stopped.stderr
    try:

        def down() -> Any:
            rc, report, err = status_json(cluster)
            states = {n["node"]: n["state"] for n in report.get("nodes", [])}
            return (rc, states, err) if states.get(node3.name) == "DOWN" else None

        rc, states, err = wait_for("node3 DOWN in mpictl status", down)
        assert rc == 1 and states == {**dict.fromkeys(cluster.names, "up"), node3.name: "DOWN"}
        assert err.strip().endswith(f"status: {node3.name}: DOWN"), err
    finally:
        # the short path sees the stopped unit: monitoring takes its long path and starts it
        result = provision_run(cluster.source, source_vars)
    assert result.ok, describe_failures(result)
    assert any(
        r.task == "Start the node exporter and start it at boot" and r.host == node3.name
        for r in result.changed_tasks()
    ), [(r.host, r.task) for r in result.changed_tasks()]
    assert ssh(node3, "systemctl is-active prometheus-node-exporter").stdout.strip() == "active"
    wait_for("node3 up again", lambda: status_json(cluster)[0] == 0)
