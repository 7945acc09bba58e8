#!/usr/bin/env bash
# bench/gpu_node.sh: the whole GPU path of mpictl on one real GPU machine (issue 15, part 3).
#
# Provisions the machine it runs on as a one-node cluster against itself (Ansible's local
# connection; no network needed), from what is carried in, then runs and keeps:
#   - OpenMPI CUDA-aware (openmpi_cuda: enabled), checked with ompi_info;
#   - NCCL, full kernel set, for the architecture nvidia-smi detects (nccl_cuda_archs empty);
#   - Horovod with NCCL operations built into the existing PyTorch environment (horovod_python:
#     the system python3 that has torch; nothing is downloaded for PyTorch);
#   - mpictl doctor, mpictl smoke --suite all (smoke requires ranks on >= 2 hosts, so on one
#     node its tests report "did not cross nodes": kept as evidence that every op ran), a
#     torch.distributed NCCL allreduce under `mpictl run --torch` with 1 rank, Horovod's
#     allreduce/broadcast/allgather on CUDA tensors, nccl-tests' all_reduce_perf (the nccl_tests
#     role's build, on PATH) when its source is carried in, and a torch timing of allreduce (algbw, busbw = algbw*2(n-1)/n, which is 0
#     with one rank) and, from the same run, the device memory bandwidth (device-to-device copy);
#   - the compile times of OpenMPI, mpi4py, NCCL (full) and Horovod (bench/build_times.py
#     --from-run on the provision's run), with a fresh artifact cache so everything compiles.
# Everything goes under OUT_DIR: summary.txt (one line per step: exit code, seconds), the logs
# of each step, vars.yml/inventory, and the JSON results.
#
# Usage (as root, from a clone of mpictl):
#   bash bench/gpu_node.sh --bundle CARRY_DIR [PYVER...]   on a connected machine: fill CARRY_DIR
#   bash bench/gpu_node.sh CARRY_DIR [OUT_DIR]             on the GPU machine (no network)
# CARRY_DIR holds:
#   wheels/        mpictl and its Python dependencies as wheels (the controller side)
#   node-wheels/   wheels of Horovod's run-time/build dependencies for the GPU machine's Python
#                  (numpy cffi cloudpickle psutil pyyaml packaging setuptools wheel); --bundle
#                  fetches them for PYVER (default: 3.10 3.11 3.12 3.13)
#   sources/       openmpi_*.orig.tar.xz, nvidia-nccl_*.orig.tar.gz, mpi4py-*.tar.gz,
#                  cython-*-py3-none-any.whl (mpi4py 4.x builds with it), horovod-*.tar.gz,
#                  nccl-tests-*.tar.gz (optional: the nccl_tests role builds it once)
#                  (scripts/fetch-test-sources.sh puts them in the cache)
#   debs/*.deb     (optional) OS packages the machine lacks (the roles install missing ones
#                  with apt, which needs a mirror): e.g. openssh-server, openssh-client,
#                  openssh-sftp-server, rsync, iperf3, sudo. They are unpacked, not installed:
#                  `dpkg-deb --fsys-tarfile | tar -x --keep-directory-symlink -C /` (never
#                  `dpkg -x DEB /`, which replaces the /lib link of a merged-/usr system and
#                  breaks the linker); bench/start_sshd.sh then does what their scripts would.
# Needs: nvidia-smi, nvcc (CUDA_HOME, default /usr/local/cuda), python3 with a CUDA torch
# (PYTHON, default the python3 on PATH), sshd listening on 127.0.0.1:22 (jobs log in to the
# head over SSH as the MPI user).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYVERS_DEFAULT="3.10 3.11 3.12 3.13"

die() { echo "gpu_node.sh: $*" >&2; exit 2; }

