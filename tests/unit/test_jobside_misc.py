"""Job records, smoke result parsing, bench math, doctor aggregation, the torch env wrapper."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mpictl import bench, doctor, hostfile, iperf, jobs, mpirun_plan, planner, smoke, submit
from mpictl.errors import UsageError
from mpictl.remote import NodeOutput, json_lines
from tests.unit.jobside import three

SCRIPTS = Path(__file__).resolve().parents[2] / "mpictl" / "scripts"


# ----------------------------------------------------------------------------- job records


def test_job_record_lifecycle(isolated_state: Path) -> None:
    c = three()
    p = mpirun_plan.plan(
        c, planner.LaunchOptions(command=["hostname"], np=3), "20260101-000000-abc123", None
    )
    rec = submit.create_record(c, p, ["hostname"])
    assert rec.directory == isolated_state / "jobs" / p.job_id
    data = json.loads((rec.directory / "job.json").read_text())
    assert data["status"] == "running" and data["ranks"] == 3 and data["command"] == ["hostname"]
    assert data["mpirun"].startswith("mpirun --hostfile /etc/mpictl/hostfile -np 3")
    assert [h["host"] for h in data["hosts"]] == ["node1", "node2", "node3"]
    rec.output_path.write_text("[1,0]<stdout>: node1\n")
    jobs.finish(rec, exit_code=1, status="failed")
    again = jobs.load("20260101-000000")  # a unique prefix is enough
    assert again.exit_code == 1 and again.status == "failed" and again.end is not None
    assert again.duration_s is not None and again.duration_s >= 0
    assert jobs.output(p.job_id) == "[1,0]<stdout>: node1\n"
    assert [r.id for r in jobs.list_jobs()] == [p.job_id]


def test_unknown_or_ambiguous_job_is_a_usage_error() -> None:
    c = three()
    for jid in ("20260101-000000-aaaaaa", "20260101-000000-bbbbbb"):
        submit.create_record(
            c, mpirun_plan.plan(c, planner.LaunchOptions(command=["x"]), jid, None)
        )
    with pytest.raises(UsageError, match="unknown job"):
        jobs.load("nope")
    with pytest.raises(UsageError, match="ambiguous"):
        jobs.load("20260101")
    assert len(jobs.list_jobs()) == 2


# ----------------------------------------------------------------------------- smoke parsing


def _line(rank: int, record: dict) -> str:
    return f"[1,{rank}]<stdout>: " + json.dumps(record)


OUTPUT = "\n".join(
    [
        _line(0, {"suite": "mpi", "event": "start", "ranks": 4}),
        _line(
            0,
            {
                "suite": "mpi",
                "test": "broadcast",
                "ranks": 4,
                "hosts": ["n1", "n2"],
                "ok": True,
                "time_s": 0.002,
                "failures": [],
            },
        ),
        "[1,2]<stderr>: some warning",
        _line(
            0,
            {
                "suite": "mpi",
                "test": "gather",
                "ranks": 4,
                "hosts": ["n1", "n2"],
                "ok": False,
                "time_s": 0.01,
                "failures": [
                    {"rank": 3, "host": "n2", "error": "gathered array: element 1 is 0.0, want 2.0"}
                ],
            },
        ),
    ]
)


def test_parse_results_reads_json_lines_behind_tag_prefixes() -> None:
    results = smoke.parse_results(OUTPUT, "mpi")
    assert [r.test for r in results] == ["broadcast", "gather"]
    ok, bad = results
    assert ok.ok and ok.result == "pass" and ok.hosts == ["n1", "n2"] and ok.ranks == 4
    assert not bad.ok and bad.result == "FAIL"
    assert bad.message == "n2 (rank 3): gathered array: element 1 is 0.0, want 2.0"
    assert smoke.parse_results(OUTPUT, "horovod") == []


def test_missing_tests_fail_and_name_the_node_from_mpirun_output() -> None:
    out = (
        "--------\nprterun was unable to launch the specified application as it could not\n"
        "access or execute an executable:\n\nExecutable: /opt/mpictl/venv/bin/python\n"
        "Node: node3\n"
    )
    done = smoke.complete("mpi", smoke.MPI_TESTS, [], out, 1, ["node1", "node2", "node3"])
    assert len(done) == len(smoke.MPI_TESTS)
    assert all(not r.ok for r in done)
    assert done[0].hosts == ["node3"]
    assert "Node: node3" in done[0].message and "exit code 1" in done[0].message


def test_report_ok_needs_a_test_and_no_failure() -> None:
    assert not smoke.SmokeReport().ok
    results = smoke.parse_results(OUTPUT, "mpi")
    assert not smoke.SmokeReport(results=results).ok
    assert smoke.SmokeReport(results=results[:1]).ok
    assert not smoke.SmokeReport(results=results[:1], errors=["node2: down"]).ok
    data = smoke.SmokeReport(results=results).to_json()
    assert data["ok"] is False and data["results"][1]["result"] == "FAIL"


def test_node_lines_match_whole_names_only() -> None:
    text = "node10 ok\nssh: connect to host node1 port 22: Connection refused\n"
    assert smoke.node_lines(text, ["node1"]) == [
        "ssh: connect to host node1 port 22: Connection refused"
    ]


def test_json_lines_ignores_free_text() -> None:
    assert json_lines('hello\n{"a": 1}\n[1,0]<stdout>: {"b": 2}\n{broken\n') == [{"a": 1}, {"b": 2}]


# ----------------------------------------------------------------------------- bench math


def test_busbw_follows_nccl_tests_definition() -> None:
    assert bench.algbw(64 * 2**20, 0.5) == 2 * 64 * 2**20
    # 2(n-1)/n: n=2 -> 1, n=4 -> 1.5, n=1 -> 0
    assert bench.busbw(1000, 1.0, 2) == 1000
    assert bench.busbw(1000, 1.0, 4) == 1500
    assert bench.busbw(1000, 1.0, 1) == 0
    assert bench.busbw(900, 1.0, 3) == pytest.approx(1200)
    with pytest.raises(ValueError):
        bench.busbw(1, 0, 2)


def test_bench_points_report_and_ratio() -> None:
    out = "\n".join(
        "[1,0]<stdout>: "
        + json.dumps(
            {
                "bytes": b,
                "iters": 5,
                "time_s": b / 1e9,
                "ok": True,
                "ranks": 3,
                "hosts": ["node1", "node2", "node3"],
            }
        )
        for b in (8, 64 * 2**20)
    )
    points, hosts = bench.parse_points(out)
    assert [p.bytes for p in points] == [8, 64 * 2**20] and hosts == ["node1", "node2", "node3"]
    report = bench.BenchReport(
        points=points, hosts=hosts, link_gbps=2.0, link_pair=("node1", "node2")
    )
    p64 = report.at(64 * 2**20)
    assert p64 is not None
    assert p64.algbw_gbps == pytest.approx(1.0)
    assert p64.busbw_gbps == pytest.approx(4 / 3)
    assert p64.latency_us == pytest.approx(64 * 2**20 / 1e3)
    assert report.ratio(p64) == pytest.approx(2 / 3)
    data = report.to_json()
    assert data["busbw_64MiB_GBps"] == pytest.approx(4 / 3)
    assert "busbw at 64 MiB: 1.333 GB/s" in bench.summary(report)
    assert "ratio busbw/link: 0.67" in bench.summary(report)


def test_parse_iperf() -> None:
    text = json.dumps({"end": {"sum_received": {"bits_per_second": 8e9}}})
    assert iperf.parse_iperf(text) == pytest.approx(1.0)


def test_plot_writes_a_png(tmp_path: Path) -> None:
    pts = [bench.Point(bytes=2**k, ranks=3, time_s=1e-5 * 2**k) for k in range(3, 10)]
    out = bench.plot(
        bench.BenchReport(points=pts, hosts=["a", "b"], link_gbps=1.0), tmp_path / "p.png"
    )
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ----------------------------------------------------------------------------- doctor


# A login shell's PATH: the contributed dirs (/etc/profile.d/mpictl.sh), then /etc/profile's own.
LOGIN_PATH = "/opt/openmpi/5.0.7/bin:/opt/mpictl/venv/bin:/usr/local/bin:/usr/bin:/bin"


def login(**over: object) -> dict:
    """What the probe reports of one login shell (bash -lc / sh -lc)."""
    return {
        "path": LOGIN_PATH,
        "ld_library_path": "/opt/openmpi/5.0.7/lib",
        "mpirun": "/opt/openmpi/5.0.7/bin/mpirun",
        "error": "",
        **over,
    }


def probe(**over: object) -> dict:
    base = {
        "hostname": "n",
        "path": "/opt/openmpi/5.0.7/bin:/usr/bin",
        "ld_library_path": "/opt/openmpi/5.0.7/lib",
        "mpirun": "/opt/openmpi/5.0.7/bin/mpirun",
        "prted": "/opt/openmpi/5.0.7/bin/prted",
        "openmpi_prefix": "/opt/openmpi/5.0.7",
        "login": {"bash": login(), "sh": login()},
        "venv": True,
        "versions": {
            "openmpi": "mpirun (Open MPI) 5.0.7",
            "mpi4py": "3.1.6",
            "mpi4py_library": "Open MPI v5.0.7",
        },
        "markers": {"/opt/openmpi/5.0.7/.mpictl-fingerprint": "abc"},
        "cores": 2,
        "gpus": 0,
        "ipv4": [["lo", "127.0.0.1/8"], ["eth0", "10.0.0.11/24"]],
        "reach": {"node1": {"tcp": True}, "node2": {"tcp": True}, "node3": {"tcp": True}},
        "hostfile": "# managed\nnode1 slots=2\nnode2 slots=2\nnode3 slots=2\n",
        "tools": {"/opt/mpictl/bin/mpictl-torch-env": True},
    }
    base.update(over)
    return base


def outputs(**per_node: dict | NodeOutput) -> dict[str, NodeOutput]:
    out = {}
    for name in ("node1", "node2", "node3"):
        value = per_node.get(name, probe())
        out[name] = (
            value if isinstance(value, NodeOutput) else NodeOutput(name, 0, json.dumps(value), "")
        )
    return out


def test_doctor_all_good() -> None:
    report = doctor.evaluate(three(), outputs())
    assert report.ok, [c for c in report.checks if not c.ok]
    names = {c.check for c in report.checks}
    assert {
        "ssh from head",
        "non-interactive env",
        "login shell env",
        "openmpi version",
        "common network",
        "tcp reachability",
        "slots",
    } <= names


def test_doctor_checks_the_login_shells_of_every_node() -> None:
    report = doctor.evaluate(three(), outputs())
    ok = [c for c in report.checks if c.check == "login shell env"]
    assert [(c.node, c.ok) for c in ok] == [("node1", True), ("node2", True), ("node3", True)]
    assert ok[0].detail.startswith("bash -l and sh -l: mpirun /opt/openmpi/5.0.7/bin/mpirun, ")


def test_doctor_names_the_node_whose_login_shell_lacks_the_cluster_env() -> None:
    reset = "/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games"  # /etc/profile, no mpictl.sh
    report = doctor.evaluate(
        three(),
        outputs(
            node2=probe(login={"bash": login(path=reset, mpirun=None), "sh": login()}),
            node3=probe(
                login={
                    "bash": login(mpirun="/usr/bin/mpirun", ld_library_path=""),
                    "sh": login(error="sh -lc: timed out after 20 seconds"),
                }
            ),
        ),
    )
    failed = {c.node: c for c in report.failed}
    assert sorted(failed) == ["node2", "node3"]
    assert all(c.check == "login shell env" for c in report.failed)
    assert failed["node2"].detail == (
        "bash -l: mpirun not in PATH; bash -l: PATH lacks /opt/openmpi/5.0.7/bin; "
        "bash -l: PATH lacks /opt/mpictl/venv/bin"
    )
    assert failed["node3"].detail == (
        "bash -l: mpirun is /usr/bin/mpirun, non-interactive SSH has "
        "/opt/openmpi/5.0.7/bin/mpirun; bash -l: LD_LIBRARY_PATH lacks /opt/openmpi/5.0.7/lib; "
        "sh -l: sh -lc: timed out after 20 seconds"
    )
    for check in failed.values():
        assert check.fix.startswith("run `mpictl provision -i ")
        assert check.fix.endswith("(mpi_environment writes /etc/profile.d/mpictl.sh)")


def test_doctor_reads_older_probes_without_login_shells() -> None:
    old = probe()
    del old["login"]
    report = doctor.evaluate(three(), outputs(node1=old, node2=probe(login={"bash": None})))
    checks = {(c.check, c.node): c for c in report.checks if c.check == "login shell env"}
    assert sorted(checks) == [("login shell env", "node2"), ("login shell env", "node3")]
    assert not checks[("login shell env", "node2")].ok
    assert checks[("login shell env", "node2")].detail == "bash -l: no answer"
    assert report.failed == [checks[("login shell env", "node2")]]


def test_doctor_checks_each_network_interface_override() -> None:
    from tests.unit.jobside import cluster, facts, node

    c = cluster(
        node("node1", facts=facts("10.0.0.11"), interface="eth0"),
        node("node2", facts=facts("10.0.0.12"), interface="ib0"),
        node("node3", facts=facts("10.0.0.13")),
    )
    report = doctor.evaluate(c, outputs())
    checks = {(x.node, x.ok) for x in report.checks if x.check == "network interface"}
    assert checks == {("node1", True), ("node2", False)}
    bad = next(x for x in report.failed if x.check == "network interface")
    assert (
        bad.detail
        == "mpi_network_interface ib0 has no IPv4 address on this node (it has: eth0, lo)"
    )
    assert "mpi_network_interface" in bad.fix


def test_doctor_names_each_broken_node_and_the_fix() -> None:
    report = doctor.evaluate(
        three(),
        outputs(
            node2=NodeOutput("node2", 255, "", "ssh: connect to host node2 port 22: No route"),
            node3=probe(
                path="/usr/bin",
                versions={
                    "openmpi": "mpirun (Open MPI) 5.0.6",
                    "mpi4py": "3.1.6",
                    "mpi4py_library": "Open MPI v5.0.7",
                },
                markers={"/opt/openmpi/5.0.7/.mpictl-fingerprint": "zzz"},
                ipv4=[["eth0", "10.9.0.13/24"]],
                cores=1,
            ),
        ),
    )
    assert not report.ok
    failed = {(c.check, c.node) for c in report.failed}
    assert ("ssh from head", "node2") in failed
    assert ("non-interactive env", "node3") in failed
    assert ("openmpi version", "node3") in failed
    assert ("fingerprint /opt/openmpi/5.0.7/.mpictl-fingerprint", "node3") in failed
    assert ("common network", "node3") in failed
    assert ("slots", "node3") in failed
    assert all(c.fix for c in report.failed)
    assert all(c.node in ("node2", "node3") for c in report.failed)
    ssh = next(c for c in report.failed if c.node == "node2")
    assert "No route" in ssh.detail and "mpictl provision" in ssh.fix


def test_doctor_missing_component_on_one_node_and_unreachable_pairs() -> None:
    p3 = probe(
        versions={"openmpi": "mpirun (Open MPI) 5.0.7", "mpi4py_library": "Open MPI v5.0.7"},
        reach={"node1": {"tcp": False, "error": "10.0.0.11:22: refused"}},
    )
    report = doctor.evaluate(three(), outputs(node3=p3))
    failed = {(c.check, c.node): c for c in report.failed}
    assert "missing" in failed[("mpi4py version", "node3")].detail
    assert "not reachable from node3" in failed[("tcp reachability", "node1")].detail


def test_doctor_requires_openmpi_and_mpi4py() -> None:
    report = doctor.evaluate(
        three(), outputs(**{n: probe(versions={}) for n in ("node1", "node2", "node3")})
    )
    failed = {(c.check, c.node) for c in report.failed}
    assert ("openmpi version", "all") in failed and ("mpi4py version", "all") in failed
    assert ("horovod version", "all") not in failed


def test_doctor_slots_vs_gpus_and_hostfile() -> None:
    p1 = probe(gpus=1, hostfile="node1 slots=2\nnode2 slots=2\n")
    report = doctor.evaluate(three(), outputs(node1=p1))
    failed = {(c.check, c.node) for c in report.failed}
    assert ("slots", "node1") in failed  # 2 slots > 1 GPU
    assert ("hostfile", "node3") in failed  # not listed on the head's hostfile


def test_parse_hostfile() -> None:
    assert hostfile.parse_hostfile("# x\nnode1 slots=4\nnode2\n") == {"node1": 4, "node2": 1}


# ----------------------------------------------------------------------------- torch wrapper


def torch_env(env: dict[str, str], *cmd: str) -> subprocess.CompletedProcess[str]:
    base = {"PATH": os.environ["PATH"]}
    return subprocess.run(
        ["sh", str(SCRIPTS / "mpictl-torch-env"), *(cmd or ("env",))],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=30,
    )


OMPI = {
    "OMPI_COMM_WORLD_RANK": "5",
    "OMPI_COMM_WORLD_SIZE": "6",
    "OMPI_COMM_WORLD_LOCAL_RANK": "2",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "3",
    "MASTER_ADDR": "node1",
}


def env_of(proc: subprocess.CompletedProcess[str]) -> dict[str, str]:
    return dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)


def test_torch_env_maps_openmpi_variables() -> None:
    got = env_of(torch_env({**OMPI, "MPICTL_GPU_COUNT": "0"}))
    assert got["RANK"] == "5" and got["WORLD_SIZE"] == "6"
    assert got["LOCAL_RANK"] == "2" and got["LOCAL_WORLD_SIZE"] == "3"
    assert got["MASTER_ADDR"] == "node1" and got["MASTER_PORT"] == "29500"
    assert "CUDA_VISIBLE_DEVICES" not in got


def test_torch_env_pins_gpus_round_robin_unless_set() -> None:
    assert env_of(torch_env({**OMPI, "MPICTL_GPU_COUNT": "2"}))["CUDA_VISIBLE_DEVICES"] == "0"
    assert env_of(torch_env({**OMPI, "MPICTL_GPU_COUNT": "4"}))["CUDA_VISIBLE_DEVICES"] == "2"
    user = {**OMPI, "MPICTL_GPU_COUNT": "4", "CUDA_VISIBLE_DEVICES": "3"}
    assert env_of(torch_env(user))["CUDA_VISIBLE_DEVICES"] == "3"


def test_torch_env_refuses_outside_mpirun_and_keeps_the_exit_code() -> None:
    proc = torch_env({})
    assert proc.returncode == 2 and "OMPI_COMM_WORLD_RANK" in proc.stderr
    assert torch_env({**OMPI, "MPICTL_GPU_COUNT": "0"}, "sh", "-c", "exit 7").returncode == 7


def test_failed_nodes_come_from_errors_and_failed_tests() -> None:
    results = smoke.parse_results(OUTPUT, "mpi")
    report = smoke.SmokeReport(results=results, errors=["node7: cannot ssh from node1 as mpi"])
    assert report.failed_nodes == ["n2", "node7"]


def _preflight_with(  # type: ignore[no-untyped-def]
    monkeypatch, horovod: dict[str, str], tf: dict[str, str] | None = None, frameworks=None
):
    """smoke.preflight against fake node answers: horovod.torch's (and horovod.tensorflow's)
    import result per node; the modules each node was asked for, recorded."""
    import json as _json

    from mpictl import remote
    from tests.unit.jobside import three

    asked: list[str] = []

    answers = {"horovod.torch": horovod, "horovod.tensorflow": tf or {}}

    def fake(head, hosts, command, program="", **kw):  # type: ignore[no-untyped-def]
        asked.append(command)
        out = {}
        for h in hosts:
            mods = {"mpi4py": "ok"} | {m: answers[m][h] for m in answers if m in command.split()}
            line = _json.dumps({"missing": [], "modules": mods}) + "\n"
            out[h] = remote.NodeOutput(h, 0, line, "")
        return out

    monkeypatch.setattr(remote, "run_on_nodes", fake)
    cluster = three()
    if frameworks is not None:
        cluster.head.vars["horovod_frameworks"] = frameworks
    return (*smoke.preflight(cluster, None, ["mpi", "horovod"]), asked)  # type: ignore[arg-type]


def test_smoke_preflight_horovod_on_no_node_is_a_skip(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    missing = "ModuleNotFoundError: No module named 'horovod'"
    nodes = ("node1", "node2", "node3")
    errors, skip, asked = _preflight_with(monkeypatch, dict.fromkeys(nodes, missing))
    assert errors == []
    assert skip["horovod"].startswith(f"node1: horovod.torch: {missing}")
    assert "horovod.tensorflow" not in asked[0]  # the default cluster: PyTorch only


def test_smoke_preflight_horovod_on_some_nodes_names_the_broken_one(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    broken = "ImportError: libtorch_cpu.so: cannot open shared object file"
    errors, _, _ = _preflight_with(monkeypatch, {"node1": "ok", "node2": broken, "node3": "ok"})
    assert errors == [
        f"node2: Horovod does not import (horovod.torch: {broken}) while node1, node3 have it; "
        "fix: `mpictl provision` (horovod role)"
    ]


def test_smoke_preflight_asks_for_every_framework_and_names_the_one_missing(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """With horovod_frameworks [pytorch, tensorflow] every node must import both bindings; a
    node whose horovod.tensorflow fails is named with that module."""
    ok3 = dict.fromkeys(("node1", "node2", "node3"), "ok")
    broken = "ImportError: mpi_lib.cpython-311-x86_64-linux-gnu.so: undefined symbol"
    errors, skip, asked = _preflight_with(
        monkeypatch, ok3, {**ok3, "node3": broken}, frameworks=["pytorch", "tensorflow"]
    )
    assert asked[0].split()[-2:] == ["horovod.torch", "horovod.tensorflow"]
    assert errors == [
        f"node3: Horovod does not import (horovod.tensorflow: {broken}) while node1, node2 have "
        "it; fix: `mpictl provision` (horovod role)"
    ]
    assert skip == {}


def test_smoke_preflight_a_framework_missing_everywhere_is_an_error_not_a_skip(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The inventory names tensorflow, Horovod imports under PyTorch, horovod.tensorflow nowhere
    (a cluster not provisioned since): every node is named, nothing is silently skipped."""
    ok3 = dict.fromkeys(("node1", "node2", "node3"), "ok")
    missing = "ModuleNotFoundError: No module named 'tensorflow'"
    errors, skip, _ = _preflight_with(
        monkeypatch, ok3, dict.fromkeys(ok3, missing), frameworks=["pytorch", "tensorflow"]
    )
    assert skip == {}
    assert errors == [
        f"{n}: Horovod does not import (horovod.tensorflow: {missing}) while horovod_frameworks "
        "names it and horovod.torch import; fix: `mpictl provision` (horovod role)"
        for n in ("node1", "node2", "node3")
    ]
    # neither imports anywhere: a cluster without Horovod, whose suite is skipped
    none = "ModuleNotFoundError: No module named 'horovod'"
    errors, skip, _ = _preflight_with(
        monkeypatch, dict.fromkeys(ok3, none), dict.fromkeys(ok3, none),
        frameworks=["pytorch", "tensorflow"],
    )  # fmt: skip
    assert errors == [] and skip["horovod"].startswith(
        f"node1: horovod.torch: {none}; horovod.tensorflow: {none}; node2: "
    )


