#!/bin/sh
# Build the mpictl sandbox node image without any registry: debootstrap Debian (bookworm, or the
# RELEASE given: trixie) (minbase + ./packages) into a temporary root, add the node's sshd and
# systemd configuration, and `podman import` it under TAG. Needs root (debootstrap).
# Usage: build.sh TAG MIRROR_URI [RELEASE]
# `mpictl sandbox up` computes TAG from the content of this directory and the release, and passes
# the Debian mirror it found in the host's apt configuration.
set -eu
tag=$1
mirror=$2
release=${3:-bookworm}
here=$(cd "$(dirname "$0")" && pwd)
include=$(grep -v '^#' "$here/packages" | grep -v '^ *$' | paste -sd, -)

root=$(mktemp -d "${TMPDIR:-/var/tmp}/mpictl-node-rootfs.XXXXXX")
trap 'rm -rf "$root"' EXIT INT TERM

debootstrap --variant=minbase --components=main --include="$include" "$release" "$root" "$mirror"

install -m 0644 "$here/sshd_config" "$root/etc/ssh/sshd_config.d/mpictl.conf"
# systemd is PID 1, as on a real machine: sshd is its ssh.service, after a oneshot unit that
# generates this node's host keys at first boot; roles start services with systemctl.
install -m 0755 "$here/hostkeys.sh" "$root/usr/local/sbin/mpictl-node-hostkeys"
install -m 0644 "$here/mpictl-hostkeys.service" "$root/etc/systemd/system/mpictl-hostkeys.service"
install -d "$root/etc/systemd/system/ssh.service.d"
install -m 0644 "$here/ssh-override.conf" "$root/etc/systemd/system/ssh.service.d/mpictl.conf"
install -d "$root/etc/systemd/system/multi-user.target.wants"
ln -sf /etc/systemd/system/mpictl-hostkeys.service \
    "$root/etc/systemd/system/multi-user.target.wants/mpictl-hostkeys.service"
# apt's daily timers would take the dpkg lock at random while a role installs packages.
for unit in apt-daily.timer apt-daily-upgrade.timer; do
    ln -sf /dev/null "$root/etc/systemd/system/$unit"
done
# pam_loginuid needs CAP_AUDIT_CONTROL, which containers lack; required, it refuses logins.
sed -i 's/^session\s\+required\s\+pam_loginuid.so/session optional pam_loginuid.so/' \
    "$root/etc/pam.d/sshd"
# Each node generates its own host keys at first boot (hostkeys.sh).
rm -f "$root"/etc/ssh/ssh_host_*
# Stale package lists would point at superseded versions; nodes run apt-get update.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
: > "$root/etc/machine-id"

tar --numeric-owner --xattrs --xattrs-include='*' -C "$root" -cf - . |
    podman import \
        --change 'ENTRYPOINT ["/sbin/init"]' \
        --change 'STOPSIGNAL SIGRTMIN+3' \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'LABEL io.mpictl.image=node' \
        - "$tag" >/dev/null
