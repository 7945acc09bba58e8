"""SSH access to the nodes: the per-sandbox controller key, its place in root's
``authorized_keys``, the nodes' host keys pinned in ``known_hosts`` (read over ``podman exec``,
never trusted on first use), and waiting until SSH answers.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from mpictl import programs
from mpictl.errors import SandboxError
from mpictl.sandbox import podman
from mpictl.sandbox.host import Runtime
from mpictl.sandbox.podman import last_line
from mpictl.sandbox.spec import SandboxNode, SandboxSpec

#: Created in a node by its ssh.service once sshd runs with the node's own host keys (systemd
#: boots the node; see ``mpictl/data/sandbox/``).
NODE_READY = "/run/mpictl-node-ready"
NODE_BOOT_WAIT_S = 60
SSH_WAIT_S = 60.0


def known_hosts_lines(port: int, host_keys: str) -> list[str]:
    """``[127.0.0.1]:port type key`` lines from the text of ``ssh_host_*_key.pub`` files."""
    lines = []
    for line in host_keys.splitlines():
        fields = line.split()
        if len(fields) >= 2 and (fields[0].startswith(("ssh-", "ecdsa-", "sk-"))):
            lines.append(f"[127.0.0.1]:{port} {fields[0]} {fields[1]}")
    return lines


def ssh_check_args(spec: SandboxSpec, node: SandboxNode, timeout: int = 5) -> list[str]:
    """An ``ssh`` login that succeeds only with the sandbox key and the pinned host keys."""
    return [
        "ssh",
        "-F",
        "/dev/null",
        "-i",
        str(spec.key_path()),
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        f"UserKnownHostsFile={spec.known_hosts_path()}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"ConnectTimeout={timeout}",
        "-p",
        str(node.ssh_port),
        "root@127.0.0.1",
        "true",
    ]


def ensure_key(spec: SandboxSpec) -> Path:
    """The per-sandbox controller key pair, generated on first use."""
    key = spec.key_path()
    if key.exists() and key.with_suffix(".pub").exists():
        return key
    keygen = shutil.which("ssh-keygen")
    if keygen is None:
        raise SandboxError(
            "ssh-keygen is not installed (openssh-client is needed on the controller)"
        )
    key.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(key.parent, 0o700)
    for stale in (key, key.with_suffix(".pub")):
        stale.unlink(missing_ok=True)
    proc = subprocess.run(
        [
            keygen,
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            f"mpictl-sandbox-{spec.name}",
            "-f",
            str(key),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SandboxError(f"ssh-keygen failed: {last_line(proc.stderr)}")
    return key


NODE_SETUP = "sandbox_node_setup.sh"  # runs in the node (podman exec), as root


def authorize_and_read_host_keys(container: str, runtime: Runtime, pubkey: str) -> str:
    """Put ``pubkey`` into root's ``authorized_keys`` in ``container``; its host keys' text."""
    proc = podman.run(
        [
            "exec",
            "-i",
            container,
            "sh",
            "-c",
            programs.source(NODE_SETUP),
            "sandbox-setup",
            NODE_READY,
            str(NODE_BOOT_WAIT_S * 10),
        ],
        runtime=runtime,
        stdin=pubkey.strip() + "\n",
        what=f"setting up SSH on {container}",
        timeout=NODE_BOOT_WAIT_S + 30,
    )
    return proc.stdout


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` atomically with ``text``, readable by the owner only."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def login_once(spec: SandboxSpec, nodes: Iterable[SandboxNode]) -> dict[str, str]:
    """One SSH login attempt per node, in parallel: node name -> error ("" when it worked)."""
    if shutil.which("ssh") is None:
        raise SandboxError("ssh is not installed (openssh-client is needed on the controller)")
    procs = [
        (
            node,
            subprocess.Popen(
                ssh_check_args(spec, node),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            ),
        )
        for node in nodes
    ]
    result: dict[str, str] = {}
    for node, proc in procs:
        _, err = proc.communicate()
        result[node.name] = "" if proc.returncode == 0 else last_line(err)
    return result


def wait_for_ssh(spec: SandboxSpec, nodes: Iterable[SandboxNode], deadline_s: float) -> None:
    """Retry :func:`login_once` until every node lets the key in, or raise after the deadline."""
    deadline = time.monotonic() + deadline_s
    pending = list(nodes)
    while pending:
        errors = login_once(spec, pending)
        pending = [node for node in pending if errors[node.name]]
        if not pending:
            return
        if time.monotonic() > deadline:
            node = pending[0]
            raise SandboxError(
                f"SSH to {node.name} (127.0.0.1:{node.ssh_port}) did not answer within "
                f"{deadline_s:.0f} s: {errors[node.name]}"
            )
        time.sleep(0.5)


def pinned_by_port(known_hosts: str) -> dict[int, list[str]]:
    """The ``[127.0.0.1]:port`` lines of a known_hosts text, by port."""
    found: dict[int, list[str]] = {}
    for line in known_hosts.splitlines():
        match = re.match(r"^\[127\.0\.0\.1\]:(\d+) \S+ \S+$", line.strip())
        if match:
            found.setdefault(int(match.group(1)), []).append(line.strip())
    return found
