#!/usr/bin/env bash
# Re-derives app/engines/data/*.json, the option tables admission reads command lines with, from
# the engines' and routers' released wheels at the versions pinned in scripts/extract_engine_flags.py
# (SOURCES). `pip download --no-deps` puts the wheels (about 430 MB) in a temporary directory that
# is removed on exit; each parser is built without torch (scripts/extract_engine_flags.py says how).
#   scripts/extract-engine-flags.sh           rewrite the data files
#   scripts/extract-engine-flags.sh --check   write nothing; exit 1 when a committed file differs
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
status=0
while read -r file pin; do
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
    -d "$work/wheels" "$pin"
  mkdir -p "$work/$file"
  "$PY" scripts/extract_engine_flags.py --source "$file" --wheels "$work/wheels" --scratch "$work/$file" "$@" \
    || status=1
done < <("$PY" scripts/extract_engine_flags.py --list)
exit "$status"
