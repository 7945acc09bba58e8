#!/usr/bin/env bash
# Fetch the source packages the tests and the sandbox provision use into the controller cache,
# and write a vars file pointing the roles at them (air-gapped style: `*_source_local` + sha256).
#
#   scripts/fetch-test-sources.sh [DEST_DIR]
#
# DEST_DIR defaults to "$MPICTL_CACHE_DIR/sources" (MPICTL_CACHE_DIR defaults to
# $XDG_CACHE_HOME/mpictl, i.e. ~/.cache/mpictl, as for mpictl itself). Idempotent: a file
# already present is not downloaded again, so a second run takes well under a second. The vars file is written to "$DEST_DIR/test-sources.yml"
# (override with MPICTL_TEST_SOURCES_VARS) and can be passed as `-e @file`.
#
# Debian sources come from Debian's archive through apt itself: a temporary deb-src list whose
# URI is copied at runtime from the host's /etc/apt/sources.list.d/debian.sources (or
# /etc/apt/sources.list), with private apt state dirs — the host's apt configuration is not
# modified. Python sdists come from PyPI through pip. nccl-tests, UCX and UCC are vendored in the
# repository (tests/data/sources/) and only copied.
#
# To add a source: write one `fetch_<name>` function that puts the file into "$DEST" and calls
# `emit_var <var> <value>` for each variable, then add it to SOURCES below.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${MPICTL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mpictl}"
DEST="$(mkdir -p "${1:-$CACHE/sources}" && cd "${1:-$CACHE/sources}" && pwd)"
VARS_FILE="${MPICTL_TEST_SOURCES_VARS:-$DEST/test-sources.yml}"

# UCX is vendored (tests/data/sources/, a git archive of the tag: Debian's UCX sources cannot be
# fetched here, and UCX's CUDA 13 support came with 1.20.0): no download.
UCX_VERSION="${UCX_VERSION:-1.22.0}"
# UCC is vendored too (tests/data/sources/, a git archive of its tag: no registry carries it).
UCC_VERSION="${UCC_VERSION:-1.8.0}"
OPENMPI_VERSION="${OPENMPI_VERSION:-5.0.7}"
OPENMPI_DEBIAN_SUITE="${OPENMPI_DEBIAN_SUITE:-trixie}"
MPI4PY_VERSION="${MPI4PY_VERSION:-4.1.2}"
CYTHON_VERSION="${CYTHON_VERSION:-3.2.4}"

NCCL_VERSION="${NCCL_VERSION:-2.29.7}"
NCCL_RELEASE="${NCCL_RELEASE:-1}"
NCCL_DEBIAN_SUITE="${NCCL_DEBIAN_SUITE:-sid}"
# nccl-tests is vendored (tests/data/sources/, see its README.md): no download.
NCCL_TESTS_VERSION="${NCCL_TESTS_VERSION:-2.19.6}"
HOROVOD_VERSION="${HOROVOD_VERSION:-0.28.1}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
TORCH_WHEELHOUSE="${TORCH_WHEELHOUSE:-/opt/wheels}"
# Slurm is vendored too (tests/data/sources/, a git archive of SchedMD's tag slurm-26-05-3-1).
# The tests build 26.05.3, not the role's default 26.05.5: 26.05.5's source cannot be fetched
# here (SchedMD's repository reachable here ends at 26.05.3, and Debian's orig file of 26.05.5,
# listed in sid's Sources, is not served), so the tests also show the role's warning of a release
# with known vulnerabilities.
SLURM_VERSION="${SLURM_VERSION:-26.05.3}"

# enroot and pyxis are vendored too (tests/data/sources/, git archives of their tags: neither is
# in Debian). Their files are GitHub's archive bytes, so they match the containers role's pins.
ENROOT_VERSION="${ENROOT_VERSION:-4.1.2}"
PYXIS_VERSION="${PYXIS_VERSION:-0.24.0}"

