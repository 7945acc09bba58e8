"""doctor's shared filesystem (``mpi_shared_dir``, issue 26): the one check that a directory is
the same filesystem on every node. The head writes a token file there as the MPI user
(:func:`write_token`), every node's probe reads it back (``scripts/doctor_probe.py``,
``shared``), and :func:`checks` (pure) says per node whether it saw the head's token: a node
where the filesystem is not mounted shows its own local directory, or none. The token is removed
after the probe (:func:`remove_token`)."""

from __future__ import annotations

import secrets
import shlex
from collections.abc import Mapping
from typing import Any

from mpictl import remote
from mpictl.doctor.report import Check
from mpictl.inventory import Cluster
from mpictl.settings import ClusterSettings

CHECK = "shared dir"
TOKEN_PREFIX = ".mpictl-doctor-"


def new_token() -> tuple[str, str]:
    """(file name, content) of a token no other doctor run uses."""
    return TOKEN_PREFIX + secrets.token_hex(8), secrets.token_hex(16)


def write_token(head: remote.HeadSSH, directory: str, name: str, value: str) -> str:
    """Write the token on the head as the MPI user: '' or why it could not be written."""
    path = shlex.quote(f"{directory}/{name}")
    proc = head.run(f"umask 022 && printf %s {shlex.quote(value)} > {path}", timeout=30)
    return "" if proc.returncode == 0 else remote.last_line(proc.stderr) or "not written"


def remove_token(head: remote.HeadSSH, directory: str, name: str) -> None:
    head.run(f"rm -f {shlex.quote(f'{directory}/{name}')}", timeout=30)


def checks(
    cluster: Cluster,
    data: Mapping[str, dict[str, Any]],
    settings: ClusterSettings,
    token: str,
    head_error: str,
) -> list[Check]:
    """One check per reachable node: did it read the head's token in ``mpi_shared_dir``?"""
    directory, user = settings.shared_dir, settings.user
    mount_it = f"mount the shared filesystem at {directory} on it (or fix mpi_shared_dir)"
    if head_error:
        return [
            Check(
                CHECK,
                cluster.head.name,
                False,
                f"cannot write to {directory} as {user}: {head_error}",
                f"make {directory} writable by {user}, or fix mpi_shared_dir",
            )  # fmt: skip
        ]
    out = []
    for node in cluster.nodes:
        probe = (data.get(node.name) or {}).get("shared")
        if probe is None:
            continue  # unreachable: the ssh check names it
        point, fstype, source = ([*probe.get("mount", []), "", "", ""])[:3]
        here = f"{fstype} {source} at {point}".strip() if point else "an unknown mount"
        if not probe.get("dir"):
            out.append(Check(CHECK, node.name, False, f"{directory} does not exist here",
                             mount_it))  # fmt: skip
        elif probe.get("token") != token:
            detail = (f"{directory} is not the head's filesystem: the head's token is not there "
                      f"(here it is {here})")  # fmt: skip
            out.append(Check(CHECK, node.name, False, detail, mount_it))
        elif not probe.get("writable"):
            out.append(Check(CHECK, node.name, False, f"{directory} is not writable by {user}",
                             f"give {user} write access to {directory}"))  # fmt: skip
        else:
            out.append(
                Check(CHECK, node.name, True, f"{directory}: the head's filesystem ({here})")
            )
    return out
