#!/usr/bin/env bash
# bench/gpu_node.sh: the whole GPU path of mpictl on one real GPU machine (issues 15, 24, 25).
#
# Provisions the machine it runs on as a one-node cluster against itself (Ansible's local
# connection; no network needed), from what is carried in, in two phases so that the figures
# that matter most come first when device time is short:
#   A. UCX and UCC built with CUDA, OpenMPI CUDA-aware on them, the job tools; then
#      MPI on device buffers (bench/device_buffers.c, 2 ranks on the GPU through `mpictl run`):
#      mpictl's own choice, pml ucx, and the pml ob1 baseline without UCC, side by side;
#      ompi_info, ucx_info, doctor, and a torch.distributed NCCL allreduce under
#      `mpictl run --torch` (torch's NCCL) with its timing (algbw, busbw = algbw*2(n-1)/n, 0 with
#      one rank) and the device memory bandwidth (device-to-device copy);
#   B. mpi4py; NCCL for the architecture nvidia-smi detects (nccl_cuda_archs empty; GPU_NODE_NCCL_FUNCS
#      limits the kernels, e.g. "AllReduce Sum f32 * *|AllGather * *|Broadcast * *|SendRecv"),
#      nccl-tests when its source is carried, Horovod with NCCL operations built into the
#      existing PyTorch environment (horovod_python: the python3 that has torch), then
#      horovodrun --check-build, Horovod on CUDA tensors, all_reduce_perf and sendrecv_perf, smoke
#      --suite all (one node: its tests say "did not cross nodes", kept as evidence every op ran),
#      the no-change re-run, and the compile times (bench/build_times.py --from-run) of both
#      provisions (a fresh artifact cache: everything compiles).
# Everything goes under OUT_DIR: summary.txt (one line per step: exit code, seconds), the logs
# of each step, vars.yml/inventory, results.txt and results.json (rewritten after each phase).
# GPU_NODE_PHASES=A stops after phase A; GPU_NODE_PHASES=B runs phase B alone, on a fresh machine
# with phase A's artifacts imported (GPU_NODE_IMPORT, below). bench/gpu_window.sh runs this inside
# a lent machine's short window.
#
# Usage (as root, from a clone of mpictl):
#   bash bench/gpu_node.sh --bundle CARRY_DIR [PYVER...]   on a connected machine: fill CARRY_DIR
#   bash bench/gpu_node.sh CARRY_DIR [OUT_DIR]             on the GPU machine (no network)
# CARRY_DIR holds:
#   wheels/        mpictl and its Python dependencies as wheels (the controller side), for this
#                  machine's Python and, for the compiled ones, each PYVER
#   node-wheels/   wheels of Horovod's run-time/build dependencies for the GPU machine's Python
#                  (numpy cffi cloudpickle psutil pyyaml packaging setuptools wheel); --bundle
#                  fetches them for PYVER (default: 3.10 3.11 3.12 3.13)
#   sources/       openmpi_*.orig.tar.xz, nvidia-nccl_*.orig.tar.gz, mpi4py-*.tar.gz,
#                  cython-*-py3-none-any.whl (mpi4py 4.x builds with it), horovod-*.tar.gz,
#                  ucx-*.tar.*, ucc-*.tar.gz, nccl-tests-*.tar.gz (optional)
#                  (scripts/fetch-test-sources.sh puts them in the cache)
#   cuda/          (optional) NVIDIA's nvidia-nvml-dev wheel: its nvml.h goes into the toolkit
#                  when the machine's CUDA lacks it (UCX's and UCC's CUDA builds need it; it is
#                  the toolkit's cuda-nvml-dev part, which some images leave out)
#   debs/*.deb     (optional) OS packages the machine lacks: openssh, rsync, iperf3, iproute2,
#                  the autotools (UCX's and UCC's sources have no configure) and their libraries;
#                  --bundle fetches them with apt-get download where it can. They are unpacked,
#                  not installed: `dpkg-deb --fsys-tarfile | tar -x --keep-directory-symlink -C /`
#                  (never `dpkg -x DEB /`, which replaces the /lib link of a merged-/usr system
#                  and breaks the linker); a library package only where the machine lacks one of
#                  its libraries, a program package only where dpkg does not know it (the
#                  machine's own newer ones stay); bench/start_sshd.sh then does what their
#                  scripts would.
# The machine has no package mirror, so the roles' OS package lists are emptied (*_packages: [])
# and step "tools" records which build tools the machine has (GPU_NODE_APT=1 keeps the lists).
# Needs: nvidia-smi, nvcc (CUDA_HOME, default /usr/local/cuda), python3 with a CUDA torch
# (PYTHON, default the python3 on PATH), sshd listening on 127.0.0.1:22 (jobs log in to the
# head over SSH as the MPI user).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYVERS_DEFAULT="3.10 3.11 3.12 3.13"
# What a bare GPU image tends to lack (bookworm's packages work on Ubuntu 24.04 when unpacked).
DEBS_DEFAULT="openssh-server openssh-client openssh-sftp-server rsync iperf3 libiperf0 libsctp1
iproute2 libbpf1 libmnl0 libelf1 libcap2 libbsd0 libmd0 libxxhash0 liblz4-1 libpopt0 libwrap0 libnsl2
libtirpc3 libtirpc-common libaudit1 libcap-ng0 libpam0g libsystemd0 libselinux1 libpcre2-8-0 libgssapi-krb5-2 libkrb5-3
libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2 libcrypt1 libacl1 libzstd1 m4 autoconf
automake autotools-dev libtool"

