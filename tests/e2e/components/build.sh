#!/usr/bin/env bash
# Build the control-plane components used by the e2e tests from pinned Go
# modules (served by the Go module proxy) and cache them under
#   ${MODELDEPLOYMENT_CACHE:-$HOME/.cache/modeldeployment}/components/<name>-<version>/
# A component whose directory already exists is skipped, so a warm run takes
# seconds.  GOPATH, GOMODCACHE and GOCACHE live under the same cache directory
# so a later (CI) run on the same machine reuses downloads and compiled packages.
#
# Usage: tests/e2e/components/build.sh [component ...]
#   components: kube-apiserver kube-controller-manager kube-scheduler kubectl etcd
#               kwok kueue metacontroller helm
#               kubelet kube-proxy coredns pause stub  (the real node, tests/e2e/realnode.py)
#               (default: all); lws (only when named)
# Env:
#   MODELDEPLOYMENT_CACHE  cache root (default ~/.cache/modeldeployment)
#   BUILD_PARALLELISM      go build -p value (default: number of cores, max 2)
#   FORCE_REBUILD=1        rebuild even when cached
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# ---- pinned versions -------------------------------------------------------
KUBERNETES_VERSION=v1.36.3      # tests/e2e/components/kubernetes/go.mod pins the same
ETCD_VERSION=v3.6.8             # selected by the k8s.io/kubernetes v1.36.3 module graph
KWOK_VERSION=v0.8.0
KUEUE_VERSION=v0.19.0
METACONTROLLER_VERSION=v4.17.2
METACONTROLLER_PSEUDO=v0.0.0-20260813213314-76b818bdc67b   # commit of tag v4.17.2
HELM_VERSION=v3.22.0
COREDNS_VERSION=v1.14.7         # tests/e2e/components/coredns/go.mod pins the same
PAUSE_VERSION=1                 # our own sandbox image (components/pause); bump when it changes
PAUSE_IMAGE=localhost/modeldeployment-e2e/pause:$PAUSE_VERSION   # cluster.py's realnode.py uses the same

CACHE="${MODELDEPLOYMENT_CACHE:-$HOME/.cache/modeldeployment}"
COMP="$CACHE/components"
BIN="$COMP/bin"
mkdir -p "$COMP" "$BIN"

# One build at a time per cache (two test sessions may start together).
if command -v flock >/dev/null; then
  exec 9>"$COMP/.build.lock"
  flock 9
fi

export GOPATH="$CACHE/go"
export GOMODCACHE="$CACHE/go/pkg/mod"
export GOCACHE="$CACHE/go-build"
export GOTOOLCHAIN=local
export CGO_ENABLED=0
export GOFLAGS="-buildvcs=false"
P="${BUILD_PARALLELISM:-$(( $(nproc) < 2 ? $(nproc) : 2 ))}"

need_go() { command -v go >/dev/null || { echo "build.sh: go is not installed (needed to build $1)" >&2; exit 1; }; }

START_ALL=$(date +%s)
TIMES_FILE="$COMP/build-times.txt"
declare -a SUMMARY=()

