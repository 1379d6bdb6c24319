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
# The binary of the manager image the test node runs (hack/lib/static-build.sh), from here on in
# the background: it needs the musl tools above, not the tools below.
source hack/lib/static-build.sh
trap static_build_stop EXIT
step "cargo build, static, in the background"
static_build_start
step "hack/build-tools.sh (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl, tofu, terraform, CAPI CRDs, managers and clusterctl, cert-manager, registry, crane, kustomize, promtool, cert-manager and Prometheus Operator CRDs, the time and kubectl providers)"
bash hack/build-tools.sh
# The machine may point TF_CLI_CONFIG_FILE at a file that does not exist; the engines then
# print a warning on stdout that breaks their JSON output. Tests use an empty config instead.
empty_rc="$(mktemp)"
trap 'static_build_stop; rm -f "$empty_rc"' EXIT
export TF_CLI_CONFIG_FILE="$empty_rc"

step "cargo fmt --check"
cargo fmt --all -- --check
# The fuzz targets are a workspace of their own (fuzz/, docs/fuzzing.md).
cargo fmt --manifest-path fuzz/Cargo.toml -- --check

# Every test binary, and with them the binaries the end-to-end tests run (captf,
# captf-testenv): cargo builds a package's binaries for its integration tests.
step "cargo test --no-run (every test binary)"
cargo test --workspace --locked --no-run
step "waiting for the static build"
static_build_wait
# The lints beside the tests, which leave about a third of the CPU idle while they wait on
# Jobs: in a target directory of their own, since cargo lets one build at a time use one.
step "cargo clippy, in the background"
clippy_log="$(mktemp)"
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}/clippy" \
	cargo clippy --workspace --all-targets --locked -- -D warnings >"$clippy_log" 2>&1 &
clippy_pid=$!
# The fuzz targets beside them too (docs/fuzzing.md): built on nightly in a target directory of
# their own under ~/.cache/captf, then FUZZ_SECONDS (15) each on a copy of the checked-in corpus.
step "hack/fuzz.sh, in the background"
fuzz_log="$(mktemp)"
FUZZ_REPORT="${CARGO_TARGET_DIR:-$PWD/target}/fuzz-report.md" bash hack/fuzz.sh >"$fuzz_log" 2>&1 &
fuzz_pid=$!
trap 'static_build_stop; kill "$clippy_pid" "$fuzz_pid" 2>/dev/null || true; rm -f "$empty_rc" "$clippy_log" "$fuzz_log"' EXIT
step "cargo test"
# The end-to-end tests spend most of their time waiting on Jobs, the kubelet and leases: three
# at a time keep two cores busy (the namespaced binary: 14 minutes, against 20 at two).
tests=0
cargo test --workspace --locked --no-fail-fast -- --test-threads=3 || tests=$?
step "waiting for cargo clippy"
if ! wait "$clippy_pid"; then
	cat "$clippy_log" >&2
	echo "cargo clippy failed" >&2
	exit 1
fi
tail -n 1 "$clippy_log"
step "waiting for hack/fuzz.sh"
if ! wait "$fuzz_pid"; then
	cat "$fuzz_log" >&2
	echo "hack/fuzz.sh failed" >&2
	exit 1
fi
grep -E ' crashes$|built in|done in' "$fuzz_log" || true
[ "$tests" -eq 0 ] || exit "$tests"
step "done"
