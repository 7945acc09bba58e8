"""SSH from the controller to the head node as the MPI user.

The job side (run, smoke, bench, doctor) talks to the cluster the way a user would: it logs in to
the head node as the MPI user with the cluster key (``<state>/cluster_ssh/id_ed25519``, made by the
``ssh_mesh`` role) over the head's connection from the inventory (``ansible_host``,
``ansible_port``, ``ansible_ssh_common_args`` with its pinned known_hosts), and from there reaches
the other nodes through the cluster's own SSH mesh.

A head provisioned through Ansible's local connection is the controller's own machine: its host
key is pinned from its own ``/etc/ssh/ssh_host_*_key.pub`` (files of this machine, nothing taken
over the network) into ``<state>/known_hosts.local``, which comes before the inventory's ssh
options (ssh keeps an option's first value).
"""

from __future__ import annotations

import glob
import json
import os
import shlex
import shutil
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpictl import paths, programs, settings
from mpictl.errors import InventoryError, JobError
from mpictl.inventory import Cluster, Node

FANOUT = "fanout.py"
#: This machine's SSH host keys: a local head's key is pinned from them.
HOST_KEYS = "/etc/ssh/ssh_host_*_key.pub"


def cluster_key() -> Path:
    return paths.state_dir() / "cluster_ssh" / "id_ed25519"