log() { printf '[build.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# CPU seconds (user+sys) used so far by finished child processes; differences
# between two calls give a component's CPU cost independent of other load.
# Sets CPU_NOW. (`times` must run in this shell, not in a pipeline or a
# $(...) subshell, so the result is passed back in a variable.)
TIMES_TMP="$(mktemp)"
trap 'rm -f "$TIMES_TMP"' EXIT
cpu_children() {
  times >"$TIMES_TMP"
  CPU_NOW=$(tail -1 "$TIMES_TMP" | awk '{ t = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); sub("s", "", a[2]); t += a[1] * 60 + a[2] } printf "%d", t }')
}

want() {
  # want <component>: true if selected on the command line (or no selection)
  [ ${#SELECTED[@]} -eq 0 ] && return 0
  local c
  for c in "${SELECTED[@]}"; do [ "$c" = "$1" ] && return 0; done
  return 1
}

cached() {
  # cached <dir> <binary>: true if the component is already built
  [ "${FORCE_REBUILD:-0}" != 1 ] && [ -x "$1/$2" ]
}

link_bin() {
  # link_bin <dir> <binary>
  ln -sfn "$1/$2" "$BIN/$2"
}

cpu_children; CPU_MARK=$CPU_NOW
record() {
  # record <name> <version> <seconds> <status>
  local cpu
  cpu_children; cpu=$(( CPU_NOW - CPU_MARK )); CPU_MARK=$CPU_NOW
  SUMMARY+=("$(printf '%-26s %-10s %6ss %6ss  %s' "$1" "$2" "$3" "$cpu" "$4")")
  if [ "$4" = built ]; then
    printf '%s %s %s wall=%ss cpu=%ss\n' "$(date -u +%FT%TZ)" "$1" "$2" "$3" "$cpu" >>"$TIMES_FILE"
  fi
}

k8s_ldflags() {
  local v="$1" major minor f=""
  major="${v#v}"; major="${major%%.*}"
  minor="${v#v*.}"; minor="${minor%%.*}"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    f+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    f+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  echo "-s -w$f"
}

# build_in_wrapper <name> <version> <package> <ldflags>
build_in_wrapper() {
  local name="$1" version="$2" pkg="$3" ldflags="$4"
  local dir="$COMP/$name-$version"
  if cached "$dir" "$name"; then
    link_bin "$dir" "$name"; record "$name" "$version" 0 cached; return 0
  fi
  need_go "$name"
  log "building $name $version ($pkg)"
  local t0; t0=$(date +%s)
  rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"
  (cd "$HERE/kubernetes" && go build -mod=readonly -trimpath -p "$P" -ldflags "$ldflags" -o "$dir.tmp/$name" "$pkg")
  rm -rf "$dir"; mv "$dir.tmp" "$dir"
  link_bin "$dir" "$name"
  record "$name" "$version" $(( $(date +%s) - t0 )) built
}

# go_install <name> <module> <version> <package> <ldflags>: build pkg@version
# (the module's own go.mod/go.sum decide the dependencies) into a cache dir.
go_install() {
  local name="$1" module="$2" version="$3" pkg="$4" ldflags="$5"
  local dir="$COMP/$name-$version"
  need_go "$name"
  log "building $name $version ($pkg@$version)"
  rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"
  GOBIN="$dir.tmp" go install -trimpath -p "$P" -ldflags "$ldflags" "$pkg@$version"
  mv "$dir.tmp/$(basename "$pkg")" "$dir.tmp/$name" 2>/dev/null || true
}

moddir() { go mod download -json "$1@$2" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p'; }

SELECTED=("$@")

# ---- kubernetes + etcd (one wrapper module, tests/e2e/components/kubernetes) --
K8S_LDFLAGS="$(k8s_ldflags "$KUBERNETES_VERSION")"
# kubelet and kube-proxy are the real node's (tests/e2e/realnode.py); the wrapper's go.sum covers
# them (their `tool` lines), so -mod=readonly holds for them too.
for c in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy; do
  if want "$c"; then
    build_in_wrapper "$c" "$KUBERNETES_VERSION" "k8s.io/kubernetes/cmd/$c" "$K8S_LDFLAGS"
  fi
done
if want etcd; then
  build_in_wrapper etcd "$ETCD_VERSION" go.etcd.io/etcd/server/v3 "-s -w"
fi

# ---- kwok ---------------------------------------------------------------------
if want kwok; then
  dir="$COMP/kwok-$KWOK_VERSION"
  if cached "$dir" kwok && [ -d "$dir/stages" ]; then
    link_bin "$dir" kwok; record kwok "$KWOK_VERSION" 0 cached
  else
    t0=$(date +%s)
    go_install kwok sigs.k8s.io/kwok "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok "-s -w"
    src="$(moddir sigs.k8s.io/kwok "$KWOK_VERSION")"
    mkdir -p "$dir.tmp/stages" "$dir.tmp/crds"
    cp "$src"/kustomize/stage/node/fast/node-initialize.yaml \
       "$src"/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
       "$src"/kustomize/stage/pod/fast/pod-*.yaml "$dir.tmp/stages/"
    cp "$src"/kustomize/crd/bases/*.yaml "$dir.tmp/crds/"
    chmod -R u+w "$dir.tmp"
    rm -rf "$dir"; mv "$dir.tmp" "$dir"
    link_bin "$dir" kwok
    record kwok "$KWOK_VERSION" $(( $(date +%s) - t0 )) built
  fi
fi

# ---- kueue --------------------------------------------------------------------
if want kueue; then
  dir="$COMP/kueue-$KUEUE_VERSION"
  if cached "$dir" kueue && [ -d "$dir/crds" ] && [ -f "$dir/webhook/manifests.yaml" ]; then
    link_bin "$dir" kueue; record kueue "$KUEUE_VERSION" 0 cached
  else
    t0=$(date +%s)
    go_install kueue sigs.k8s.io/kueue "$KUEUE_VERSION" sigs.k8s.io/kueue/cmd/kueue \
      "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION -X sigs.k8s.io/kueue/pkg/version.BuildDate=1970-01-01"
    src="$(moddir sigs.k8s.io/kueue "$KUEUE_VERSION")"
    mkdir -p "$dir.tmp/crds" "$dir.tmp/webhook" "$dir.tmp/rbac"
    cp "$src"/config/components/crd/bases/*.yaml "$dir.tmp/crds/"
    cp "$src"/config/components/webhook/manifests.yaml "$dir.tmp/webhook/"
    cp "$src"/config/components/manager/controller_manager_config.yaml "$dir.tmp/" 2>/dev/null || true
    chmod -R u+w "$dir.tmp"
    rm -rf "$dir"; mv "$dir.tmp" "$dir"
    link_bin "$dir" kueue
    record kueue "$KUEUE_VERSION" $(( $(date +%s) - t0 )) built
  fi
fi

# ---- metacontroller -------------------------------------------------------------
# Its go.mod declares the module path `metacontroller` (not a host path), and the Go
# module proxy reachable here refuses github.com/metacontroller/metacontroller, so the
# released source comes from the tarball shared beside the repository
# (../shared/third_party/metacontroller-v4.17.2.tar.gz, checksum verified). Its
# dependencies are ordinary modules the proxy serves. Without the tarball (a clone
# elsewhere) the wrapper-module route through the proxy is tried; when both fail the
# build stops and says what it tried: the e2e suite needs the real component.
METACONTROLLER_TARBALL="${METACONTROLLER_TARBALL:-$(cd "$HERE/../../.." && pwd)/../shared/third_party/metacontroller-$METACONTROLLER_VERSION.tar.gz}"
METACONTROLLER_SHA256=71242194978649546c50f6970bc117b883699a46c66f4eb16298bcdbb8b722a3
if want metacontroller; then
  dir="$COMP/metacontroller-$METACONTROLLER_VERSION"
  if cached "$dir" metacontroller && [ -f "$dir/crds/metacontroller-crds-v1.yaml" ]; then
    link_bin "$dir" metacontroller; record metacontroller "$METACONTROLLER_VERSION" 0 cached
  else
    t0=$(date +%s)
    need_go metacontroller
    rm -rf "$dir.tmp"; mkdir -p "$dir.tmp/crds"
    if [ -f "$METACONTROLLER_TARBALL" ]; then
      got="$(sha256sum "$METACONTROLLER_TARBALL" | cut -d' ' -f1)"
      if [ "$got" != "$METACONTROLLER_SHA256" ]; then
        echo "build.sh: $METACONTROLLER_TARBALL has sha256 $got, expected $METACONTROLLER_SHA256" >&2
        exit 1
      fi
      log "building metacontroller $METACONTROLLER_VERSION from $METACONTROLLER_TARBALL"
      src="$CACHE/src/metacontroller-$METACONTROLLER_VERSION"
      rm -rf "$src"; mkdir -p "$src"
      tar xzf "$METACONTROLLER_TARBALL" -C "$src" --strip-components=1
      (cd "$src" && go build -mod=readonly -trimpath -p "$P" -ldflags "-s -w" \
          -o "$dir.tmp/metacontroller" ./pkg/cmd/metacontroller) >&2
    else
      log "metacontroller: no tarball at $METACONTROLLER_TARBALL; trying the Go module proxy"
      w="$CACHE/src/metacontroller-wrapper"
      rm -rf "$w"; mkdir -p "$w"
      printf '%s\n' "module modeldeployment.e2e/components/metacontroller" "" "go 1.26.4" "" \
        "require metacontroller v0.0.0" "" \
        "replace metacontroller => github.com/metacontroller/metacontroller $METACONTROLLER_PSEUDO" >"$w/go.mod"
      if ! (cd "$w" && go mod download -json metacontroller >"$w/download.json" 2>&1); then
        {
          echo "build.sh: cannot build metacontroller $METACONTROLLER_VERSION; tried:"
          echo "  1. the released source at $METACONTROLLER_TARBALL: absent"
          echo "  2. the Go module proxy ($(go env GOPROXY)) via a wrapper module:"
          sed 's/^/       /' "$w/download.json"
          echo "  Set METACONTROLLER_TARBALL to its release tarball (sha256 $METACONTROLLER_SHA256)."
        } >&2
        exit 1
      fi
      src="$(sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p' "$w/download.json" | head -1)"
      (cd "$w" && GOFLAGS="-mod=mod -buildvcs=false" go build -trimpath -p "$P" -ldflags "-s -w" \
          -o "$dir.tmp/metacontroller" metacontroller/pkg/cmd/metacontroller) >&2
    fi
    cp "$src"/manifests/production/metacontroller-crds-v1.yaml "$dir.tmp/crds/"
    chmod -R u+w "$dir.tmp"
    rm -rf "$dir"; mv "$dir.tmp" "$dir"
    link_bin "$dir" metacontroller
    record metacontroller "$METACONTROLLER_VERSION" $(( $(date +%s) - t0 )) built
  fi
fi

# ---- helm ---------------------------------------------------------------------
# `helm template` renders charts/modeldeployment for tests/e2e/test_install.py and the commands of
# docs/operations.md#with-helm. Without a cluster, `helm template` and `helm lint` check a chart's
# kubeVersion against the Kubernetes version compiled into helm, which a plain `go install` leaves at
# v1.20.0 (helm.sh/helm/v3/pkg/chartutil's k8sVersionMajor/Minor defaults), refusing our
# `kubeVersion: >=1.29.0-0`. A release binary gets it from helm's Makefile: major 1, minor the minor
# of the k8s.io/client-go its go.mod requires. The same ldflags here; the version is part of the
# cache directory's name, so a helm cached without it is rebuilt.
HELM_KUBE_VERSION=v1.37.0       # helm v3.22.0's go.mod: k8s.io/client-go v0.37.0 (checked below)
helm_ldflags() {
  local major minor f="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  major="${HELM_KUBE_VERSION#v}"; major="${major%%.*}"
  minor="${HELM_KUBE_VERSION#v*.}"; minor="${minor%%.*}"
  f+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    f+=" -X $pkg.k8sVersionMajor=$major -X $pkg.k8sVersionMinor=$minor"
  done
  echo "$f"
}
if want helm; then
  dir="$COMP/helm-$HELM_VERSION-kube$HELM_KUBE_VERSION"
  if cached "$dir" helm; then
    link_bin "$dir" helm; record helm "$HELM_VERSION" 0 cached
  else
    t0=$(date +%s)
    need_go helm
    src="$(moddir helm.sh/helm/v3 "$HELM_VERSION")"
    client_go="$(sed -n 's/^[[:space:]]*k8s\.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$src/go.mod" | head -1)"
    if [ "v1.$client_go.0" != "$HELM_KUBE_VERSION" ]; then
      echo "build.sh: helm $HELM_VERSION requires k8s.io/client-go v0.$client_go (so its release build" \
           "assumes Kubernetes v1.$client_go.0); set HELM_KUBE_VERSION=v1.$client_go.0" >&2
      exit 1
    fi
    go_install helm helm.sh/helm/v3 "$HELM_VERSION" helm.sh/helm/v3/cmd/helm "$(helm_ldflags)"
    rm -rf "$dir"; mv "$COMP/helm-$HELM_VERSION.tmp" "$dir"   # go_install's directory
    link_bin "$dir" helm
    record helm "$HELM_VERSION" $(( $(date +%s) - t0 )) built
  fi
fi

# ---- the real node: coredns, the pause image, the stub engine images -------------
# CoreDNS from its own wrapper module (components/coredns: main.go imports only the plugins the
# real node's Corefile uses, so none of the cloud providers' SDKs are compiled; go.sum checked).
if want coredns; then
  dir="$COMP/coredns-$COREDNS_VERSION"
  if cached "$dir" coredns; then
    link_bin "$dir" coredns; record coredns "$COREDNS_VERSION" 0 cached
  else
    need_go coredns
    log "building coredns $COREDNS_VERSION (components/coredns wrapper)"
    t0=$(date +%s)
    rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"
    (cd "$HERE/coredns" && go build -mod=readonly -trimpath -p "$P" \
        -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$COREDNS_VERSION" \
        -o "$dir.tmp/coredns" .) >&2
    rm -rf "$dir"; mv "$dir.tmp" "$dir"
    link_bin "$dir" coredns
    record coredns "$COREDNS_VERSION" $(( $(date +%s) - t0 )) built
  fi
fi

# The sandbox image containerd starts every Pod with: a static Go program (components/pause)
# packed as an OCI image tarball by pack_image.py; realnode.py imports it and names it
# containerd's sandbox_image, so no registry is ever contacted.
if want pause; then
  dir="$COMP/pause-$PAUSE_VERSION"
  if cached "$dir" pause && [ -f "$dir/pause.tar" ] && [ -f "$dir/image" ]; then
    link_bin "$dir" pause; record pause "$PAUSE_VERSION" 0 cached
  else
    need_go pause
    t0=$(date +%s)
    rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"
    (cd "$HERE/pause" && go build -trimpath -ldflags "-s -w" -o "$dir.tmp/pause" .) >&2
    python3 "$HERE/pack_image.py" "$dir.tmp/pause.tar" "$PAUSE_IMAGE" \
      --file "$dir.tmp/pause:/pause:0755" --entrypoint /pause
    echo "$PAUSE_IMAGE" >"$dir.tmp/image"
    rm -rf "$dir"; mv "$dir.tmp" "$dir"
    link_bin "$dir" pause
    record pause "$PAUSE_VERSION" $(( $(date +%s) - t0 )) built
  fi
fi

# The stub engine images (tests/e2e/stub, its own build script: it writes image tarballs and a
# list of image references into the directory it is given; realnode.py imports every tarball
# there at node start). Run every time: that script decides what it can reuse. Until it exists
# nothing is built and the real node runs with the pause image alone.
STUB_BUILD="$HERE/../stub/build.sh"
if want stub && [ -f "$STUB_BUILD" ]; then
  need_go stub
  log "building the stub images ($STUB_BUILD $COMP/stub-images)"
  t0=$(date +%s)
  mkdir -p "$COMP/stub-images"
  bash "$STUB_BUILD" "$COMP/stub-images" >&2
  record stub-images - $(( $(date +%s) - t0 )) ran
fi

# ---- leaderworkerset ----------------------------------------------------------------
# LeaderWorkerSet is the peer bench/e2e-scale compares against (bench/README.md); the e2e suite
# does not need it, so it is built only when named (`build.sh lws`) or when LWS_BUILD=1. Like
# metacontroller its pinned source comes from the tarball shared beside the repository
# (../shared/third_party/lws-060ab4d.tar.gz, checksum verified); its dependencies are ordinary
# modules the proxy serves. Cached with its CRDs and webhook manifests.
LWS_COMMIT=060ab4d
LWS_TARBALL="${LWS_TARBALL:-$(cd "$HERE/../../.." && pwd)/../shared/third_party/lws-$LWS_COMMIT.tar.gz}"
LWS_SHA256=1104e0a2b510d0a931d21d0ca121e652515b7aba452e24e810fdb71a7b26a7b5
want_lws() {
  [ "${LWS_BUILD:-0}" = 1 ] && return 0
  local c
  for c in "${SELECTED[@]}"; do [ "$c" = lws ] && return 0; done
  return 1
}
if want_lws; then
  dir="$COMP/lws-$LWS_COMMIT"
  if cached "$dir" lws && [ -f "$dir/crds/leaderworkerset.x-k8s.io_leaderworkersets.yaml" ] \
      && [ -f "$dir/webhook/manifests.yaml" ]; then
    link_bin "$dir" lws; record lws "$LWS_COMMIT" 0 cached
  else
    t0=$(date +%s)
    need_go lws
    if [ ! -f "$LWS_TARBALL" ]; then
      echo "build.sh: cannot build lws $LWS_COMMIT: no source tarball at $LWS_TARBALL;" \
           "set LWS_TARBALL to lws-$LWS_COMMIT.tar.gz (sha256 $LWS_SHA256)" >&2
      exit 1
    fi
    got="$(sha256sum "$LWS_TARBALL" | cut -d' ' -f1)"
    if [ "$got" != "$LWS_SHA256" ]; then
      echo "build.sh: $LWS_TARBALL has sha256 $got, expected $LWS_SHA256" >&2
      exit 1
    fi
    log "building lws $LWS_COMMIT from $LWS_TARBALL"
    src="$CACHE/src/lws-$LWS_COMMIT"
    rm -rf "$src" "$dir.tmp"; mkdir -p "$src" "$dir.tmp/crds" "$dir.tmp/webhook"
    tar xzf "$LWS_TARBALL" -C "$src" --strip-components=1
    (cd "$src" && go build -mod=readonly -trimpath -p "$P" -ldflags "-s -w" -o "$dir.tmp/lws" ./cmd/) >&2
    cp "$src"/config/crd/bases/*.yaml "$dir.tmp/crds/"
    cp "$src"/config/webhook/manifests.yaml "$dir.tmp/webhook/"
    chmod -R u+w "$dir.tmp"
    rm -rf "$dir"; mv "$dir.tmp" "$dir"
    link_bin "$dir" lws
    record lws "$LWS_COMMIT" $(( $(date +%s) - t0 )) built
  fi
fi

echo
echo "component                  version      wall     cpu  status"
for line in "${SUMMARY[@]}"; do echo "$line"; done
echo "bin dir: $BIN"
cpu_children
echo "total: $(( $(date +%s) - START_ALL ))s (cpu ${CPU_NOW}s)"
