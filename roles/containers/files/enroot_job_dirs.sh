#!/bin/sh
# Slurm's prolog and epilog for enroot (roles/containers: 50-mpictl-enroot in the slurm role's
# /etc/slurm/prolog.d and epilog.d; Slurm runs it as root with SLURM_SCRIPT_CONTEXT
# prolog_slurmd or epilog_slurmd).
#
# enroot makes its runtime, cache and data directories itself, as the user, under parents that
# are root's (0755): so that every user of the cluster can run a container (pyxis: srun
# --container-image), the prolog makes the job user's directories, the user's own with mode 0700,
# at the paths of enroot's settings (enroot.conf.d/mpictl.conf, its "$(id -u)" the job's uid;
# a directory that exists is left as it is). The epilog removes the user's runtime directory
# (enroot's state on tmpfs) once no other job of the user runs on the node, as the user; the
# MPI user's directories, which the role keeps for mpirun (tmpfiles.d/mpictl-enroot.conf), stay.
# pyxis removes its own containers of the job (its SPANK epilog).
#
# Root makes a directory only where every existing parent is root's and no one else may write it
# (or it is sticky, as /tmp): nothing another user placed on the path is followed, and a
# directory there that is not the job user's is left as it is. The epilog removes as the user,
# inside the directory once it is the user's. A prolog and an epilog of the same node take turns
# (a lock on the runtime directories' parent), so that a job that starts while another job of the
# same user ends finds its directory. squeue gets 10 s.
#
# Never fails the job: a directory that cannot be made is one line in slurmd's log (the
# container then fails with enroot's own message), not a drained node.
set -u
umask 022
# Slurm gives a prolog no PATH: set here, and exported for the programs it runs (timeout's squeue).
PATH=${PATH:+$PATH:}/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin
export PATH
conf=${MPICTL_ENROOT_CONF:-/etc/enroot/enroot.conf.d/mpictl.conf}
kept=${MPICTL_ENROOT_KEPT:-/etc/tmpfiles.d/mpictl-enroot.conf}
me=50-mpictl-enroot
uid=${SLURM_JOB_UID:-}
gid=${SLURM_JOB_GID:-}
job=${SLURM_JOB_ID:-}

say() { echo "$me: job $job uid $uid: $*" >&2; }

# The directory enroot's settings name for KEY ($1), "$(id -u)" replaced by the job's uid; empty
# when the setting is absent or is not an absolute path once replaced (nothing else is
# evaluated: root never runs what the path says).
path() {
  awk -v key="$1" -v uid="$uid" '
    $1 == key {
      p = $0; t = "$(id -u)"
      sub(/^[ \t]*[^ \t]+[ \t]+/, "", p); sub(/[ \t]+$/, "", p)
      while ((i = index(p, t)) > 0) p = substr(p, 1, i - 1) uid substr(p, i + length(t))
      if (p ~ /^\/[^$`\\]*$/ && p !~ /(^|\/)\.\.?(\/|$)/) print p
      exit
    }' "$conf" 2>/dev/null
}

case "$uid:$gid:$job" in
  *[!0-9:]* | :* | *::* | *:) say "no SLURM_JOB_UID, SLURM_JOB_GID or SLURM_JOB_ID: nothing done"; exit 0 ;;
esac
[ "$uid" = 0 ] && exit 0 # root's enroot needs nothing made
[ -r "$conf" ] || exit 0  # enroot is not set up here (any more)

# Whether every existing ancestor of $1 is a directory of root's (not a link) that no one else
# may write, or that is sticky (/tmp: others cannot move or remove what root made there): then no
# other user can put a link or a directory of theirs on the path root makes. Asked again once
# the missing parents are made.
safe_parents() {
  p=$1
  while [ "$p" != / ]; do
    p=$(dirname "$p")
    [ -e "$p" ] || [ -L "$p" ] || continue
    [ -d "$p" ] && [ ! -L "$p" ] && [ "$(stat -c %u "$p")" = 0 ] || return 1
    case $(stat -c %A "$p") in *[tT]) ;; ?????w* | ????????w*) return 1 ;; esac
  done
}

# The runtime directories' parent, locked for the check and its change (fd 9): a job of the same
# user that starts on the node while another one's epilog runs waits for it, and then makes the
# directory that epilog removed.
lock() {
  mkdir -p "$1" && exec 9<"$1" && flock -w 60 9
}

case ${SLURM_SCRIPT_CONTEXT:-} in
  prolog_slurmd)
    runtime=$(path ENROOT_RUNTIME_PATH)
    if [ -n "$runtime" ] && safe_parents "$runtime"; then lock "$(dirname "$runtime")" || true; fi
    for key in ENROOT_RUNTIME_PATH ENROOT_CACHE_PATH ENROOT_DATA_PATH; do
      dir=$(path "$key")
      if [ -z "$dir" ]; then
        say "$key in $conf is not an absolute path: not made"
      elif ! safe_parents "$dir"; then
        say "$key: a directory above $dir is a link, another user's, or others may write it: not made"
      elif [ -L "$dir" ] || { [ -e "$dir" ] && [ "$(stat -c %u "$dir")" != "$uid" ]; }; then
        say "$dir is there and is not the user's directory: left as it is"
      elif [ ! -e "$dir" ]; then
        if ! { mkdir -p "$(dirname "$dir")" && safe_parents "$dir" && mkdir -m 0700 "$dir" \
          && chown "$uid:$gid" "$dir"; }; then
          say "could not make $dir"
        fi
      fi
    done
    ;;
  epilog_slurmd)
    dir=$(path ENROOT_RUNTIME_PATH)
    [ -n "$dir" ] && [ -d "$dir" ] && [ ! -L "$dir" ] && safe_parents "$dir" || exit 0
    # the directories the role keeps (the MPI user's: mpirun runs containers outside Slurm)
    if awk -v d="$dir" '$1 == "d" && $2 == d {found = 1} END {exit !found}' "$kept" 2>/dev/null; then
      exit 0
    fi
    lock "$(dirname "$dir")" || { say "$(dirname "$dir") stays locked: $dir kept"; exit 0; }
    if ! others=$(timeout 10 "$(command -v squeue || echo squeue)" -h -u "$uid" -w "${SLURMD_NODENAME:-$(hostname -s)}" -o %A 2>&1); then
      say "squeue did not answer ($others): $dir kept"
      exit 0
    fi
    if printf '%s\n' "$others" | grep -qvx -e "$job" -e ''; then
      exit 0 # another job of the user still runs here
    fi
    # as the user, in the directory itself once it is the user's: what the user's containers
    # left is the user's; then the empty directory
    (cd -P "$dir" && [ "$(pwd -P)" = "$dir" ] && [ "$(stat -c %u .)" = "$uid" ] \
      && setpriv --reuid="$uid" --regid="$gid" --clear-groups -- \
        find . -mindepth 1 -maxdepth 1 -exec rm -rf -- {} + 2>/dev/null)
    rmdir -- "$dir" 2>/dev/null || say "$dir not empty: kept"
    ;;
esac
exit 0
