#!/usr/bin/env bash
# Every test of the project, as CI runs it: the test tools, formatting, lints, then the whole
# test suite (unit, runner, and end-to-end tests on the local control plane).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's start, with the time since the script began: where a slow run spent it.
began=$(date +%s)
step() { printf '== [%s, +%ds] %s\n' "$(date +%H:%M:%S)" "$(($(date +%s) - began))" "$*"; }

step "hack/node-packages.sh (containerd, runc, CNI plugins, iptables, busybox, musl-tools)"
bash hack/node-packages.sh
step "hack/build-tools.sh (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl, tofu, terraform, CAPI CRDs and managers, registry, crane, kustomize, promtool, cert-manager and Prometheus Operator CRDs)"
bash hack/build-tools.sh
# The machine may point TF_CLI_CONFIG_FILE at a file that does not exist; the engines then
# print a warning on stdout that breaks their JSON output. Tests use an empty config instead.
empty_rc="$(mktemp)"
trap 'rm -f "$empty_rc"' EXIT
export TF_CLI_CONFIG_FILE="$empty_rc"

step "cargo fmt --check"
cargo fmt --all -- --check

# The binary of the manager image the test node runs, as the Dockerfile builds it (static musl,
# the `dist` profile). Its whole-program optimisation ends in a link that runs on one core for
# most of ten minutes, so it builds in the background while the other core checks and builds
# the rest. It has a target directory of its own because cargo lets one build at a time use a
# target directory.
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
static_target="$target_dir/static"
static_log="$(mktemp)"
static_pid=
cleanup() {
	[ -z "$static_pid" ] || kill "$static_pid" 2>/dev/null || true
	rm -f "$empty_rc" "$static_log"
}
trap cleanup EXIT
step "cargo build, static, in the background (log: $static_log)"
CARGO_TARGET_DIR="$static_target" \
	cargo build --profile dist --locked -p captf --bin captf --target x86_64-unknown-linux-musl \
	>"$static_log" 2>&1 &
static_pid=$!
step "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
step "cargo build (the binaries the end-to-end tests run: captf, captf-testenv)"
cargo build --workspace --bins --locked
step "cargo test --no-run (every test binary)"
cargo test --workspace --locked --no-run
step "waiting for the static build"
if ! wait "$static_pid"; then
	cat "$static_log"
	echo "the static build failed" >&2
	exit 1
fi
static_pid=
tail -n 1 "$static_log"
export CAPTF_STATIC_BIN="$static_target/x86_64-unknown-linux-musl/dist/captf"
step "cargo test"
# The end-to-end tests start real control planes and Jobs; two at a time suit two cores.
cargo test --workspace --locked --no-fail-fast -- --test-threads=2
step "done"
