#!/usr/bin/env bash
# Sets up and runs the whole test suite: unit, API and end-to-end (a real control plane built
# from Go modules, cached under ${MODELDEPLOYMENT_CACHE:-$HOME/.cache/modeldeployment}).
# MODELDEPLOYMENT_E2E=0 skips the end-to-end suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-venv.sh
if [ "${MODELDEPLOYMENT_E2E:-1}" != "0" ]; then
  tests/e2e/components/build.sh
fi
exec .venv/bin/python -m pytest "$@"
