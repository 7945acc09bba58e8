#!/bin/sh
# What `mpictl fabric` reads of a node before it measures (sent on stdin, run with `sh -s` as the
# MPI user from the head; an optional argument replaces /sys/class/infiniband, for tests): its
# GPUs, whether NCCL is installed and nccl-tests' sendrecv_perf is on its PATH, and each RDMA port
# the kernel shows in sysfs (python3 running mpictl's one reader of them), one line each:
#   gpus N               (nvidia-smi -L; "gpus ?" when it hangs or fails: the node still answers)
#   nccl yes|no          (libnccl.so.2 known to the dynamic linker)
#   nccl-tests PATH|none
#   port DEVICE PORT STATE|RATE|LINK_LAYER|HCA_TYPE
#                        e.g. port mlx5_0 1 4: ACTIVE|400 Gb/sec (4X NDR)|InfiniBand|MT4129
root=${1:-/sys/class/infiniband}
gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
  if listed=$(timeout 20 nvidia-smi -L 2>/dev/null); then
    gpus=$(printf '%s\n' "$listed" | grep -c '^GPU ')
  else
    gpus='?'
  fi
fi
echo "gpus ${gpus:-0}"
if /sbin/ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2 '; then echo "nccl yes"; else echo "nccl no"; fi
if found=$(command -v sendrecv_perf 2>/dev/null); then
  echo "nccl-tests $found"
else
  echo "nccl-tests none"
fi
# the RDMA ports: mpictl's one reader (hca_ports.py, put in place when this probe is sent)
python3 -S - "$root" <<'PY' || true
from __future__ import annotations
import sys
# mpictl-include: hca_ports.py
for line in rdma_ports(sys.argv[1]):
    print(line)
PY
exit 0
