"""What ``mpictl doctor`` needs to know about one node, as one JSON object.

Runs on every node with its system python3, as the MPI user, over the same kind of
non-interactive SSH session that mpirun uses: ``python3 - SPEC_JSON``. SPEC is
``{"targets": {name: address}, "hostfile": path, "venv_python": path, "venv_program": source,
"tools": [paths]}``. Reports PATH and LD_LIBRARY_PATH of this session, where mpirun and prted
are, PATH, LD_LIBRARY_PATH and mpirun of the login shells ``bash -lc`` and ``sh -lc`` started
from it (``login``: what ``su -``, ``sudo -i`` and an interactive login see), the versions of
OpenMPI, NCCL and (through ``venv_program``, run with ``venv_python``) the venv's packages, the
build-fingerprint markers under /opt and beside the libnccl the linker finds, cores, GPUs, IPv4
addresses and the default route's interface, TCP reachability of every target's SSH port, the
hostfile's text, which tools exist and the MPI user's public SSH keys (its own, and those its
authorized_keys admits). With ``"slurm": true`` in SPEC also whether munge and
slurmd run here and a fresh munge credential (the head decodes it: the same key on both nodes).
Standard library only.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from typing import Any

# rdma_ports(root): the node's RDMA ports in sysfs, as fabric and the node state read them
# mpictl-include: hca_ports.py


def run(cmd: list[str], timeout: float = 60) -> tuple[int, str, str]:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout.strip(), p.stderr.strip()
    except Exception as exc:  # noqa: BLE001 - a command that cannot run is reported, not raised
        return 127, "", str(exc)


def read_marker(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read().strip()[:200]
    except OSError as exc:
        return f"unreadable: {exc}"


def os_release(text: str | None) -> str:
    """The node's OS release as its builds are keyed (roles/build_once): ``debian bookworm``
    (ID and VERSION_CODENAME of /etc/os-release, else VERSION_ID), or ``unknown``."""
    fields = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip().strip("\"'")
    name = fields.get("ID", "")
    release = fields.get("VERSION_CODENAME") or fields.get("VERSION_ID", "")
    return f"{name} {release}".strip() or "unknown"


def markers(root: str = "/opt", depth: int = 4) -> dict[str, str]:
    """Build-fingerprint markers (``.mpictl*`` files) up to ``depth`` levels below ``root``."""
    out = {}
    for level in range(1, depth + 1):
        for path in glob.glob(root + "/*" * level + "/.mpictl*"):
            if os.path.isfile(path):
                out[path] = read_marker(path)
    return out


def openmpi(versions: dict[str, Any], out: dict[str, Any]) -> None:
    mpirun = shutil.which("mpirun")
    out["mpirun"], out["prted"] = mpirun, shutil.which("prted")
    if mpirun:
        rc, so, se = run([mpirun, "--version"])
        versions["openmpi"] = (
            so.splitlines()[0] if rc == 0 and so else "error: " + (se or so)[-200:]
        )
        out["openmpi_prefix"] = os.path.dirname(os.path.dirname(os.path.realpath(mpirun)))


LOGIN_MARK = "@mpictl-login@"  # what the login shell prints after its profile scripts ran
LOGIN_REPORT = (
    f'printf "%s\\n%s\\n%s\\n" {LOGIN_MARK} "$PATH" "${{LD_LIBRARY_PATH:-}}"; '
    "command -v mpirun || true"
)


def login_shell(shell: str, timeout: float = 20) -> dict[str, Any]:
    """PATH, LD_LIBRARY_PATH and mpirun of ``<shell> -lc`` (its /etc/profile, profile.d and
    ~/.profile ran; what they print themselves comes before the mark and is ignored)."""
    try:
        p = subprocess.run(
            [shell, "-lc", LOGIN_REPORT],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return {"error": f"{shell} -lc: {exc}"}
    lines = p.stdout.splitlines()
    if LOGIN_MARK not in lines:
        why = (p.stderr or p.stdout).strip()[-200:]
        return {"error": f"{shell} -lc exited {p.returncode}: {why}"}
    rest = lines[len(lines) - lines[::-1].index(LOGIN_MARK) :] + ["", "", ""]
    return {"path": rest[0], "ld_library_path": rest[1], "mpirun": rest[2] or None, "error": ""}


def venv(spec: dict[str, Any], versions: dict[str, Any]) -> bool:
    py = spec["venv_python"]
    if not os.path.exists(py):
        return False
    rc, so, se = run([py, "-c", spec["venv_program"]])
    try:
        versions.update(json.loads(so.splitlines()[-1]))
    except (ValueError, IndexError):
        versions["mpi4py"] = "error: " + (se or so)[-200:]
    # Horovod and its frameworks in another environment (horovod_python): their versions are that
    # one's.
    other = spec.get("frameworks_python") or ""
    if other and other != py:
        rc, so, se = run([other, "-c", spec["venv_program"]])
        try:
            found = json.loads(so.splitlines()[-1])
        except (ValueError, IndexError):
            found = {}
        versions.update({k: found.get(k) for k in ("horovod", "torch", "tensorflow")})
    return True


def nccl(ldconfig_output: str, versions: dict[str, Any], found: dict[str, str]) -> None:
    """The libnccl the linker finds (from ``ldconfig -p``), and the marker of its install tree."""
    for line in ldconfig_output.splitlines():
        if "libnccl.so" in line and "=>" in line:
            real = os.path.realpath(line.split("=>")[-1].strip())
            m = re.search(r"libnccl\.so\.([\d.]+)$", real)
            versions["nccl"] = m.group(1) if m else real
            marker = os.path.join(os.path.dirname(os.path.dirname(real)), ".mpictl-fingerprint")
            if os.path.isfile(marker):
                found[marker] = read_marker(marker)
            return


def rdma(ldconfig_output: str, with_ucx: bool) -> dict[str, Any]:
    """The node's RDMA layer: its HCA ports from sysfs (``port DEV N
    STATE|RATE|LINK_LAYER|HCA_TYPE`` lines, as fabric's node probe prints them), rdma-core's
    verbs library, GPUDirect RDMA (nvidia_peermem loaded; the open kernel module with a kernel
    that has dma-buf), and what UCX and OpenMPI see (only where the node has ports, or where
    UCX is the transport)."""
    driver = read_text("/proc/driver/nvidia/version") or ""
    out: dict[str, Any] = {
        "ports": rdma_ports(),  # noqa: F821 (hca_ports.py)
        "verbs": "libibverbs.so.1" in ldconfig_output,
        "peermem": os.path.isdir("/sys/module/nvidia_peermem"),
        "open_kernel_module": "Open Kernel Module" in driver,
        "kernel": os.uname().release,
    }
    if not out["ports"] and not with_ucx:
        return out
    ucx_info = shutil.which("ucx_info")
    if ucx_info:
        rc, so, _ = run([ucx_info, "-d"])
        out["ucx_devices"] = sorted(
            {line.split(":", 1)[1].strip() for line in so.splitlines() if "Device:" in line}
        )
    else:
        out["ucx_devices"] = None
    ompi_info = shutil.which("ompi_info")
    if ompi_info:
        rc, so, _ = run([ompi_info])
        out["pml_ucx"] = bool(re.search(r"MCA pml:\s*ucx", so))
    return out


def device_path() -> dict[str, Any]:
    """What carries MPI's device (GPU) buffers on a GPU node: OpenMPI's coll/ucc (ompi_info),
    UCC's cuda transport (its component library beside the ucc_info on PATH) and UCX's CUDA
    transports (``ucx_info -d`` lists cuda_ipc)."""
    out: dict[str, Any] = {"coll_ucc": False, "ucc_cuda": False, "ucx_cuda": False}
    if shutil.which("ompi_info"):
        out["coll_ucc"] = bool(re.search(r"MCA coll:\s*ucc", run(["ompi_info"])[1]))
    ucc_info = shutil.which("ucc_info")
    if ucc_info:
        prefix = os.path.dirname(os.path.dirname(os.path.realpath(ucc_info)))
        out["ucc_cuda"] = os.path.exists(os.path.join(prefix, "lib", "ucc", "libucc_tl_cuda.so"))
    if shutil.which("ucx_info"):
        out["ucx_cuda"] = "cuda_ipc" in run(["ucx_info", "-d"])[1]
    return out


def gpus() -> int:
    if shutil.which("nvidia-smi"):
        rc, so, _ = run(["nvidia-smi", "-L"])
        return sum(1 for line in so.splitlines() if line.startswith("GPU ")) if rc == 0 else 0
    return len(glob.glob("/dev/nvidia[0-9]*"))


def ipv4_addresses(ip_output: str) -> list[list[str]]:
    """[interface, address/prefix] pairs from ``ip -o -4 addr show``."""
    nets = []
    for line in ip_output.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] == "inet":
            nets.append([parts[1], parts[3]])
    return nets


def default_interface(route_output: str) -> str | None:
    """The interface of the default route, from ``ip -o -4 route show default``."""
    for line in route_output.splitlines():
        parts = line.split()
        if "dev" in parts[:-1]:
            return parts[parts.index("dev") + 1]
    return None


def reach(targets: dict[str, str], port: int = 22) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, addr in targets.items():
        try:
            ip = socket.gethostbyname(addr)
        except OSError as exc:
            out[name] = {"ip": None, "tcp": False, "error": f"cannot resolve {addr}: {exc}"}
            continue
        try:
            socket.create_connection((ip, port), timeout=3).close()
            out[name] = {"ip": ip, "tcp": True, "error": ""}
        except OSError as exc:
            out[name] = {"ip": ip, "tcp": False, "error": f"{ip}:{port}: {exc}"}
    return out


def read_text(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return None


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 0


def slurm_node() -> dict[str, Any]:
    """munge and slurmd on this node (systemd's view) and a munge credential to decode."""
    out: dict[str, Any] = {}
    for unit in ("munge", "slurmd"):
        out[unit] = run(["systemctl", "is-active", unit], timeout=10)[1] or "unknown"
    rc, cred, err = run(["munge", "-n"], timeout=10)
    out["credential"] = cred if rc == 0 else ""
    out["munge_error"] = "" if rc == 0 else (err or f"munge exit {rc}")
    return out


def mount_of(path: str, mounts: str) -> list[str]:
    """[mount point, file system type, source] of the mount that holds ``path`` (/proc/mounts)."""
    best = ["", "", ""]
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best[0]):
            best = [point, fields[2], fields[0]]
    return best


