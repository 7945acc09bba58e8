"""The local sandbox cluster: podman containers that behave like SSH-reachable Debian nodes.

An inventory such as ``inventories/sandbox/`` describes the sandbox: group vars ``sandbox_name``
(prefix of the containers and name of the podman network) and ``sandbox_subnet``; per host of
``mpi_nodes`` an ``ansible_port`` (published on 127.0.0.1) and a ``sandbox_ip`` on that network.

``up`` builds the node image when missing (debootstrap + ``podman import``, tagged by the hash of
the recipe in ``mpictl/data/sandbox/``), creates the network and one container per node, puts the
per-sandbox controller key into root's ``authorized_keys``, pins the nodes' host keys (read over
``podman exec``) in ``<state>/sandbox/<name>/known_hosts`` and waits until SSH answers. ``down``
removes that sandbox's containers and network and nothing else. ``status`` reports every node.

Library code: no printing; failures raise :class:`SandboxError` (or :class:`InventoryError` for a
bad inventory) with a one-line message.
"""

from __future__ import annotations

import fcntl
import hashlib
import ipaddress
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpictl import paths
from mpictl.errors import InventoryError, SandboxError

RECIPE_DIR = Path(__file__).resolve().parent / "data" / "sandbox"
IMAGE_REPO = "localhost/mpictl-node"
CUDA_PATH = Path("/usr/local/cuda")
LABEL_SANDBOX = "io.mpictl.sandbox"
LABEL_NODE = "io.mpictl.node"
LABEL_RUNTIME = "io.mpictl.runtime"
LABEL_CONFIG = "io.mpictl.config"
HOSTKEYS_READY = "/run/mpictl-hostkeys-ready"
#: Limits that a runc container on a cgroup-v1/hybrid host may set (they can only be lowered there).
LOWERED_ULIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096")
SSH_WAIT_S = 60.0
HOSTKEY_WAIT_S = 30
BUILD_TIMEOUT_S = 1800
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,40}$")


@dataclass(frozen=True)
class NodeState:
    """One sandbox node as ``status``/``up`` report it.

    ``state`` is ``running``, ``stopped`` or ``missing``; ``action`` says what ``up`` did to it
    (``created``, ``recreated``, ``started``, ``unchanged``) and is empty for ``status``.
    """

    name: str
    container: str
    state: str
    ssh_port: int
    ip: str
    action: str = ""


@dataclass(frozen=True)
class SandboxNode:
    name: str
    ssh_port: int
    ip: str


@dataclass(frozen=True)
class SandboxSpec:
    """What an inventory says about its sandbox."""

    name: str
    subnet: str
    nodes: tuple[SandboxNode, ...]

    def container(self, node: SandboxNode | str) -> str:
        host = node if isinstance(node, str) else node.name
        return f"{self.name}-{host}"

    def state_dir(self) -> Path:
        return paths.state_dir() / "sandbox" / self.name

    def key_path(self) -> Path:
        return self.state_dir() / "id_ed25519"

    def known_hosts_path(self) -> Path:
        return self.state_dir() / "known_hosts"


@dataclass(frozen=True)
class Runtime:
    """How podman runs the nodes on this host.

    ``name`` is ``runc`` on a cgroup-v1/hybrid host (crun refuses hybrid mode there, and podman's
    raised default rlimits fail with EPERM, hence the lowered ulimits) and ``default`` elsewhere
    (podman's own runtime and limits).
    """

    name: str

    @property
    def global_args(self) -> tuple[str, ...]:
        return ("--runtime", "runc") if self.name == "runc" else ()

    @property
    def run_args(self) -> tuple[str, ...]:
        return LOWERED_ULIMITS if self.name == "runc" else ()


# --------------------------------------------------------------------------------------------
# Inventory


def _literal(value: Any, *, where: str, var: str) -> Any:
    if isinstance(value, str) and ("{{" in value or "{%" in value):
        raise InventoryError(f"{where}: {var} must be a literal value, not a template ({value!r})")
    return value


