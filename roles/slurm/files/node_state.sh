# What the slurm role manages on a node, read in one round trip (ansible.builtin.raw): packages
# and versions, mode/owner/sha256 of the munge key and the Slurm configuration files, the state
# of the three services, and whether the cgroup controllers Slurm uses are writable. Reads only.
# Lines: "package NAME VERSION", "stat PATH MODE USER GROUP", "sha256 PATH HEX",
# "service NAME ACTIVE ENABLED", "cgroup rw|ro", and "member NAME" for each node the node's
# slurm.conf lists (the cluster as the last run left it: a node since taken out of the inventory
# is named here, and the munge key it holds is replaced).
exec 2>/dev/null
dpkg-query -W -f '${db:Status-Status} ${Package} ${Version}\n' \
  munge slurmd slurm-client slurmctld libpmix2 libpmix-dev | awk '$1 == "installed" {print "package " $2 " " $3}'
for f in /etc/munge/munge.key /etc/slurm/slurm.conf /etc/slurm/gres.conf /etc/slurm/cgroup.conf \
  /etc/slurm/mpi.conf; do
  [ -e "$f" ] || continue
  stat -c 'stat %n %a %U %G' "$f"
  sha256sum "$f" | awk '{print "sha256 " $2 " " $1}'
done
[ -f /etc/slurm/slurm.conf ] && sed -n 's/^NodeName=\([^[:space:]]*\).*/member \1/p' /etc/slurm/slurm.conf
for s in munge slurmd slurmctld; do
  echo "service $s $(systemctl is-active "$s.service") $(systemctl is-enabled "$s.service")"
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
true
