"""``mpictl status`` (mpictl.status and scripts/cluster_status.py): the head program against a
Prometheus HTTP API on loopback that answers with what the sandbox's real Prometheus 2.42 answered
(tests/data/recordings/sandbox-prometheus/, recorded from `mpictl status --json`'s queries), plus
DCGM series in the names and units of NVIDIA's dcgm-exporter (no DCGM here: said so), a fake
``sinfo``; and the pure report built from that answer."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mpictl import cli, programs, status
from mpictl.inventory import load_inventory
from tests.unit.jobside import cluster, forbid_processes, node, three

RECORDED = Path(__file__).parents[1] / "data" / "recordings" / "sandbox-prometheus" / "answers.json"


def dcgm(values: dict[str, list[float]]) -> list[dict[str, Any]]:
    """Per GPU series of one DCGM field on node2 (dcgm-exporter labels gpu, UUID, Hostname)."""
    return [
        {"metric": {"gpu": str(i), "node": "node2", "Hostname": "node2"}, "value": [1.0, str(v)]}
        for i, v in enumerate(values["v"])
    ]


def answers() -> dict[str, Any]:
    """PromQL -> the API's ``data.result``: the recording, with node2's GPUs added."""
    data: dict[str, Any] = json.loads(RECORDED.read_text())
    by_name = {status.QUERIES[name]: result for name, result in data.items()}
    # dcgm-exporter on an 8-GPU node: utilisation in %, framebuffer in MiB
    by_name[status.QUERIES["gpus"]] = [
        {"metric": {"node": "node2"}, "value": [1.0, "8"]},
    ]
    by_name[status.QUERIES["gpu_util"]] = [{"metric": {"node": "node2"}, "value": [1.0, "87.5"]}]
    by_name[status.QUERIES["gpu_mem_used"]] = [
        {"metric": {"node": "node2"}, "value": [1.0, str(8 * 40960)]}
    ]
    by_name[status.QUERIES["gpu_mem_free"]] = [
        {"metric": {"node": "node2"}, "value": [1.0, str(8 * 40960)]}
    ]
    return by_name


class FakePrometheus(http.server.BaseHTTPRequestHandler):
    results: dict[str, Any] = {}

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        url = urllib.parse.urlparse(self.path)
        query = urllib.parse.parse_qs(url.query).get("query", [""])[0]
        if url.path != "/api/v1/query":
            self.send_error(404)
            return
        if query not in self.results:
            body = {"status": "error", "errorType": "bad_data", "error": f"unknown {query}"}
            self.send_response(400)
        else:
            body = {"status": "success", "data": {"resultType": "vector",
                                                  "result": self.results[query]}}  # fmt: skip
            self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(body).encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def prometheus() -> Iterator[str]:
    FakePrometheus.results = answers()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakePrometheus)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def run_head(tmp_path: Path, config: dict[str, Any] | None, slurm: bool, sinfo: str = "") -> Any:
    path = tmp_path / "monitoring.json"
    if config is not None:
        path.write_text(json.dumps(config))
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "sinfo").write_text(f"#!/bin/sh\ncat <<'EOF'\n{sinfo}EOF\n")
    (bindir / "sinfo").chmod(0o755)
    spec = {"config": str(path), "queries": status.QUERIES, "slurm": slurm}
    proc = subprocess.run(
        [sys.executable, "-", json.dumps(spec)],
        input=programs.source(status.HEAD_PROGRAM),
        capture_output=True,
        text=True,
        env={"PATH": f"{bindir}:/usr/bin:/bin"},
        timeout=60,
        check=True,
    )
    assert proc.stderr == ""
    return json.loads(proc.stdout.strip().splitlines()[-1])


SINFO = "node1|idle|none\nnode2|drained|mpictl-health: gpu: 7 GPUs, expected 8\nnode3|idle|none\n"


def test_the_head_program_reads_every_query_and_sinfo(tmp_path: Path, prometheus: str) -> None:
    config = {"prometheus": prometheus, "server": "node1", "nodes": ["node1", "node2", "node3"]}
    got = run_head(tmp_path, config, slurm=True, sinfo=SINFO)
    assert got["error"] == "" and got["query_errors"] == {}
    assert sorted(got["results"]) == sorted(status.QUERIES)
    assert sorted(n for n, _ in got["results"]["up"]) == ["node1", "node2", "node3"]
    assert got["sinfo"]["node2"] == ["drained", "mpictl-health: gpu: 7 GPUs, expected 8"]
    assert got["sinfo"]["node1"] == ["idle", ""]
    assert got["prometheus"] == prometheus and got["server"] == "node1"


def test_the_report_is_one_row_per_node_with_the_recorded_values(
    tmp_path: Path, prometheus: str
) -> None:
    config = {"prometheus": prometheus, "server": "node1", "nodes": ["node1", "node2", "node3"]}
    report = status.build(three(), run_head(tmp_path, config, slurm=True, sinfo=SINFO))
    assert [n.node for n in report.nodes] == ["node1", "node2", "node3"]
    assert report.problems == [] and report.error == ""
    for n in report.nodes:  # the recording: every exporter up, real numbers
        assert n.up is True and n.cpus and n.cpus > 0
        assert n.load1 is not None and n.mem_total and 0 < (n.mem_used or 0) < 1
        assert n.disk_used is not None and 0 < n.disk_used < 1
        assert n.rx is not None and n.tx is not None
    node2 = report.nodes[1]
    assert (node2.gpus, node2.gpu_util, node2.gpu_mem_total) == (8, 87.5, 8 * 81920)
    assert report.nodes[0].gpus is None
    rows = status.table_rows(report)
    assert rows[1][7] == "8 × 88%, 320/640 GiB"
    assert rows[1][8] == "drained (mpictl-health: gpu: 7 GPUs, expected 8)"
    assert rows[0][7] == "-" and rows[0][8] == "idle"


def test_a_stopped_exporter_is_a_down_node_and_a_problem(tmp_path: Path, prometheus: str) -> None:
    up = FakePrometheus.results[status.QUERIES["up"]]
    for series in up:
        if series["metric"]["node"] == "node3":
            series["value"] = [series["value"][0], "0"]
    config = {"prometheus": prometheus, "server": "node1", "nodes": ["node1", "node2", "node3"]}
    report = status.build(three(), run_head(tmp_path, config, slurm=False))
    assert [n.state for n in report.nodes] == ["up", "up", "DOWN"]
    assert status.table_rows(report)[2][2:8] == ("-",) * 6  # its last samples are not shown
    assert report.problems == ["node3: DOWN"]


def test_a_node_prometheus_does_not_scrape_is_said(tmp_path: Path, prometheus: str) -> None:
    grown = cluster(*three().nodes, node("node4"))
    config = {"prometheus": prometheus, "server": "node1", "nodes": ["node1", "node2", "node3"]}
    report = status.build(grown, run_head(tmp_path, config, slurm=False))
    assert report.nodes[3].state == "not scraped"
    assert report.problems == ["node4: not scraped"]


def test_a_failed_query_is_a_note_not_a_failure(tmp_path: Path, prometheus: str) -> None:
    del FakePrometheus.results[status.QUERIES["rx"]]
    config = {"prometheus": prometheus, "server": "node1", "nodes": ["node1"]}
    got = run_head(tmp_path, config, slurm=False)
    report = status.build(three(), got)
    assert report.error == "" and report.notes == [f"rx: HTTP 400: unknown {status.QUERIES['rx']}"]
    assert all(n.rx is None for n in report.nodes) and all(n.up for n in report.nodes)


def test_no_config_and_no_prometheus_are_one_line_each(tmp_path: Path) -> None:
    got = run_head(tmp_path, None, slurm=False)
    assert got["error"].endswith("monitoring.json on the head: the monitoring role is not "
                                 "installed there")  # fmt: skip
    closed = {"prometheus": "http://127.0.0.1:9", "server": "node1", "nodes": ["node1"]}
    got = run_head(tmp_path, closed, slurm=True, sinfo="")
    assert got["error"].startswith("Prometheus at http://127.0.0.1:9 does not answer:")
    report = status.build(three(), got)
    assert report.problems == [got["error"]]


def test_garbage_values_are_no_values() -> None:
    data = {"results": {"up": [["node1", "1"]], "load1": [["node1", "NaN"], ["node2", "x"]],
                        "cpus": [["node1", "+Inf"]], "mem_total": [[1, 2]]}}  # fmt: skip
    report = status.build(three(), data)
    assert report.nodes[0].load1 is None and report.nodes[0].cpus is None
    assert status.table_rows(report)[0][2] == "-"


def inventory(tmp_path: Path, head_vars: str) -> Path:
    path = tmp_path / "hosts.yml"
    path.write_text(
        "all:\n  children:\n    mpi_nodes:\n      hosts:\n"
        f"        node1:\n          ansible_host: 127.0.0.1\n{head_vars}"
    )
    return path


def test_status_without_monitoring_is_refused_before_any_contact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = inventory(tmp_path, "          monitoring_enabled: false\n")
    load_inventory(inv)  # importing Ansible runs ldconfig once: not the command reaching a node
    spawned = forbid_processes(monkeypatch)
    assert cli.main(["status", "-i", str(inv)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "monitoring_enabled is not true for the head node1" in err[0]
    assert "--tags monitoring" in err[0]
    assert spawned == []
