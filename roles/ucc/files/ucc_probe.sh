#!/bin/sh
# The UCX a UCC build uses on this node, read in one round trip by the ucc role's install
# (ansible.builtin.raw: sh -c "$(cat ucc_probe.sh)" ucc_probe UCX_PREFIX LOOKUP). Reads only.
# UCX_PREFIX empty and LOOKUP yes: the ucx role's UCX, found as the openmpi role finds it
# (ucx_info on the PATH of /etc/environment). Prints KEY=VALUE lines: ucx=the UCX home (empty:
# none), ucx_files=yes|no (include/ucp/api/ucp.h and lib/libucp.so there), ucx_ours=yes|no (the
# ucx role's marker is there), ucx_marker=that marker (else the version ucx_info reports),
# ucx_cuda=yes|no (UCX's CUDA transport module is there: UCX was built with CUDA).
exec 2>/dev/null
ucx=$1
if [ -z "$ucx" ] && [ "${2:-yes}" = yes ]; then
  # shellcheck disable=SC1091 # the node's own file, read at run time
  info=$(set -a; . /etc/environment; command -v ucx_info)
  if [ -n "$info" ]; then ucx=$(dirname "$(dirname "$info")"); fi
fi
printf 'ucx=%s\n' "$ucx"
[ -n "$ucx" ] || exit 0
if [ -f "$ucx/include/ucp/api/ucp.h" ] && [ -e "$ucx/lib/libucp.so" ]; then
  echo "ucx_files=yes"
else
  echo "ucx_files=no"
fi
if [ -f "$ucx/.mpictl-fingerprint" ]; then
  echo "ucx_ours=yes"
  printf 'ucx_marker=%s\n' "$(cat "$ucx/.mpictl-fingerprint")"
else
  echo "ucx_ours=no"
  printf 'ucx_marker=%s\n' "$("$ucx/bin/ucx_info" -v | sed -n 's/^# Library version: *//p')"
fi
if ls "$ucx"/lib/ucx/libuct_cuda.so* >/dev/null 2>&1; then echo "ucx_cuda=yes"; else echo "ucx_cuda=no"; fi
