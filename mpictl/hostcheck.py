"""Check machines with the user's own ssh before mpictl manages them (``mpictl init``).

Each host gets one ``ssh -o BatchMode=yes -o ConnectTimeout=5 -o StrictHostKeyChecking=yes
[-i KEY] [-o K=V ...] [-l USER] [-p PORT] HOST sh -s`` with ``scripts/init_probe.sh`` on stdin,
all hosts in parallel. It is the user's ssh (their ``~/.ssh/config``, agent and known_hosts), not
mpictl's cluster key; this machine itself (``localhost``, Ansible's local connection) runs the
probe with ``sh -s``, no ssh. A host key is never accepted here: an unknown one is reported with the
commands that check and pin it; an unreachable host fails within the connect timeout.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from mpictl import programs

PROBE = "init_probe.sh"
CONNECT_TIMEOUT = 5  # seconds, ssh's ConnectTimeout
RUN_TIMEOUT = 30.0  # seconds for the whole probe of one host
WORKERS = 16

OK = "ok"
UNKNOWN_KEY = "host key unknown"
CHANGED_KEY = "host key changed"
LOGIN_REFUSED = "login refused"
UNREACHABLE = "unreachable"
ERROR = "error"

_UNREACHABLE = re.compile(
    r"Connection refused|Connection timed out|Operation timed out|No route to host|"
    r"Network is unreachable|Could not resolve hostname|Name or service not known|"
    r"Temporary failure in name resolution"
)
_UNKNOWN_KEY = re.compile(r"No \S+ host key is known for|Host key verification failed")


@dataclass(frozen=True)
class SshTarget:
    """One machine as the user's ssh reaches it; ``name`` is its inventory name."""

    name: str
    host: str
    port: int | None = None
    user: str | None = None
    key: str | None = None
    options: tuple[str, ...] = ()  # "Key=Value", each passed as -o
    local: bool = False  # this machine: Ansible's local connection, the probe runs without ssh

    @property
    def display(self) -> str:
        """``name``, followed by where ssh connects when that is not the name on port 22."""
        if self.local:
            return f"{self.name} (this machine)"
        if self.host == self.name and self.port is None:
            return self.name
        host = f"[{self.host}]" if ":" in self.host and self.port is not None else self.host
        return f"{self.name} ({host}{'' if self.port is None else f':{self.port}'})"


@dataclass(frozen=True)
class ProbeFacts:
    """What ``init_probe.sh`` printed."""

    user: str = ""
    sudo: str = ""  # "yes", "root" (logged in as root, no sudo needed) or "no"
    os: str = ""
    python: str = ""
    cpus: int | None = None
    gpus: int | None = None
    host_keys: int | None = None  # SSH host keys in /etc/ssh

    @property
    def passwordless_sudo(self) -> bool:
        return self.sudo in ("yes", "root")


@dataclass(frozen=True)
class HostCheck:
    """One host's result: ``status`` is OK (the probe ran) or why ssh could not run it."""

    target: SshTarget
    status: str
    facts: ProbeFacts | None = None
    note: str = ""

    @property
    def reachable(self) -> bool:
        return self.status == OK

    @property
    def ready(self) -> bool:
        """Reachable, and Ansible can become root there without a password; this machine also
        has an SSH server's host keys (jobs log in to it over ssh)."""
        return self.facts is not None and self.reachable and not self._missing

    @property
    def _missing(self) -> str:
        if self.facts is None:
            return ""
        if not self.facts.passwordless_sudo:
            return "no passwordless sudo"
        if self.target.local and self.facts.host_keys == 0:
            return "no SSH server"
        return ""

    @property
    def problem(self) -> str:
        return self.status if not self.reachable else self._missing


def ssh_argv(target: SshTarget, ssh: str = "ssh") -> list[str]:
    """The probe's ssh command line. mpictl's options come first: ssh keeps the first value of
    an option, so neither ``--ssh-option`` nor ``~/.ssh/config`` can relax host key checking.
    This machine (``target.local``) runs the probe with ``sh -s``."""
    if target.local:
        return ["sh", "-s"]
    argv = [ssh, "-T", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT}"]
    argv += ["-o", "StrictHostKeyChecking=yes"]
    if target.key:
        argv += ["-i", target.key]
    for option in target.options:
        argv += ["-o", option]
    if target.user:
        argv += ["-l", target.user]
    if target.port is not None:
        argv += ["-p", str(target.port)]
    return [*argv, "--", target.host, "sh", "-s"]


def parse_probe(text: str) -> ProbeFacts | None:
    """The probe's ``key=value`` lines as facts; None when its first line never came."""
    values: dict[str, str] = {}
    started = False
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if key == "mpictl_probe" and sep:
            started = True
        elif started and sep:
            values[key] = value.strip()
    if not started:
        return None
    return ProbeFacts(
        user=values.get("user", ""),
        sudo=values.get("sudo", ""),
        os=values.get("os", ""),
        python=values.get("python", ""),
        cpus=_count(values.get("cpus")),
        gpus=_count(values.get("gpus")),
        host_keys=_count(values.get("host_keys")),
    )


