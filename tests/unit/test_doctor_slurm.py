"""mpictl doctor's Slurm checks (pure): each failure names the node and the fix."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from mpictl.doctor import slurm_checks as slurm
from tests.unit.jobside import three

PROVISION = "run `mpictl provision -i inv`"


def healthy() -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    node = {"slurm": {"munge": "active", "slurmd": "active", "credential": "c", "munge_error": ""}}
    data = {n: {**node} for n in ("node1", "node2", "node3")}
    result = {
        "sinfo": {"node1": "idle", "node2": "mixed", "node3": "allocated"},
        "srun": {"rc": 0, "hosts": ["node1", "node2", "node3"], "error": ""},
        "mpi": ["none", "pmix", "pmix_v4"],
        "munge": {"node1": "", "node2": "", "node3": ""},
    }
    return data, result


def failed(data: dict[str, Any], result: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c.check, c.node) for c in slurm.checks(three(), data, result, PROVISION) if not c.ok]


def test_a_healthy_cluster_passes_every_check() -> None:
    data, result = healthy()
    checks = slurm.checks(three(), data, result, PROVISION)
    assert len(checks) == 3 * 3 + 2 and all(c.ok for c in checks)


def test_slurmd_stopped_on_node2_names_node2() -> None:
    data, result = healthy()
    data["node2"] = {"slurm": {**data["node2"]["slurm"], "slurmd": "inactive"}}
    result["sinfo"]["node2"] = "idle*"
    result["srun"] = {"rc": 1, "hosts": ["node1", "node3"], "error": "srun: error: node2: x"}
    bad = failed(data, result)
    assert ("slurm daemons", "node2") in bad and ("slurm node state", "node2") in bad
    assert ("srun on every node", "node2") in bad
    assert all(node == "node2" for _, node in bad)
    fix = next(c.fix for c in slurm.checks(three(), data, result, PROVISION) if not c.ok)
    assert fix == "run `mpictl provision -i inv --tags slurm` (slurm role)"


def test_a_different_munge_key_and_a_missing_node_and_no_pmix() -> None:
    data, result = healthy()
    result["munge"]["node3"] = "unmunge: Error: Invalid credential"
    del result["sinfo"]["node1"]
    result["mpi"] = ["none", "pmi2"]
    bad = failed(data, result)
    assert ("munge key", "node3") in bad
    assert ("slurm node state", "node1") in bad
    assert ("srun --mpi=list has pmix", "node1") in bad


def test_no_answer_from_the_head_is_one_failure() -> None:
    data, _ = healthy()
    assert failed(data, {}) == [("slurm on the head", "node1")]


def test_enabled_reads_the_heads_variable() -> None:
    c = three()
    assert slurm.enabled(c) is False
    c.head.vars["slurm_enabled"] = "true"
    assert slurm.enabled(c) is True


def test_a_drained_node_shows_its_reason_and_who_resumes_it() -> None:
    data, result = healthy()
    result["sinfo"].update(node2="drained", node3="drained")
    result["reasons"] = {"node2": "mpictl-health: disk: /tmp has 3 MiB free, below 512 MiB",
                         "node3": "operator: new DIMM"}  # fmt: skip
    checks = {c.node: c for c in slurm.checks(three(), data, result, PROVISION)
              if c.check == "slurm node state"}  # fmt: skip
    assert checks["node1"].ok and checks["node1"].detail == "sinfo: idle"
    assert not checks["node2"].ok
    assert (
        checks["node2"].detail
        == "sinfo: drained (mpictl-health: disk: /tmp has 3 MiB free, below 512 MiB)"
    )
    assert (
        checks["node2"].fix
        == "repair what the reason names: the next health check resumes the node"
    )
    assert checks["node3"].detail == "sinfo: drained (operator: new DIMM)"
    assert "state=resume" in checks["node3"].fix


def test_the_drain_mark_is_the_health_programs_own() -> None:
    # doctor tells a health drain from an operator's by the mark the node program writes
    import importlib.util

    from tests.unit.test_node_health import PROGRAM

    spec = importlib.util.spec_from_file_location("node_health", PROGRAM)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert slurm.HEALTH_MARK == module.MARK


def test_an_old_slurm_release_is_warned_of_once_with_the_fix() -> None:
    data, result = healthy()
    result["version"] = "slurm 26.05.3"
    checks = slurm.checks(three(), data, result, PROVISION)
    warned = [c for c in checks if c.check == "slurm release"]
    assert len(warned) == 1 and warned[0].ok and warned[0].node == "all"  # a warning, not a fail
    assert warned[0].detail.startswith("WARNING: Slurm 26.05.3 is older than 26.05.5")
    assert "26.05.4 fixed CVE-2026-65107" in warned[0].detail
    assert "slurm_version: 26.05.5" in warned[0].fix and "--tags slurm" in warned[0].fix


def test_the_current_release_and_an_unknown_series_are_not_warned_of() -> None:
    table = slurm.release_table()
    assert table["newest"]["26.05"] == "26.05.5"
    for line in ("slurm 26.05.5", "slurm 25.11.7", "slurm-wlm 22.05.8x", "", "garbage"):
        assert slurm.release_check(line, table, PROVISION) is None, line


def test_the_role_default_is_the_newest_patch_release_the_role_knows() -> None:
    import yaml

    from mpictl import paths

    defaults = yaml.safe_load((paths.roles_dir() / "slurm" / "defaults" / "main.yml").read_text())
    version = defaults["slurm_version"]
    assert slurm.release_table()["newest"][".".join(version.split(".")[:2])] == version


def head_program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, srun: str) -> ModuleType:
    """The head program with a stand-in srun (body ``srun``) and a scancel that logs its
    arguments to ``tmp_path/scancel``."""
    from tests.unit.loader import load

    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, body in (("srun", srun), ("scancel", f'echo "$*" >> {tmp_path}/scancel\n')):
        (bindir / name).write_text("#!/bin/sh\n" + body)
        (bindir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    return load("doctor_slurm", Path(slurm.__file__).parents[1] / "scripts" / slurm.HEAD_PROGRAM)


def test_an_srun_that_hangs_is_stopped_and_its_job_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a stopped node keeps the allocation configuring (its prolog cannot run): srun is stopped
    # with SIGTERM past the timeout and the job cancelled by its name, so that it holds no node
    srun = f"trap 'echo TERM > {tmp_path}/term; exit 143' TERM\nsleep 30 > /dev/null &\nwait\n"
    program = head_program(tmp_path, monkeypatch, srun)
    started = time.monotonic()
    result = program.srun_hostnames(["node1", "node2", "node3"], timeout=1)
    assert time.monotonic() - started < 10
    assert result == {"rc": 124, "hosts": [], "error": "timed out after 1 s"}
    assert (tmp_path / "term").read_text() == "TERM\n"
    assert (tmp_path / "scancel").read_text() == f"--me --name mpictl-doctor-{os.getpid()}\n"


def test_an_srun_that_answers_leaves_nothing_to_cancel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    srun = 'for n in node1 node2 node3; do echo "$n"; done\necho "$*" > ' + f"{tmp_path}/args\n"
    program = head_program(tmp_path, monkeypatch, srun)
    result = program.srun_hostnames(["node1", "node2", "node3"])
    assert result == {"rc": 0, "hosts": ["node1", "node2", "node3"], "error": ""}
    assert (tmp_path / "args").read_text().startswith(f"-J mpictl-doctor-{os.getpid()} -N3 ")
    assert not (tmp_path / "scancel").exists()


def test_srun_asks_exactly_the_nodes_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    srun = f'echo "$*" > {tmp_path}/args\nfor n in node1 node3; do echo "$n"; done\n'
    program = head_program(tmp_path, monkeypatch, srun)
    result = program.srun_hostnames(["node1", "node3"])
    assert result == {"rc": 0, "hosts": ["node1", "node3"], "error": ""}
    assert " -N2 -w node1,node3 " in (tmp_path / "args").read_text()


def test_with_no_node_to_ask_srun_does_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    program = head_program(tmp_path, monkeypatch, f"touch {tmp_path}/ran\n")
    result = program.srun_hostnames([])
    assert result["hosts"] == [] and result["error"] == "no node answered ssh from the head"
    assert not (tmp_path / "ran").exists() and not (tmp_path / "scancel").exists()


def test_srun_leaves_out_a_node_the_head_could_not_reach_and_doctor_says_why() -> None:
    # node2 is stopped: ssh from the head could not log in, and its probe never answered
    data, _ = healthy()
    del data["node2"]
    sent: list[dict[str, Any]] = []

    class Head:
        def run_python(self, source: str, args: list[str], timeout: float) -> Any:
            import json
            from types import SimpleNamespace

            sent.append(json.loads(args[0]))
            return SimpleNamespace(returncode=0, stdout="{}\n")

    slurm.ask_head(Head(), three(), data, ["node3", "node1"])  # type: ignore[arg-type]
    assert sent[0]["nodes"] == ["node1", "node2", "node3"]
    assert sent[0]["srun_nodes"] == ["node1", "node3"]
    _, result = healthy()
    asked = ["node1", "node3"]
    result["srun"] = {"rc": 0, "hosts": ["node1", "node3"], "error": "", "asked": asked}
    check = next(c for c in slurm.checks(three(), data, result, PROVISION) if not c.ok)
    assert (check.check, check.node) == ("srun on every node", "node2")
    assert check.detail.endswith("not asked (no ssh from the head): node2")
    # the fix is the ssh check's, not Slurm's: nothing is known wrong with node2's Slurm
    assert check.fix == "start node2 (see the check ssh from head)"
    # a node that was asked and did not answer gets Slurm's fix
    result["srun"] = {"rc": 1, "hosts": ["node1"], "error": "x", "asked": asked}
    check = next(c for c in slurm.checks(three(), data, result, PROVISION) if not c.ok)
    assert check.node == "node2, node3" and check.fix.endswith("--tags slurm` (slurm role)")


def test_doctor_asks_slurm_about_every_node_ssh_logged_in_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a node whose probe failed after ssh logged in (rc 1) is asked; one ssh could not reach
    # (255) or that did not answer in time (124) is not
    import mpictl.doctor as doctor
    from mpictl.remote import NodeOutput

    asked: list[list[str]] = []
    codes = {"node1": 0, "node2": 255, "node3": 1}
    probes = {n: NodeOutput(host=n, rc=rc, stdout="", stderr="") for n, rc in codes.items()}

    class Head:
        def check_reachable(self) -> None:
            return None

    monkeypatch.setattr(doctor.remote.HeadSSH, "for_cluster", lambda c: Head())
    monkeypatch.setattr(doctor, "collect", lambda *a, **k: probes)
    monkeypatch.setattr(doctor.slurm_checks, "enabled", lambda c: True)
    monkeypatch.setattr(doctor.slurm_checks, "ask_head", lambda h, c, d, r: asked.append(r) or {})
    monkeypatch.setattr(doctor.health_checks, "enabled", lambda c: False)
    monkeypatch.setattr(doctor, "evaluate", lambda *a, **k: None)
    doctor.run_doctor(three())
    assert asked == [["node1", "node3"]]
    codes["node3"] = 124
    probes["node3"] = NodeOutput(host="node3", rc=124, stdout="", stderr="")
    doctor.run_doctor(three())
    assert asked[-1] == ["node1"]