def read_sandbox(inventory: Path) -> SandboxSpec:
    """Read the sandbox description of ``inventory`` through Ansible's inventory API."""
    inventory = Path(inventory)
    if not inventory.exists():
        raise InventoryError(f"{inventory}: no such inventory file or directory")
    from ansible.errors import AnsibleError
    from ansible.vars.manager import VariableManager

    # the same quiet loading (parse failures are errors, Ansible's warnings captured) as
    # `mpictl.inventory`; raw variables here, since the sandbox needs only literal ones
    from mpictl.inventory import _load_manager

    loader, inv = _load_manager(inventory)
    try:
        variables = VariableManager(loader=loader, inventory=inv)
        group = inv.groups.get("mpi_nodes")
        hosts = group.get_hosts() if group is not None else []
        if not hosts:
            raise InventoryError(f"{inventory}: group mpi_nodes is missing or has no hosts")
        host_vars = {h.name: variables.get_vars(host=h) for h in hosts}
    except AnsibleError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InventoryError(f"{inventory}: {first}") from None
    return spec_from_vars(inventory, [h.name for h in hosts], host_vars)


def spec_from_vars(
    inventory: Path, hosts: Sequence[str], host_vars: Mapping[str, Mapping[str, Any]]
) -> SandboxSpec:
    """Validate the raw variables of the ``mpi_nodes`` hosts into a :class:`SandboxSpec`."""
    first = host_vars[hosts[0]]
    for var in ("sandbox_name", "sandbox_subnet"):
        if first.get(var) is None:
            raise InventoryError(f"{inventory}: {var} is not set (not a sandbox inventory)")
    name = _literal(first.get("sandbox_name"), where=str(inventory), var="sandbox_name")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise InventoryError(
            f"{inventory}: sandbox_name must be lower-case letters, digits, '.', '_' or '-' "
            f"(got {name!r})"
        )
    subnet_raw = _literal(first.get("sandbox_subnet"), where=str(inventory), var="sandbox_subnet")
    try:
        subnet = ipaddress.ip_network(str(subnet_raw), strict=True)
    except ValueError:
        raise InventoryError(
            f"{inventory}: sandbox_subnet must be a network such as 10.89.42.0/24 "
            f"(got {subnet_raw!r})"
        ) from None
    if not isinstance(subnet, ipaddress.IPv4Network) or subnet.num_addresses < 8:
        raise InventoryError(f"{inventory}: sandbox_subnet must be an IPv4 network of /29 or wider")
    gateway = next(subnet.hosts())
    nodes: list[SandboxNode] = []
    ports: dict[int, str] = {}
    ips: dict[str, str] = {}
    for host in hosts:
        hv = host_vars[host]
        where = f"{inventory}: host {host}"
        for var, value in (("sandbox_name", name), ("sandbox_subnet", subnet_raw)):
            if hv.get(var) != value:
                raise InventoryError(f"{where}: {var} differs from the other nodes'")
        if not _NAME_RE.match(host):
            raise InventoryError(f"{where}: host name unusable as a container host name")
        port_raw = _literal(hv.get("ansible_port"), where=where, var="ansible_port")
        try:
            port = int(port_raw)
        except (TypeError, ValueError):
            port = -1
        if isinstance(port_raw, bool) or not 1024 <= port <= 65535:
            raise InventoryError(
                f"{where}: ansible_port must be a port 1024..65535 (got {port_raw!r})"
            )
        if port in ports:
            raise InventoryError(f"{where}: ansible_port {port} is also used by {ports[port]}")
        ip_raw = _literal(hv.get("sandbox_ip"), where=where, var="sandbox_ip")
        try:
            ip = ipaddress.ip_address(str(ip_raw))
        except ValueError:
            raise InventoryError(
                f"{where}: sandbox_ip must be an IPv4 address (got {ip_raw!r})"
            ) from None
        if ip not in subnet or ip in (subnet.network_address, subnet.broadcast_address, gateway):
            raise InventoryError(
                f"{where}: sandbox_ip {ip} is not a usable address of {subnet} "
                f"({gateway} is the gateway)"
            )
        if str(ip) in ips:
            raise InventoryError(f"{where}: sandbox_ip {ip} is also used by {ips[str(ip)]}")
        ports[port] = host
        ips[str(ip)] = host
        nodes.append(SandboxNode(name=host, ssh_port=port, ip=str(ip)))
    return SandboxSpec(name=name, subnet=str(subnet), nodes=tuple(nodes))


# --------------------------------------------------------------------------------------------
# Host inspection (pure functions take the text they parse, for tests)


