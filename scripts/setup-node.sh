#!/usr/bin/env bash
# Installs what the e2e suite's real node needs from Debian's packages (tests/e2e/README.md,
# "The real node"): containerd and runc (the container runtime the kubelet talks to), the CNI
# plugins (bridge + host-local: Pod networking), iptables and conntrack (kube-proxy's iptables
# mode). Nothing is started here: the test harness runs its own containerd with its own config,
# root and socket under the test's work directory, never the system service.
#
# Skips apt entirely when every command is already there, so a warm run costs nothing.
# Needs root (apt-get); a machine without root cannot run the real node anyway.
set -euo pipefail

# command -> Debian package providing it
declare -A NEED=(
  [containerd]=containerd
  [ctr]=containerd
  [runc]=runc
  [iptables]=iptables
  [conntrack]=conntrack
)
missing=()
for cmd in "${!NEED[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${NEED[$cmd]}")
done
# The CNI plugins are not on PATH: Debian puts them in /usr/lib/cni.
[ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] && [ -x /usr/lib/cni/loopback ] \
  || missing+=(containernetworking-plugins)

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
# Unique package names.
mapfile -t pkgs < <(printf '%s\n' "${missing[@]}" | sort -u)
if [ "$(id -u)" != 0 ]; then
  echo "setup-node.sh: the real e2e node needs ${pkgs[*]}; run as root (apt-get install)" >&2
  exit 1
fi
echo "setup-node.sh: installing ${pkgs[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# Do not let the packages' postinst start the system containerd: the harness runs its own.
# (policy-rc.d 101 = "action not allowed"; removed again afterwards.)
policy=/usr/sbin/policy-rc.d
own_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; own_policy=1
fi
trap '[ "$own_policy" = 1 ] && rm -f "$policy"' EXIT
apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >&2
