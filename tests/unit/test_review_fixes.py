"""The review fixes of commit 37618d1, each pinned by a test that fails without it: table cells
are text, smoke/bench stop at an interrupted job with its exit code, ``--plot`` and a one-node
bench are refused before any job, ``--output-dir`` is checked before any record, the head's ssh
pins host keys whatever the inventory says, a ``--hosts`` job's network is its nodes', the head
must answer before a record is written, a lost job's logs exit 1, records keep an absolute
inventory path, and the horovod preflight's download loop survives ``horovod_enabled: false``."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from mpictl import (
    bench,
    cli,
    errors,
    jobops,
    jobs,
    mpirun_plan,
    paths,
    remote,
    smoke,
    submit,
    ui,
)
from mpictl.doctor.report import Check, DoctorReport
from mpictl.executor import JobResult
from mpictl.inventory import Cluster
from mpictl.planner import LaunchOptions
from tests.unit.jobside import cluster, facts, node, three

ROOT = Path(__file__).resolve().parents[2]
MARKUP = ["[node2:0123]", "[red]x[/]", "[bold]"]


# ----------------------------------------------------------------------------- fakes


class Head:
    """A head that answers (or not) ``check_reachable`` and must never be asked anything else."""

    def __init__(self, error: str | None = None) -> None:
        self.error = error
        self.checks = 0
        self.node = node("node1")

    def check_reachable(self) -> None:
        self.checks += 1
        if self.error is not None:
            raise errors.JobError(self.error)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AssertionError(f"the head was asked for {name!r}")


@pytest.fixture
def inv(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.yml"
    path.write_text(
        "all:\n  children:\n    mpi_nodes:\n      hosts:\n"
        "        a: {mpi_slots: 2}\n        b: {mpi_slots: 2}\n"
    )
    return path


def interrupted_submit(calls: list[LaunchOptions]) -> Any:
    """``submit.submit`` whose job a signal ended (exit 143), with a record and no output."""

    def fake(c: Cluster, options: LaunchOptions, **kw: Any) -> tuple[JobResult, jobs.JobRecord]:
        calls.append(options)
        job_id = f"20260101-000000-{len(calls):06d}"
        plan = mpirun_plan.plan(c, options, job_id, None)
        record = submit.create_record(c, plan, options.command)
        jobs.finish(record, exit_code=143, status="interrupted")
        return JobResult(job_id, 143, "interrupted", 0.1), record

    return fake


# ----------------------------------------------------------------------------- 1. ui


def _render(table: Any) -> str:
    out = Console(record=True, width=200)
    out.print(table)
    return out.export_text()


def test_table_cells_are_printed_as_text_not_markup() -> None:
    record = jobs.JobRecord(
        id="J1",
        command=["echo", "[node2:0123]", "[red]x[/]", "[bold]"],
        mpirun="mpirun",
        inventory="/inv",
        head="node1",
        hosts=[{"host": "[red]x[/]", "slots": 1}],
        ranks=1,
        start=0.0,
        status="[node2:0123]",
    )
    text = _render(ui.jobs_table([record]))
    for literal in MARKUP:
        assert literal in text, text
    text = _render(ui.host_check_table([["[node2:0123]", "[red]x[/]", "", "", "", "", "", "[b]"]]))
    assert "[node2:0123]" in text and "[red]x[/]" in text and "[b]" in text, text
    report = DoctorReport([Check("[red]x[/]", "[node2:0123]", False, "[bold]", "see [x]")])
    text = _render(ui.doctor_table(report))
    for literal in [*MARKUP, "see [x]"]:
        assert literal in text, text


# ----------------------------------------------------------------------------- 2. interrupted


@pytest.fixture
def fake_head(monkeypatch: pytest.MonkeyPatch) -> Head:
    head = Head()
    monkeypatch.setattr(remote.HeadSSH, "for_cluster", classmethod(lambda cls, c, key=None: head))
    return head


def test_smoke_stops_at_an_interrupted_job_with_its_exit_code(
    fake_head: Head, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[LaunchOptions] = []
    monkeypatch.setattr(smoke, "preflight", lambda *a, **kw: ([], {}))
    monkeypatch.setattr(submit, "submit", interrupted_submit(calls))
    with pytest.raises(errors.Interrupted) as err:
        smoke.run_smoke(three(), "all")
    assert err.value.exit_code == 143
    assert len(calls) == 1  # the mpi suite only: horovod never started


def test_bench_stops_at_an_interrupted_job_with_its_exit_code(
    fake_head: Head, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[LaunchOptions] = []
    monkeypatch.setattr(submit, "submit", interrupted_submit(calls))

    def no_link(*a: Any) -> Any:
        raise AssertionError("iperf3 ran after the interrupted sweep")

    monkeypatch.setattr(bench, "measure_link", no_link)
    with pytest.raises(errors.Interrupted) as err:
        bench.run_bench(three())
    assert err.value.exit_code == 143 and len(calls) == 1


def test_cli_smoke_exits_with_the_interrupted_jobs_code(
    inv: Path, fake_head: Head, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[LaunchOptions] = []
    monkeypatch.setattr(smoke, "preflight", lambda *a, **kw: ([], {}))
    monkeypatch.setattr(submit, "submit", interrupted_submit(calls))
    assert cli.main(["smoke", "-i", str(inv), "--json"]) == 143
    err = capsys.readouterr().err
    assert len(calls) == 1 and "interrupted" in err and len(err.splitlines()) == 1, err


# ----------------------------------------------------------------------------- 3. bench refusals


def test_bench_plot_without_matplotlib_is_refused_before_the_sweep(
    inv: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a, **kw: None if name == "matplotlib" else real(name, *a, **kw),
    )
    started: list[Any] = []

    def sweep(*a: Any, **kw: Any) -> Any:
        started.append(a)
        raise errors.JobError("the sweep started")

    monkeypatch.setattr(bench, "run_bench", sweep)
    assert cli.main(["bench", "-i", str(inv), "--plot", "x.png"]) == 2
    err = capsys.readouterr().err
    assert started == []
    assert len(err.splitlines()) == 1 and "mpictl[plot]" in err, err


def test_bench_on_one_node_is_refused_before_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*a: Any, **kw: Any) -> Any:
        raise AssertionError("bench went on with one node")

    monkeypatch.setattr(remote.HeadSSH, "for_cluster", classmethod(never))
    monkeypatch.setattr(submit, "submit", never)
    with pytest.raises(errors.UsageError, match="at least two nodes"):
        bench.run_bench(cluster(node("node1", facts=facts("10.0.0.11"))))
    assert not paths.jobs_dir().exists()


# ----------------------------------------------------------------------------- 4. --output-dir


def _submit_with_output_dir(out: Path) -> None:
    submit.submit(
        three(),
        LaunchOptions(command=["hostname"]),
        via=submit.MpirunLauncher(head=Head()),  # type: ignore[arg-type]
        request=submit.JobRequest(output_dir=out),
    )


def test_output_dir_that_is_a_file_is_refused_before_any_record(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("x")
    for out in (tmp_path / "taken", tmp_path / "taken" / "sub"):
        with pytest.raises(errors.UsageError, match="--output-dir"):
            _submit_with_output_dir(out)
    assert not paths.jobs_dir().exists()


def test_output_dir_not_writable_is_refused_before_any_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory the user cannot write to (faked: root, who runs the tests here, writes
    everywhere)."""
    locked = tmp_path / "locked"
    locked.mkdir()
    real = os.access
    monkeypatch.setattr(
        os, "access", lambda p, mode, **kw: False if Path(p) == locked else real(p, mode, **kw)
    )
    with pytest.raises(errors.UsageError, match="not writable"):
        _submit_with_output_dir(locked)
    assert not paths.jobs_dir().exists()


