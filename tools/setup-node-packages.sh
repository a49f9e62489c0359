#!/usr/bin/env bash
# Debian packages the real node (tests/infra/node.py) runs beside the binaries build-tools.sh builds:
# runc (containerd's OCI runtime; needs cgo and libseccomp, so Debian's rather than a Go build),
# containernetworking-plugins (the CNI bridge, host-local, loopback and portmap plugins in /usr/lib/cni),
# iptables (kube-proxy, the kubelet, the bridge plugin's NAT) and conntrack (kube-proxy's stale-flow cleanup).
# Installs only what is missing, and only as root on a Debian-like system; otherwise it says what is missing
# and exits 0: the real-node tests skip with the reason.
set -euo pipefail

missing=()
command -v runc >/dev/null || missing+=(runc)
[[ -x /usr/lib/cni/bridge ]] || missing+=(containernetworking-plugins)
command -v iptables >/dev/null || missing+=(iptables)
command -v conntrack >/dev/null || missing+=(conntrack)

if [[ ${#missing[@]} -eq 0 ]]; then
    echo "[setup-node-packages] runc, CNI plugins, iptables, conntrack: installed" >&2
    exit 0
fi
if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
    echo "[setup-node-packages] missing ${missing[*]} (needs root and apt-get); the real-node tests will skip" >&2
    exit 0
fi
echo "[setup-node-packages] installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
