"""The node's record of the state the last successful run left (the cluster's short path).

Run with ``raw`` (one SSH exec, no module payload: ``python3 -c <this file> <JSON>``), it prints one
JSON object. ``{"mode": "probe", "inputs": D, "cuda_homes": [...]}`` (read-only; D: the
controller's digest of each component's inputs, ``{component: digest}``) compares the
record with the node as it is now and returns the components still in that state
(``converged``), those whose signed items changed (``drifted``), the node's GPU count
(``gpus``), its RDMA ports (``rdma``), its public SSH host keys (``host_keys``, type and key:
mpictl.members tells a re-imaged node by them) and who it is (``identity``: its machine id and OS,
which the controller compares with the facts it cached for the node).
``{"mode": "record", "inputs": D, "claims": {component: [item, ...]}, "keep": [...]}`` signs
what each component claims and writes the record (``changed``).

A component is converged when its entry in the record was written for the same inputs (the
controller's digest of the project and the inventory's variables the component reads), on the
same node environment
(OS, kernel, host name, CPUs, memory, GPUs, addresses, compiler, CUDA), and every item it claims
still has the signature recorded:

- ``path:P``: type, mode, owner, size and mtime of P (and the sha256 of a small file); a directory
  is one entry (its listing is not followed);
- ``tree:P``: the same for P and everything below it, by size and mtime, not content
  (``__pycache__`` and ``*.pyc`` left out);
- ``user:U``: the passwd entry and the groups of U;
- ``unit:U``: the systemd unit's ActiveState and UnitFileState;
- ``package:N``: the package's dpkg status and version.

This file runs on the nodes (Python 3.7+, standard library only); its functions are unit-tested
on the controller (tests/unit/test_short_path.py).
"""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import re
import stat
import subprocess
import sys

# rdma_ports(root): the node's RDMA ports in sysfs (the fact mpi_rdma_ports)
# mpictl-include: hca_ports.py

SMALL_FILE = 1 << 20  # files up to this size are signed by content too
SKIP_NAMES = ("__pycache__",)
SKIP_SUFFIXES = (".pyc",)


def run(argv: list[str]) -> str:
    """The stdout of argv, or "" when it cannot run or fails."""
    try:
        proc = subprocess.run(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return proc.stdout if proc.returncode == 0 else ""


def read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def on_path(program: str) -> bool:
    return any(
        os.access(os.path.join(d, program), os.X_OK)
        for d in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep)
    )


def gpu_lines() -> list[str]:
    if not on_path("nvidia-smi"):
        return []
    return [line for line in run(["nvidia-smi", "-L"]).splitlines() if line.startswith("GPU")]


SSH_DIR = "/etc/ssh"


def host_keys(root: str = SSH_DIR) -> list[str]:
    """The node's public SSH host keys (``ssh_host_*_key.pub``) as ``TYPE KEY``, sorted."""
    out = []
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        if name.startswith("ssh_host_") and name.endswith("_key.pub"):
            try:
                with open(os.path.join(root, name), encoding="utf-8") as handle:
                    words = handle.read().split()
            except (OSError, UnicodeDecodeError):
                continue
            if len(words) >= 2:
                out.append(f"{words[0]} {words[1]}")
    return sorted(out)


def identity(etc: str = "/etc") -> dict[str, str]:
    """The node's machine id and OS (``ID`` and ``VERSION_ID`` of os-release, as Ansible's
    ``ansible_distribution`` lowercased and ``ansible_distribution_version`` read them)."""
    fields = {}
    for line in read(os.path.join(etc, "os-release")).splitlines():
        key, _, value = line.partition("=")
        fields[key.strip()] = value.strip().strip('"')
    return {
        "machine_id": read(os.path.join(etc, "machine-id")).strip(),
        "os": fields.get("ID", ""),
        "os_version": fields.get("VERSION_ID", ""),
    }