SOURCES=(ucx ucc openmpi mpi4py nccl nccl_tests horovod torch slurm containers)

log() { printf 'fetch-test-sources: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
sha256() { sha256sum "$1" | cut -d' ' -f1; }

_VARS=()
emit_var() { _VARS+=("$1: \"$2\""); }
# role_default PREFIX VAR: a scalar default of roles/PREFIX (e.g. nccl_version), unquoted.
role_default() {
  sed -n "s/^$2: *\"\{0,1\}\([^\"]*\)\"\{0,1\} *$/\1/p" "$ROOT/roles/$1/defaults/main.yml"
}
# check_pin ROLE VERSION_VAR SHA_VAR VERSION FILE SUM: a file of the role's default version
# (VERSION_VAR in roles/ROLE) must have the sha256 the role pins (SHA_VAR): the released file,
# not whatever a mirror served first.
check_pin() {
  [[ "$4" == "$(role_default "$1" "$2")" ]] || return 0
  local want
  want="$(role_default "$1" "$3")"
  [[ "$6" == "$want" ]] \
    || die "$5 has sha256 $6, but roles/$1 pins $want for $2 $4; remove the file and retry"
}
# emit_source PREFIX VERSION FILE [pinned]: the variables pointing a role at a source in the
# cache. With "pinned", the file is checked against the role's pin (check_pin); Debian's repacked
# OpenMPI orig tarball and the vendored git archive of UCX are the sources that cannot match
# upstream's checksum (of its release tarball), so they carry their own.
emit_source() {
  local sum
  sum="$(sha256 "$3")"
  if [[ "${4:-}" == pinned ]]; then
    check_pin "$1" "$1_version" "$1_source_sha256" "$2" "$3" "$sum"
  fi
  emit_var "$1_version" "$2"
  emit_var "$1_source_local" "$3"
  emit_var "$1_source_sha256" "$sum"
}

# --- apt helpers -----------------------------------------------------------------------------
_APT_TMP=""
cleanup() { [[ -n "$_APT_TMP" ]] && rm -rf "$_APT_TMP"; return 0; }
trap cleanup EXIT

debian_mirror() {
  # First Debian archive URI the host already uses (never hard-coded in the repository).
  local uri=""
  if [[ -r /etc/apt/sources.list.d/debian.sources ]]; then
    uri="$(awk '/^URIs:/ {print $2}' /etc/apt/sources.list.d/debian.sources \
      | grep -v -- '-security' | head -n1 || true)"
  fi
  if [[ -z "$uri" && -r /etc/apt/sources.list ]]; then
    uri="$(awk '$1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' \
      /etc/apt/sources.list || true)"
  fi
  [[ -n "$uri" ]] || die "no Debian archive URI found in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list"
  printf '%s\n' "$uri"
}

# apt_source_version PACKAGE UPSTREAM-VERSION: the Debian version (e.g. 5.0.7-1) of a source
# package whose upstream version matches, from the temporary deb-src lists.
apt_source_version() {
  _apt_cache showsrc "$1" 2>/dev/null | awk -v want="$2" '
    /^Version:/ { v = $2; u = v; sub(/^[0-9]+:/, "", u); sub(/-[^-]*$/, "", u);
                  sub(/\+dfsg.*$/, "", u); sub(/\+ds.*$/, "", u); if (u == want) print v }' \
    | sort -V | tail -n1
}

# apt_prepare SUITE COMPONENT: add a temporary deb-src entry and refresh the private lists.
_APT_READY=""
apt_prepare() {
  local suite="$1" component="$2" key="$1/$2"
  [[ " $_APT_READY " == *" $key "* ]] && return 0
  command -v apt-get >/dev/null || die "apt-get not found (Debian sources need a Debian/Ubuntu controller)"
  if [[ -z "$_APT_TMP" ]]; then
    _APT_TMP="$(mktemp -d)"
    mkdir -p "$_APT_TMP/lists/partial" "$_APT_TMP/archives/partial" "$_APT_TMP/parts"
    : >"$_APT_TMP/sources.list"
  fi
  local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  printf 'deb-src [signed-by=%s] %s %s %s\n' "$keyring" "$(debian_mirror)" "$suite" "$component" \
    >>"$_APT_TMP/sources.list"
  _apt update -qq >/dev/null || die "apt-get update for deb-src $suite/$component failed"
  _APT_READY="$_APT_READY $key"
}
_apt() { _apt_cmd apt-get "$@"; }
_apt_cache() { _apt_cmd apt-cache "$@"; }
_apt_cmd() {
  local tool="$1"; shift
  "$tool" -o Dir::Etc::SourceList="$_APT_TMP/sources.list" \
    -o Dir::Etc::SourceParts="$_APT_TMP/parts" \
    -o Dir::State::Lists="$_APT_TMP/lists" \
    -o Dir::Cache::Archives="$_APT_TMP/archives" \
    -o Dir::Cache::pkgcache="" -o Dir::Cache::srcpkgcache="" \
    -o APT::Sandbox::User=root "$@"
}

# copy_vendored FILE: the file of that name in tests/data/sources/ (sources no reachable registry
# carries, vendored so a clean clone has them) copied to FILE once.
copy_vendored() {
  local vendored
  vendored="$ROOT/tests/data/sources/$(basename "$1")"
  [[ -s "$1" ]] && return 0
  [[ -s "$vendored" ]] || die "$vendored not found (not vendored in this checkout)"
  log "copying the vendored $(basename "$1")"
  cp "$vendored" "$1.part" && chmod 0644 "$1.part" && mv "$1.part" "$1"
}

# --- one function per source -----------------------------------------------------------------
# `git archive` of openucx/ucx's tag, vendored in the repository (a clean clone has it); copied
# into $DEST once. It has no generated configure (the role runs autogen.sh) and is not upstream's
# release tarball, so it carries its own sha256 (the README of tests/data/sources/ records it).
fetch_ucx() {
  local file="$DEST/ucx-${UCX_VERSION}.tar.xz"
  copy_vendored "$file"
  emit_source ucx "$UCX_VERSION" "$file"
}

# The same for openucx/ucc's tag. The vendored file is `git archive --format=tar.gz` (git's own
# gzip), the same tar as GitHub's archive but other bytes: it carries its own sha256 (the role
# pins GitHub's).
fetch_ucc() {
  local file="$DEST/ucc-${UCC_VERSION}.tar.gz"
  copy_vendored "$file"
  emit_source ucc "$UCC_VERSION" "$file"
}

fetch_openmpi() {
  # Debian's orig tarball (its name keeps Debian's compression suffix; its checksum differs from
  # upstream's .tar.bz2, so the vars file carries this file's own sha256).
  local file
  file="$(find "$DEST" -maxdepth 1 -name "openmpi_${OPENMPI_VERSION}.orig.tar.*" | head -n1)"
  if [[ -z "$file" ]]; then
    log "downloading Debian source openmpi $OPENMPI_VERSION ($OPENMPI_DEBIAN_SUITE)"
    apt_prepare "$OPENMPI_DEBIAN_SUITE" main
    local deb_version work orig
    deb_version="$(apt_source_version openmpi "$OPENMPI_VERSION")"
    [[ -n "$deb_version" ]] || die "openmpi $OPENMPI_VERSION not in Debian $OPENMPI_DEBIAN_SUITE"
    work="$(mktemp -d "$DEST/.openmpi.XXXXXX")"
    (cd "$work" && _apt source --download-only -qq "openmpi=${deb_version}" >/dev/null) \
      || { rm -rf "$work"; die "apt-get source openmpi=${deb_version} failed"; }
    orig="$(find "$work" -maxdepth 1 -name "openmpi_${OPENMPI_VERSION}*.orig.tar.*" | head -n1)"
    [[ -n "$orig" ]] || { rm -rf "$work"; die "no orig tarball for openmpi $OPENMPI_VERSION"; }
    file="$DEST/$(basename "$orig")"
    mv "$orig" "$file.part" && mv "$file.part" "$file"
    rm -rf "$work"
  fi
  emit_source openmpi "$OPENMPI_VERSION" "$file"
}

# pip_fetch FILE WHAT PIP_DOWNLOAD_ARGS...: FILE (its name as pip saves it) downloaded into $DEST
# once, through a private folder so that a failed download leaves nothing behind.
pip_fetch() {
  local file="$1" what="$2"
  shift 2
  [[ ! -s "$file" ]] || return 0
  log "downloading $what"
  local work
  work="$(mktemp -d "$DEST/.fetch.XXXXXX")"
  python3 -m pip download --quiet --no-deps --dest "$work" "$@" \
    || { rm -rf "$work"; die "pip download of $what failed"; }
  mv "$work/$(basename "$file")" "$file.part" && mv "$file.part" "$file"
  rm -rf "$work"
}

# fetch_sdist PREFIX NAME VERSION NO_BINARY: NAME==VERSION's sdist from PyPI into $DEST (once),
# then its variables. NO_BINARY is pip's --no-binary value: just NAME keeps its build deps
# (setuptools, wheel) as wheels, which is faster.
fetch_sdist() {
  local prefix="$1" name="$2" version="$3" no_binary="$4"
  local file="$DEST/${name}-${version}.tar.gz"
  pip_fetch "$file" "$name $version sdist" --no-binary "$no_binary" "${name}==${version}"
  emit_source "$prefix" "$version" "$file" pinned
}

# mpi4py 4.x builds with Cython: its pure-Python wheel, which the builder's build venv installs.
fetch_mpi4py() {
  fetch_sdist mpi4py mpi4py "$MPI4PY_VERSION" mpi4py
  local file="$DEST/cython-${CYTHON_VERSION}-py3-none-any.whl"
  pip_fetch "$file" "Cython $CYTHON_VERSION (pure-Python wheel)" --only-binary :all: \
    --platform any --implementation py --abi none "cython==${CYTHON_VERSION}"
  local sum
  sum="$(sha256 "$file")"
  check_pin mpi4py mpi4py_cython_version mpi4py_cython_sha256 "$CYTHON_VERSION" "$file" "$sum"
  emit_var mpi4py_cython_version "$CYTHON_VERSION"
  emit_var mpi4py_cython_local "$file"
  emit_var mpi4py_cython_sha256 "$sum"
}

fetch_nccl() {
  local file="$DEST/nvidia-nccl_${NCCL_VERSION}.orig.tar.gz"
  if [[ ! -s "$file" ]]; then
    log "downloading Debian source nvidia-nccl $NCCL_VERSION ($NCCL_DEBIAN_SUITE contrib)"
    apt_prepare "$NCCL_DEBIAN_SUITE" contrib
    local deb_version work
    # NCCL versions carry a release suffix (tag v2.29.7-1): Debian version 2.29.7-1-1.
    deb_version="$(apt_source_version nvidia-nccl "${NCCL_VERSION}-${NCCL_RELEASE}")"
    [[ -n "$deb_version" ]] || die "nvidia-nccl $NCCL_VERSION not in Debian $NCCL_DEBIAN_SUITE"
    work="$(mktemp -d "$DEST/.nccl.XXXXXX")"
    # Debian's .dsc for this upload may be missing on mirrors; the orig tarball is what we need,
    # so a failing `apt-get source` is tolerated as long as the tarball arrived.
    (cd "$work" && _apt source --download-only -qq "nvidia-nccl=${deb_version}" >/dev/null 2>&1) || true
    local orig
    orig="$(find "$work" -maxdepth 1 -name "nvidia-nccl_${NCCL_VERSION}*.orig.tar.*" | head -n1)"
    [[ -n "$orig" ]] || { rm -rf "$work"; die "no orig tarball for nvidia-nccl $NCCL_VERSION"; }
    mv "$orig" "$file.part" && mv "$file.part" "$file"
    rm -rf "$work"
  fi
  emit_source nccl "$NCCL_VERSION" "$file" pinned
}

# The `git archive` of NVIDIA/nccl-tests' tag, vendored in the repository (a clean clone has it);
# copied into $DEST once. Made with git's own gzip: the same tar as GitHub's archive, other bytes,
# so it carries its own sha256 (the role pins GitHub's).
fetch_nccl_tests() {
  local file="$DEST/nccl-tests-${NCCL_TESTS_VERSION}.tar.gz"
  copy_vendored "$file"
  emit_source nccl_tests "$NCCL_TESTS_VERSION" "$file"
}

fetch_horovod() { fetch_sdist horovod horovod "$HOROVOD_VERSION" :all:; }

# The CPU torch wheel lies on this machine (TORCH_WHEELHOUSE); the horovod role downloads torch's
# and Horovod's pure-Python dependencies itself (controller side) into the cache.
fetch_torch() {
  [[ -d "$TORCH_WHEELHOUSE" ]] || die "torch wheelhouse $TORCH_WHEELHOUSE not found"
  compgen -G "$TORCH_WHEELHOUSE/torch-${TORCH_VERSION}*.whl" >/dev/null \
    || die "no torch ${TORCH_VERSION} wheel in $TORCH_WHEELHOUSE"
  emit_var horovod_torch_version "$TORCH_VERSION"
  emit_var horovod_torch_wheelhouse "$TORCH_WHEELHOUSE"
}

# `git archive` of SchedMD/slurm's tag, vendored in the repository (a clean clone has it; Debian's
# newer suites list Slurm 26.05, but the archive here serves only trixie's 24.11 file, which
# SchedMD no longer supports). It is xz-compressed, not the tag's .tar.gz the role pins, so it
# carries its own sha256 (the README of tests/data/sources/ records it).
fetch_slurm() {
  local file="$DEST/slurm-${SLURM_VERSION}.tar.xz"
  copy_vendored "$file"
  emit_source slurm "$SLURM_VERSION" "$file"
}

fetch_containers() {
  local enroot="$DEST/enroot-${ENROOT_VERSION}.tar.gz" pyxis="$DEST/pyxis-${PYXIS_VERSION}.tar.gz"
  copy_vendored "$enroot"
  copy_vendored "$pyxis"
  check_pin containers containers_enroot_version containers_enroot_source_sha256 \
    "$ENROOT_VERSION" "$enroot" "$(sha256 "$enroot")"
  check_pin containers containers_pyxis_version containers_pyxis_source_sha256 \
    "$PYXIS_VERSION" "$pyxis" "$(sha256 "$pyxis")"
  emit_var containers_enroot_version "$ENROOT_VERSION"
  emit_var containers_enroot_source_local "$enroot"
  emit_var containers_enroot_source_sha256 "$(sha256 "$enroot")"
  emit_var containers_pyxis_version "$PYXIS_VERSION"
  emit_var containers_pyxis_source_local "$pyxis"
  emit_var containers_pyxis_source_sha256 "$(sha256 "$pyxis")"
}

main() {
  local src
  # One fetch at a time per cache: two test workers, a Molecule scenario and the suite, or the
  # demo and the suite, may run this at once; the second waits, then finds every file in place.
  exec 9>"$DEST/.fetch.lock"
  flock 9
  for src in "${SOURCES[@]}"; do
    "fetch_$src"
  done
  {
    printf '# Written by scripts/fetch-test-sources.sh: sources in the controller cache.\n'
    printf '%s\n' "${_VARS[@]}"
  } >"$VARS_FILE.part"
  mv "$VARS_FILE.part" "$VARS_FILE"
  printf '%s\n' "$VARS_FILE"
}

main
