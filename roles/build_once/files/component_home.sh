#!/bin/sh
# Where a component the node already has lives, read-only, for the roles that build against it
# (openmpi: UCX and UCC; ucc: UCX), one call per component in the same raw round trip:
#   sh -c "$(cat component_home.sh)" component_home NAME PREFIX LOOKUP INFO HEADER LIB VERSION_SED [CUDA_GLOB]
# PREFIX set: that home (a site's own build). Else, with LOOKUP yes: the prefix of the INFO
# program (ucx_info, ucc_info) on the PATH of /etc/environment, which the component's role
# contributes. Prints KEY=VALUE lines:
#   NAME=HOME           (empty: none)
#   NAME_files=yes|no   (HEADER and LIB, relative to HOME, are there)
#   NAME_ours=yes|no    (the role's marker, .mpictl-fingerprint, is there)
#   NAME_marker=M       (that marker, else the version INFO -v reports, through sed -n VERSION_SED)
#   NAME_cuda=yes|no    (only with CUDA_GLOB: a file matching HOME/CUDA_GLOB exists)
# MPICTL_ENVIRONMENT_FILE replaces /etc/environment (tests).
exec 2>/dev/null
name=$1 home=$2 lookup=$3 info=$4 header=$5 lib=$6 version=$7 cuda=${8:-}
if [ -z "$home" ] && [ "$lookup" = yes ]; then
  env_file=${MPICTL_ENVIRONMENT_FILE:-/etc/environment}
  # shellcheck disable=SC1090 # the node's own file, read at run time
  found=$(set -a; . "$env_file"; command -v "$4")  # ($4: the file cannot set it)
  case $found in /*) home=$(dirname "$(dirname "$found")") ;; esac
fi
printf '%s=%s\n' "$name" "$home"
[ -n "$home" ] || exit 0
if [ -f "$home/$header" ] && [ -e "$home/$lib" ]; then files=yes; else files=no; fi
printf '%s_files=%s\n' "$name" "$files"
if [ -f "$home/.mpictl-fingerprint" ]; then
  printf '%s_ours=yes\n%s_marker=%s\n' "$name" "$name" "$(cat "$home/.mpictl-fingerprint")"
else
  printf '%s_ours=no\n%s_marker=%s\n' "$name" "$name" "$("$home/bin/$info" -v | sed -n "$version")"
fi
if [ -n "$cuda" ]; then
  # shellcheck disable=SC2086 # CUDA_GLOB is a pattern, expanded here
  if ls "$home"/$cuda >/dev/null 2>&1; then echo "${name}_cuda=yes"; else echo "${name}_cuda=no"; fi
fi
exit 0
