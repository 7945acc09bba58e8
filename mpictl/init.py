"""``mpictl init``: a starter inventory for the user's own machines.

Hosts are given as ``[NAME=]HOST[:PORT]``: NAME is the inventory name (default: HOST), HOST is
where the controller's ssh connects (written as ``ansible_host`` when it is not the name), PORT
its ssh port (``ansible_port``); an IPv6 address with a port goes in brackets (``[::1]:2222``).
Every name is a DNS name or an IP address, since it is also the address other nodes reach the
node by (the default ``mpi_address``); HOST follows the rules of ``ansible_host``
(:mod:`mpictl.hostnames`). Parsing and rendering are pure; :func:`write` never overwrites a file
unless asked to.

``localhost`` (no port) is this machine, reached with Ansible's local connection
(``ansible_connection: local``, no ssh for provisioning): the most common first cluster is one
GPU server, provisioned from itself. Its inventory name is the machine's host name (Ansible keeps
the name ``localhost`` for the controller), and on a one-node cluster its ``mpi_address`` is
``127.0.0.1`` (nothing else has to resolve the name). Jobs still log in to it over ssh as the MPI
user; :mod:`mpictl.remote` pins its host key from its own ``/etc/ssh``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import socket
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mpictl import inputs
from mpictl.errors import UsageError
from mpictl.hostcheck import SshTarget
from mpictl.hostnames import NOT_A_HOST, NOT_AN_ADDRESS, host_problem, is_ip_address
from mpictl.inputs import quoted, shown

SPEC_SYNTAX = "[NAME=]HOST[:PORT], with an IPv6 HOST in brackets when a port follows"
_SSH_OPTION = re.compile(r"([A-Za-z][A-Za-z0-9]*)=([^\x00-\x1f]+)")
# ssh options mpictl init sets itself: host keys are never accepted automatically.
_OWN_OPTIONS = {"batchmode", "stricthostkeychecking"}
#: The HOST that means this machine, through Ansible's local connection (with no port).
LOCAL = "localhost"
LOCAL_ADDRESS = "127.0.0.1"


@dataclass(frozen=True)
class HostSpec:
    """One ``[NAME=]HOST[:PORT]`` argument."""

    name: str
    host: str
    port: int | None = None
    text: str = ""

    @property
    def local(self) -> bool:
        """This machine, provisioned through Ansible's local connection."""
        return self.host.lower() == LOCAL and self.port is None


@dataclass(frozen=True)
class Starter:
    """Everything ``mpictl init`` writes into the inventory, validated."""

    hosts: tuple[HostSpec, ...]
    head: str | None = None
    user: str | None = None
    slots: int | None = None
    ssh_key: str | None = None
    ssh_options: tuple[str, ...] = ()
    as_root: bool = False  # every host is this machine, and mpictl runs as root: no become

    @property
    def targets(self) -> list[SshTarget]:
        """Each host as the user's ssh reaches it."""
        return [
            SshTarget(
                h.name, h.host, h.port, self.user, self.ssh_key, self.ssh_options, local=h.local
            )
            for h in self.hosts
        ]


def _split_port(text: str, rest: str) -> tuple[str, str | None]:
    if rest.startswith("["):
        match = re.fullmatch(r"\[([^\]]*)\](?::(.*))?", rest)
        if not match or not is_ip_address(match.group(1)) or ":" not in match.group(1):
            raise UsageError(f"host {text!r}: brackets hold an IPv6 address, as in [::1]:2222")
        return match.group(1), match.group(2)
    if rest.count(":") > 1:  # a bare IPv6 address: no port
        return rest, None
    host, sep, port = rest.partition(":")
    return host, port if sep else None


def parse_host_spec(text: str) -> HostSpec:
    """``[NAME=]HOST[:PORT]`` as a HostSpec, or a UsageError naming the argument."""
    name, sep, rest = text.partition("=")
    if not sep:
        name, rest = "", text
    host, port_text = _split_port(text, rest)
    if host_problem(host, underscore=True):
        raise UsageError(f"host {text!r}: {host!r}: {NOT_A_HOST} ({SPEC_SYNTAX})")
    port = None
    if port_text is not None:
        port = inputs.number(port_text)
        if port is None or not 1 <= port <= 65535:
            raise UsageError(
                f"host {quoted(text)}: port {quoted(port_text)} is not a number in 1..65535"
            )
    if not sep:
        name = this_machine(text) if host.lower() == LOCAL and port is None else host
    if name.lower() == LOCAL:
        raise UsageError(
            f"host {text!r}: the inventory name cannot be localhost (Ansible keeps it for the "
            f"controller): name the machine by its host name, e.g. gpu01={rest}"
        )
    if host_problem(name):
        why = NOT_AN_ADDRESS
        if not host_problem(name, underscore=True):
            why += " ('_' is not; other nodes resolve the name: use NAME=HOST)"
        raise UsageError(f"host {text!r}: name {name!r}: {why}")
    return HostSpec(name=name, host=host, port=port, text=text)


