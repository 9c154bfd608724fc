#!/usr/bin/env bash
# Sets up and runs the whole test suite: the type check (mypy, strict on app/), then unit, API and
# end-to-end (a real control plane built from Go modules, cached under
# ${MODELDEPLOYMENT_CACHE:-$HOME/.cache/modeldeployment}, with a real node: kubelet + containerd).
# MODELDEPLOYMENT_E2E=0 skips the end-to-end suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-venv.sh
# pyproject.toml's [tool.mypy]; a type error fails the run before any test.
.venv/bin/python -m mypy app
if [ "${MODELDEPLOYMENT_E2E:-1}" != "0" ]; then
  # The e2e real node's runtime (containerd, runc, CNI plugins, iptables) from Debian's packages;
  # nothing to do when they are installed (tests/e2e/README.md, "The real node").
  scripts/setup-node.sh
  tests/e2e/components/build.sh
fi
exec .venv/bin/python -m pytest "$@"
