#!/bin/sh
# Build the mpictl sandbox node image without any registry: debootstrap Debian bookworm
# (minbase + ./packages) into a temporary root, add the node's sshd/entrypoint configuration,
# and `podman import` it under TAG. Needs root (debootstrap). Usage: build.sh TAG MIRROR_URI
# `mpictl sandbox up` computes TAG from the content of this directory and passes the Debian
# mirror it found in the host's apt configuration.
set -eu
tag=$1
mirror=$2
here=$(cd "$(dirname "$0")" && pwd)
include=$(grep -v '^#' "$here/packages" | grep -v '^ *$' | paste -sd, -)

root=$(mktemp -d "${TMPDIR:-/var/tmp}/mpictl-node-rootfs.XXXXXX")
trap 'rm -rf "$root"' EXIT INT TERM

debootstrap --variant=minbase --components=main --include="$include" bookworm "$root" "$mirror"

install -m 0755 "$here/entrypoint.sh" "$root/usr/local/sbin/mpictl-node-entrypoint"
install -m 0644 "$here/sshd_config" "$root/etc/ssh/sshd_config.d/mpictl.conf"
# No init system runs in a node: package installs must not try to start daemons.
printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"
chmod 0755 "$root/usr/sbin/policy-rc.d"
# pam_loginuid needs CAP_AUDIT_CONTROL, which containers lack; required, it refuses logins.
sed -i 's/^session\s\+required\s\+pam_loginuid.so/session optional pam_loginuid.so/' \
    "$root/etc/pam.d/sshd"
# Each node generates its own host keys at first start (entrypoint.sh).
rm -f "$root"/etc/ssh/ssh_host_*
# Stale package lists would point at superseded versions; nodes run apt-get update.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
: > "$root/etc/machine-id"

tar --numeric-owner --xattrs --xattrs-include='*' -C "$root" -cf - . |
    podman import \
        --change 'ENTRYPOINT ["/usr/bin/catatonit", "--", "/usr/local/sbin/mpictl-node-entrypoint"]' \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'LABEL io.mpictl.image=node' \
        - "$tag" >/dev/null
