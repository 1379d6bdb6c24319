#!/usr/bin/env bash
# Every test of the project, as CI runs it: the test tools, formatting, lints, then the whole
# test suite (unit, runner, and end-to-end tests on the local control plane).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== hack/node-packages.sh (containerd, runc, CNI plugins, iptables, busybox, musl-tools)"
bash hack/node-packages.sh
echo "== hack/build-tools.sh (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl, tofu, terraform, CAPI CRDs and managers, registry, crane, kustomize, promtool, cert-manager and Prometheus Operator CRDs)"
bash hack/build-tools.sh
# The machine may point TF_CLI_CONFIG_FILE at a file that does not exist; the engines then
# print a warning on stdout that breaks their JSON output. Tests use an empty config instead.
empty_rc="$(mktemp)"
trap 'rm -f "$empty_rc"' EXIT
export TF_CLI_CONFIG_FILE="$empty_rc"

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo build (the binaries the end-to-end tests run: captf, captf-testenv)"
cargo build --workspace --bins --locked
echo "== cargo build, static (the binary of the manager image the test node runs, as the Dockerfile builds it)"
cargo build --profile dist --locked -p captf --bin captf --target x86_64-unknown-linux-musl
echo "== cargo test"
# The end-to-end tests start real control planes and Jobs; two at a time suit two cores.
cargo test --workspace --locked --no-fail-fast -- --test-threads=2