def shared(directory: str, token_file: str) -> dict[str, Any]:
    """mpi_shared_dir as this node sees it: the token the head wrote there (the same filesystem
    shows it), whether the MPI user may write there, and the mount that holds it."""
    out: dict[str, Any] = {"dir": os.path.isdir(directory)}
    if not out["dir"]:
        return out
    out["token"] = read_text(os.path.join(directory, token_file))
    out["writable"] = os.access(directory, os.W_OK | os.X_OK)
    out["mount"] = mount_of(os.path.realpath(directory), read_text("/proc/mounts") or "")
    return out


KEY_TYPE = re.compile(r"^(ssh-(ed25519|rsa|dss)|ecdsa-sha2-\S+|sk-\S+)$")


def public_keys(text: str) -> list[str]:
    """The ``TYPE BASE64`` of every key line of an authorized_keys or .pub text (options before
    the type and comments after the key left out)."""
    keys = []
    for line in text.splitlines():
        fields = line.split()
        for i, field in enumerate(fields[:-1]):
            if KEY_TYPE.match(field):
                keys.append(f"{field} {fields[i + 1]}")
                break
    return keys


def ssh_keys(home: str) -> dict[str, Any]:
    """The MPI user's own public key (the one ranks started here log in to other nodes with; the
    ssh_mesh role generates it as ~/.ssh/id_ed25519) and the keys its authorized_keys admits.
    Public halves only."""
    own = public_keys(read_text(os.path.join(home, ".ssh", "id_ed25519.pub")) or "")
    authorized = public_keys(read_text(os.path.join(home, ".ssh", "authorized_keys")) or "")
    return {"own": own[0] if own else None, "authorized": authorized}