def this_machine(text: str) -> str:
    """The inventory name of ``localhost``: this machine's host name, which must be a DNS name
    (other nodes of a larger cluster resolve it)."""
    name = socket.gethostname()
    if host_problem(name):
        raise UsageError(
            f"host {text!r}: this machine's host name {name!r} is {NOT_AN_ADDRESS}: name it, "
            f"e.g. gpu01={text}"
        )
    return name


def parse_host_specs(texts: Sequence[str]) -> tuple[HostSpec, ...]:
    """Every argument parsed; inventory names must be distinct (case-insensitively)."""
    if not texts:
        raise UsageError(f"no hosts given ({SPEC_SYNTAX})")
    seen: dict[str, HostSpec] = {}
    for spec in map(parse_host_spec, texts):
        other = seen.get(spec.name.lower())
        if other is not None:
            hint = "" if "=" in spec.text else f": name each one, e.g. NAME={spec.text}"
            raise UsageError(
                f"host {spec.text!r}: the inventory name {spec.name!r} is already used by "
                f"{other.text!r}{hint}"
            )
        seen[spec.name.lower()] = spec
    local = [s.text for s in seen.values() if s.local]
    if len(local) > 1:
        raise UsageError(
            f"hosts {', '.join(map(repr, local))}: each is this machine (localhost): name it once"
        )
    return tuple(seen.values())


def _ssh_option(value: str) -> str:
    match = _SSH_OPTION.fullmatch(value)
    if not match:
        raise UsageError(f"--ssh-option {value!r}: expected KEY=VALUE, as ssh's -o takes it")
    if match.group(1).lower() in _OWN_OPTIONS:
        raise UsageError(
            f"--ssh-option {value!r}: mpictl init sets {match.group(1)} itself "
            "(host keys are never accepted automatically)"
        )
    return value


def plan(
    hosts: Sequence[str],
    *,
    head: str | None = None,
    user: str | None = None,
    slots: int | None = None,
    ssh_key: Path | str | None = None,
    ssh_options: Sequence[str] = (),
) -> Starter:
    """Validate the arguments of ``mpictl init`` (UsageError on the first bad one)."""
    specs = parse_host_specs(hosts)
    if head is not None and head not in {s.name for s in specs}:
        names = ", ".join(s.name for s in specs)
        raise UsageError(f"--head {quoted(head)} is not one of the hosts ({shown(names)})")
    if user is not None and not inputs.fullmatch(inputs.LOGIN_NAME, user):
        raise UsageError(f"--user {quoted(user)}: not a login name ({inputs.LOGIN_RULE})")
    if slots is not None and not 1 <= slots <= inputs.MAX_SLOTS:
        raise UsageError(
            f"--slots must be a positive integer up to {inputs.MAX_SLOTS}, got {slots}"
        )
    key = None
    if ssh_key is not None:
        path = Path(ssh_key).expanduser()
        if not path.is_file():
            raise UsageError(f"--ssh-key {quoted(str(ssh_key))}: no such file")
        key = str(path.absolute())
    options = tuple(_ssh_option(o) for o in ssh_options)
    as_root = all(s.local for s in specs) and os.geteuid() == 0
    return Starter(specs, head, user, slots, key, options, as_root)


def _scalar(value: str | int | bool) -> str:
    """One YAML scalar, quoted where YAML needs it (an IPv6 address, a number-like string)."""
    import yaml

    text = yaml.safe_dump(value, default_flow_style=True, width=1000)
    return text.removesuffix("\n").removesuffix("\n...").strip()


HEADER = """\
---
# A starter inventory written by `mpictl init` for your own machines: edit it freely.
# The names below are mpictl's inventory contract: see the "Inventory contract" section of
# mpictl's README.md. Check it with `mpictl hostfile -i FILE`; `mpictl provision -i FILE`
# installs the cluster.
#
#   mpi_nodes    every machine of the cluster (required)
#   mpi_head     the machine that runs mpirun (optional; default: the first of mpi_nodes)
#   mpi_slots    ranks per node (optional; default: its GPU count, else its vCPU count, from the
#                facts of the last provision)
#   mpi_address  the name/address the other nodes reach a node by (optional; default: the
#                inventory name), e.g. its address on the fast interconnect
#   mpi_network_interface  the interface MPI/NCCL traffic uses on a node (optional)
#   ansible_host, ansible_port  where this controller's ssh connects (default: the name, 22)
"""