die() { echo "gpu_node.sh: $*" >&2; exit 2; }

# newest SOURCES/PATTERN of the cache (one of each: mpi4py 3 and 4 both live there)
newest() { find "$1" -maxdepth 1 -name "$2" | sort -V | tail -n 1; }

bundle() {
  local carry=$1; shift
  local pyvers=${*:-$PYVERS_DEFAULT}
  mkdir -p "$carry"/{wheels,node-wheels,sources,cuda,debs} || die "cannot create $carry"
  python3 -m pip wheel --quiet -w "$carry/wheels" "$ROOT" || die "pip wheel of mpictl failed"
  local v own
  own=$(find "$carry/wheels" -maxdepth 1 -name 'mpictl-*.whl' | sort -V | tail -n 1)
  for v in $pyvers; do
    # the controller side on the GPU machine's Python: its compiled dependencies as binaries
    python3 -m pip download --quiet --only-binary :all: --python-version "$v" \
      --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
      --dest "$carry/wheels" "$own" || die "pip download of mpictl's dependencies for Python $v failed"
    python3 -m pip download --quiet --only-binary :all: --python-version "$v" \
      --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
      --dest "$carry/node-wheels" numpy 'cffi>=1.4.0' cloudpickle psutil pyyaml packaging \
      'setuptools>=77.0.3' wheel || die "pip download for Python $v failed"
  done
  python3 -m pip download --quiet --no-deps --only-binary :all: --dest "$carry/cuda" \
    nvidia-nvml-dev || echo "gpu_node.sh: no nvidia-nvml-dev wheel (carry nvml.h if the GPU machine lacks it)"
  local sources pattern
  sources=$(bash "$ROOT/scripts/fetch-test-sources.sh" | tail -n 1) || die "fetch-test-sources failed"
  for pattern in 'openmpi_*' 'nvidia-nccl_*' 'mpi4py-*' 'cython-*' 'horovod-*' 'nccl-tests-*' \
    'ucx-*' 'ucc-*'; do
    cp "$(newest "$(dirname "$sources")" "$pattern")" "$carry/sources/" 2>/dev/null
  done
  ls "$carry/sources"
  if command -v apt-get >/dev/null; then
    local deb
    for deb in $DEBS_DEFAULT; do  # one at a time: a name this release lacks skips only itself
      (cd "$carry/debs" && apt-get download "$deb") >/dev/null 2>&1 ||
        echo "gpu_node.sh: apt-get download $deb failed (add its .deb by hand if the GPU machine lacks it)"
    done
  fi
  du -sh "$carry"
  echo "bundle ready: $carry"
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
PHASES=${GPU_NODE_PHASES:-AB}
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

file_of() { newest "$CARRY/sources" "$1"; }
version_of() { basename "$1" | sed -E "s/^$2([0-9][0-9.]*[0-9]).*$/\\1/"; }
sha_of() { sha256sum "$1" | cut -d' ' -f1; }

# machine: what the machine is; fails (before anything is changed) without a GPU, nvcc or torch.
machine() {
  nproc
  free -g
  cat /etc/os-release
  nvidia-smi &&
    nvidia-smi --query-gpu=index,name,compute_cap,memory.total,driver_version --format=csv &&
    "$CUDA_HOME/bin/nvcc" --version &&
    "$PYTHON" -c 'import torch, sys; print(sys.version); print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), torch.cuda.get_device_name(0))'
}
step machine machine || die "this machine lacks nvidia-smi, nvcc at $CUDA_HOME or a CUDA torch in $PYTHON (see $OUT/machine.log)"

# unpack_debs: each carried .deb the machine needs (see the header), unpacked into /.
unpack_debs() {
  local deb pkg libs missing so progs known
  known=$(PATH="$PATH:/sbin:/usr/sbin" ldconfig -p | awk '{print $1}')
  for deb in "$CARRY"/debs/*.deb; do
    pkg=$(dpkg-deb -f "$deb" Package)
    # a library package is one that ships shared libraries by soname (libpam0g, libnsl2, ...)
    libs=$(dpkg-deb -c "$deb" | awk '{ print ($(NF - 1) == "->") ? $(NF - 2) : $NF }' |
      grep -E '/lib[^/]*\.so\.[0-9]+$' | xargs -r -n1 basename)
    case ${libs:+library} in
      library)
        missing=
        for so in $libs; do
          printf '%s\n' "$known" | grep -qxF "$so" || missing="$missing $so"
        done
        if [ -z "$missing" ]; then echo "kept the machine's own $pkg ($libs)"; continue; fi
        echo "unpacking $pkg (missing:$missing)"
        ;;
      *)
        # (dpkg may call a package installed whose programs an image stripped: look at them)
        progs=$(dpkg-deb -c "$deb" | awk '{ print ($(NF - 1) == "->") ? $(NF - 2) : $NF }' |
          grep -E '^\./(usr/)?s?bin/[^/]+$' | sed 's|^\.||')
        missing=
        for so in $progs; do [ -e "$so" ] || missing="$missing $so"; done
        if [ -z "$missing" ] &&
          [ "$(dpkg-query -W -f '${db:Status-Status}' "$pkg" 2>/dev/null)" = installed ]; then
          echo "kept the machine's own $pkg"; continue
        fi
        echo "unpacking $pkg${missing:+ (missing:$missing)}"
        ;;
    esac
    dpkg-deb --fsys-tarfile "$deb" | tar -x --keep-directory-symlink -C / || return 1
  done
  PATH="$PATH:/sbin:/usr/sbin" ldconfig
}
if compgen -G "$CARRY/debs/*.deb" >/dev/null; then
  step debs unpack_debs
fi
step sshd sh "$ROOT/bench/start_sshd.sh"

# The toolkit's NVML header (cuda-nvml-dev), from NVIDIA's wheel, where the machine lacks it.
nvml_header() {
  local whl include
  include=$(readlink -f "$CUDA_HOME/include")
  if [ -e "$include/nvml.h" ]; then echo "$include/nvml.h: the machine's own"; return 0; fi
  whl=$(newest "$CARRY/cuda" 'nvidia_nvml_dev*.whl')
  [ -n "$whl" ] || { echo "no nvml.h and none carried: UCX and UCC build without CUDA"; return 1; }
  "$PYTHON" - "$whl" "$include/nvml.h" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as whl:
    name = next(n for n in whl.namelist() if n.endswith("include/nvml.h"))
    open(sys.argv[2], "wb").write(whl.read(name))
print(f"{sys.argv[2]}: from {sys.argv[1]}")
EOF
}
step nvml-header nvml_header

tools() {
  local t
  for t in gcc g++ make perl patch m4 autoconf automake libtoolize cmake xz bzip2 ip ssh sshd \
    ssh-keygen rsync iperf3; do
    printf '%-12s %s\n' "$t" "$(PATH="$PATH:/sbin:/usr/sbin" command -v "$t" || echo MISSING)"
  done
  ! grep -q MISSING <<<"$(for t in gcc g++ make perl patch autoconf automake libtoolize ip ssh-keygen rsync; do command -v "$t" >/dev/null || echo MISSING; done)"
}
step tools tools

# mpictl itself, offline, in its own venv. The venv also sees the machine Python's packages (a
# .pth line after its own): the carry then holds only the wheels that Python lacks (a GPU image
# has PyYAML, Jinja2, typer and rich; it lacks Ansible), which keeps the carry small.
mpictl_venv() {
  local site
  python3 -m venv "$OUT/venv" || return 1
  site=$("$OUT/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') &&
    "$PYTHON" -c 'import site; print("\n".join(site.getsitepackages()))' >"$site/_machine_python.pth" &&
    "$OUT/venv/bin/pip" install --quiet --no-index --find-links "$CARRY/wheels" mpictl
}
step mpictl-venv mpictl_venv ||
  die "cannot install mpictl from $CARRY/wheels (see $OUT/mpictl-venv.log)"
MPICTL=$OUT/venv/bin/mpictl

openmpi=$(file_of 'openmpi_*.orig.tar.*')
nccl=$(file_of 'nvidia-nccl_*.orig.tar.gz')
mpi4py=$(file_of 'mpi4py-*.tar.gz')
cython=$(file_of 'cython-*-py3-none-any.whl')
horovod=$(file_of 'horovod-*.tar.gz')
nccl_tests=$(file_of 'nccl-tests-*.tar.gz')
ucx=$(file_of 'ucx-*.tar.*')
ucc=$(file_of 'ucc-*.tar.gz')
for f in "$nccl" "$mpi4py" "$horovod"; do
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

# UCX and UCC compile their CUDA code for the GPUs here only (their defaults: every
# architecture the toolkit knows, minutes of nvcc).
gencode=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | tr -d ' .' | sort -u |
  sed 's/.*/-gencode=arch=compute_&,code=sm_&/' | paste -sd' ')
# GPU_NODE_IMPORT: an archive of `mpictl cache export` from a machine of the same OS, compiler and
# CUDA (phase A's, as gpu_window.sh brings it back: FILE or its parts FILE.part-aa, -ab, ...),
# imported before any provision: what it holds installs without compiling and without its
# source, so OpenMPI's, UCX's and UCC's sources may stay out of CARRY/sources (their versions and
# sha256s, which the fingerprints hold, are read from the archive).
IMPORT=
if [ -n "${GPU_NODE_IMPORT:-}" ]; then
  IMPORT=$GPU_NODE_IMPORT
  if [ ! -f "$IMPORT" ] && compgen -G "$IMPORT.part-*" >/dev/null; then
    cat "$IMPORT".part-* >"$OUT/import.tar.gz" && IMPORT=$OUT/import.tar.gz
  fi
  # (no -i: a fresh machine has no cached facts yet; an artifact of another OS, compiler or
  # CUDA is never picked, its fingerprint holds them)
  step cache-import "$MPICTL" cache import "$IMPORT" ||
    die "mpictl cache import $GPU_NODE_IMPORT failed (see $OUT/cache-import.log)"
fi

# imported ROLE: "VERSION SHA256" of the source the imported artifact of ROLE was built from
imported() {
  [ -n "$IMPORT" ] || return 1
  "$OUT/venv/bin/python" - "$IMPORT" "$1" <<'PY'
import json
import sys
import tarfile

with tarfile.open(sys.argv[1]) as archive:
    manifest = json.load(archive.extractfile("mpictl-cache.json"))
for artifact in manifest["artifacts"]:
    if artifact["component"] == sys.argv[2]:
        inputs = artifact["meta"]["inputs"]
        print(inputs["version"], inputs["source_sha256"])
        break
else:
    sys.exit(1)
PY
}

# source_vars ROLE FILE PREFIX: ROLE's version, source and sha256 from the carried FILE, else
# from its imported artifact
source_vars() {
  local role=$1 file=$2 prefix=$3 got
  if [ -n "$file" ]; then
    printf '%s_version: "%s"\n%s_source_local: "%s"\n%s_source_sha256: "%s"\n' \
      "$role" "$(version_of "$file" "$prefix")" "$role" "$file" "$role" "$(sha_of "$file")"
  elif got=$(imported "$role"); then
    printf '%s_version: "%s"\n%s_source_sha256: "%s"\n' "$role" "${got% *}" "$role" "${got#* }"
  else
    die "no $prefix* source in $CARRY/sources and no $role artifact imported (run --bundle)"
  fi
}
{
  source_vars openmpi "$openmpi" openmpi_
  source_vars ucx "$ucx" ucx-
  source_vars ucc "$ucc" ucc-
} >"$OUT/vars.yml"
cat >>"$OUT/vars.yml" <<EOF
mpi4py_version: "$(version_of "$mpi4py" mpi4py-)"
mpi4py_source_local: "$mpi4py"
mpi4py_source_sha256: "$(sha_of "$mpi4py")"
ucx_enabled: "true"
ucx_cuda: enabled
ucx_cuda_home: "$CUDA_HOME"
ucx_configure_extra_flags: ["--with-nvcc-gencode=$gencode"]
ucc_enabled: "true"
ucc_cuda: enabled
ucc_cuda_home: "$CUDA_HOME"
ucc_configure_extra_flags: ["--with-nvcc-gencode=$gencode"]
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
nccl_cuda_home: "$CUDA_HOME"
nccl_cuda_archs: []
nccl_make_args: [$([ -n "${GPU_NODE_NCCL_FUNCS:-}" ] && printf '"ONLY_FUNCS=%s"' "$GPU_NODE_NCCL_FUNCS")]
horovod_gpu_operations: NCCL
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
if [ "${GPU_NODE_APT:-0}" != 1 ]; then
  cat >>"$OUT/vars.yml" <<EOF
# no package mirror here: the machine's own tools (step "tools")
openmpi_packages: []
ucx_packages: []
ucc_packages: []
nccl_packages: []
mpi4py_packages: []
mpi4py_build_packages: []
horovod_packages: []
mpi_jobs_packages: []
EOF
fi
# phase A: no NCCL, nccl-tests or Horovod yet
cat >"$OUT/phase-a.yml" <<EOF
nccl_enabled: "false"
nccl_tests_enabled: "false"
horovod_enabled: false
EOF
cat >"$OUT/phase-b.yml" <<EOF
nccl_enabled: "true"
nccl_tests_enabled: "$([ -n "$nccl_tests" ] && echo true || echo false)"
horovod_enabled: true
EOF

INV=(-i "$OUT/inventory")
results() { "$OUT/venv/bin/python" "$ROOT/bench/gpu_results.py" "$OUT"; }
build_times() {  # build_times NAME: the compile times of the newest provision run
  local run_dir
  run_dir=$(find "$MPICTL_STATE_DIR/runs" -mindepth 1 -maxdepth 1 -type d | sort | tail -n 1)
  [ -n "$run_dir" ] || return 0
  step "build-times-$1" "$OUT/venv/bin/python" "$ROOT/bench/build_times.py" --from-run "$run_dir"
  [ -f "$ROOT/bench/out/build_times_from_run.json" ] &&
    cp "$ROOT/bench/out/build_times_from_run.json" "$OUT/build_times_$1.json"
}

mkdir -p "$OUT/work"
cp "$ROOT/bench/device_buffers.c" "$OUT/work/"
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

# ---- phase A: UCX, UCC, OpenMPI; MPI on device buffers
# NCCL needs no MPI: with both phases to run, phase B's NCCL compiles beside phase A (its own
# `provision --tags nccl`, its own state dir, the same artifact cache) on the cores phase A's
# configure steps leave idle (at the lowest priority: phase A's own make takes what it needs);
# phase B's provision then installs it from the cache. mpi4py waits for phase B too (phase A's
# proof is C and torch; --skip-tags mpi4py).
# GPU_NODE_NCCL_BESIDE=0 keeps them one after the other.
# GPU_NODE_PHASES=B: phase B alone (on a fresh machine, with phase A's artifacts imported).
BESIDE=
case $PHASES in
  *A*B*)
    if [ "${GPU_NODE_NCCL_BESIDE:-1}" = 1 ]; then
      MPICTL_STATE_DIR=$OUT/state-nccl step provision-nccl-beside nice -n 19 "$MPICTL" provision \
        "${INV[@]}" --tags nccl -e "@$OUT/vars.yml" -e "@$OUT/phase-b.yml" &
      BESIDE=$!
    fi
    ;;
esac
phase_a() {
  # shellcheck disable=SC2086 # GPU_NODE_PROVISION_ARGS: more arguments, e.g. --tags ucx
  step provision-a "$MPICTL" provision "${INV[@]}" -e "@$OUT/vars.yml" -e "@$OUT/phase-a.yml" \
    --skip-tags mpi4py ${GPU_NODE_PROVISION_ARGS:-}
  build_times a
  # phase A's artifacts, exported as another machine imports them (phase B on a fresh machine)
  step cache-export-a "$MPICTL" cache export "$OUT/cache-a.tar.gz" -c ucx -c ucc -c openmpi
  # (each fails unless what it looks for is there: the cluster's own tools, from /etc/environment)
  # shellcheck disable=SC2016 # expanded by the inner bash
  step ompi-cuda bash -c '. /etc/environment; export PATH; command -v ompi_info; i=$(ompi_info --parsable --all) &&
    grep -E "mpi_built_with_cuda_support:value|mca:(coll|pml):(ucc|ucx):" <<<"$i" | grep -v ":param:" | sort -u | head -20;
    grep -q "mpi_built_with_cuda_support:value:true" <<<"$i" && grep -q "^mca:coll:ucc:" <<<"$i"'
  # shellcheck disable=SC2016 # expanded by the inner bash
  step ucx-info bash -c '. /etc/environment; export PATH; ucx_info -v && d=$(ucx_info -d) &&
    grep -E "Transport|Device" <<<"$d" && grep -q "Transport: cuda_ipc" <<<"$d"'
  # shellcheck disable=SC2016 # expanded by the inner bash
  step ucc-info bash -c '. /etc/environment; export PATH; ucc_info -v && c=$(ucc_info -c) &&
    grep -m5 -iE "TL_CUDA|EC_CUDA|MC_CUDA" <<<"$c"'

  step doctor "$MPICTL" doctor "${INV[@]}" --json
  # built as a user builds a program: the cluster's mpicc (on the PATH of /etc/environment)
  step device-build sh -c ". /etc/environment; export PATH; cd '$OUT/work' && mpicc -O2 -o device_buffers device_buffers.c -I'$CUDA_HOME/include' -L'$CUDA_HOME/lib64' -lcudart -Wl,-rpath,'$CUDA_HOME/lib64' && chmod a+rx device_buffers"
  RUN2=(run "${INV[@]}" -np 2 --oversubscribe --timeout 300 --workdir "$OUT/work")
  step device-mpictl "$MPICTL" "${RUN2[@]}" -- ./device_buffers
  step device-ucx "$MPICTL" "${RUN2[@]}" --mca pml=ucx -- ./device_buffers
  step device-ob1 "$MPICTL" "${RUN2[@]}" --mca pml=ob1 --mca coll_ucc_enable=0 -- ./device_buffers
  step torch-nccl "$MPICTL" run "${INV[@]}" -np 1 --torch --workdir "$OUT/work" -- "$PYTHON" gpu_checks.py
  results
}
case $PHASES in *A*) phase_a ;; esac
case $PHASES in *B*) ;; *) cat "$SUMMARY" "$OUT/results.txt"; exit 0 ;; esac

