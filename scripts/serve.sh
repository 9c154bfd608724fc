#!/usr/bin/env bash
# Sets up and starts the service locally on the example world (no cluster needed).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-venv.sh
exec .venv/bin/modeldeployment serve --world examples/world --host "${HOST:-127.0.0.1}" --port "${PORT:-8080}"
