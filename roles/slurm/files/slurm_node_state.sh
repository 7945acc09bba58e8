# What the slurm role manages on a node, read in one round trip (ansible.builtin.raw), with the
# Slurm prefix ($1) and slurm_pmix_prefix ($2) as arguments. Reads only. Lines:
# "package NAME VERSION" (munge and the libraries Slurm runs with), "debian-package NAME VERSION"
# (Debian's own Slurm packages, which the role's build replaces), "marker FINGERPRINT" (the
# build the prefix holds), "version V" (what its sinfo says), "uid N" and "gid N" (of the slurm
# user and group), "links ok" (every command of the prefix linked from /usr/local/bin or sbin),
# "stat PATH MODE USER GROUP" (and "sha256 PATH HEX" of files: munge key, Slurm files, systemd
# units, the role's prolog and epilog; configuration, prolog, epilog, state and log
# directories), "service NAME ACTIVE ENABLED", "cgroup rw|ro", "member NAME" for each node the
# node's slurm.conf lists (the cluster as the last run left it: a node since taken out of the
# inventory is named here, and the munge key it holds is replaced), and the
# PMIx to build against: "pmix HOME", "pmix-files yes" where HOME holds include/pmix.h and
# lib/libpmix.so, "pmix-hwloc yes" where it holds include/hwloc.h and lib/libhwloc.so,
# "pmix-marker M" (the openmpi role's marker there, else the PMIx version).
exec 2>/dev/null
prefix=$1
dpkg-query -W -f '${db:Status-Status} ${Package} ${Version}\n' munge libmunge2 libnuma1 libdbus-1-3 \
  | awk '$1 == "installed" {print "package " $2 " " $3}'
# Debian's own Slurm packages (an earlier mpictl installed them): the role's build replaces them.
dpkg-query -W -f '${db:Status-Status} ${Package} ${Version}\n' slurmd slurmctld slurm-client \
  slurm-wlm-basic-plugins slurm-wlm | awk '$1 == "installed" {print "debian-package " $2 " " $3}'
[ -f "$prefix/.mpictl-fingerprint" ] && echo "marker $(cat "$prefix/.mpictl-fingerprint")"
# The release from the installed header (sinfo --version needs a readable slurm.conf).
v=$(awk '/define SLURM_VERSION_NUMBER/ {print $3}' "$prefix/include/slurm/slurm_version.h")
[ -n "$v" ] && printf 'version %d.%02d.%d\n' $((v >> 16 & 255)) $((v >> 8 & 255)) $((v & 255))
# "role-slurm yes": a Slurm of this role (any release) was installed beside the prefix.
for m in "$(dirname "$prefix")"/*/.mpictl-fingerprint; do
  [ -f "$m" ] && { echo "role-slurm yes"; break; }
done
id -u slurm >/dev/null && echo "uid $(id -u slurm)"
getent group slurm >/dev/null && echo "gid $(getent group slurm | cut -d: -f3)"
links=ok
for f in "$prefix"/bin/* "$prefix"/sbin/*; do
  [ -e "$f" ] || { links=no; break; }
  d=/usr/local/$(basename "$(dirname "$f")")/$(basename "$f")
  [ "$(readlink "$d")" = "$f" ] || { links=no; break; }
done
echo "links $links"
for f in /etc/munge/munge.key /etc/slurm/slurm.conf /etc/slurm/gres.conf /etc/slurm/cgroup.conf \
  /etc/slurm/mpi.conf /etc/systemd/system/slurmd.service /etc/systemd/system/slurmctld.service \
  /etc/slurm/prolog.d/00-mpictl-log /etc/slurm/epilog.d/00-mpictl-log; do
  [ -e "$f" ] || continue
  stat -c 'stat %n %a %U %G' "$f"
  sha256sum "$f" | awk '{print "sha256 " $2 " " $1}'
done
for d in /etc/slurm /etc/slurm/prolog.d /etc/slurm/epilog.d /var/lib/slurm /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm; do
  [ -d "$d" ] && stat -c 'stat %n %a %U %G' "$d"
done
[ -f /etc/slurm/slurm.conf ] && sed -n 's/^NodeName=\([^[:space:]]*\).*/member \1/p' /etc/slurm/slurm.conf
for s in munge slurmd slurmctld; do
  echo "service $s $(systemctl is-active "$s.service") $(systemctl is-enabled "$s.service")"
done
# "stale NAME": the running service started before one of its files last changed (a run that
# stopped before its handlers restarted it: munge would still use the key its package made).
# Whole seconds on both sides: a file written in the second the service started is not stale.
stale() {
  name=$1; shift
  [ "$(systemctl is-active "$name.service")" = active ] || return 0
  started=$(date -d "$(systemctl show -p ExecMainStartTimestamp --value "$name.service")" +%s)
  [ -n "$started" ] || return 0
  for f in "$@"; do
    if [ -e "$f" ] && [ "$(stat -c %Y "$f")" -gt "$started" ]; then echo "stale $name"; return 0; fi
  done
}
stale munge /etc/munge/munge.key
for s in slurmd slurmctld; do
  stale "$s" /etc/slurm/slurm.conf /etc/slurm/gres.conf /etc/slurm/cgroup.conf /etc/slurm/mpi.conf \
    "/etc/systemd/system/$s.service" "$prefix/.mpictl-fingerprint"
done
# proctrack/cgroup needs the freezer (cgroup v1) or the unified hierarchy (v2) writable, task/cgroup
# cpuset and memory: a container's read-only cgroup mounts fail here (access(2) says EROFS).
if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
  dirs=/sys/fs/cgroup
else
  dirs="/sys/fs/cgroup/freezer /sys/fs/cgroup/cpuset /sys/fs/cgroup/memory"
fi
cgroup=rw
for d in $dirs; do [ -d "$d" ] && [ -w "$d" ] || cgroup=ro; done
echo "cgroup $cgroup"
pmix=$2
if [ -z "$pmix" ]; then
  # shellcheck disable=SC1091 # the node's own file, read at run time
  info=$(set -a; . /etc/environment; command -v ompi_info)
  if [ -n "$info" ]; then pmix=$(dirname "$(dirname "$info")"); fi
fi
echo "pmix $pmix"
if [ -n "$pmix" ] && [ -f "$pmix/include/pmix.h" ] && [ -e "$pmix/lib/libpmix.so" ]; then
  echo "pmix-files yes"
fi
if [ -n "$pmix" ] && [ -f "$pmix/include/hwloc.h" ] && [ -e "$pmix/lib/libhwloc.so" ]; then
  echo "pmix-hwloc yes"
fi
if [ -n "$pmix" ] && [ -f "$pmix/.mpictl-fingerprint" ]; then
  echo "pmix-marker $(cat "$pmix/.mpictl-fingerprint")"
elif [ -n "$pmix" ] && [ -f "$pmix/include/pmix_version.h" ]; then
  echo "pmix-marker $(awk '/define PMIX_NUMERIC_VERSION/ {print $3}' "$pmix/include/pmix_version.h")"
fi
true
