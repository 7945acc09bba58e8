#!/usr/bin/env bash
# Make a squashfs image for `mpictl run --container` without a registry, on the controller (or any
# machine with squashfs-tools; scripts/bootstrap.sh installs them):
#
#   scripts/container-image.sh [--marker TEXT] [--exclude PATTERN]... SOURCE OUT.sqsh
#
# SOURCE: a root filesystem directory (debootstrap/mmdebstrap output, an unpacked tarball), or
# podman:IMAGE, a local podman image (exported through a container that is created, never
# started, and removed). --marker writes TEXT to /etc/mpictl-image inside the image (a label a
# job can read to know it runs in it); --exclude leaves paths out (mksquashfs -wildcards, e.g.
# 'usr/share/doc/*'). The image is compressed with zstd; put OUT where every node reads it at
# the same path (the shared directory, mpi_shared_dir), then:
#   mpictl run --container /shared/images/NAME.sqsh -- python3 train.py
# An image runs the cluster's MPI (OpenMPI, UCX, UCC, the cluster venv are mounted at their
# paths): it needs a libc as new as the nodes' and, for the venv's Python, the same Python; the
# nodes' own OS release is the safe base.
set -euo pipefail

die() { printf 'container-image: %s\n' "$*" >&2; exit 1; }

marker="" excludes=()
while [ $# -gt 0 ]; do
  case $1 in
    --marker) [ $# -ge 2 ] || die "--marker needs TEXT"; marker=$2; shift 2 ;;
    --exclude) [ $# -ge 2 ] || die "--exclude needs a PATTERN"; excludes+=(-e "$2"); shift 2 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; break ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) break ;;
  esac
done
[ $# -eq 2 ] || die "usage: container-image.sh [--marker TEXT] [--exclude PATTERN]... SOURCE OUT.sqsh"
source=$1 out=$2
command -v mksquashfs >/dev/null || die "mksquashfs not found: install squashfs-tools"
case $out in *.sqsh) ;; *) die "$out: the image's name must end in .sqsh" ;; esac
[ -d "$(dirname "$out")" ] || die "$(dirname "$out"): no such directory"

work=$(mktemp -d "${TMPDIR:-/tmp}/container-image.XXXXXX")
cleanup() { rm -rf "$work"; [ -z "${ctr:-}" ] || podman rm -f "$ctr" >/dev/null 2>&1 || true; }
trap cleanup EXIT

case $source in
  podman:*)
    image=${source#podman:}
    command -v podman >/dev/null || die "podman not found"
    ctr=$(podman create --entrypoint /bin/true "$image" 2>"$work/err") \
      || die "podman create $image: $(tail -n 1 "$work/err")"
    root=$work/rootfs
    mkdir "$root"
    podman export "$ctr" | tar -x -C "$root" --numeric-owner --exclude='dev/*' \
      || die "podman export of $image failed"
    ;;
  *)
    [ -d "$source" ] || die "$source: not a directory (a root filesystem) or podman:IMAGE"
    [ -d "$source/etc" ] && [ -d "$source/usr" ] || die "$source: no etc/ and usr/: not a root filesystem"
    root=$source
    ;;
esac

opts=(-noappend -quiet -comp zstd -no-xattrs -all-root)
if [ -n "$marker" ]; then
  # The source directory stays as it was: the marker enters through mksquashfs's pseudo file.
  printf '%s\n' "$marker" >"$work/marker"
  opts+=(-p "etc/mpictl-image f 644 root root cat $work/marker")
fi
[ ${#excludes[@]} -eq 0 ] || opts+=(-wildcards "${excludes[@]}")
mksquashfs "$root" "$out.part" "${opts[@]}" >/dev/null || die "mksquashfs failed"
mv "$out.part" "$out"
printf 'container-image: %s (%s)\n' "$out" "$(du -h "$out" | cut -f1)"
