#!/usr/bin/env bash
# Sets up and starts the service locally on the example world (no cluster needed). Arguments go to
# `modeldeployment serve` (e.g. --port 9443 --hooks-port 9081); so do its MODELDEPLOYMENT_HOST,
# MODELDEPLOYMENT_PORT and MODELDEPLOYMENT_HOOKS_PORT (defaults 127.0.0.1, 8443 and 8081; README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-venv.sh
exec .venv/bin/modeldeployment serve --world examples/world "$@"
