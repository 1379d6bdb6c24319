#!/usr/bin/env bash
# The demo: a local control plane and node, CAPTF installed on it as a Cluster API user installs
# it (cert-manager, then clusterctl init), and a Cluster with a MachineDeployment and a
# MachinePool on the no-op modules, provisioned by CAPTF.
#   hack/demo.sh        start it and show what it made
#   hack/demo.sh down   stop the control plane, the node and everything on it
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-up}" = down ]; then
	cargo run -q -p captf-testenv -- down
	exit 0
fi
bash hack/node-packages.sh
# The manager image's binary, static as the Dockerfile builds it (the node runs real images), in
# the background beside the tools and the other builds (hack/lib/static-build.sh).
source hack/lib/static-build.sh
trap static_build_stop EXIT
static_build_start
bash hack/build-tools.sh
cargo build -q -p captf-testenv -p captf-e2e
echo "waiting for the static build of captf (the manager image's binary)"
static_build_wait
cargo run -q -p captf-testenv -- up
cargo run -q -p captf-e2e --bin captf-demo -- up
