#!/usr/bin/env bash
# The test suite: lint, unit tests and integration tests that provision real sandboxes.
#   bash scripts/test.sh             (all tiers; lint and the unit tests beside the integration tests)
#   bash scripts/test.sh unit        (lint + unit tests only, seconds)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"

# Built artifacts and downloaded sources are cached per machine (like pip's cache), so a fresh
# clone on a machine that ran the suite before installs from the cache instead of compiling;
# on a new machine the suite proves the cold path (exactly one compile per fingerprint).
export MPICTL_CACHE_DIR=${MPICTL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mpictl}

tier=${1:-all}

fast_tiers() {
  ruff check mpictl tests bench filter_plugins roles examples playbooks mpictl/scripts/mpictl-tf-env
  ruff format --check mpictl tests bench filter_plugins roles examples playbooks mpictl/scripts/mpictl-tf-env
  shellcheck scripts/*.sh bench/*.sh .ci/run mpictl/scripts/*.sh mpictl/scripts/mpictl-torch-env \
    mpictl/scripts/mpictl-container mpictl/scripts/mpictl-container.conf
  shellcheck -s sh mpictl/scripts/mpictl-container.rc
  shellcheck -s sh roles/*/files/*.sh  # node probes, run with sh -c through raw
  ansible-lint --nocolor -q playbooks roles
  pytest -q -p no:cacheprovider -rs tests/unit
}

if [ "$tier" != all ]; then
  fast_tiers
  exit 0
fi

# All tiers. The integration tests start at once and lint and the unit tests run beside them
# (their output is printed at the end): the first minutes of the integration tests are
# fetching sources and starting sandboxes, which leave most of a CPU idle (measured), and the
# unit tests use one CPU. A failure in any tier fails the run.
fast_log=$(mktemp)
fast_tiers >"$fast_log" 2>&1 &
fast=$!
if ! bash scripts/fetch-test-sources.sh; then
  echo "the test sources could not be fetched: no integration tests" >&2
  wait "$fast" || true
  cat "$fast_log"
  exit 1
fi
# Two pytest processes side by side: the session sandbox's tests, and the tests with sandboxes
# of their own (marker `beside`: tests/integration/conftest.py, OWN_SANDBOX; Molecule's
# scenarios among them), which start compiling nothing the session's first provision builds:
# they wait for it (MPICTL_IT_RUN names this run's marker in the cache). The second process's
# output is printed when it ends. MPICTL_IT_PARALLEL=0 runs them in one process, one after the
# other. --durations: the profile of every test, the first place to look when CI slows.
it=(pytest -v -p no:cacheprovider -rs --durations=40 --durations-min=5)
rc=0
if [ "${MPICTL_IT_PARALLEL:-1}" = 0 ]; then
  "${it[@]}" -m integration tests/integration || rc=$?
else
  MPICTL_IT_RUN="$$-$(date +%s)"
  export MPICTL_IT_RUN
  warm="$MPICTL_CACHE_DIR/.it-warm-$MPICTL_IT_RUN"
  beside_log=$(mktemp)
  MPICTL_IT_BESIDE=1 "${it[@]}" -m "integration and beside" tests/integration >"$beside_log" 2>&1 &
  beside=$!
  "${it[@]}" -m "integration and not beside" tests/integration || rc=$?
  [ -e "$warm" ] || echo failed >"$warm" # the session never provisioned: stop the waiting
  wait "$beside" || rc=$((rc ? rc : $?))
  echo "=== the tests with sandboxes of their own (run beside the session sandbox's) ==="
  cat "$beside_log"
  rm -f "$beside_log" "$warm"
fi
wait "$fast" || rc=$((rc ? rc : $?))
echo "=== lint and the unit tests (run beside the integration tests) ==="
cat "$fast_log"
rm -f "$fast_log"
exit "$rc"