def libcuda_entries(cache: bytes) -> list[str]:
    """The libcuda names and paths the dynamic linker's cache (/etc/ld.so.cache) holds."""
    found = re.findall(rb"[^\0]*libcuda\.so[^\0]*", cache)
    return sorted({name.decode(errors="replace") for name in found})


def read_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return b""


# Interfaces that container runtimes and CNI plugins add and remove as containers come and go.
EPHEMERAL_INTERFACES = (
    "veth", "cali", "docker", "br-", "cni", "flannel", "lxc", "virbr", "podman", "cilium", "kube-",
)  # fmt: skip


def addresses(ip_output: str) -> list[str]:
    """``ifname address/prefix`` of each line of ``ip -o addr show`` (lifetimes left out, and the
    interfaces of local containers)."""
    out = []
    for line in ip_output.splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[2] not in ("inet", "inet6") or "temporary" in fields:
            continue  # IPv6 privacy addresses rotate
        name = fields[1].split("@")[0]
        if not name.startswith(EPHEMERAL_INTERFACES):
            out.append(f"{name} {fields[3]}")
    return sorted(out)


def mem_gib(meminfo: str) -> str:
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            return str(int(line.split()[1]) >> 20)
    return ""


def environment(gpus: list[str], cuda_homes: list[str]) -> str:
    """A digest of what the roles read from the node rather than the inventory: the OS, kernel,
    host name, CPUs, memory, GPUs, RDMA devices (their names: a port's state may change, a new
    HCA makes the ucx role build its verbs transports), addresses, the C compiler (build
    fingerprints hold its version) and the CUDA toolkits the roles are pointed at."""
    compiler = os.path.realpath("/usr/bin/cc")
    parts = [
        read("/etc/os-release"),
        os.uname().release,
        os.uname().nodename,
        str(os.cpu_count()),
        mem_gib(read("/proc/meminfo")),
        "\n".join(gpus),
        "\n".join(sorted(os.listdir(IB_ROOT)) if os.path.isdir(IB_ROOT) else []),  # noqa: F821 (hca)
        "\n".join(addresses(run(["ip", "-o", "addr", "show"]))),
        compiler + " " + stat_signature(compiler, content=False),
        "\n".join(libcuda_entries(read_bytes("/etc/ld.so.cache"))),
    ]
    for home in sorted(set(cuda_homes)):
        parts += [os.path.realpath(home), read(os.path.join(home, "version.json"))]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 16), b""):
                digest.update(block)
    except OSError:
        return "unreadable"
    return digest.hexdigest()


def entry_line(st: os.stat_result) -> str:
    """Type, mode and owner; for a file, size and mtime (a directory's mtime moves with any file
    created in it: not drift)."""
    kind = stat.S_IFMT(st.st_mode)
    head = f"{kind:o} {stat.S_IMODE(st.st_mode):o} {st.st_uid}:{st.st_gid}"
    if kind == stat.S_IFREG:
        return f"{head} {st.st_size} {st.st_mtime_ns}"
    return head