def _count(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdecimal() else None


def _ssh_flags(target: SshTarget) -> list[str]:
    flags = ["-p", str(target.port)] if target.port is not None else []
    if target.key:
        flags += ["-i", target.key]
    for option in target.options:
        flags += ["-o", option]
    return flags


def _login(target: SshTarget) -> str:
    return f"{target.user}@{target.host}" if target.user else target.host


CONSOLE_FINGERPRINT = (
    "`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` run on the machine's console"
)


def _scan_and_accept(target: SshTarget) -> tuple[str, str]:
    port = str(target.port if target.port is not None else 22)
    scan = shlex.join(["ssh-keyscan", "-p", port, target.host]) + " | ssh-keygen -lf -"
    return scan, shlex.join(["ssh", *_ssh_flags(target), _login(target), "true"])


def pin_commands(target: SshTarget) -> str:
    """How to check an unknown host key against the machine's own and then pin it."""
    scan, accept = _scan_and_accept(target)
    return (
        f"host key not known, never accepted automatically: compare `{scan}` with "
        f"{CONSOLE_FINGERPRINT}; if they match, accept it with `{accept}`"
    )


def _changed_key(target: SshTarget) -> str:
    scan, accept = _scan_and_accept(target)
    entry = target.host if target.port in (None, 22) else f"[{target.host}]:{target.port}"
    files = [o.partition("=")[2] for o in target.options if o.lower().startswith("userknownhost")]
    remove = shlex.join(["ssh-keygen", *(["-f", files[0]] if files else []), "-R", entry])
    return (
        "the host key differs from the pinned one (a reinstalled machine, or someone in between), "
        f"never replaced automatically: compare `{scan}` with {CONSOLE_FINGERPRINT}; if they "
        f"match, drop the old key with `{remove}` and accept the new one with `{accept}`"
    )


def _reason(stderr: str, pattern: re.Pattern[str] | None = None) -> str:
    lines = [line.strip() for line in stderr.replace("\r", "\n").splitlines() if line.strip()]
    if pattern is not None:
        lines = [line for line in lines if pattern.search(line)] or lines
    return lines[-1] if lines else ""


def _facts_note(target: SshTarget, facts: ProbeFacts) -> str:
    notes = []
    if not facts.passwordless_sudo:
        notes.append(
            f"sudo asks {facts.user or target.user or 'the user'} for a password: provisioning "
            "needs passwordless sudo (a NOPASSWD rule in /etc/sudoers.d/)"
        )
    if not facts.python:
        notes.append("no python3 (Ansible needs it on the node)")
    if target.local and facts.host_keys == 0:
        notes.append(
            "no SSH host key in /etc/ssh: jobs log in to this machine over ssh as the MPI user "
            "(install and start openssh-server)"
        )
    return "; ".join(notes)


def classify(target: SshTarget, returncode: int, stdout: str, stderr: str) -> HostCheck:
    """One ssh run's outcome, from the probe's output or ssh's own error message."""
    facts = parse_probe(stdout)
    if facts is not None:
        return HostCheck(target, OK, facts, _facts_note(target, facts))
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in stderr:
        return HostCheck(target, CHANGED_KEY, note=_changed_key(target))
    if _UNKNOWN_KEY.search(stderr):
        return HostCheck(target, UNKNOWN_KEY, note=pin_commands(target))
    if "Permission denied" in stderr:
        reason = _reason(stderr, re.compile("Permission denied"))
        fix = "install your key there (ssh-copy-id), or pass --ssh-key / --user"
        return HostCheck(target, LOGIN_REFUSED, note=f"{reason.rstrip('.')}; {fix}")
    if _UNREACHABLE.search(stderr):
        return HostCheck(target, UNREACHABLE, note=_reason(stderr, _UNREACHABLE))
    reason = _reason(stderr) or f"ssh exited {returncode} and the probe did not run"
    return HostCheck(target, ERROR, note=reason)


def check_host(target: SshTarget, *, timeout: float = RUN_TIMEOUT, ssh: str = "ssh") -> HostCheck:
    """Run the probe on one host with the user's ssh."""
    try:
        proc = subprocess.run(
            ssh_argv(target, ssh),
            input=programs.source(PROBE),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return HostCheck(target, UNREACHABLE, note=f"no answer within {timeout:g} s")
    except OSError as exc:
        tool = "sh" if target.local else "ssh"
        return HostCheck(target, ERROR, note=f"cannot run {tool}: {exc.strerror or exc}")
    return classify(target, proc.returncode, proc.stdout, proc.stderr)


def check_hosts(targets: Sequence[SshTarget], *, timeout: float = RUN_TIMEOUT) -> list[HostCheck]:
    """Every target's check, in the order given; the hosts are probed in parallel."""
    ssh = shutil.which("ssh")
    if ssh is None:
        # Jobs log in over ssh to every head, this machine included.
        note = "ssh not found on PATH (install the OpenSSH client)"
        return [HostCheck(t, ERROR, note=note) for t in targets]
    if not targets:
        return []
    with ThreadPoolExecutor(max_workers=min(WORKERS, len(targets))) as pool:
        return list(pool.map(lambda t: check_host(t, timeout=timeout, ssh=ssh), targets))


def table_rows(checks: Sequence[HostCheck]) -> list[tuple[str, ...]]:
    """Rows of host, reachable, sudo, OS, Python, CPUs, GPUs, note."""
    rows = []
    for check in checks:
        facts = check.facts or ProbeFacts()
        sudo = {"yes": "yes", "root": "yes (root)", "no": "no"}.get(facts.sudo, "")
        rows.append(
            (
                check.target.display,
                "yes" if check.reachable else f"no: {check.status}",
                sudo,
                facts.os,
                facts.python or ("missing" if check.facts else ""),
                "" if facts.cpus is None else str(facts.cpus),
                "" if facts.gpus is None else str(facts.gpus),
                check.note,
            )
        )
    return rows


def summary(checks: Sequence[HostCheck]) -> str | None:
    """One line naming every host that is not ready and why; None when all are ready."""
    failed = [f"{c.target.name} ({c.problem})" for c in checks if not c.ready]
    if not failed:
        return None
    return f"{len(failed)} of {len(checks)} hosts not ready: {', '.join(failed)}"
