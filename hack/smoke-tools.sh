#!/usr/bin/env bash
# Quick offline checks of the tools built by hack/build-tools.sh:
#  1. versions of all binaries match hack/versions.env;
#  2. tofu and terraform: init + apply + plan -detailed-exitcode of a local
#     module with a builtin terraform_data resource (no provider download);
#  3. tofu and terraform: `init` with a `backend "kubernetes"` block gets past
#     configuration (fails to connect to 127.0.0.1:1, as intended);
#  4. etcd on loopback ports with --unsafe-no-fsync answers GET /health;
#  5. kube-apiserver against that etcd becomes /readyz with a static admin
#     token, `kubectl get ns` lists default and kube-system through an admin
#     kubeconfig, the CAPI CRDs apply and their v1beta2 API is served, and
#     kube-controller-manager starts and creates the default ServiceAccount.
# Usage: hack/smoke-tools.sh [--quick]   (--quick: steps 1-4 only)
set -euo pipefail

HACK="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$HACK/versions.env"
# shellcheck source=tools-env.sh
source "$HACK/tools-env.sh"

QUICK=0
[ "${1:-}" = "--quick" ] && QUICK=1

log() { printf '[smoke-tools %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }
step() { # LABEL CMD... (logs duration)
	local label=$1 start
	shift
	start=$(date +%s%N)
	"$@"
	log "ok: $label ($(( ($(date +%s%N) - start) / 1000000 )) ms)"
}

WORK="$(mktemp -d "${TMPDIR:-/tmp}/captf-smoke.XXXXXX")"
PIDS=()
NAMES=()
stop_pid() { # PID NAME: SIGTERM, SIGKILL after 15 s
	local p=$1 i start
	kill -0 "$p" 2>/dev/null || return 0
	start=$(date +%s%N)
	kill -TERM "$p" 2>/dev/null || true
	for ((i = 0; i < 150; i++)); do
		kill -0 "$p" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$p" 2>/dev/null; then
		log "$2 (pid $p) ignored SIGTERM for 15 s: SIGKILL"
		kill -KILL "$p" 2>/dev/null || true
	fi
	wait "$p" 2>/dev/null || true
	log "stopped $2 in $(( ($(date +%s%N) - start) / 1000000 )) ms"
}
cleanup() {
	local i
	# reverse start order: kcm, apiserver, then etcd
	for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do stop_pid "${PIDS[i]}" "${NAMES[i]}"; done
	rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() { # URL TIMEOUT_S [CURL_ARGS...]
	local url=$1 t=$2 i
	shift 2
	for ((i = 0; i < t * 10; i++)); do
		curl -fsS -o /dev/null "$@" "$url" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

# Engines read no user CLI config here (an env TF_CLI_CONFIG_FILE pointing at
# a missing file makes both print a warning).
: >"$WORK/empty.tfrc"
export TF_CLI_CONFIG_FILE="$WORK/empty.tfrc" CHECKPOINT_DISABLE=1 TF_IN_AUTOMATION=1

# ------------------------------------------------------------------ versions
first_line() { local out; out="$("$@" 2>&1)" || die "$* failed: $out"; printf '%s\n' "${out%%$'\n'*}"; }
check_versions() {
	[ "$(first_line "$CAPTF_BIN/etcd" --version)" = "etcd Version: ${ETCD_VERSION#v}" ] || die "etcd version"
	[ "$(first_line "$CAPTF_BIN/kube-apiserver" --version)" = "Kubernetes $KUBERNETES_VERSION" ] || die "kube-apiserver version"
	[ "$(first_line "$CAPTF_BIN/kube-controller-manager" --version)" = "Kubernetes $KUBERNETES_VERSION" ] || die "kcm version"
	[ "$(first_line env KUBECONFIG=/dev/null "$CAPTF_BIN/kubectl" version --client)" = "Client Version: $KUBERNETES_VERSION" ] || die "kubectl version --client"
	[ "$(first_line "$CAPTF_BIN/tofu" version)" = "OpenTofu $OPENTOFU_VERSION" ] || die "tofu version"
	[ "$(first_line "$CAPTF_BIN/terraform" version)" = "Terraform v$TERRAFORM_VERSION" ] || die "terraform version"
	ls "$CAPTF_CAPI_CRDS"/*.yaml >/dev/null || die "no CAPI CRDs"
}
step "versions" check_versions

# ------------------------------------------------------------------ engines
engine_apply() { # ENGINE
	local e=$1 d="$WORK/$1-local" rc=0
	mkdir -p "$d"
	cat >"$d/main.tf" <<'EOF'
resource "terraform_data" "smoke" {
  input = "captf"
}
output "echo" {
  value = terraform_data.smoke.output
}
EOF
	(cd "$d" && "$CAPTF_BIN/$e" init -input=false -no-color >init.log 2>&1) || { cat "$d/init.log"; die "$e init"; }
	(cd "$d" && "$CAPTF_BIN/$e" apply -input=false -auto-approve -no-color >apply.log 2>&1) || { cat "$d/apply.log"; die "$e apply"; }
	[ "$(cd "$d" && "$CAPTF_BIN/$e" output -raw echo)" = captf ] || die "$e output"
	(cd "$d" && "$CAPTF_BIN/$e" plan -input=false -detailed-exitcode -no-color >plan.log 2>&1) || rc=$?
	[ "$rc" -eq 0 ] || { cat "$d/plan.log"; die "$e plan -detailed-exitcode: exit $rc, want 0"; }
	sed -i 's/"captf"/"changed"/' "$d/main.tf"
	rc=0
	(cd "$d" && "$CAPTF_BIN/$e" plan -input=false -detailed-exitcode -no-color >plan2.log 2>&1) || rc=$?
	[ "$rc" -eq 2 ] || { cat "$d/plan2.log"; die "$e plan -detailed-exitcode after change: exit $rc, want 2"; }
}

engine_k8s_backend() { # ENGINE : kubernetes backend exists and reaches the connect step
	local e=$1 d="$WORK/$1-k8s" rc=0
	mkdir -p "$d"
	cat >"$d/kubeconfig" <<'EOF'
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
EOF
	cat >"$d/main.tf" <<EOF
terraform {
  backend "kubernetes" {
    secret_suffix = "smoke"
    namespace     = "default"
    config_path   = "$d/kubeconfig"
  }
}
resource "terraform_data" "x" {}
EOF
	(cd "$d" && timeout 120 "$CAPTF_BIN/$e" init -input=false -no-color >init.log 2>&1) || rc=$?
	if grep -qiE 'unsupported backend|unknown backend|invalid backend type|no backend type' "$d/init.log"; then
		cat "$d/init.log"; die "$e: kubernetes backend missing"
	fi
	grep -qE '127\.0\.0\.1:1|connection refused' "$d/init.log" || { cat "$d/init.log"; die "$e: kubernetes backend did not try to connect (exit $rc)"; }
	[ "$rc" -ne 0 ] || die "$e: init against 127.0.0.1:1 unexpectedly succeeded"
}

for e in tofu terraform; do
	step "$e init/apply/plan terraform_data (local backend)" engine_apply "$e"
	step "$e backend \"kubernetes\" parses and dials the API server" engine_k8s_backend "$e"
done

# ------------------------------------------------------------------ etcd
ETCD_PORT="$(free_port)"
ETCD_PEER_PORT="$(free_port)"
ETCD_URL="http://127.0.0.1:$ETCD_PORT"
start_etcd() {
	"$CAPTF_BIN/etcd" --data-dir="$WORK/etcd" --name=smoke \
		--listen-client-urls="$ETCD_URL" --advertise-client-urls="$ETCD_URL" \
		--listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster="smoke=http://127.0.0.1:$ETCD_PEER_PORT" \
		--unsafe-no-fsync=true --log-level=warn >"$WORK/etcd.log" 2>&1 &
	PIDS+=($!) NAMES+=(etcd)
	wait_http "$ETCD_URL/health" 30 || { cat "$WORK/etcd.log"; die "etcd /health"; }
	curl -fsS "$ETCD_URL/health" | grep -q '"health":"true"' || die "etcd unhealthy"
}
step "etcd --unsafe-no-fsync on 127.0.0.1:$ETCD_PORT GET /health" start_etcd

if [ "$QUICK" -eq 1 ]; then
	log "all quick checks passed"
	exit 0
fi

# ------------------------------------------------------------------ control plane
PKI="$WORK/pki"
API_PORT="$(free_port)"
API="https://127.0.0.1:$API_PORT"
TOKEN="smoke-admin-token"
make_pki() {
	mkdir -p "$PKI"
	(
		cd "$PKI"
		openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 1 -subj /CN=captf-test-ca 2>/dev/null
		openssl req -newkey rsa:2048 -nodes -keyout srv.key -out srv.csr -subj /CN=kube-apiserver 2>/dev/null
		printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >san.ext
		openssl x509 -req -in srv.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out srv.crt -days 1 -extfile san.ext 2>/dev/null
		openssl genrsa -out sa.key 2048 2>/dev/null
		printf '%s,admin,admin,"system:masters"\n' "$TOKEN" >tokens.csv
	)
	cat >"$WORK/admin.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: t, cluster: {server: "$API", certificate-authority: "$PKI/ca.crt"}}]
users: [{name: admin, user: {token: "$TOKEN"}}]
contexts: [{name: t, context: {cluster: t, user: admin}}]
current-context: t
EOF
}
step "PKI (openssl) + admin token kubeconfig" make_pki

kget() { curl -fsS --cacert "$PKI/ca.crt" -H "Authorization: Bearer $TOKEN" "$@"; }

start_apiserver() {
	"$CAPTF_BIN/kube-apiserver" --etcd-servers="$ETCD_URL" \
		--bind-address=127.0.0.1 --secure-port="$API_PORT" --cert-dir="$PKI" \
		--tls-cert-file="$PKI/srv.crt" --tls-private-key-file="$PKI/srv.key" \
		--client-ca-file="$PKI/ca.crt" --token-auth-file="$PKI/tokens.csv" \
		--authorization-mode=RBAC --allow-privileged=true \
		--service-cluster-ip-range=10.0.0.0/24 \
		--service-account-issuer="$API" --service-account-key-file="$PKI/sa.key" \
		--service-account-signing-key-file="$PKI/sa.key" \
		>"$WORK/apiserver.log" 2>&1 &
	PIDS+=($!) NAMES+=(kube-apiserver)
	wait_http "$API/readyz" 90 --cacert "$PKI/ca.crt" -H "Authorization: Bearer $TOKEN" ||
		{ tail -40 "$WORK/apiserver.log"; die "kube-apiserver /readyz"; }
	kget "$API/version" | grep -q "\"gitVersion\": \"$KUBERNETES_VERSION\"" || die "/version gitVersion"
}
step "kube-apiserver on $API /readyz" start_apiserver

kubectl_get_ns() {
	local out
	out="$("$CAPTF_BIN/kubectl" --kubeconfig="$WORK/admin.kubeconfig" get ns -o name 2>&1)" || { echo "$out"; die "kubectl get ns"; }
	grep -qx namespace/default <<<"$out" && grep -qx namespace/kube-system <<<"$out" ||
		{ echo "$out"; die "kubectl get ns: default/kube-system missing"; }
}
step "kubectl get ns (default, kube-system)" kubectl_get_ns

apply_crds() { # the apiserver accepts YAML request bodies
	local f i
	for f in "$CAPTF_CAPI_CRDS"/*.yaml; do
		kget -X POST -H 'Content-Type: application/yaml' --data-binary @"$f" \
			"$API/apis/apiextensions.k8s.io/v1/customresourcedefinitions" >/dev/null ||
			die "create CRD $(basename "$f")"
	done
	for ((i = 0; i < 100; i++)); do
		kget "$API/apis/cluster.x-k8s.io/v1beta2" 2>/dev/null | grep -q '"kind": *"Cluster"' && return 0
		sleep 0.1
	done
	die "cluster.x-k8s.io/v1beta2 not served"
}
step "apply $(ls "$CAPTF_CAPI_CRDS" | wc -l) CAPI CRDs, cluster.x-k8s.io/v1beta2 served" apply_crds

start_kcm() {
	"$CAPTF_BIN/kube-controller-manager" --kubeconfig="$WORK/admin.kubeconfig" \
		--authentication-kubeconfig="$WORK/admin.kubeconfig" --authorization-kubeconfig="$WORK/admin.kubeconfig" \
		--leader-elect=false --bind-address=127.0.0.1 --secure-port="$(free_port)" \
		--controllers=job-controller,garbage-collector-controller,namespace-controller,serviceaccount-controller,ttl-after-finished-controller \
		--use-service-account-credentials=false --root-ca-file="$PKI/ca.crt" \
		--service-account-private-key-file="$PKI/sa.key" \
		>"$WORK/kcm.log" 2>&1 &
	PIDS+=($!) NAMES+=(kube-controller-manager)
	# serviceaccount-controller creates the "default" ServiceAccount
	local i
	for ((i = 0; i < 300; i++)); do
		kget "$API/api/v1/namespaces/default/serviceaccounts/default" >/dev/null 2>&1 && return 0
		kill -0 "${PIDS[-1]}" 2>/dev/null || { tail -30 "$WORK/kcm.log"; die "kube-controller-manager exited"; }
		sleep 0.1
	done
	tail -30 "$WORK/kcm.log"
	die "kube-controller-manager did not create default/default ServiceAccount"
}
step "kube-controller-manager (job,gc,namespace,serviceaccount,ttl) creates default SA" start_kcm

log "all checks passed"
