#!/usr/bin/env bash
# bench/e2e-scale: N ModelDeployments through the real Metacontroller, ours vs. a baseline hook
# service, on the loopback control plane of tests/e2e (bench/e2e_scale.py; components from the
# e2e cache, tests/e2e/components/build.sh). Rewrites bench/e2e-scale.{json,png} and the
# e2e-scale section of bench/results.md. About 45 minutes for the default sizes on 2 cores.
#   bench/e2e-scale.sh                          # N = 10, 50, 100
#   bench/e2e-scale.sh --sizes 10 --out /tmp/s  # a smoke run elsewhere
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
"$PY" -c 'import matplotlib' 2>/dev/null || "$PY" -m pip install --quiet matplotlib
exec "$PY" -m bench.e2e_scale "$@"
