#!/usr/bin/env bash
# The test suite: lint, unit tests, then integration tests that provision a real 3-node sandbox.
#   bash scripts/test.sh             (all tiers)
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
ruff check mpictl tests bench filter_plugins roles examples playbooks mpictl/scripts/mpictl-tf-env
ruff format --check mpictl tests bench filter_plugins roles examples playbooks mpictl/scripts/mpictl-tf-env
shellcheck scripts/*.sh bench/*.sh .ci/run mpictl/scripts/*.sh mpictl/scripts/mpictl-torch-env
shellcheck -s sh roles/*/files/*.sh  # node probes, run with sh -c through raw
ansible-lint --nocolor -q playbooks roles
pytest -q -p no:cacheprovider -rs tests/unit
if [ "$tier" = all ]; then
  bash scripts/fetch-test-sources.sh
  # Two workers (pytest-xdist, --dist loadgroup): the session sandbox's tests on one, the modules
  # and Molecule scenarios with sandboxes of their own beside them on the other, once the session's
  # first provision has filled the artifact cache (tests/integration/conftest.py: OWN_SANDBOX,
  # warm_cache). MPICTL_IT_WORKERS=0 runs them all in one process, one after another.
  # --durations: the profile of every test (setup included), the first place to look when CI slows.
  workers=${MPICTL_IT_WORKERS:-2}
  parallel=(); [ "$workers" = 0 ] || parallel=(-n "$workers" --dist loadgroup)
  pytest -v -p no:cacheprovider -rs --durations=60 --durations-min=5 "${parallel[@]}" \
    -m integration tests/integration
fi
