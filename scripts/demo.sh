#!/usr/bin/env bash
# The main job on a fresh machine: a 3-node sandbox cluster (with Slurm), provisioned and
# smoke-tested, directly and through Slurm.
#   bash scripts/demo.sh            (re-runs reuse the node image and the artifact cache)
#   bash scripts/demo.sh --cuda     (also NCCL and nccl-tests, compiled with the host's CUDA
#                                    toolkit at /usr/local/cuda; the sandbox has no GPU to run
#                                    them, so the plain demo leaves them out)
#
# The MPI stack comes first and is proven before the rest is built: a new user sees a working
# MPI cluster (the MPI smoke suite on three nodes) 12 minutes into a cold run of 18 (2 cores, no
# mpictl cache, state or node image; 2026-11-28). Each step says what it does and how long it took
# then; the table at the end has this run's times.
set -euo pipefail
cd "$(dirname "$0")/.."

cuda=()
[ $# -le 1 ] || { echo "demo: one option at most (--cuda)" >&2; exit 2; }
case "${1:-}" in
  "") ;;
  --cuda)
    [ -x /usr/local/cuda/bin/nvcc ] || { echo "demo: --cuda needs nvcc at /usr/local/cuda" >&2; exit 2; }
    cuda=(--cuda) ;;
  *) echo "demo: unknown option '$1' (the only one is --cuda)" >&2; exit 2 ;;
esac

steps=()
started=$SECONDS
step_began=$SECONDS
step() { # step "what" "cold time": end the step before, announce this one
  [ "${#steps[@]}" -eq 0 ] || steps[-1]+=$'\t'$((SECONDS - step_began))
  step_began=$SECONDS
  steps+=("$1")
  printf '\n=== demo step %d: %s (%s)\n' "${#steps[@]}" "$1" "$2" >&2
}
table() { # the steps so far and their times (also when a step failed)
  local rc=$?
  [ "${#steps[@]}" -gt 0 ] || return "$rc"
  steps[-1]+=$'\t'$((SECONDS - step_began))
  printf '\n=== demo: %d s in all%s\n' $((SECONDS - started)) "$([ "$rc" = 0 ] || echo ", failed in the last step")" >&2
  printf '%s\n' "${steps[@]}" | awk -F'\t' '{ printf "  %5d s  %s\n", $2, $1 }' >&2
  return "$rc"
}
trap table EXIT

step "the controller's venv (mpictl, Ansible)" "cold: 15 s with pip's cache, minutes without"
bash scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
# Built artifacts are cached per machine (as in scripts/test.sh): a second clone, or the test
# suite, installs what an earlier run compiled.
export MPICTL_CACHE_DIR=${MPICTL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mpictl}

# The controller downloads sources into its cache (nodes never reach the internet) and writes a
# vars file that points the roles at them.
step "sources into the controller's cache" "cold: 9 s"
sources_vars=$(bash scripts/fetch-test-sources.sh)

step "the node image and three sandbox nodes" "cold: 80 s (debootstrap)"
mpictl sandbox up "${cuda[@]}"

# The MPI stack alone first: SSH mesh, environment, hostfile, UCX, UCC, OpenMPI (each compiled
# once, on one node, and sent to the others) and mpi4py in the cluster venv, and the job side's
# programs; then the MPI smoke suite on all three nodes.
step "the MPI stack: UCX, UCC, OpenMPI and mpi4py, built once" "cold: 10 min; 80 s from the cache"
mpictl provision -e "@$sources_vars" --tags ssh,environment,hostfile,ucx,ucc,openmpi,mpi4py,jobs
mpictl hostfile
step "the MPI smoke suite on three nodes" "3 s"
mpictl smoke --suite mpi

# Everything else site.yml does on this inventory: PyTorch and Horovod, the health checks,
# metrics (Prometheus on node1) and Slurm 26.05 built against OpenMPI's PMIx (and, with --cuda,
# NCCL and nccl-tests). What the run above installed takes the short path.
step "PyTorch and Horovod, health checks, metrics and Slurm" "cold: 6 min; 2 min from the cache"
mpictl provision -e "@$sources_vars"
step "doctor and the whole smoke suite (MPI and Horovod)" "15 s"
mpictl doctor
mpictl smoke --suite all
# The sandbox runs Slurm too (slurm_enabled in its inventory): the same suite through sbatch/srun.
# It builds the vendored Slurm 26.05.3 (the newest source reachable here), so the provision above
# warns once that 26.05.5 fixes its known CVEs; a real cluster gets 26.05.5 by default.
step "the MPI smoke suite through Slurm" "3 s"
mpictl smoke --suite mpi --launcher slurm
