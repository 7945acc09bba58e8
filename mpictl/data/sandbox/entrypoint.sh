#!/bin/sh
# PID 2 of a sandbox node (catatonit is PID 1 and reaps orphans): create this node's own SSH
# host keys on first start (the image ships none, so no two nodes share one; ed25519 and ECDSA
# only, RSA would cost seconds per node), then run sshd in the foreground. `mpictl sandbox up`
# waits for the marker before reading the public host keys.
set -eu
rm -f /run/mpictl-hostkeys-ready
for type in ed25519 ecdsa; do
    key=/etc/ssh/ssh_host_${type}_key
    [ -s "$key" ] || ssh-keygen -q -t "$type" -N '' -f "$key"
done
mkdir -p /run/sshd
touch /run/mpictl-hostkeys-ready
exec /usr/sbin/sshd -D -e