# A stand-in for torch.distributed: a process group whose destructor, run when Python finalizes
# its modules (after the atexit handlers) with the group still initialized, aborts the process as
# gloo's threads do (exit 134), unless it was destroyed.
FAKE_DIST = """
import os
_state = {"initialized": False}
def is_available():
    return True
def is_initialized():
    return _state["initialized"]
def init_process_group(*args, **kwargs):
    _state["initialized"] = True
def destroy_process_group():
    _state["initialized"] = False
    with open(os.environ["FAKE_TORCH_LOG"], "a") as log:
        log.write("destroyed\\n")
class _Group:
    def __del__(self, _exit=os._exit, _state=_state):
        if _state["initialized"]:
            _exit(134)  # "terminate called without an active exception"
_group = _Group()
"""


def fake_torch(tmp_path: Path) -> Path:
    root = tmp_path / "fake-torch"
    (root / "torch" / "distributed").mkdir(parents=True)
    (root / "torch" / "__init__.py").write_text("")
    (root / "torch" / "distributed" / "__init__.py").write_text(FAKE_DIST)
    return root


@pytest.mark.parametrize(
    ("script", "code", "destroyed"),
    [
        # the three-line script of issue 23: the group is left initialized
        ("import torch.distributed as d; d.init_process_group('gloo')", 0, 1),
        ("import sys, torch.distributed as d; d.init_process_group('gloo'); sys.exit(3)", 3, 1),
        # a script that tears down its own group: nothing more to do
        ("import torch.distributed as d; d.init_process_group(); d.destroy_process_group()", 0, 1),
        ("import torch.distributed as d", 0, 0),
        ("print('no torch')", 0, 0),
    ],
)
def test_torch_env_tears_down_a_process_group_the_script_left(
    tmp_path: Path, script: str, code: int, destroyed: int
) -> None:
    log = tmp_path / "log"
    env = {
        **OMPI,
        "MPICTL_GPU_COUNT": "0",
        "PYTHONPATH": str(fake_torch(tmp_path)),
        "FAKE_TORCH_LOG": str(log),
    }
    proc = torch_env(env, sys.executable, "-c", script)
    assert proc.returncode == code, proc.stderr
    assert (log.read_text().count("destroyed") if log.exists() else 0) == destroyed