def test_cli_run_output_dir_that_is_a_file_exits_2(
    inv: Path, tmp_path: Path, fake_head: Head, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "taken").write_text("x")
    argv = ["run", "-i", str(inv), "--output-dir", str(tmp_path / "taken"), "--", "hostname"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--output-dir" in err, err
    assert not paths.jobs_dir().exists()


# ----------------------------------------------------------------------------- 5. head's ssh


def test_head_ssh_pins_host_keys_before_the_inventorys_ssh_args(tmp_path: Path) -> None:
    n = node("node1", ssh_common_args="-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null")
    argv = remote.HeadSSH(node=n, user="mpi", key=tmp_path / "key").transport()
    pinned = argv.index("StrictHostKeyChecking=yes")
    assert argv[pinned - 1] == "-o"
    assert pinned < argv.index("StrictHostKeyChecking=no")  # ssh keeps the first value


def test_unparsable_ssh_common_args_is_an_inventory_error(tmp_path: Path) -> None:
    n = node("node7", ssh_common_args='-o "ProxyCommand=ssh jump')
    with pytest.raises(errors.InventoryError) as err:
        remote.HeadSSH(node=n, user="mpi", key=tmp_path / "key").transport()
    assert err.value.exit_code == 2 and "node7" in str(err.value)


def test_no_ssh_on_path_is_a_job_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = tmp_path / "key"
    key.write_text("k")  # the key exists: what is missing is ssh
    real = shutil.which
    monkeypatch.setattr(
        shutil, "which", lambda n, *a, **kw: None if n == "ssh" else real(n, *a, **kw)
    )
    with pytest.raises(errors.JobError, match="ssh is not installed"):
        remote.HeadSSH.for_cluster(three(), key=key)


# ----------------------------------------------------------------------------- 6. --hosts network


def test_hosts_job_network_is_derived_from_its_own_nodes() -> None:
    c = cluster(
        node("node1"),  # no facts: must not matter to a job on node2,node3
        node("node2", facts=facts("10.0.0.12")),
        node("node3", facts=facts("10.0.0.13")),
    )
    options = LaunchOptions(command=["hostname"], hosts=["node2", "node3"])
    plan = submit.MpirunLauncher(head=Head()).plan(c, options, "20260101-000000-aaaaaa")  # type: ignore[arg-type]
    argv = plan.argv
    assert "btl_tcp_if_include" in argv, argv
    assert argv[argv.index("btl_tcp_if_include") + 1] == "eth0"


# ----------------------------------------------------------------------------- 7. head answers


def test_run_checks_the_head_answers_before_recording(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    head = Head(error="node1: cannot ssh to the head node as mpi (Connection refused)")
    monkeypatch.setattr(remote.HeadSSH, "for_cluster", classmethod(lambda cls, c, key=None: head))
    with pytest.raises(errors.JobError, match="cannot ssh to the head"):
        submit.submit(three(), LaunchOptions(command=["hostname"]))
    assert head.checks == 1
    assert not paths.jobs_dir().exists() or not any(paths.jobs_dir().iterdir())


def test_a_given_head_is_not_checked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*a: Any, **kw: Any) -> Any:
        raise AssertionError("a head was created")

    monkeypatch.setattr(remote.HeadSSH, "for_cluster", classmethod(never))
    head = Head(error="must not be asked")
    assert submit.MpirunLauncher(head=head).prepare(three()) is head  # type: ignore[arg-type]
    assert head.checks == 0


# ----------------------------------------------------------------------------- 8. lost job


def test_logs_of_a_lost_detached_job_exit_1(monkeypatch: pytest.MonkeyPatch) -> None:
    c = three()
    plan = mpirun_plan.plan(c, LaunchOptions(command=["train"]), "20260101-000000-bbbbbb", None)
    record = submit.create_record(c, plan, extra={"detached": {"dir": ".mpictl/jobs/x"}})
    monkeypatch.setattr(jobops, "_head", lambda rec: Head())

    def lost(head: Any, rec: jobs.JobRecord, **kw: Any) -> Any:
        from mpictl import detached

        detached.settle(rec, detached.HeadState("lost"))  # the head knows nothing of it
        return detached.HeadState("lost")

    monkeypatch.setattr(jobops.detached, "fetch_output", lost)
    assert jobops.logs(record.id, follow=True, out=lambda text: None) == 1
    final = jobs.load(record.id)
    assert (final.status, final.exit_code) == (jobs.UNKNOWN, -1)
    assert final.extra["detached"]["fetched"] is True
    assert jobops.logs(record.id, follow=True, out=lambda text: None) == 1  # from the record


# ----------------------------------------------------------------------------- 9. inventory path


def test_record_keeps_the_inventory_as_an_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    nodes = three().nodes
    c = Cluster(source=Path("inv/hosts.yml"), nodes=nodes, head=nodes[0])
    plan = mpirun_plan.plan(c, LaunchOptions(command=["x"]), "20260101-000000-cccccc", None)
    record = submit.create_record(c, plan)
    assert Path(record.inventory).is_absolute()
    assert record.inventory == str((tmp_path / "inv" / "hosts.yml").resolve())
    assert jobs.load(record.id).inventory == record.inventory


# ----------------------------------------------------------------------------- 10. horovod loop

DOWNLOAD_TASK = "Download the Python packages for the nodes on the controller"


def _find_task(tasks: list[dict[str, Any]], name: str) -> dict[str, Any]:
    for task in tasks:
        if task.get("name") == name:
            return task
        for key in ("block", "rescue", "always"):
            try:
                return _find_task(task.get(key) or [], name)
            except LookupError:
                pass
    raise LookupError(name)


def test_horovod_download_loop_with_horovod_disabled_and_shared_keys(tmp_path: Path) -> None:
    playbook_bin = ROOT / ".venv" / "bin" / "ansible-playbook"
    if not playbook_bin.exists():
        found = shutil.which("ansible-playbook")
        assert found is not None, "ansible-playbook (a dependency of mpictl) is not installed"
        playbook_bin = Path(found)
    role_tasks = yaml.safe_load((ROOT / "roles/horovod/tasks/fetch.yml").read_text())
    task = _find_task(role_tasks, DOWNLOAD_TASK)
    probe = {
        "name": "The role's download loop",
        "ansible.builtin.debug": {"msg": "{{ item }}"},
        "loop": task["loop"],  # the role's own expressions, not a copy
        "when": task["when"],
        "delegate_to": "localhost",
        "run_once": True,
        "register": "__probe",
    }
    local = {"connection": "local", "gather_facts": False}
    check = "ansible.builtin.assert"
    plays = [
        {
            "name": "horovod_enabled false: no host set _horovod_wheels_key",
            "hosts": "localhost",
            **local,
            "vars": {"horovod_enabled": False},
            "tasks": [
                {"block": [probe], "when": "horovod_enabled | bool"},
                {check: {"that": ["__probe is skipped"]}},
            ],
        },
        {
            "name": "hosts of one platform",
            "hosts": "localhost",
            **local,
            "tasks": [
                {"ansible.builtin.add_host": {"name": h, "groups": "nodes"}}
                for h in ("h1", "h2", "h3")
            ],
        },
        {
            "name": "two hosts with equal keys, one with Horovod off",
            "hosts": "nodes",
            **local,
            "tasks": [
                {
                    # the role sets the two together (preflight's platform description)
                    "ansible.builtin.set_fact": {
                        "_horovod_wheels_key": "k1",
                        "_horovod_requirements": ["numpy"],
                    },
                    "when": "inventory_hostname != 'h3'",
                },
                probe,
                {
                    check: {
                        "that": [
                            "__probe.results | length == 1",
                            "__probe.results[0].item == 'h1'",
                            "__probe.results[0] is not skipped",
                        ]
                    }
                },
            ],
        },
        {
            "name": "a named environment that already meets every requirement downloads nothing",
            "hosts": "nodes",
            **local,
            "tasks": [
                {
                    "ansible.builtin.set_fact": {
                        "_horovod_wheels_key": "k2",
                        "_horovod_requirements": [],
                    }
                },
                probe,
                {
                    check: {
                        "that": [
                            "__probe.results | length == 1",
                            "__probe.results[0] is skipped",
                        ]
                    }
                },
            ],
        },
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(plays, sort_keys=False))
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(tmp_path / "ansible.cfg"),  # not the checkout's
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LOCALHOST_WARNING": "0",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
    }
    proc = subprocess.run(
        [
            str(playbook_bin),
            "-i",
            "localhost,",
            "-e",
            f"mpictl_cache_dir={tmp_path / 'cache'}",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            str(tmp_path / "play.yml"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "ok=" in out and "failed=0" in out, out


def test_a_local_head_is_pinned_from_its_own_host_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_state: Path
) -> None:
    """A head provisioned through Ansible's local connection is this machine: the job side's
    ssh to it trusts exactly the keys in its /etc/ssh, ahead of the inventory's ssh options."""
    etc = tmp_path / "etc_ssh"
    etc.mkdir()
    (etc / "ssh_host_ed25519_key.pub").write_text("ssh-ed25519 AAAAC3Nz root@gpu01\n")
    (etc / "ssh_host_ecdsa_key.pub").write_text("ecdsa-sha2-nistp256 AAAAE2Vj root@gpu01\n")
    monkeypatch.setattr(remote, "HOST_KEYS", str(etc / "ssh_host_*_key.pub"))
    key = tmp_path / "key"
    key.write_text("k")
    head = node(
        "gpu01",
        local=True,
        ssh_common_args="-o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=no",
    )
    ssh = remote.HeadSSH.for_cluster(cluster(head), key=key)
    assert ssh.known_hosts == isolated_state / "known_hosts.local"
    assert ssh.known_hosts.read_text() == (
        "127.0.0.1 ecdsa-sha2-nistp256 AAAAE2Vj\n127.0.0.1 ssh-ed25519 AAAAC3Nz\n"
    )
    argv = ssh.argv("true")
    pinned = argv.index(f"UserKnownHostsFile={ssh.known_hosts}")
    assert pinned < argv.index("UserKnownHostsFile=/dev/null")  # ssh keeps the first value
    # Neither the global file nor a ~/.ssh/config that skips localhost's key can relax it.
    assert argv[pinned + 2 : pinned + 5] == [
        "GlobalKnownHostsFile=/dev/null",
        "-o",
        "NoHostAuthenticationForLocalhost=no",
    ]
    assert argv[-4:] == ["-l", ssh.user, "127.0.0.1", "true"]
    # On another port the entry is [host]:port, as ssh looks it up.
    remote.local_known_hosts(node("gpu01", port=2222, local=True))
    assert ssh.known_hosts.read_text().startswith("[127.0.0.1]:2222 ecdsa-sha2-nistp256 ")
    # A node reached over ssh keeps the user's known_hosts.
    assert remote.HeadSSH.for_cluster(three(), key=key).known_hosts is None


def test_a_local_head_without_an_ssh_server_is_a_job_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(remote, "HOST_KEYS", str(tmp_path / "none" / "ssh_host_*_key.pub"))
    key = tmp_path / "key"
    key.write_text("k")
    with pytest.raises(errors.JobError) as caught:
        remote.HeadSSH.for_cluster(cluster(node("gpu01", local=True)), key=key)
    assert "gpu01 is this machine (ansible_connection: local)" in str(caught.value)
    assert "install and start openssh-server" in str(caught.value)


def test_a_local_head_pin_in_an_unusable_state_dir_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    etc = tmp_path / "etc_ssh"
    etc.mkdir()
    (etc / "ssh_host_ed25519_key.pub").write_text("ssh-ed25519 AAAAC3Nz root@gpu01\n")
    monkeypatch.setattr(remote, "HOST_KEYS", str(etc / "ssh_host_*_key.pub"))
    blocker = tmp_path / "state-is-a-file"
    blocker.write_text("")
    monkeypatch.setenv("MPICTL_STATE_DIR", str(blocker))
    with pytest.raises(errors.UsageError) as caught:
        remote.local_known_hosts(node("gpu01", local=True))
    message = str(caught.value)
    assert "\n" not in message and "the local head's pinned host keys" in message
    assert "MPICTL_STATE_DIR" in message
