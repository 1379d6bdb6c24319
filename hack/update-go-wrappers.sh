#!/usr/bin/env bash
# Regenerate the Go wrapper modules hack/go/<component>/{go.mod,go.sum}
# from the pins in hack/versions.env. Needs the Go module proxy.
#
#   hack/update-go-wrappers.sh            # all: kube etcd tofu capi cert-manager registry crane kustomize promtool provider-time provider-kubectl
#   hack/update-go-wrappers.sh kube       # just one
#
# Each wrapper requires one upstream module, copies the upstream go.mod's
# main-module-only directives (replace, godebug; see hack/lib/gowrapper.py)
# and lists the binaries in a `tool` block so `go mod tidy` keeps their deps.
# cert-manager is the exception: the proxy serves none of its cmd/ modules, so
# its wrapper has its own main packages (hack/go/cert-manager/*/main.go).
# Commit the resulting go.mod and go.sum; hack/build-tools.sh builds with
# -mod=readonly and refuses a go.mod that disagrees with versions.env.
set -euo pipefail

HACK="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$HACK/versions.env"

log() { printf '[update-go-wrappers %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

export GOWORK=off GOFLAGS=-mod=mod

upstream_gomod() { # MODULE VERSION -> path of the upstream go.mod in the module cache
	(cd / && go list -m -json "$1@$2") |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])'
}

# The wrapper's module path is captf.local/hack/go/<component> unless the caller sets
# WRAPPER_MODULE (cert-manager: a path inside the upstream module's, see below).
regen() { # COMPONENT UPSTREAM_MODULE VERSION PKG...
	local comp=$1 mod=$2 ver=$3
	shift 3
	local dir="$HACK/go/$comp" start=$SECONDS gomod
	mkdir -p "$dir"
	log "$comp: $mod@$ver"
	gomod="$(upstream_gomod "$mod" "$ver")"
	python3 "$HACK/lib/gowrapper.py" "${WRAPPER_MODULE:-captf.local/hack/go/$comp}" "$gomod" "$mod" "$ver" "$@" >"$dir/go.mod"
	rm -f "$dir/go.sum"
	(cd "$dir" && go mod tidy)
	# tidy may only add requirements; the pinned version must stay as written.
	(cd "$dir" && go list -m -f '{{.Version}}' "$mod") | grep -qx -- "$ver" ||
		{ log "$comp: MVS selected another version of $mod than $ver"; exit 1; }
	log "$comp: done in $((SECONDS - start))s ($(grep -c . "$dir/go.sum") go.sum lines)"
}

components=("$@")
[ ${#components[@]} -gt 0 ] || components=(kube etcd tofu capi cert-manager registry crane kustomize promtool provider-time provider-kubectl)
for c in "${components[@]}"; do
	case "$c" in
	kube) regen kube k8s.io/kubernetes "$KUBERNETES_VERSION" \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet \
		k8s.io/kubernetes/cmd/kube-proxy ;;
	etcd) regen etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION" go.etcd.io/etcd/server/v3 ;;
	tofu) regen tofu github.com/opentofu/opentofu "$OPENTOFU_VERSION" github.com/opentofu/opentofu/cmd/tofu ;;
	capi) regen capi sigs.k8s.io/cluster-api "$CLUSTER_API_VERSION" \
		sigs.k8s.io/cluster-api/core sigs.k8s.io/cluster-api/bootstrap/kubeadm \
		sigs.k8s.io/cluster-api/controlplane/kubeadm sigs.k8s.io/cluster-api/cmd/clusterctl ;;
	# cert-manager's binaries are nested modules (cmd/controller/go.mod, ...) that the proxy
	# does not serve, so the wrapper holds small main packages of our own. Its module path is
	# inside github.com/cert-manager/cert-manager/ so that they may import the root module's
	# internal/ packages (as upstream's cmd/ modules do).
	cert-manager) WRAPPER_MODULE=github.com/cert-manager/cert-manager/captf-testbins \
		regen cert-manager github.com/cert-manager/cert-manager "$CERT_MANAGER_VERSION" \
		github.com/cert-manager/cert-manager/captf-testbins/controller \
		github.com/cert-manager/cert-manager/captf-testbins/webhook \
		github.com/cert-manager/cert-manager/captf-testbins/cainjector ;;
	registry) regen registry github.com/distribution/distribution/v3 "$DISTRIBUTION_VERSION" \
		github.com/distribution/distribution/v3/cmd/registry ;;
	crane) regen crane github.com/google/go-containerregistry "$GGCR_VERSION" \
		github.com/google/go-containerregistry/cmd/crane ;;
	kustomize) regen kustomize sigs.k8s.io/kustomize/kustomize/v5 "$KUSTOMIZE_VERSION" \
		sigs.k8s.io/kustomize/kustomize/v5 ;;
	promtool) regen promtool github.com/prometheus/prometheus "$PROMETHEUS_VERSION" \
		github.com/prometheus/prometheus/cmd/promtool ;;
	# The repository root is the provider's main package.
	provider-time) regen provider-time github.com/hashicorp/terraform-provider-time "$PROVIDER_TIME_VERSION" \
		github.com/hashicorp/terraform-provider-time ;;
	provider-kubectl) regen provider-kubectl github.com/gavinbunney/terraform-provider-kubectl "$PROVIDER_KUBECTL_VERSION" \
		github.com/gavinbunney/terraform-provider-kubectl ;;
	*) log "unknown component: $c (kube|etcd|tofu|capi|cert-manager|registry|crane|kustomize|promtool|provider-time|provider-kubectl)"; exit 2 ;;
	esac
done