bundle() {
  local carry=$1; shift
  local pyvers=${*:-$PYVERS_DEFAULT}
  mkdir -p "$carry"/{wheels,node-wheels,sources} || die "cannot create $carry"
  python3 -m pip wheel --quiet -w "$carry/wheels" "$ROOT" || die "pip wheel of mpictl failed"
  local v
  for v in $pyvers; do
    python3 -m pip download --quiet --only-binary :all: --python-version "$v" \
      --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
      --dest "$carry/node-wheels" numpy 'cffi>=1.4.0' cloudpickle psutil pyyaml packaging \
      'setuptools>=77.0.3' wheel || die "pip download for Python $v failed"
  done
  local sources
  sources=$(bash "$ROOT/scripts/fetch-test-sources.sh" | tail -n 1) || die "fetch-test-sources failed"
  cp "$(dirname "$sources")"/{openmpi_,nvidia-nccl_,mpi4py-,cython-,horovod-,nccl-tests-}* "$carry/sources/" 2>/dev/null
  ls "$carry/sources"
  echo "bundle ready: $carry (add debs/ if wanted)"
}

if [ "${1:-}" = "--bundle" ]; then
  [ $# -ge 2 ] || die "usage: gpu_node.sh --bundle CARRY_DIR [PYVER...]"
  shift
  bundle "$@"
  exit $?
fi

[ $# -ge 1 ] || die "usage: gpu_node.sh CARRY_DIR [OUT_DIR]   (or --bundle CARRY_DIR)"
CARRY=$(cd "$1" && pwd) || die "no carry dir $1"
OUT=${2:-$ROOT/bench/out/gpu-node-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
[ "$(id -u)" -eq 0 ] || die "run as root (the roles install under /usr/local and /opt)"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
PYTHON=${PYTHON:-$(command -v python3)}
export MPICTL_STATE_DIR=$OUT/state MPICTL_CACHE_DIR=$OUT/cache
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"

# step NAME CMD...: run CMD with its output in OUT/NAME.log; one summary line; never stops.
step() {
  local name=$1; shift
  local start end rc
  start=$(date +%s)
  echo "== $name: $*" | tee -a "$OUT/steps.log"
  "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  end=$(date +%s)
  printf '%-24s rc=%-3s %6ss\n' "$name" "$rc" "$((end - start))" | tee -a "$SUMMARY"
  return "$rc"
}

file_of() { find "$CARRY/sources" -maxdepth 1 -name "$1" | sort | tail -n 1; }
version_of() { basename "$1" | sed -E "s/^$2([0-9][0-9.]*[0-9]).*$/\\1/"; }
sha_of() { sha256sum "$1" | cut -d' ' -f1; }

machine() {
  nvidia-smi
  nvidia-smi --query-gpu=index,name,compute_cap,memory.total,driver_version --format=csv
  "$CUDA_HOME/bin/nvcc" --version
  "$PYTHON" -c 'import torch, sys; print(sys.version); print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), torch.cuda.get_device_name(0))'
  nproc
  free -g
  cat /etc/os-release
}
step machine machine || die "this machine lacks nvidia-smi, nvcc at $CUDA_HOME or a CUDA torch in $PYTHON (see $OUT/machine.log)"

if compgen -G "$CARRY/debs/*.deb" >/dev/null; then
  unpack_debs() {
    local deb
    for deb in "$CARRY"/debs/*.deb; do
      echo "unpacking $deb"
      dpkg-deb --fsys-tarfile "$deb" | tar -x --keep-directory-symlink -C / || return 1
    done
  }
  step debs unpack_debs
fi
step sshd sh "$ROOT/bench/start_sshd.sh"

# mpictl itself, offline, in its own venv.
step mpictl-venv sh -c "python3 -m venv '$OUT/venv' && '$OUT/venv/bin/pip' install --quiet --no-index --find-links '$CARRY/wheels' mpictl" ||
  die "cannot install mpictl from $CARRY/wheels (see $OUT/mpictl-venv.log)"
MPICTL=$OUT/venv/bin/mpictl

openmpi=$(file_of 'openmpi_*.orig.tar.*')
nccl=$(file_of 'nvidia-nccl_*.orig.tar.gz')
mpi4py=$(file_of 'mpi4py-*.tar.gz')
cython=$(file_of 'cython-*-py3-none-any.whl')
horovod=$(file_of 'horovod-*.tar.gz')
nccl_tests=$(file_of 'nccl-tests-*.tar.gz')
for f in "$openmpi" "$nccl" "$mpi4py" "$horovod"; do
  [ -n "$f" ] || die "a source tarball is missing from $CARRY/sources (run --bundle)"
done
case "$(version_of "$mpi4py" mpi4py-)" in
  [4-9]*) [ -n "$cython" ] || die "mpi4py 4.x builds with Cython: no cython-*-py3-none-any.whl in $CARRY/sources (run --bundle)" ;;
esac

# The inventory as a user writes it for one GPU server: `mpictl init localhost` (Ansible's local
# connection, the machine's host name as the node name, mpi_address 127.0.0.1; the job side pins
# this machine's host key from /etc/ssh). A host name that is no DNS name gets one of ours.
mkdir -p "$OUT/inventory/group_vars"
# (init exits 1 and still writes the file when the machine is not ready: provision says why.)
step init "$MPICTL" init localhost -o "$OUT/inventory/hosts.yml"
[ -f "$OUT/inventory/hosts.yml" ] ||
  step init-named "$MPICTL" init gpu-node=localhost -o "$OUT/inventory/hosts.yml"
[ -f "$OUT/inventory/hosts.yml" ] || die "mpictl init localhost wrote no inventory (see $OUT/init.log)"
cat >"$OUT/inventory/group_vars/mpi_nodes.yml" <<EOF
ansible_python_interpreter: /usr/bin/python3
# in the inventory, not vars.yml: doctor, smoke and run read it there (they never see
# provision's -e)
horovod_python: "$PYTHON"
EOF

cat >"$OUT/vars.yml" <<EOF
openmpi_version: "$(version_of "$openmpi" openmpi_)"
openmpi_source_local: "$openmpi"
openmpi_source_sha256: "$(sha_of "$openmpi")"
mpi4py_version: "$(version_of "$mpi4py" mpi4py-)"
mpi4py_source_local: "$mpi4py"
mpi4py_source_sha256: "$(sha_of "$mpi4py")"
EOF
if [ -n "$cython" ]; then
  cat >>"$OUT/vars.yml" <<EOF
mpi4py_cython_version: "$(version_of "$cython" cython-)"
mpi4py_cython_local: "$cython"
mpi4py_cython_sha256: "$(sha_of "$cython")"
EOF
fi
cat >>"$OUT/vars.yml" <<EOF
nccl_version: "$(version_of "$nccl" nvidia-nccl_)"
nccl_source_local: "$nccl"
nccl_source_sha256: "$(sha_of "$nccl")"
horovod_version: "$(version_of "$horovod" horovod-)"
horovod_source_local: "$horovod"
horovod_source_sha256: "$(sha_of "$horovod")"
openmpi_cuda: enabled
openmpi_cuda_home: "$CUDA_HOME"
nccl_enabled: "true"
nccl_cuda_home: "$CUDA_HOME"
nccl_cuda_archs: []
nccl_make_args: []
horovod_gpu_operations: NCCL
nccl_tests_enabled: "$([ -n "$nccl_tests" ] && echo true || echo false)"
horovod_pip_download_args: ["--no-index", "--find-links", "$CARRY/node-wheels"]
slurm_enabled: false
EOF
if [ -n "$nccl_tests" ]; then
  cat >>"$OUT/vars.yml" <<EOF
nccl_tests_version: "$(version_of "$nccl_tests" nccl-tests-)"
nccl_tests_source_local: "$nccl_tests"
nccl_tests_source_sha256: "$(sha_of "$nccl_tests")"
EOF
fi

INV=(-i "$OUT/inventory")
step provision "$MPICTL" provision "${INV[@]}" -e "@$OUT/vars.yml"
run_dir=$(find "$MPICTL_STATE_DIR/runs" -mindepth 1 -maxdepth 1 -type d | sort | tail -n 1)
[ -n "$run_dir" ] && step build-times "$OUT/venv/bin/python" "$ROOT/bench/build_times.py" --from-run "$run_dir"
[ -f "$ROOT/bench/out/build_times_from_run.json" ] && cp "$ROOT/bench/out/build_times_from_run.json" "$OUT/"
step provision-again "$MPICTL" provision "${INV[@]}" -e "@$OUT/vars.yml"

step ompi-cuda sh -c '. /etc/environment; export PATH; ompi_info --parsable --all | grep mpi_built_with_cuda_support:value | grep -q ":true$" && echo CUDA-aware'
step nccl-archs sh -c "python3 '$ROOT/roles/nccl/files/cuda_archs.py' /usr/local/nccl-*/lib/libnccl.so.*.*.*"
step horovod-build "$PYTHON" -m horovod.runner.launch --check-build
step doctor "$MPICTL" doctor "${INV[@]}" --json
step smoke "$MPICTL" smoke "${INV[@]}" --suite all --json

mkdir -p "$OUT/work"
cat >"$OUT/work/gpu_checks.py" <<'EOF'
"""torch.distributed NCCL allreduce (correctness), its timing over sizes (algbw/busbw) and the
device memory bandwidth, in one run; one JSON line per result."""
import json
import sys

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank, size = dist.get_rank(), dist.get_world_size()
dev = torch.device("cuda", 0)  # mpictl-torch-env pins this rank's GPU as device 0
torch.cuda.set_device(dev)
x = torch.full((1 << 20,), float(rank + 1), device=dev)
dist.all_reduce(x)
want = size * (size + 1) / 2
print(json.dumps({"check": "allreduce", "rank": rank, "size": size, "ok": bool((x == want).all())}))


def timed(fn, iters):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / 1000 / iters


for shift in range(3, 31, 3):
    nbytes = 1 << shift
    t = torch.ones(max(nbytes // 4, 1), dtype=torch.float32, device=dev)
    sec = timed(lambda: dist.all_reduce(t), 20 if nbytes < (1 << 26) else 5)
    algbw = nbytes / sec / 1e9
    print(json.dumps({"check": "allreduce_time", "bytes": nbytes, "time_us": round(sec * 1e6, 2),
                      "algbw_GBps": round(algbw, 3),
                      "busbw_GBps": round(algbw * 2 * (size - 1) / size, 3)}))

n = 4 << 30
a = torch.empty(n, dtype=torch.uint8, device=dev)
b = torch.empty_like(a)
sec = timed(lambda: b.copy_(a), 20)
print(json.dumps({"check": "memory_bandwidth", "bytes": n, "read_write_GBps": round(2 * n / sec / 1e9, 1),
                  "device": torch.cuda.get_device_name(dev)}))
dist.destroy_process_group()
sys.exit(0)
EOF
cat >"$OUT/work/horovod_gpu.py" <<'EOF'
"""Horovod's allreduce, broadcast and allgather on CUDA tensors (NCCL operations)."""
import json

import horovod.torch as hvd
import torch

hvd.init()
torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
r, n = hvd.rank(), hvd.size()
s = hvd.allreduce(torch.full((8,), float(r), device="cuda"), op=hvd.Sum)
b = hvd.broadcast(torch.arange(8, dtype=torch.float32, device="cuda") * (r + 1), root_rank=0)
g = hvd.allgather(torch.tensor([[float(r)]], device="cuda"))
print(json.dumps({"rank": r, "size": n, "device": str(s.device),
                  "allreduce": s[0].item() == n * (n - 1) / 2,
                  "broadcast": b.tolist() == [float(i) for i in range(8)],
                  "allgather": g.flatten().tolist() == [float(i) for i in range(n)]}))
EOF
chmod -R a+rX "$OUT/work"
step torch-nccl "$MPICTL" run "${INV[@]}" -np 1 --torch --workdir "$OUT/work" -- "$PYTHON" gpu_checks.py
step horovod-gpu "$MPICTL" run "${INV[@]}" -np 1 --workdir "$OUT/work" -- "$PYTHON" horovod_gpu.py

if [ -n "$nccl_tests" ]; then
  # the nccl_tests role's build, found on PATH as every job finds it
  step all-reduce-perf "$MPICTL" run "${INV[@]}" -np 1 -- all_reduce_perf -b 8 -e 4G -f 2 -g 1
  step sendrecv-perf "$MPICTL" run "${INV[@]}" -np 1 -- sendrecv_perf -b 8 -e 1G -f 4 -g 1 -c 1
fi

# results.txt/results.json: the figures, read from the step logs without mpirun's rank tags
"$OUT/venv/bin/python" "$ROOT/bench/gpu_results.py" "$OUT"
echo "steps: $SUMMARY"
cat "$SUMMARY" "$OUT/results.txt"
echo "everything is under $OUT"
