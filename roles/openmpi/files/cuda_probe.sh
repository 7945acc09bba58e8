#!/bin/sh
# What an OpenMPI build with CUDA needs on this node, read in one round trip by the openmpi
# preflight (ansible.builtin.raw: sh -c "$(cat cuda_probe.sh)" cuda_probe HOME [LIBDIR]).
# Reads only. HOME is openmpi_cuda_home, LIBDIR openmpi_cuda_libdir ('' = search).
#
# OpenMPI's configure links a test against libcuda (cuMemFree) and, when that fails, builds
# without CUDA silently; this finds the library it can link against. In LIBDIR when given
# (libcuda.so, then libcuda.so.1), else in this order: the toolkit's stubs (lib64/stubs,
# targets/*/lib/stubs, lib/stubs), its compat/ driver, the driver's library
# as the dynamic linker knows it (ldconfig -p; /sbin may not be on PATH), then the usual library
# directories.
#
# Prints KEY=VALUE lines: home=HOME, nvcc=yes|no (HOME/bin/nvcc), cuda_h=yes|no
# (HOME/include/cuda.h), libcuda=the first library found (empty: none), searched=what was looked
# at, in order, separated by "; ".
exec 2>/dev/null
home=$1
libdir=${2:-}
found=
searched=

note() {
  searched="${searched:+$searched; }$1"
}

# look PATH...: note each PATH; the first one that exists becomes $found (unless one was found).
look() {
  for candidate in "$@"; do
    note "$candidate"
    if [ -z "$found" ] && [ -e "$candidate" ]; then
      found=$candidate
    fi
  done
}

# The 64-bit libcuda.so / libcuda.so.1 entries of the dynamic linker's cache, one path a line.
driver_libs() {
  PATH="$PATH:/sbin:/usr/sbin" ldconfig -p | awk '
    ($1 == "libcuda.so" || $1 == "libcuda.so.1") && $2 ~ /64/ { sub(/^.* => /, ""); print }'
}

yes_no() {
  if [ -e "$1" ]; then echo yes; else echo no; fi
}

if [ -n "$libdir" ]; then
  look "$libdir/libcuda.so" "$libdir/libcuda.so.1"
else
  # the stubs where NVIDIA's packages put them, then conda's layout (lib/stubs) and the forward
  # compatibility package's driver (compat/)
  look "$home/lib64/stubs/libcuda.so"
  look "$home"/targets/*/lib/stubs/libcuda.so
  look "$home/lib/stubs/libcuda.so" "$home/compat/libcuda.so.1"
  note "ldconfig -p"
  libs=$(driver_libs)
  while IFS= read -r candidate; do
    if [ -z "$found" ] && [ -n "$candidate" ] && [ -e "$candidate" ]; then
      found=$candidate
    fi
  done <<EOF
$libs
EOF
  multiarch="/usr/lib/$(uname -m)-linux-gnu"
  look "$multiarch/libcuda.so" "$multiarch/libcuda.so.1" /usr/lib64/libcuda.so /usr/lib64/libcuda.so.1
fi

printf 'home=%s\n' "$home"
printf 'nvcc=%s\n' "$(yes_no "$home/bin/nvcc")"
printf 'cuda_h=%s\n' "$(yes_no "$home/include/cuda.h")"
printf 'libcuda=%s\n' "$found"
printf 'searched=%s\n' "$searched"