# ---- phase B: NCCL, nccl-tests, Horovod
if [ -n "$BESIDE" ]; then wait "$BESIDE"; fi
step provision-b "$MPICTL" provision "${INV[@]}" -e "@$OUT/vars.yml" -e "@$OUT/phase-b.yml"
build_times b
step horovod-build "$PYTHON" -m horovod.runner.launch --check-build
step horovod-gpu "$MPICTL" run "${INV[@]}" -np 1 --workdir "$OUT/work" -- "$PYTHON" horovod_gpu.py
step nccl-archs sh -c "python3 '$ROOT/roles/nccl/files/cuda_archs.py' /usr/local/nccl-*/lib/libnccl.so.*.*.*"
if [ -n "$nccl_tests" ]; then
  # the nccl_tests role's build, found on PATH as every job finds it
  step all-reduce-perf "$MPICTL" run "${INV[@]}" -np 1 -- all_reduce_perf -b 8 -e 4G -f 2 -g 1
  step sendrecv-perf "$MPICTL" run "${INV[@]}" -np 1 -- sendrecv_perf -b 8 -e 1G -f 4 -g 1 -c 1
fi
results
step provision-again "$MPICTL" provision "${INV[@]}" -e "@$OUT/vars.yml" -e "@$OUT/phase-b.yml"
step smoke "$MPICTL" smoke "${INV[@]}" --suite all --json

results
echo "steps: $SUMMARY"
cat "$SUMMARY" "$OUT/results.txt"
echo "everything is under $OUT"