@dataclass(frozen=True)
class HeadSSH:
    """How to reach the head node as the MPI user."""

    node: Node
    user: str
    key: Path
    known_hosts: Path | None = None  # a local head's pinned keys (local_known_hosts)

    @classmethod
    def for_cluster(cls, cluster: Cluster, key: Path | None = None) -> HeadSSH:
        key = key or cluster_key()
        if shutil.which("ssh") is None:
            raise JobError("ssh is not installed on this machine (apt-get install openssh-client)")
        if not key.is_file():
            raise JobError(
                f"cluster key {key} not found: run `mpictl provision -i {cluster.source}` first "
                "(the ssh_mesh role creates it)"
            )
        head = cluster.head
        pinned = local_known_hosts(head) if head.local else None
        return cls(head, settings.for_cluster(cluster).user, key, pinned)

    def transport(self, *, tty: bool = False, connect_timeout: int = 10) -> list[str]:
        """ssh and its options to reach the head (what ``rsync -e`` takes), without the host.

        Keepalives end the session when the head stops answering for 2 minutes (10 s x 12): a
        busy head (ranks polling every core) can stall its sshd for tens of seconds, and a
        shorter limit ended healthy jobs. LogLevel=INFO keeps ssh's own reason ("Timeout, server
        not responding", "Connection closed") in the job's output instead of a bare exit 255.
        """
        return [
            "ssh",
            *(["-tt"] if tty else ["-T"]),
            "-p",
            str(self.node.ssh_port),
            "-i",
            str(self.key),
            "-o",
            "BatchMode=yes",
            "-o",
            f"ConnectTimeout={connect_timeout}",
            "-o",
            "ServerAliveInterval=10",
            "-o",
            "ServerAliveCountMax=12",
            "-o",
            "LogLevel=INFO",
            # pinned host keys only, whatever ~/.ssh/config says (ssh keeps the first value)
            "-o",
            "StrictHostKeyChecking=yes",
            *self._local_pin(),
            *self._common_args(),
        ]

    def _local_pin(self) -> list[str]:
        """A local head: only its own keys (no global file), checked for 127.0.0.1 too (ssh
        skips the check for localhost where ``NoHostAuthenticationForLocalhost`` is set)."""
        if self.known_hosts is None:
            return []
        return [
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "NoHostAuthenticationForLocalhost=no",
        ]

    def _common_args(self) -> list[str]:
        try:
            return shlex.split(self.node.ssh_common_args)
        except ValueError as exc:
            raise InventoryError(
                f"{self.node.name}: ansible_ssh_common_args does not parse ({exc}): "
                f"{self.node.ssh_common_args!r}"
            ) from None

    @property
    def host(self) -> str:
        return self.node.ssh_host or self.node.name

    def argv(self, command: str, *, tty: bool = False, connect_timeout: int = 10) -> list[str]:
        """ssh argv that runs ``command`` (a remote shell command line) on the head."""
        return [
            *self.transport(tty=tty, connect_timeout=connect_timeout),
            "-l",
            self.user,
            self.host,
            command,
        ]

    def run(
        self, command: str, *, stdin: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run ``command`` on the head and capture its output."""
        try:
            return subprocess.run(
                self.argv(command),
                input=stdin if stdin is not None else "",
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise JobError(
                f"{self.node.name}: no answer from the head node within {timeout:.0f} s"
            ) from None

    def run_watched(
        self, source: str, args: Sequence[str] = (), *, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run a Python program (``python3 -c``) on the head with the SSH channel's stdin held
        open while it runs: a program that watches its stdin learns when this process is gone
        (``scripts/iperf_driver.py``)."""
        command = "python3 -c " + " ".join(shlex.quote(a) for a in (source, *args))
        pipe = subprocess.PIPE
        proc = subprocess.Popen(self.argv(command), stdin=pipe, stdout=pipe, stderr=pipe, text=True)
        out: dict[str, str] = {}
        readers = [
            threading.Thread(target=lambda k=k, s=s: out.__setitem__(k, s.read()), daemon=True)
            for k, s in (("stdout", proc.stdout), ("stderr", proc.stderr))
        ]
        for reader in readers:
            reader.start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise JobError(
                f"{self.node.name}: no answer from the head node within {timeout:.0f} s"
            ) from None
        finally:
            if proc.stdin is not None:
                proc.stdin.close()
        for reader in readers:
            reader.join(timeout=10)
        return subprocess.CompletedProcess(
            proc.args, rc, out.get("stdout", ""), out.get("stderr", "")
        )

    def run_python(
        self, source: str, args: Sequence[str] = (), *, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run a Python program (sent on stdin) with the head's system python3."""
        quoted = " ".join(shlex.quote(a) for a in args)
        return self.run(f"python3 - {quoted}", stdin=source, timeout=timeout)

    def check_reachable(self) -> None:
        """Raise a JobError naming the head when it cannot be logged in to."""
        proc = self.run("true", timeout=30)
        if proc.returncode != 0:
            detail = last_line(proc.stderr) or f"ssh exit {proc.returncode}"
            raise JobError(
                f"{self.node.name}: cannot ssh to the head node as {self.user} "
                f"({detail}); fix: check that the node is up and run `mpictl provision`"
            )


@dataclass(frozen=True)
class NodeOutput:
    host: str
    rc: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @property
    def error(self) -> str:
        return last_line(self.stderr) or last_line(self.stdout) or f"exit {self.rc}"


def local_known_hosts(node: Node) -> Path:
    """``<state>/known_hosts.local``: this machine's own host keys (:data:`HOST_KEYS`) under the
    name the job side's ssh connects to (``node``'s ansible_host and port), rewritten on every use.
    JobError when the machine has none: jobs log in to it over ssh."""
    host = node.ssh_host or node.name
    entry = host if node.ssh_port == 22 else f"[{host}]:{node.ssh_port}"
    keys = []
    for path in sorted(glob.glob(HOST_KEYS)):
        try:
            fields = Path(path).read_text().split()
        except OSError:
            continue
        if len(fields) >= 2:
            keys.append(f"{entry} {fields[0]} {fields[1]}\n")
    if not keys:
        raise JobError(
            f"{node.name} is this machine (ansible_connection: local), and jobs log in to it over "
            f"ssh as the MPI user, but it has no SSH host key ({HOST_KEYS}): install and start "
            "openssh-server, then `mpictl provision`"
        )
    what = "the local head's pinned host keys"
    target = paths.ensure_dir(paths.state_dir(), what) / "known_hosts.local"
    text = "".join(keys)
    try:
        if not target.is_file() or target.read_text() != text:
            tmp = target.with_name(f".{target.name}.{os.getpid()}")
            tmp.write_text(text)
            os.replace(tmp, target)
    except OSError as exc:
        raise paths.unusable(target.parent, what, exc) from None
    return target


def run_on_nodes(
    head: HeadSSH,
    hosts: Sequence[str],
    command: str,
    program: str = "",
    *,
    timeout: float = 60,
    connect_timeout: int = 5,
) -> dict[str, NodeOutput]:
    """From the head, as the MPI user, run ``command`` on each of ``hosts`` (``program`` on its
    stdin), in parallel (``mpictl/scripts/fanout.py``). A host that could not be reached has rc
    255 (ssh's)."""
    spec = {
        "hosts": list(hosts),
        "command": command,
        "timeout": timeout,
        "connect_timeout": connect_timeout,
    }
    proc = head.run(
        "python3 -c " + shlex.quote(programs.source(FANOUT)),
        stdin=json.dumps(spec) + "\n" + program,
        timeout=timeout + connect_timeout + 30,
    )
    if proc.returncode != 0:
        raise JobError(
            f"{head.node.name}: could not run commands from the head node as {head.user}: "
            f"{last_line(proc.stderr) or proc.returncode}"
        )
    out: dict[str, NodeOutput] = {}
    for rec in json_lines(proc.stdout):
        out[str(rec["host"])] = NodeOutput(
            str(rec["host"]), int(rec["rc"]), str(rec["stdout"]), str(rec["stderr"])
        )
    return out


def last_line(text: str) -> str:
    """The last non-blank line of ``text`` (what a failed command said last), stripped."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line of ``text`` that is a JSON object (other lines are ignored)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        # --tag-output prefixes lines with "[jobid,rank]<stdout>: "
        start = line.find("{")
        if start < 0 or not line.endswith("}"):
            continue
        try:
            value = json.loads(line[start:])
        except ValueError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out
