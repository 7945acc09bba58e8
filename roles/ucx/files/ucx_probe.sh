#!/bin/sh
# What a UCX build needs from this node, read in one round trip by the ucx preflight
# (ansible.builtin.raw: sh -c "$(cat ucx_probe.sh)" ucx_probe CUDA_HOME CUDA_MODE). Reads only.
# Two more arguments, for tests only, replace /sys/class/infiniband and /usr/include.
#
# RDMA: the devices under /sys/class/infiniband (HCAs, RoCE NICs) and whether verbs.h and rdma_cma.h
# are already installed (rdma-core's libibverbs-dev and librdmacm-dev, or MOFED/DOCA-OFED's own).
#
# CUDA (unless CUDA_MODE is "disabled"): UCX's configure with --with-cuda needs cuda.h,
# cuda_runtime.h and nvml.h, and links against libcuda (cuDeviceGetUuid), the toolkit's libcudart
# and libnvidia-ml (nvmlInit); it stops when one is missing. Each of the two driver libraries is
# looked for as the openmpi role looks for libcuda (roles/openmpi/files/cuda_probe.sh): the
# toolkit's stubs (lib64/stubs, targets/*/lib/stubs, lib/stubs), its compat/ driver (libcuda
# only), the driver's library as the dynamic linker knows it (ldconfig -p; /sbin may not be on
# PATH), then the usual library directories.
#
# Prints KEY=VALUE lines: ib_devices=the device names (space-separated; empty: none),
# verbs_h=yes|no, rdmacm_h=yes|no (rdma/rdma_cma.h: librdmacm's headers); with CUDA: home=CUDA_HOME, nvcc=yes|no, nvcc_release=what `nvcc --version` says
# ("release 13.0, V13.0.88"), cuda_h, cuda_runtime_h, nvml_h=yes|no, libcuda=, libnvidia_ml=
# (the first library found; empty: none) and searched_libcuda=, searched_libnvidia_ml= (what was
# looked at, in order, separated by "; ").
exec 2>/dev/null
home=$1
mode=${2:-auto}
sysfs=${3:-/sys/class/infiniband}
include=${4:-/usr/include}

yes_no() {
  if [ -e "$1" ]; then echo yes; else echo no; fi
}

devices=
for dev in "$sysfs"/*; do
  if [ -e "$dev" ]; then devices="${devices:+$devices }${dev##*/}"; fi
done
printf 'ib_devices=%s\n' "$devices"
printf 'verbs_h=%s\n' "$(yes_no "$include/infiniband/verbs.h")"
printf 'rdmacm_h=%s\n' "$(yes_no "$include/rdma/rdma_cma.h")"

if [ "$mode" = disabled ]; then
  exit 0
fi

# find_lib NAME: sets $found (the first NAME library that exists, or empty) and $searched.
find_lib() {
  name=$1
  found=
  searched=
  set -- "$home/lib64/stubs/$name.so" "$home"/targets/*/lib/stubs/"$name.so" "$home/lib/stubs/$name.so"
  if [ "$name" = libcuda ]; then set -- "$@" "$home/compat/libcuda.so.1"; fi
  for candidate in "$@"; do
    searched="${searched:+$searched; }$candidate"
    if [ -z "$found" ] && [ -e "$candidate" ]; then found=$candidate; fi
  done
  searched="$searched; ldconfig -p"
  libs=$(PATH="$PATH:/sbin:/usr/sbin" ldconfig -p | awk -v n="$name" '
    ($1 == n ".so" || $1 == n ".so.1") && $2 ~ /64/ { sub(/^.* => /, ""); print }')
  while IFS= read -r candidate; do
    if [ -z "$found" ] && [ -n "$candidate" ] && [ -e "$candidate" ]; then found=$candidate; fi
  done <<EOF
$libs
EOF
  multiarch="/usr/lib/$(uname -m)-linux-gnu"
  for candidate in "$multiarch/$name.so" "$multiarch/$name.so.1" "/usr/lib64/$name.so" "/usr/lib64/$name.so.1"; do
    searched="$searched; $candidate"
    if [ -z "$found" ] && [ -e "$candidate" ]; then found=$candidate; fi
  done
}

printf 'home=%s\n' "$home"
printf 'nvcc=%s\n' "$(yes_no "$home/bin/nvcc")"
if [ -x "$home/bin/nvcc" ]; then
  printf 'nvcc_release=%s\n' "$("$home/bin/nvcc" --version | sed -n 's/^.*\(release [0-9.]*, V[0-9.]*\).*$/\1/p' | head -n 1)"
fi
printf 'cuda_h=%s\n' "$(yes_no "$home/include/cuda.h")"
printf 'cuda_runtime_h=%s\n' "$(yes_no "$home/include/cuda_runtime.h")"
printf 'nvml_h=%s\n' "$(yes_no "$home/include/nvml.h")"
find_lib libcuda
printf 'libcuda=%s\nsearched_libcuda=%s\n' "$found" "$searched"
find_lib libnvidia-ml
printf 'libnvidia_ml=%s\nsearched_libnvidia_ml=%s\n' "$found" "$searched"