def containers_node(timeout: float = 90) -> dict[str, Any]:
    """enroot's and pyxis's versions on the node (None: missing), and whether a container starts
    as this user: an image of a marker and mount points (``/usr`` from the node) unpacked and
    started; "ok" or what went wrong."""
    out: dict[str, Any] = {}
    rc, so, _ = run(["enroot", "version"])
    out["enroot"] = so.strip() if rc == 0 else None
    conf = read_text("/etc/slurm/plugstack.conf.d/pyxis.conf") or ""
    m = re.search(r"(/\S*/pyxis/([^/\s]+)/lib/slurm/spank_pyxis\.so)", conf)
    out["pyxis"] = m.group(2) if m and os.path.exists(m.group(1)) else None
    if out["enroot"] is None:
        out["start"] = "no enroot on the PATH"
        return out
    name = f"mpictl-doctor-{os.getpid()}"
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "root")
        for sub in ("etc", "usr", "proc", "sys", "dev", "tmp"):
            os.makedirs(os.path.join(root, sub))
        for link in ("bin", "lib", "lib64", "sbin"):
            os.symlink(f"usr/{link}", os.path.join(root, link))
        with open(os.path.join(root, "etc", "mpictl-doctor"), "w") as fh:
            fh.write(name + "\n")
        image = os.path.join(tmp, "doctor.sqsh")
        steps = [
            ["mksquashfs", root, image, "-quiet", "-noappend", "-no-progress"],
            ["enroot", "create", "-f", "-n", name, image],
            ["enroot", "start", "-m", "/usr:/usr", name, "cat", "/etc/mpictl-doctor"],
        ]
        out["start"] = "ok"
        for argv in steps:
            rc, so, se = run(argv, timeout=timeout)
            if rc != 0 or (argv[1] == "start" and so.strip() != name):
                lines = [line for line in (se or so).splitlines() if line.strip()]
                out["start"] = f"{' '.join(argv[:2])}: " + (lines[-1] if lines else f"exit {rc}")
                break
        run(["enroot", "remove", "-f", name])
    return out


