"""Shared values have one home (roles/cluster_defaults) and the job side follows the head's
inventory variables: a site that moves the hostfile, the cluster venv, the job tools or the MPI
user moves run, smoke, bench and doctor with the roles."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mpictl import doctor, mpirun_plan, planner, remote, settings, smoke
from mpictl.errors import InventoryError
from tests.unit.jobside import cluster, facts, node

ROOT = Path(__file__).resolve().parents[2]
SITE = {
    "mpi_user": "trainer",
    "mpi_cluster_venv": "/srv/{{ site_name }}/venv",
    "mpi_hostfile_path": "/etc/cluster/hosts",
    "mpi_tools_dir": "/srv/tools/",
    "mpi_bin_dir": "/srv/bin",
    "site_name": "lab",
}


def site_cluster(**head_vars: Any):  # type: ignore[no-untyped-def]
    return cluster(
        node("node1", facts=facts("10.0.0.11"), vars={**SITE, **head_vars}),
        node("node2", facts=facts("10.0.0.12")),
    )


def test_defaults_are_the_roles_own_file() -> None:
    text = (ROOT / "roles" / "cluster_defaults" / "defaults" / "main.yml").read_text()
    assert settings.defaults() == {k: v for k, v in yaml.safe_load(text).items()}
    c = cluster(node("a"), node("b"))
    s = settings.for_cluster(c)
    assert s.hostfile == settings.defaults()["mpi_hostfile_path"]
    assert s.venv_python == settings.defaults()["mpi_cluster_venv"] + "/bin/python"


def test_the_head_variables_win_and_are_templated() -> None:
    s = settings.for_cluster(site_cluster())
    assert s == settings.ClusterSettings(
        user="trainer",
        venv="/srv/lab/venv",
        hostfile="/etc/cluster/hosts",
        tools_dir="/srv/tools",
        bin_dir="/srv/bin",
        health_program="/opt/mpictl/sbin/mpictl-health",
        monitoring_config="/etc/mpictl/monitoring.json",
    )
    assert s.torch_env == "/srv/bin/mpictl-torch-env"
    assert s.tool("smoke_mpi.py") == "/srv/tools/smoke_mpi.py"


def test_a_relative_path_is_refused_with_the_host_and_variable() -> None:
    with pytest.raises(
        InventoryError,
        match="node1: mpi_hostfile_path 'etc/hosts': must be an absolute path on the nodes",
    ):
        settings.for_cluster(site_cluster(mpi_hostfile_path="etc/hosts"))


@pytest.mark.parametrize(
    ("head_vars", "message"),
    [
        ({"mpi_user": "x y"}, r"^node1: mpi_user 'x y': must be a login name"),
        (
            {"mpi_user": "-oProxyCommand=x"},
            r"^node1: mpi_user '-oProxyCommand=x': must be a login name",
        ),
        ({"mpi_user": "mpi\n"}, r"^node1: mpi_user 'mpi\\n': must be a login name"),
        ({"mpi_user": "{{ site_name }} x"}, r"^node1: mpi_user 'lab x': must be a login name"),
        ({"mpi_user": ["a"]}, r"^node1: mpi_user '\['a'\]': must be a login name"),
        ({"mpi_user": ""}, r"^node1: mpi_user '': must be a login name"),
        (
            {"mpi_tools_dir": "/srv/x\ny"},
            r"^node1: mpi_tools_dir '/srv/x\\ny': must be an absolute path",
        ),
        (
            {"horovod_python": "/srv/\x1b]0;x"},
            r"^node1: horovod_python '/srv/\\x1b\]0;x': must be an absolute",
        ),
    ],
)
def test_the_job_sides_values_are_checked_as_it_uses_them(
    head_vars: dict[str, Any], message: str
) -> None:
    # mpi_user follows `ssh -l` and owns every job: the user name rule of mpictl.inputs, after
    # templating; a path goes into remote command lines: no control characters.
    with pytest.raises(InventoryError, match=message) as caught:
        settings.for_cluster(site_cluster(**head_vars))
    assert "\n" not in str(caught.value) and "\x1b" not in str(caught.value)


def test_run_uses_the_sites_hostfile_and_torch_wrapper() -> None:
    c = site_cluster()
    plan = mpirun_plan.plan(c, planner.LaunchOptions(command=["train"], torch=True), "J", None)
    assert plan.mpirun[:3] == ["mpirun", "--hostfile", "/etc/cluster/hosts"]
    assert plan.command == ["/srv/bin/mpictl-torch-env", "train"]


def test_the_head_login_uses_the_sites_mpi_user(tmp_path: Path) -> None:
    key = tmp_path / "id_ed25519"
    key.write_text("k")
    assert remote.HeadSSH.for_cluster(site_cluster(), key=key).user == "trainer"


def test_smoke_preflight_checks_the_sites_venv_and_programs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[str] = []

    def fake(head, hosts, command, program="", **kw):  # type: ignore[no-untyped-def]
        seen.append(command)
        out = '{"missing": [], "modules": {"mpi4py": "ok"}}\n'
        return {h: remote.NodeOutput(h, 0, out, "") for h in hosts}

    monkeypatch.setattr(remote, "run_on_nodes", fake)
    errors, _ = smoke.preflight(site_cluster(), None, ["mpi"])  # type: ignore[arg-type]
    assert errors == []
    assert seen == ["/srv/lab/venv/bin/python - /srv/tools/smoke_mpi.py mpi4py"]


def test_doctor_probes_and_reports_the_sites_paths() -> None:
    c = site_cluster()
    spec = doctor.probe_spec(c, settings.for_cluster(c))
    assert spec["hostfile"] == "/etc/cluster/hosts"
    assert spec["venv_python"] == "/srv/lab/venv/bin/python"
    assert spec["tools"][0] == "/srv/bin/mpictl-torch-env"
    assert "/srv/tools/bench_allreduce.py" in spec["tools"]
    import json

    no_hostfile = {
        "hostname": "n",
        "ipv4": [["eth0", "10.0.0.11/24"]],
        "reach": {},
        "hostfile": None,
        "venv": False,
    }
    out = {n.name: remote.NodeOutput(n.name, 0, json.dumps(no_hostfile), "") for n in c.nodes}
    report = doctor.evaluate(c, out)
    details = {(x.check, x.detail) for x in report.failed}
    assert ("hostfile", "/etc/cluster/hosts missing") in details
    assert ("cluster venv", "/srv/lab/venv/bin/python is missing or broken") in details
