#!/bin/sh
# What `mpictl init` reports about a machine, read with the user's own ssh (`ssh HOST sh -s`,
# this text on stdin). Read-only, POSIX sh, no bashisms: one key=value line per fact.
#   mpictl_probe=1  the probe ran (lines before it, e.g. a login banner, are ignored)
#   user            the login user
#   sudo            yes (passwordless sudo works), root (logged in as root, no sudo), or no
#   os              PRETTY_NAME of /etc/os-release
#   python          python3's version, empty when there is none
#   cpus            online CPUs (nproc)
#   gpus            NVIDIA GPUs: nvidia-smi -L, else the /dev/nvidia<N> device files
#   host_keys       SSH host keys in /etc/ssh (ssh_host_*_key.pub): jobs log in over ssh
echo mpictl_probe=1
echo "user=$(id -un 2>/dev/null)"

if sudo -n true >/dev/null 2>&1; then
    echo sudo=yes
elif [ "$(id -u)" = 0 ]; then
    echo sudo=root
else
    echo sudo=no
fi

os=""
if [ -r /etc/os-release ]; then
    os=$(sed -n 's/^PRETTY_NAME=//p' /etc/os-release | head -n 1 |
        sed -e 's/^"\(.*\)"$/\1/' -e "s/^'\(.*\)'$/\1/")
fi
echo "os=$os"

python=""
if command -v python3 >/dev/null 2>&1; then
    python=$(python3 -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null)
fi
echo "python=$python"

echo "cpus=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null)"

gpus=""
if command -v nvidia-smi >/dev/null 2>&1; then
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
fi
if [ -z "$gpus" ] || [ "$gpus" = 0 ]; then
    gpus=0
    for dev in /dev/nvidia[0-9]*; do
        [ -e "$dev" ] && gpus=$((gpus + 1))
    done
fi
echo "gpus=$gpus"

host_keys=0
for key in /etc/ssh/ssh_host_*_key.pub; do
    [ -r "$key" ] && host_keys=$((host_keys + 1))
done
echo "host_keys=$host_keys"
