#!/usr/bin/env bash
# Install what mpictl needs on a fresh Debian/Ubuntu controller: podman + runc + debootstrap for the
# sandbox, squashfs-tools for container images (scripts/container-image.sh),
# the SSH client, and the Python package (with its test extra) in ./.venv.
# Idempotent and quick when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(podman runc debootstrap openssh-client rsync uidmap catatonit iperf3 bzip2 xz-utils ca-certificates
  squashfs-tools)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "bootstrap: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.mpictl-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[test]'
  touch "$stamp"
fi
echo "bootstrap: ready (mpictl $(.venv/bin/mpictl version), $(.venv/bin/ansible --version | sed -n 1p))"
