"""What the horovod role needs to know about a node, read in one round trip (run by the node's
python3 with one JSON argument; prints one JSON object). Reads only; changes nothing."""

import glob
import json
import os
import subprocess
import sys


def run(argv):
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return 1, ""
    return done.returncode, done.stdout


def read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return ""


args = json.loads(sys.argv[1])
venv = args["venv"]

rc, out = run(["dpkg-query", "-W", "-f", "${db:Status-Status} ${Package}\n", *args["packages"]])
installed = {line.split()[1] for line in out.splitlines() if line.startswith("installed ")}

rc, out = run(["nvidia-smi", "-L"])
gpus = sum(1 for line in out.splitlines() if line.startswith("GPU ")) if rc == 0 else 0

nccl_home = args["nccl_home"]
if not nccl_home:
    rc, out = run(["ldconfig", "-p"])
    libs = [
        line.split("=>")[-1].strip()
        for line in out.splitlines()
        if line.strip().split(" ")[0] == "libnccl.so.2"
    ]
    nccl_home = os.path.dirname(os.path.dirname(libs[0])) if libs else ""

mpi_home = args["mpi_home"]
if not mpi_home:
    # The PATH every SSH session gets (pam_env reads /etc/environment), as mpirun's ranks see it.
    rc, out = run(["bash", "-c", "set -a; . /etc/environment; command -v mpicxx"])
    mpicxx = out.strip() if rc == 0 else ""
    mpi_home = os.path.dirname(os.path.dirname(mpicxx)) if mpicxx else ""

try:
    with open(args["stamp"], encoding="utf-8") as handle:
        stamp = json.load(handle)
except (OSError, ValueError):
    stamp = {}

dist_infos = os.path.join(venv, "lib", "python3*", "site-packages", "*.dist-info")
print(
    json.dumps(
        {
            "missing_packages": [p for p in args["packages"] if p not in installed],
            "venv": os.path.exists(os.path.join(venv, "bin", "python")),
            "packages_stamp": stamp if isinstance(stamp, dict) else {},
            "dists": sorted(
                os.path.basename(p)[: -len(".dist-info")] for p in glob.glob(dist_infos)
            ),
            "gpus": gpus,
            "nccl_home": nccl_home,
            "nccl_marker": read(os.path.join(nccl_home, ".mpictl-fingerprint"))
            if nccl_home
            else "",
            "mpi_home": mpi_home,
            "mpi_marker": read(os.path.join(mpi_home, ".mpictl-fingerprint")) if mpi_home else "",
        }
    )
)