def cgroup_mode(mounts: str) -> str:
    """``unified`` (pure cgroup v2), ``hybrid`` (v1 + v2 side by side) or ``legacy`` (v1)."""
    fstype_at: dict[str, str] = {}
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) >= 3:
            fstype_at[fields[1]] = fields[2]
    if fstype_at.get("/sys/fs/cgroup") == "cgroup2":
        return "unified"
    if "cgroup2" in (
        fstype_at.get("/sys/fs/cgroup/unified"),
        fstype_at.get("/sys/fs/cgroup/unified/"),
    ):
        return "hybrid"
    return "legacy"


def choose_runtime(mounts: str | None = None, env: Mapping[str, str] | None = None) -> Runtime:
    """runc + lowered ulimits on cgroup-v1/hybrid hosts, podman's defaults on cgroup v2.

    ``MPICTL_SANDBOX_RUNTIME=runc|default`` overrides the detection.
    """
    env = os.environ if env is None else env
    forced = env.get("MPICTL_SANDBOX_RUNTIME", "").strip()
    if forced:
        if forced not in ("runc", "default"):
            raise SandboxError(
                f"MPICTL_SANDBOX_RUNTIME must be 'runc' or 'default' (got {forced!r})"
            )
        return Runtime(forced)
    if mounts is None:
        try:
            mounts = Path("/proc/self/mounts").read_text()
        except OSError:
            mounts = ""
    return Runtime("default" if cgroup_mode(mounts) == "unified" else "runc")


def parse_deb822_mirror(text: str) -> str | None:
    """First Debian archive URI (not the security archive) of a deb822 ``.sources`` file."""
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[:1].isspace():
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        if "deb" not in fields.get("types", "").split():
            continue
        if fields.get("enabled", "yes").lower() == "no":
            continue
        suites = fields.get("suites", "").split()
        if not suites or all("security" in s for s in suites):
            continue
        for uri in fields.get("uris", "").split():
            if uri.startswith(("http://", "https://", "file:/")) and "security" not in uri:
                return uri
    return None


def parse_sources_list_mirror(text: str) -> str | None:
    """First Debian archive URI (not the security archive) of a one-line-style sources.list."""
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if not fields or fields[0] != "deb":
            continue
        rest = fields[1:]
        if rest and rest[0].startswith("["):
            while rest and not rest[0].endswith("]"):
                rest = rest[1:]
            rest = rest[1:]
        if len(rest) >= 2 and "security" not in rest[0] and "security" not in rest[1]:
            return rest[0]
    return None


def debian_mirror(env: Mapping[str, str] | None = None, root: Path = Path("/")) -> str:
    """The Debian mirror this host's apt uses (``MPICTL_DEBIAN_MIRROR`` overrides)."""
    env = os.environ if env is None else env
    if env.get("MPICTL_DEBIAN_MIRROR"):
        return env["MPICTL_DEBIAN_MIRROR"]
    apt = root / "etc" / "apt"
    candidates: list[tuple[Path, Callable[[str], str | None]]] = [
        (apt / "sources.list.d" / "debian.sources", parse_deb822_mirror),
        *((p, parse_deb822_mirror) for p in sorted((apt / "sources.list.d").glob("*.sources"))),
        (apt / "sources.list", parse_sources_list_mirror),
        *((p, parse_sources_list_mirror) for p in sorted((apt / "sources.list.d").glob("*.list"))),
    ]
    for path, parse in candidates:
        try:
            text = path.read_text()
        except OSError:
            continue
        uri = parse(text)
        if uri:
            return uri
    raise SandboxError(
        "no Debian mirror found in /etc/apt/sources.list(.d); set MPICTL_DEBIAN_MIRROR to one"
    )


def recipe_hash(recipe_dir: Path = RECIPE_DIR) -> str:
    """Hash of the node image recipe: file names, modes and contents."""
    digest = hashlib.sha256()
    for path in sorted(p for p in recipe_dir.rglob("*") if p.is_file()):
        if "__pycache__" in path.parts:
            continue
        digest.update(path.relative_to(recipe_dir).as_posix().encode() + b"\0")
        digest.update(b"x" if os.access(path, os.X_OK) else b"-")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def image_tag(recipe_dir: Path = RECIPE_DIR) -> str:
    return f"{IMAGE_REPO}:{recipe_hash(recipe_dir)}"


# --------------------------------------------------------------------------------------------
# Command construction (pure)