def _node_vars(starter: Starter) -> list[str]:
    out: list[str] = []
    if starter.user is not None:
        out += ["# The account Ansible logs in as.", f"ansible_user: {_scalar(starter.user)}"]
    if starter.user != "root" and not starter.as_root:
        out += ["# Ansible becomes root with sudo, which must not ask for a password."]
        out += ["ansible_become: true"]
    if starter.ssh_key is not None:
        out += ["# The private key of that login."]
        out += [f"ansible_ssh_private_key_file: {_scalar(starter.ssh_key)}"]
    if starter.ssh_options:
        args = shlex.join(part for o in starter.ssh_options for part in ("-o", o))
        out += ["# Options of every ssh connection.", f"ansible_ssh_common_args: {_scalar(args)}"]
    if starter.slots is not None:
        out += ["# Ranks per node, on every node (a host may set its own)."]
        out += [f"mpi_slots: {starter.slots}"]
    return out


def render(starter: Starter) -> str:
    """The inventory's YAML text (connection variables on mpi_nodes only: the controller's
    implicit localhost must not inherit them)."""
    lines = HEADER.splitlines() + ["all:", "  children:", "    mpi_nodes:"]
    node_vars = _node_vars(starter)
    if node_vars:
        lines += ["      vars:", *(f"        {line}" for line in node_vars)]
    lines.append("      hosts:")
    for spec in starter.hosts:
        lines.append(f"        {_scalar(spec.name)}:")
        if spec.local:
            lines += [
                "          # This machine: Ansible's local connection; jobs log in over ssh",
                "          # to 127.0.0.1 as the MPI user.",
                "          ansible_connection: local",
                f"          ansible_host: {LOCAL_ADDRESS}",
            ]
            if len(starter.hosts) == 1:
                lines += [
                    "          # One node: nothing else resolves its name. Set the address other",
                    "          # nodes reach it by before adding any.",
                    f"          mpi_address: {LOCAL_ADDRESS}",
                ]
            continue
        if spec.host != spec.name:
            lines.append(f"          ansible_host: {_scalar(spec.host)}")
        if spec.port is not None:
            lines.append(f"          ansible_port: {spec.port}")
    if starter.head is not None:
        lines += ["    mpi_head:", "      hosts:", f"        {_scalar(starter.head)}:"]
    return "\n".join(lines) + "\n"


def check_output(output: Path, *, force: bool = False) -> None:
    """``-o``: a new path in an existing directory, or with ``force`` an existing regular file.
    A symbolic link, a directory or anything else (``/dev/stdout`` is a link, a device behind
    it) is refused: ``--force`` would replace the link itself, not write where it points."""
    where = shown(str(output), limit=1000)
    try:
        info = os.lstat(output)
    except FileNotFoundError:
        parent = output.parent
        if not parent.is_dir():
            raise UsageError(
                f"{where}: no directory {quoted(str(parent))} to write it in"
            ) from None
        return
    except OSError as exc:
        raise UsageError(f"{where}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(info.st_mode):
        raise UsageError(f"{where}: is a symbolic link (give the path of the file itself)")
    if stat.S_ISDIR(info.st_mode):
        raise UsageError(f"{where}: is a directory")
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{where}: is not a regular file ('-o -' prints the inventory)")
    if not force:
        raise UsageError(f"{where}: already exists (--force overwrites it)")


def write(text: str, output: Path, *, force: bool = False) -> None:
    """Write the inventory to ``output`` (:func:`check_output` first): a new file is created
    exclusively, an existing regular one (``force``) replaced atomically by a private temporary
    file in the same directory."""
    check_output(output, force=force)
    where = shown(str(output), limit=1000)
    try:
        if force and os.path.lexists(output):
            fd, tmp = tempfile.mkstemp(
                dir=output.parent, prefix=f".{output.name}.", suffix=".mpictl-tmp"
            )
            try:
                with os.fdopen(fd, "w") as handle:
                    handle.write(text)
                os.chmod(tmp, 0o644)
                os.replace(tmp, output)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        else:
            with output.open("x") as handle:
                handle.write(text)
    except FileExistsError:
        raise UsageError(f"{where}: already exists (--force overwrites it)") from None
    except OSError as exc:
        raise UsageError(f"{where}: cannot write: {exc.strerror or exc}") from None
