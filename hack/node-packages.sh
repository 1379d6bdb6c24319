#!/usr/bin/env bash
# Install the Debian packages the test node needs, if any is missing:
#   containerd + runc          the container runtime the kubelet drives through the CRI
#   containernetworking-plugins bridge, host-local, portmap, loopback (/usr/lib/cni)
#   iptables, conntrack        kube-proxy's iptables mode, the bridge's masquerade rules
#   iproute2, util-linux       ip netns / veth for the node's network namespace, nsenter
#   musl-tools                 musl-gcc: the image's static musl build of captf (ring has C)
#   busybox-static             the shell of the test images (a static busybox, nothing else)
#   jq                         the recovery drill runs the runbook's kubectl + jq backup as written
# and the Rust musl target for that build. Needs root (the node runs as root anyway).
set -euo pipefail

PKGS=(containerd runc containernetworking-plugins iptables conntrack iproute2 util-linux musl-tools busybox-static jq)
log() { printf '[node-packages %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

missing=()
for p in "${PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	[ "$(id -u)" -eq 0 ] || { log "ERROR: missing ${missing[*]} and not root: install them with apt-get"; exit 1; }
	log "apt-get install ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# --no-install-recommends: containerd recommends nothing we use; no service is started
	# (no systemd as PID 1 here), the test environment starts its own containerd.
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx x86_64-unknown-linux-musl; then
	log "rustup target add x86_64-unknown-linux-musl"
	rustup target add x86_64-unknown-linux-musl
fi
log "ok: ${PKGS[*]} + x86_64-unknown-linux-musl"