def probe(spec: dict[str, Any]) -> dict[str, Any]:
    versions: dict[str, Any] = {}
    out: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "path": os.environ.get("PATH", ""),
        "ld_library_path": os.environ.get("LD_LIBRARY_PATH", ""),
        "versions": versions,
        "os": os_release(read_text("/etc/os-release")),
    }
    openmpi(versions, out)
    out["login"] = {shell: login_shell(shell) for shell in ("bash", "sh")}
    out["markers"] = markers()
    out["venv"] = venv(spec, versions)
    ldconfig = run(["/sbin/ldconfig", "-p"])[1]
    nccl(ldconfig, versions, out["markers"])
    out["rdma"] = rdma(ldconfig, bool(spec.get("ucx")))
    out["cores"] = cores()
    out["gpus"] = gpus()
    if out["gpus"]:
        out["device_path"] = device_path()
    out["ipv4"] = ipv4_addresses(run(["ip", "-o", "-4", "addr", "show"])[1])
    out["default_interface"] = default_interface(
        run(["ip", "-o", "-4", "route", "show", "default"])[1]
    )
    out["reach"] = reach(spec["targets"])
    out["hostfile"] = read_text(spec["hostfile"])
    out["tools"] = {p: os.path.exists(p) for p in spec["tools"]}
    out["ssh_keys"] = ssh_keys(os.path.expanduser("~"))
    if spec.get("slurm"):
        out["slurm"] = slurm_node()
    if spec.get("shared_dir"):
        out["shared"] = shared(spec["shared_dir"], spec["shared_token"])
    if spec.get("containers"):
        out["containers"] = containers_node()
    return out


if __name__ == "__main__":
    print(json.dumps(probe(json.loads(sys.argv[1]))))
