#!/usr/bin/env bash
# One command for every benchmark: bench/run.sh [--quick] [--only sync,throughput,...]
# Installs the benchmark-only tools (matplotlib for the plot, pyinstrument for the profile)
# into the project's venv when they are missing, then runs `python -m bench`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
if [ ! -x "$PY" ]; then
  echo "no .venv: create it first (python -m venv .venv && .venv/bin/pip install -e '.[test]')" >&2
  exit 2
fi
missing=()
"$PY" -c 'import matplotlib' 2>/dev/null || missing+=(matplotlib)
"$PY" -c 'import pyinstrument' 2>/dev/null || missing+=(pyinstrument)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing into .venv: ${missing[*]}"
  "$PY" -m pip install --quiet "${missing[@]}"
fi
exec "$PY" -m bench "$@"
