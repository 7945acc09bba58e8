#!/bin/sh
# Runs inside a sandbox node as root, started by `mpictl sandbox up` through podman exec:
#   sh -c "$(cat sandbox_node_setup.sh)" sandbox-setup READY_FILE WAIT_TENTHS < controller-key.pub
# Waits (up to WAIT_TENTHS tenths of a second) until the node has booted far enough that sshd runs
# with its own host keys (its ssh.service touches READY_FILE), puts the controller's public key (stdin) into root's
# authorized_keys once, and prints the node's public host keys (the controller pins them).
set -eu
ready=$1
tenths=$2
i=0
while [ ! -e "$ready" ]; do
  i=$((i + 1))
  if [ "$i" -gt "$tenths" ]; then
    echo "sshd did not start (systemctl status ssh mpictl-hostkeys in the node says why)" >&2
    exit 1
  fi
  sleep 0.1
done
umask 077
mkdir -p /root/.ssh
key=$(cat)
touch /root/.ssh/authorized_keys
grep -qxF "$key" /root/.ssh/authorized_keys || printf '%s\n' "$key" >>/root/.ssh/authorized_keys
cat /etc/ssh/ssh_host_*_key.pub
