#!/bin/sh
# PID 2 of a sandbox node (catatonit is PID 1 and reaps orphans): create this node's own SSH
# host keys on first start (the image ships none, so no two nodes share one), then run sshd in
# the foreground. `mpictl sandbox up` waits for the marker before reading the public host keys.
set -eu
rm -f /run/mpictl-hostkeys-ready
ssh-keygen -A >/dev/null
mkdir -p /run/sshd
touch /run/mpictl-hostkeys-ready
exec /usr/sbin/sshd -D -e
