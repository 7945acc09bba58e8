#!/bin/sh
# bench/start_sshd.sh: make OpenSSH's sshd listen on port 22 of this machine, for bench/gpu_node.sh
# (the job side logs in to the head over SSH, even on a one-node cluster).
#
# Works on a bare machine as found on GPU clouds: no `ss`, no `service`, no systemd, and an
# openssh-server unpacked from a .deb whose maintainer scripts never ran (no host keys, no
# privilege-separation user, no /run/sshd). Does nothing when something already listens on
# port 22 (read from /proc/net/tcp and tcp6, which need no tool). Exit 0 once port 22 listens.
#
# The paths it reads and the sshd it starts can be moved (the unit tests do):
#   START_SSHD_PROC_NET (/proc/net)  START_SSHD_ETC (/etc/ssh)  START_SSHD_RUN_DIR (/run/sshd)
#   START_SSHD_BIN (/usr/sbin/sshd, else the sshd on PATH)   START_SSHD_WAIT (5 seconds)
set -eu

PROC_NET=${START_SSHD_PROC_NET:-/proc/net}
ETC_SSH=${START_SSHD_ETC:-/etc/ssh}
RUN_DIR=${START_SSHD_RUN_DIR:-/run/sshd}
WAIT=${START_SSHD_WAIT:-5}

die() { echo "start_sshd: $*" >&2; exit 1; }

# A socket in state 0A (LISTEN) on local port 22 (hex 0016), IPv4 or IPv6.
listening() {
  for table in "$PROC_NET/tcp" "$PROC_NET/tcp6"; do
    [ -r "$table" ] || continue
    if awk 'NR > 1 && $4 == "0A" && $2 ~ /:0016$/ { found = 1 } END { exit !found }' "$table"; then
      return 0
    fi
  done
  return 1
}

if listening; then
  echo "start_sshd: something already listens on port 22"
  exit 0
fi

sshd=${START_SSHD_BIN:-}
if [ -z "$sshd" ]; then
  if [ -x /usr/sbin/sshd ]; then sshd=/usr/sbin/sshd; else sshd=$(command -v sshd || true); fi
fi
[ -n "$sshd" ] && [ -x "$sshd" ] \
  || die "no sshd on this machine: install openssh-server (bench/gpu_node.sh: put its .deb in CARRY_DIR/debs)"

# An unpacked openssh-server has no sshd_config: its maintainer script copies Debian's default.
if [ ! -e "$ETC_SSH/sshd_config" ] && [ -e "${START_SSHD_DEFAULT_CONFIG:-/usr/share/openssh/sshd_config}" ]; then
  echo "start_sshd: $ETC_SSH/sshd_config from the package's default"
  mkdir -p "$ETC_SSH" || die "cannot create $ETC_SSH"
  cp "${START_SSHD_DEFAULT_CONFIG:-/usr/share/openssh/sshd_config}" "$ETC_SSH/sshd_config" ||
    die "cannot write $ETC_SSH/sshd_config"
fi
if ! ls "$ETC_SSH"/ssh_host_*_key >/dev/null 2>&1; then
  echo "start_sshd: creating host keys in $ETC_SSH"
  ssh-keygen -A || die "ssh-keygen -A failed: no host keys for sshd"
fi
if ! getent passwd sshd >/dev/null 2>&1; then
  echo "start_sshd: creating the privilege-separation user sshd"
  useradd --system --no-create-home --home-dir "$RUN_DIR" --shell /usr/sbin/nologin sshd \
    || die "cannot create the user sshd that sshd separates privileges with"
fi
mkdir -p "$RUN_DIR"
chmod 0755 "$RUN_DIR"

if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
  systemctl start ssh 2>/dev/null || systemctl start sshd 2>/dev/null || "$sshd"
else
  "$sshd" || die "$sshd did not start (try '$sshd -d' to see why)"
fi

waited=0
until listening; do
  [ "$waited" -lt "$WAIT" ] || die "sshd started, but nothing listens on port 22 after ${WAIT}s (see its log, or run '$sshd -d')"
  sleep 1
  waited=$((waited + 1))
done
echo "start_sshd: sshd listens on port 22"
