#!/bin/sh
# What `mpictl fabric` reads of a node before it measures (sent on stdin, run with `sh -s` as the
# MPI user from the head): its GPUs, whether nccl-tests' sendrecv_perf is on its PATH, and each
# RDMA port the kernel shows in sysfs, one line each:
#   gpus N
#   nccl-tests PATH|none
#   port DEVICE PORT STATE|RATE|LINK_LAYER     e.g. port mlx5_0 1 4: ACTIVE|400 Gb/sec (4X NDR)|InfiniBand
gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
fi
echo "gpus ${gpus:-0}"
if found=$(command -v sendrecv_perf 2>/dev/null); then
  echo "nccl-tests $found"
else
  echo "nccl-tests none"
fi
for dir in /sys/class/infiniband/*/ports/*; do
  [ -r "$dir/state" ] || continue
  device=${dir#/sys/class/infiniband/}
  device=${device%%/*}
  printf 'port %s %s %s|%s|%s\n' "$device" "${dir##*/}" "$(cat "$dir/state")" \
    "$(cat "$dir/rate" 2>/dev/null)" "$(cat "$dir/link_layer" 2>/dev/null)"
done
exit 0
