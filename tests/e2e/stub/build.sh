#!/usr/bin/env bash
# Build the stub engine/router binary and pack the e2e images (tests/e2e/stub/README.md).
#
# Usage: tests/e2e/stub/build.sh <out-dir>
#
# Writes (paths absolute in images.txt):
#   <out-dir>/stub-<hash>/stub             the static binary (CGO_ENABLED=0, standard library only)
#   <out-dir>/stub-<hash>/images/<name>.tar one docker-archive tarball per entry of images.json
#   <out-dir>/current -> stub-<hash>
#   <out-dir>/images.txt                   one line per tarball: `<abs path of tar> <ref> [<ref>...]`,
#                                          refs normalized as containerd names them (docker.io/...)
# <hash> covers this module's sources, the engines' option tables (app/engines/data) and the Go
# version, so a second run with nothing changed does no build at all; older stub-* dirs are removed.
# Needs go, not root, not Docker. Honours GOPATH/GOMODCACHE/GOCACHE when set (else the e2e cache,
# ${MODELDEPLOYMENT_CACHE:-~/.cache/modeldeployment}, like tests/e2e/components/build.sh).
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 <out-dir>" >&2; exit 2; }
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
mkdir -p "$1"
OUT="$(cd "$1" && pwd)"

command -v go >/dev/null || { echo "stub/build.sh: go is not installed (needed to build the stub engine)" >&2; exit 1; }
CACHE="${MODELDEPLOYMENT_CACHE:-$HOME/.cache/modeldeployment}"
export GOPATH="${GOPATH:-$CACHE/go}"
export GOMODCACHE="${GOMODCACHE:-$GOPATH/pkg/mod}"
export GOCACHE="${GOCACHE:-$CACHE/go-build}"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
export CGO_ENABLED=0

# One build at a time per output directory.
if command -v flock >/dev/null; then
  exec 9>"$OUT/.lock"
  flock 9
fi

sources() {
  (cd "$HERE" && find . -type f \( -name '*.go' -o -name '*.json' -o -name go.mod -o -name build.sh \) \
     -not -path './cmd/stub/tables/*' | LC_ALL=C sort | xargs sha256sum)
  (cd "$ROOT" && sha256sum app/engines/data/*.json)
  go version
  go env GOARCH
}
HASH="$(sources | sha256sum | cut -c1-16)"
DIR="$OUT/stub-$HASH"

if [ ! -f "$DIR/.done" ]; then
  STAGE="$(mktemp -d "$OUT/.stage.XXXXXX")"
  trap 'rm -rf "$STAGE"' EXIT
  # Build from a staged copy: the engines' option tables are embedded from app/engines/data (one
  # source of truth), which go:embed cannot reach outside the module.
  mkdir -p "$STAGE/src"
  cp "$HERE/go.mod" "$STAGE/src/"
  cp -r "$HERE/cmd" "$STAGE/src/"
  rm -rf "$STAGE/src/cmd/stub/tables"
  mkdir -p "$STAGE/src/cmd/stub/tables"
  cp "$ROOT"/app/engines/data/*.json "$STAGE/src/cmd/stub/tables/"
  mkdir -p "$STAGE/out/images"
  (cd "$STAGE/src" && go build -trimpath -ldflags="-s -w" -o "$STAGE/out/stub" ./cmd/stub \
                   && go build -trimpath -o "$STAGE/pack" ./cmd/pack)
  "$STAGE/pack" -binary "$STAGE/out/stub" -images "$HERE/images.json" -out "$STAGE/out/images" -label "$HASH" \
    >"$STAGE/out/images.lst"
  touch "$STAGE/out/.done"
  rm -rf "$DIR"
  mv "$STAGE/out" "$DIR"
  echo "stub/build.sh: built $DIR" >&2
fi

# Only the current build is kept.
for old in "$OUT"/stub-*; do
  [ "$old" = "$DIR" ] || rm -rf "$old"
done
ln -sfn "stub-$HASH" "$OUT/current"
awk -v dir="$DIR/images" '{ $1 = dir "/" $1; print }' "$DIR/images.lst" >"$OUT/.images.txt.tmp"
mv "$OUT/.images.txt.tmp" "$OUT/images.txt"
