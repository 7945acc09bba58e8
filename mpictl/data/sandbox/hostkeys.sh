#!/bin/sh
# ExecStart of mpictl-hostkeys.service, before ssh.service: create this node's own SSH host
# keys on first boot (the image ships none, so no two nodes share one; ed25519 and ECDSA only,
# RSA would cost seconds per node).
set -eu
for type in ed25519 ecdsa; do
    key=/etc/ssh/ssh_host_${type}_key
    [ -s "$key" ] || ssh-keygen -q -t "$type" -N '' -f "$key"
done