def network_create_args(spec: SandboxSpec) -> list[str]:
    return [
        "network",
        "create",
        "--subnet",
        spec.subnet,
        "--label",
        f"{LABEL_SANDBOX}={spec.name}",
        spec.name,
    ]


def mac_for_ip(ip: str) -> str:
    """A locally administered unicast MAC address derived from an IPv4 address."""
    return "02:6d:" + ":".join(f"{b:02x}" for b in ipaddress.IPv4Address(ip).packed)


def node_run_args(
    spec: SandboxSpec, node: SandboxNode, runtime: Runtime, image: str, cuda: Path | None = None
) -> list[str]:
    """The ``podman run`` arguments (after the global ones) that create ``node``."""
    options: list[str] = [
        "--hostname",
        node.name,
        "--network",
        spec.name,
        "--ip",
        node.ip,
        "-p",
        f"127.0.0.1:{node.ssh_port}:22",
        # MPI needs more shared memory than the 64 MiB default, and CMA (process_vm_readv)
        # single-copy transfers between ranks need ptrace; ping needs raw sockets.
        "--shm-size",
        "1g",
        "--cap-add",
        "SYS_PTRACE",
        "--cap-add",
        "NET_RAW",
        *runtime.run_args,
    ]
    for other in spec.nodes:
        if other.name != node.name:
            options += ["--add-host", f"{other.name}:{other.ip}"]
    if cuda is not None:
        real = cuda.resolve()
        options += ["-v", f"{real}:{cuda}:ro"]
        if real != cuda:
            options += ["-v", f"{real}:{real}:ro"]
    # The config label covers what the inventory and --cuda decide, not the image: a newer image
    # recipe is used by nodes created from then on, running nodes are left alone.
    config = hashlib.sha256("\0".join(options).encode()).hexdigest()[:16]
    # A fixed MAC per address (derived from it, so not part of the label): a recreated node
    # answers at once instead of after the host's stale neighbour (ARP) entry for its address
    # expires (~30 s of connect timeouts).
    options += ["--mac-address", mac_for_ip(node.ip)]
    return [
        "run",
        "-d",
        "--name",
        spec.container(node),
        "--label",
        f"{LABEL_SANDBOX}={spec.name}",
        "--label",
        f"{LABEL_NODE}={node.name}",
        "--label",
        f"{LABEL_RUNTIME}={runtime.name}",
        "--label",
        f"{LABEL_CONFIG}={config}",
        *options,
        image,
    ]


def config_label(run_args: Sequence[str]) -> str:
    prefix = f"{LABEL_CONFIG}="
    return next(a[len(prefix) :] for a in run_args if a.startswith(prefix))


def known_hosts_lines(port: int, host_keys: str) -> list[str]:
    """``[127.0.0.1]:port type key`` lines from the text of ``ssh_host_*_key.pub`` files."""
    lines = []
    for line in host_keys.splitlines():
        fields = line.split()
        if len(fields) >= 2 and (fields[0].startswith(("ssh-", "ecdsa-", "sk-"))):
            lines.append(f"[127.0.0.1]:{port} {fields[0]} {fields[1]}")
    return lines


def ssh_check_args(spec: SandboxSpec, node: SandboxNode, timeout: int = 5) -> list[str]:
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


# --------------------------------------------------------------------------------------------
# podman


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "(no message)"


