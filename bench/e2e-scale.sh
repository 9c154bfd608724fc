#!/usr/bin/env bash
# bench/e2e-scale: N ModelDeployments through the real Metacontroller, ours vs. a baseline hook
# service, on the loopback control plane of tests/e2e (bench/e2e_scale.py; components from the
# e2e cache, tests/e2e/components/build.sh). Rewrites bench/e2e-scale.{json,png} and the
# e2e-scale section of bench/results.md. Modes (--modes): operator and baseline on the three shapes,
# wide (the operator on LeaderWorkerSet's shape) and lws (LeaderWorkerSet itself; bench/lws.py; built
# by tests/e2e/components/build.sh lws, which this script runs first when lws is a mode), then the
# webhooks' latency against a real API server (bench/webhooks.py; --no-webhooks skips it).
# About two hours for the default sizes and modes on 2 quiet cores (N = 200 alone about one).
#   bench/e2e-scale.sh                          # N = 10, 50, 100, 200, every mode
#   bench/e2e-scale.sh --sizes 10 --out /tmp/s  # a smoke run elsewhere
#   bench/e2e-scale.sh --modes operator,baseline  # without LeaderWorkerSet
#   bench/e2e-scale.sh --sizes 200 --modes operator --profile  # where the operator's CPU goes (py-spy)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
"$PY" -c 'import matplotlib' 2>/dev/null || "$PY" -m pip install --quiet matplotlib
case " $* " in
  *" --profile "*) [ -x .venv/bin/py-spy ] || "$PY" -m pip install --quiet py-spy ;;
esac
case " $* " in
  *" --modes "*) [[ " $* " == *lws* ]] && tests/e2e/components/build.sh lws >&2 ;;
  *) tests/e2e/components/build.sh lws >&2 ;;
esac
exec "$PY" -m bench.e2e_scale "$@"