def stat_signature(path: str, content: bool = True) -> str:
    """One line for path: absent, or entry_line, a link's target and (with content) the sha256
    of a small file."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "absent"
    except OSError as err:
        return f"error {err.errno}"
    line = entry_line(st)
    if stat.S_ISLNK(st.st_mode):
        return f"{line} -> {os.readlink(path)}"
    if content and stat.S_ISREG(st.st_mode) and st.st_size <= SMALL_FILE:
        line += " " + file_sha256(path)
    return line


def tree_signature(root: str) -> str:
    """The signature of root and of everything below it (a link's target included), as one
    digest; names sorted, so the walk's order never changes it."""
    top = stat_signature(root, content=False)
    digest = hashlib.sha256(f".\0{top}\n".encode())
    if not top.startswith(f"{stat.S_IFDIR:o} "):
        return digest.hexdigest()
    lines = []
    pending = [root]
    prefix = len(root.rstrip("/")) + 1
    while pending:
        directory = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError as err:
            lines.append(f"{directory[prefix:]}\0unlistable {err.errno}")
            continue
        for entry in entries:
            name = entry.name
            if name in SKIP_NAMES or name.endswith(SKIP_SUFFIXES):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError as err:
                lines.append(f"{entry.path[prefix:]}\0error {err.errno}")
                continue
            line = entry_line(st)
            if stat.S_ISLNK(st.st_mode):
                try:
                    line += " -> " + os.readlink(entry.path)
                except OSError:
                    line += " -> ?"
            elif stat.S_ISDIR(st.st_mode):
                pending.append(entry.path)
            lines.append(f"{entry.path[prefix:]}\0{line}")
    lines.sort()
    digest.update("\n".join(lines).encode())
    return digest.hexdigest()


def shadow_field(name: str) -> str:
    """The password field of name in /etc/shadow (the role locks it: ``*``), or "" unreadable."""
    for line in read("/etc/shadow").splitlines():
        fields = line.split(":")
        if fields[0] == name and len(fields) > 1:
            return hashlib.sha256(fields[1].encode()).hexdigest()[:16]
    return ""


def user_signature(name: str) -> str:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return "absent"
    try:
        group = grp.getgrgid(entry.pw_gid).gr_name
    except KeyError:
        group = "?"
    groups = sorted(str(g) for g in os.getgrouplist(name, entry.pw_gid))
    return (
        f"{entry.pw_uid}:{entry.pw_gid}({group}) {entry.pw_dir} {entry.pw_shell}"
        f" {','.join(groups)} {shadow_field(name)}"
    )


def unit_signature(name: str) -> str:
    out = run(["systemctl", "show", "-p", "ActiveState", "-p", "UnitFileState", name])
    return " ".join(sorted(out.split()))


def dpkg_packages(status: str) -> dict[str, str]:
    """Package name to "status version" from the text of /var/lib/dpkg/status."""
    packages: dict[str, str] = {}
    for block in status.split("\n\n"):
        fields = {}
        for line in block.splitlines():
            key, sep, value = line.partition(": ")
            if sep and not line.startswith(" "):
                fields[key] = value
        if "Package" in fields:
            line = f"{fields.get('Status', '')} {fields.get('Version', '')}"
            seen = packages.get(fields["Package"])
            # one name of several architectures (multiarch): every entry counts
            packages[fields["Package"]] = ";".join(sorted([seen, line])) if seen else line
    return packages


class Signer:
    """Signs claimed items; reads the package database at most once."""

    def __init__(self) -> None:
        self._packages: dict[str, str] | None = None
        self._seen: dict[str, str] = {}  # a venv claimed by two components is walked once

    def package(self, name: str) -> str:
        if self._packages is None:
            self._packages = dpkg_packages(read("/var/lib/dpkg/status"))
        return self._packages.get(name, "absent")

    def sign(self, item: str) -> str:
        if item not in self._seen:
            self._seen[item] = self._sign(item)
        return self._seen[item]

    def _sign(self, item: str) -> str:
        kind, sep, name = item.partition(":")
        if not sep or not name:
            raise ValueError(f"not KIND:NAME: {item!r}")
        if kind == "path":
            return stat_signature(name)
        if kind == "tree":
            return tree_signature(name)
        if kind == "user":
            return user_signature(name)
        if kind == "unit":
            return unit_signature(name)
        if kind == "package":
            return self.package(name)
        raise ValueError(f"unknown kind {kind!r} in {item!r}")


def load(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return {}
    components = record.get("components") if isinstance(record, dict) else None
    return components if isinstance(components, dict) else {}


def drifted(entry: object, signer: Signer) -> bool:
    """Whether anything the entry signed is no longer as signed (a damaged entry counts)."""
    signatures = entry.get("signatures") if isinstance(entry, dict) else None
    if not isinstance(signatures, dict):
        return True
    try:
        return any(signer.sign(item) != sig for item, sig in signatures.items())
    except ValueError:
        return True


def inputs_of(inputs: dict, name: str) -> str:
    """The digest of component ``name``'s inputs ("" where the controller gave none: never a
    match)."""
    return str(inputs.get(name) or "")


def assess(components: dict, inputs: dict, env: str, signer: Signer) -> dict[str, list[str]]:
    """``converged``: the components of the record whose inputs, environment and signatures all
    still match; ``drifted``: those whose signed items changed since the record (whatever the
    inputs: the node was changed behind mpictl's back, and the role reinstalls)."""
    out: dict[str, list[str]] = {"converged": [], "drifted": []}
    for name, entry in sorted(components.items()):
        if drifted(entry, signer):
            out["drifted"].append(name)
        elif not inputs_of(inputs, name) or entry.get("env") != env:
            continue
        elif entry.get("inputs") == inputs_of(inputs, name):
            out["converged"].append(name)
    return out


def converged(components: dict, inputs: dict, env: str, signer: Signer) -> list[str]:
    return assess(components, inputs, env, signer)["converged"]


def recorded(
    components: dict, claims: dict, keep: list[str], inputs: dict, env: str, signer: Signer
) -> dict:
    """The record after a run: what ran (claims) and what was converged (keep) signed now, the
    other components as they were (a component that drifted and did not run stays drifted)."""
    out = dict(components)
    for name in keep:
        entry = components.get(name)
        if name not in claims and isinstance(entry, dict):
            claims = {**claims, name: list(entry.get("signatures", {}))}
    for name, items in claims.items():
        out[name] = {
            "inputs": inputs_of(inputs, name),
            "env": env,
            "signatures": {item: signer.sign(item) for item in items},
        }
    return out


def write(path: str, components: dict) -> bool:
    """Write the record atomically; False when it already held exactly this."""
    text = json.dumps({"version": 1, "components": components}, indent=1, sort_keys=True)
    if read(path) == text:
        return False
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    import tempfile  # only a record writes (a probe is read-only and should start fast)

    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".node-state.")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(tmp, 0o600)  # it holds digests of the keys the roles install
    os.replace(tmp, path)
    return True


RECORD = "/var/lib/mpictl/node-state.json"


def handle(request: dict) -> dict:
    """The answer to one request (see the module docstring)."""
    mode = request.get("mode")
    inputs = request.get("inputs")
    if mode not in ("probe", "record") or not isinstance(inputs, dict):
        raise ValueError("need mode probe or record, and inputs ({component: digest})")
    path = request.get("path") or RECORD
    cuda_homes = request.get("cuda_homes") or ["/usr/local/cuda"]
    if not isinstance(cuda_homes, list):
        raise ValueError("cuda_homes must be a list")
    gpus = gpu_lines()
    env = environment(gpus, [str(h) for h in cuda_homes])
    signer = Signer()
    components = load(path)
    if mode == "probe":
        return {
            **assess(components, inputs, env, signer),
            "gpus": len(gpus),
            "rdma": rdma_ports(),  # noqa: F821 (hca_ports.py)
            "host_keys": host_keys(),
            "identity": identity(),
        }
    claims = request.get("claims") or {}
    keep = request.get("keep") or []
    if not isinstance(claims, dict) or not isinstance(keep, list):
        raise ValueError("claims must be a mapping and keep a list")
    claims = {str(k): [str(i) for i in v or []] for k, v in claims.items()}
    new = recorded(components, claims, [str(k) for k in keep], inputs, env, signer)
    return {"changed": write(path, new), "components": sorted(new)}


def main(argv: list[str]) -> int:
    try:
        answer = handle(json.loads(argv[1]) if len(argv) > 1 else {})
    except (ValueError, OSError) as err:
        print(json.dumps({"failed": True, "msg": f"node state: {err}"}))
        return 1
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