def _podman(
    args: Sequence[str],
    *,
    runtime: Runtime | None = None,
    stdin: str | None = None,
    check: bool = True,
    what: str = "",
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("podman")
    if exe is None:
        raise SandboxError("podman is not installed (the sandbox runs nodes as podman containers)")
    cmd = [exe, *(runtime.global_args if runtime else ()), *args]
    try:
        proc = subprocess.run(
            cmd, input=stdin, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise SandboxError(
            f"{what or 'podman ' + args[0]}: timed out after {timeout:.0f} s"
        ) from None
    if check and proc.returncode != 0:
        raise SandboxError(f"{what or 'podman ' + ' '.join(args[:2])}: {_last_line(proc.stderr)}")
    return proc


def _containers(name: str) -> dict[str, dict[str, Any]]:
    """Containers labelled as members of sandbox ``name``, by container name."""
    proc = _podman(
        ["ps", "-a", "--filter", f"label={LABEL_SANDBOX}={name}", "--format", "json"],
        what="podman ps",
    )
    found: dict[str, dict[str, Any]] = {}
    for entry in json.loads(proc.stdout or "[]") or []:
        labels = entry.get("Labels") or {}
        if labels.get(LABEL_SANDBOX) != name:
            continue
        names = entry.get("Names") or []
        if names:
            found[names[0]] = entry
    return found


def _state(entry: Mapping[str, Any] | None) -> str:
    if entry is None:
        return "missing"
    return "running" if str(entry.get("State", "")).lower() == "running" else "stopped"


def _entry_runtime(entry: Mapping[str, Any]) -> Runtime:
    labels = entry.get("Labels") or {}
    return Runtime("runc" if labels.get(LABEL_RUNTIME) == "runc" else "default")


def _remove_container(container: str, runtime: Runtime) -> None:
    _podman(["rm", "-f", "-t", "2", container], runtime=runtime, what=f"removing {container}")


def _network(name: str) -> dict[str, Any] | None:
    proc = _podman(["network", "inspect", name], check=False)
    if proc.returncode != 0:
        return None
    data = json.loads(proc.stdout or "[]")
    return data[0] if data else None


def _network_labels(net: Mapping[str, Any]) -> Mapping[str, str]:
    return net.get("labels") or net.get("Labels") or {}


def _network_subnets(net: Mapping[str, Any]) -> list[str]:
    return [str(s.get("subnet")) for s in net.get("subnets") or []]


def _ensure_network(spec: SandboxSpec) -> None:
    net = _network(spec.name)
    if net is None:
        _podman(network_create_args(spec), what=f"creating network {spec.name}")
        return
    if _network_labels(net).get(LABEL_SANDBOX) != spec.name:
        raise SandboxError(f"podman network {spec.name} exists but is not this sandbox's network")
    if spec.subnet not in _network_subnets(net):
        raise SandboxError(
            f"podman network {spec.name} has subnet {', '.join(_network_subnets(net))}, the "
            f"inventory says {spec.subnet}; run `mpictl sandbox down` first"
        )


# --------------------------------------------------------------------------------------------
# Image


def image_exists(tag: str) -> bool:
    return _podman(["image", "exists", tag], check=False).returncode == 0


def ensure_image(recipe_dir: Path = RECIPE_DIR) -> tuple[str, bool]:
    """Build the node image unless its tag exists; returns (tag, built)."""
    tag = image_tag(recipe_dir)
    if image_exists(tag):
        return tag, False
    lock_path = Path(tempfile.gettempdir()) / f"mpictl-node-image-{tag.rsplit(':', 1)[1]}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another `up` may be building the same image
        if image_exists(tag):
            return tag, False
        if os.geteuid() != 0:
            raise SandboxError("building the sandbox node image needs root (debootstrap)")
        if shutil.which("debootstrap") is None:
            raise SandboxError("debootstrap is not installed (it builds the sandbox node image)")
        mirror = debian_mirror()
        with tempfile.TemporaryDirectory(prefix="mpictl-recipe-") as tmp:
            # build from a snapshot of the recipe so the tag matches exactly what was built
            work = Path(tmp) / "recipe"
            shutil.copytree(recipe_dir, work)
            if image_tag(work) != tag:
                raise SandboxError("the sandbox image recipe changed while building; run up again")
            try:
                proc = subprocess.run(
                    ["sh", str(work / "build.sh"), tag, mirror],
                    capture_output=True,
                    text=True,
                    timeout=BUILD_TIMEOUT_S,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise SandboxError(
                    f"building the node image timed out after {BUILD_TIMEOUT_S} s"
                ) from None
        if proc.returncode != 0:
            raise SandboxError(
                f"building the node image {tag} failed: {_last_line(proc.stderr or proc.stdout)}"
            )
    return tag, True


# --------------------------------------------------------------------------------------------
# Keys


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
        raise SandboxError(f"ssh-keygen failed: {_last_line(proc.stderr)}")
    return key


_NODE_SETUP = f"""set -eu
i=0
while [ ! -e {HOSTKEYS_READY} ]; do
  i=$((i + 1))
  if [ "$i" -gt {HOSTKEY_WAIT_S * 10} ]; then echo "host keys were not generated" >&2; exit 1; fi
  sleep 0.1
done
umask 077
mkdir -p /root/.ssh
key=$(cat)
touch /root/.ssh/authorized_keys
grep -qxF "$key" /root/.ssh/authorized_keys || printf '%s\\n' "$key" >> /root/.ssh/authorized_keys
cat /etc/ssh/ssh_host_*_key.pub
"""


def _authorize_and_read_host_keys(container: str, runtime: Runtime, pubkey: str) -> str:
    proc = _podman(
        ["exec", "-i", container, "sh", "-c", _NODE_SETUP],
        runtime=runtime,
        stdin=pubkey.strip() + "\n",
        what=f"setting up SSH on {container}",
        timeout=HOSTKEY_WAIT_S + 30,
    )
    return proc.stdout


def _write_private(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _ssh_once(spec: SandboxSpec, nodes: Iterable[SandboxNode]) -> dict[str, str]:
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
        result[node.name] = "" if proc.returncode == 0 else _last_line(err)
    return result


def _wait_ssh(spec: SandboxSpec, nodes: Iterable[SandboxNode], deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    pending = list(nodes)
    while pending:
        errors = _ssh_once(spec, pending)
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


# --------------------------------------------------------------------------------------------
# Public API


def clone_inventory(dst: Path, name: str, subnet: str, port_base: int) -> Path:
    """Copy ``inventories/sandbox`` to ``dst`` as an independent sandbox.

    Hosts keep their names; ``sandbox_name`` and ``sandbox_subnet`` are replaced, and host i
    gets ``ansible_port`` ``port_base + i`` and ``sandbox_ip`` ``.11 + i`` of ``subnet``. Tests,
    benchmarks and parallel users run such copies side by side with the default sandbox.
    """
    import yaml

    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(paths.sandbox_inventory(), dst)
    group_vars = dst / "group_vars" / "all.yml"
    text = group_vars.read_text()
    text = re.sub(r"(?m)^sandbox_name:.*$", f"sandbox_name: {name}", text)
    text = re.sub(r"(?m)^sandbox_subnet:.*$", f"sandbox_subnet: {subnet}", text)
    group_vars.write_text(text)
    hosts_file = dst / "hosts.yml"
    data = yaml.safe_load(hosts_file.read_text())
    prefix = subnet.rsplit(".", 1)[0]
    hosts = data["all"]["children"]["mpi_nodes"]["hosts"]
    for index, host in enumerate(hosts):
        hosts[host]["ansible_port"] = port_base + index
        hosts[host]["sandbox_ip"] = f"{prefix}.{11 + index}"
    hosts_file.write_text(yaml.safe_dump(data, sort_keys=False))
    return dst


def status(inventory: Path) -> list[NodeState]:
    """Every node of the sandbox with its container state."""
    spec = read_sandbox(inventory)
    return _status(spec, _containers(spec.name))


def _status(
    spec: SandboxSpec,
    found: Mapping[str, Mapping[str, Any]],
    actions: Mapping[str, str] | None = None,
) -> list[NodeState]:
    return [
        NodeState(
            name=node.name,
            container=spec.container(node),
            state=_state(found.get(spec.container(node))),
            ssh_port=node.ssh_port,
            ip=node.ip,
            action=(actions or {}).get(node.name, ""),
        )
        for node in spec.nodes
    ]


def plan(
    spec: SandboxSpec,
    found: Mapping[str, Mapping[str, Any]],
    runtime: Runtime,
    image: str,
    cuda: Path | None = None,
    host_cuda: Path | None = None,
) -> list[tuple[SandboxNode, str, list[str]]]:
    """What ``up`` does to each node: ``unchanged``, ``started``, ``created`` or ``recreated``.

    A node whose container exists with the same configuration label is left alone (started when
    stopped); one whose configuration differs (ports, addresses, nodes) is recreated, and so is
    one without the CUDA mount when ``cuda`` asks for it. Without ``cuda``, a node that has the
    mount of ``host_cuda`` keeps it: a plain ``up`` never takes CUDA away from running nodes.
    """
    steps = []
    for node in spec.nodes:
        run_args = node_run_args(spec, node, runtime, image, cuda)
        accepted = {config_label(run_args)}
        if cuda is None and host_cuda is not None:
            accepted.add(config_label(node_run_args(spec, node, runtime, image, host_cuda)))
        entry = found.get(spec.container(node))
        if entry is None:
            action = "created"
        elif (entry.get("Labels") or {}).get(LABEL_CONFIG) not in accepted:
            action = "recreated"
        elif _state(entry) == "running":
            action = "unchanged"
        else:
            action = "started"
        steps.append((node, action, run_args))
    return steps


def up(inventory: Path, *, cuda: bool = False) -> list[NodeState]:
    """Bring the sandbox up (idempotent): image, network, containers, keys; wait for SSH."""
    spec = read_sandbox(inventory)
    cuda_path: Path | None = None
    if cuda:
        if not CUDA_PATH.is_dir():
            raise SandboxError(f"--cuda: {CUDA_PATH} does not exist on this host")
        cuda_path = CUDA_PATH
    runtime = choose_runtime()
    found = _containers(spec.name)
    host_cuda = CUDA_PATH if CUDA_PATH.is_dir() else None
    steps = plan(spec, found, runtime, image_tag(), cuda_path, host_cuda)
    if any(action in ("created", "recreated") for _, action, _ in steps):
        ensure_image()  # only when a container is to be made: running nodes keep their image
    _ensure_network(spec)
    key = ensure_key(spec)
    pubkey = key.with_suffix(".pub").read_text()

    actions: dict[str, str] = {}
    for node, action, run_args in steps:
        container = spec.container(node)
        entry = found.get(container)
        actions[node.name] = action
        if action == "unchanged":
            continue
        if action == "started" and entry is not None:
            _podman(
                ["start", container], runtime=_entry_runtime(entry), what=f"starting {container}"
            )
            continue
        if action == "recreated" and entry is not None:
            _remove_container(container, _entry_runtime(entry))
        proc = _podman(run_args, runtime=runtime, check=False)
        if proc.returncode != 0:
            _podman(["rm", "-f", "-t", "0", container], runtime=runtime, check=False)
            hint = ""
            if runtime.name == "default" and "rlimit" in proc.stderr:
                hint = " (this host needs MPICTL_SANDBOX_RUNTIME=runc: lowered ulimits)"
            raise SandboxError(f"creating {container}: {_last_line(proc.stderr)}{hint}")

    # A node left alone that already lets the key in under its pinned host keys needs nothing
    # more (the warm path: one SSH login per node). Every other node gets the key put into
    # root's authorized_keys and its host keys read over `podman exec` and pinned.
    try:
        pinned = pinned_by_port(spec.known_hosts_path().read_text())
    except OSError:
        pinned = {}
    kept = [n for n, action, _ in steps if action == "unchanged" and n.ssh_port in pinned]
    errors = _ssh_once(spec, kept) if kept else {}
    kept = [n for n in kept if not errors[n.name]]
    fresh = [n for n in spec.nodes if n not in kept]

    found = _containers(spec.name) if fresh else found
    with ThreadPoolExecutor(max_workers=max(1, len(fresh))) as pool:
        host_keys = dict(
            zip(
                [n.name for n in fresh],
                pool.map(
                    lambda node: _authorize_and_read_host_keys(
                        spec.container(node), _entry_runtime(found[spec.container(node)]), pubkey
                    ),
                    fresh,
                ),
                strict=True,
            )
        )
    lines: list[str] = []
    for node in spec.nodes:
        if node.name not in host_keys:
            lines += pinned[node.ssh_port]
            continue
        node_lines = known_hosts_lines(node.ssh_port, host_keys[node.name])
        if not node_lines:
            raise SandboxError(f"{spec.container(node)}: no SSH host keys found")
        lines += node_lines
    _write_private(spec.known_hosts_path(), "\n".join(lines) + "\n")
    _wait_ssh(spec, fresh, SSH_WAIT_S)
    return _status(spec, _containers(spec.name), actions)


def down(inventory: Path) -> list[str]:
    """Remove the sandbox's containers and network (image and keys stay); returns what went."""
    spec = read_sandbox(inventory)
    members = sorted(_containers(spec.name).items())
    with ThreadPoolExecutor(max_workers=max(1, len(members))) as pool:
        list(pool.map(lambda item: _remove_container(item[0], _entry_runtime(item[1])), members))
    removed = [f"container {container}" for container, _ in members]
    net = _network(spec.name)
    if net is not None and _network_labels(net).get(LABEL_SANDBOX) == spec.name:
        _podman(["network", "rm", spec.name], what=f"removing network {spec.name}")
        removed.append(f"network {spec.name}")
    return removed