def test_without_the_exit_handler_the_fake_group_aborts_the_rank(tmp_path: Path) -> None:
    # The control case: the same script, run without the wrapper's sitecustomize, exits 134.
    env = {**os.environ, "PYTHONPATH": str(fake_torch(tmp_path)), "FAKE_TORCH_LOG": "/dev/null"}
    script = "import torch.distributed as d; d.init_process_group('gloo')"
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True)
    assert proc.returncode == 134


def test_the_teardown_can_be_turned_off_and_the_rank_then_aborts_as_before(tmp_path: Path) -> None:
    env = {
        **OMPI,
        "MPICTL_GPU_COUNT": "0",
        "PYTHONPATH": str(fake_torch(tmp_path)),
        "FAKE_TORCH_LOG": "/dev/null",
        "MPICTL_TORCH_TEARDOWN": "0",
    }
    script = "import torch.distributed as d; d.init_process_group('gloo')"
    assert torch_env(env, sys.executable, "-c", script).returncode == 134


def test_the_exit_handler_runs_the_sitecustomize_it_shadows(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os\nopen(os.environ['FAKE_TORCH_LOG'], 'a').write('site\\n')\n"
    )
    log = tmp_path / "log"
    env = {**OMPI, "MPICTL_GPU_COUNT": "0", "PYTHONPATH": str(site), "FAKE_TORCH_LOG": str(log)}
    proc = torch_env(
        env, sys.executable, "-c", "import sitecustomize; print(sitecustomize.__file__)"
    )
    assert proc.returncode == 0, proc.stderr
    assert log.read_text() == "site\n"
    assert "mpictl-torch-site" in proc.stdout  # ours is the one Python imported


def test_smoke_on_one_node_spans_its_ranks_and_on_more_crosses_nodes(tmp_path: Path) -> None:
    from mpictl.inventory import load_inventory

    def cluster(hosts: str) -> object:
        inv = tmp_path / f"{abs(hash(hosts))}.yml"
        inv.write_text(f"mpi_nodes:\n  hosts:\n{hosts}")
        return load_inventory(inv)

    eight_gpus = cluster("    gpu01: {mpi_slots: 8}\n")
    assert smoke.single_node_options(eight_gpus) == {"env": ["MPICTL_SMOKE_MIN_HOSTS=1"]}
    one_slot = cluster("    gpu01: {mpi_slots: 1}\n")
    assert smoke.single_node_options(one_slot) == {
        "env": ["MPICTL_SMOKE_MIN_HOSTS=1"],
        "np": 2,
        "oversubscribe": True,
    }
    two = cluster("    a: {mpi_slots: 4}\n    b: {mpi_slots: 4}\n")
    assert smoke.single_node_options(two) == {}
