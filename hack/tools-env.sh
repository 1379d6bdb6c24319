# shellcheck shell=bash
# Source me:  . hack/tools-env.sh
# Exports where hack/build-tools.sh puts the test tools, and puts them first
# in PATH. Safe under `set -euo pipefail`; changes nothing else.
#   CAPTF_CACHE      cache root (default $HOME/.cache/captf)
#   CAPTF_BIN        etcd, kube-apiserver, kube-controller-manager, tofu, terraform
#   CAPTF_CAPI_CRDS  Cluster API CRD YAMLs (v1beta2 served)
#   CAPTF_CAPI_MANIFESTS  webhook configurations + kubeadm bootstrap CRDs for
#                    bin/capi-manager and bin/capi-kubeadm-bootstrap-manager, and the core
#                    provider's metadata.yaml and core-config/ for clusterctl (build-tools.sh capi)
#   CAPTF_MANIFEST_CRDS  cert-manager and Prometheus Operator CRDs for the install-manifest
#                    test (build-tools.sh manifest-crds; kustomize and promtool are in CAPTF_BIN)
export CAPTF_CACHE="${CAPTF_CACHE:-$HOME/.cache/captf}"
export CAPTF_BIN="$CAPTF_CACHE/bin"
export CAPTF_CAPI_CRDS="$CAPTF_CACHE/capi-crds"
export CAPTF_CAPI_MANIFESTS="$CAPTF_CACHE/capi-manager"
export CAPTF_MANIFEST_CRDS="$CAPTF_CACHE/manifest-crds"
case ":${PATH:-}:" in
*":$CAPTF_BIN:"*) ;;
*) export PATH="$CAPTF_BIN${PATH:+:$PATH}" ;;
esac
