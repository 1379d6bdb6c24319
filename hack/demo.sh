#!/usr/bin/env bash
# The demo: a local control plane, the CAPTF manager, and a TerraformCluster on the no-op module
# reaching Ready.   hack/demo.sh        start it and show what it made
#                   hack/demo.sh down   stop the manager and the control plane
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-up}" = down ]; then
	cargo run -q -p captf-e2e --bin captf-demo -- down
	cargo run -q -p captf-testenv -- down
	exit 0
fi
bash hack/node-packages.sh
bash hack/build-tools.sh
cargo build -q -p captf -p captf-testenv -p captf-e2e
# The manager image's binary, static as the Dockerfile builds it: the node runs real images.
cargo build -q --profile dist --locked -p captf --bin captf --target x86_64-unknown-linux-musl
cargo run -q -p captf-testenv -- up
cargo run -q -p captf-e2e --bin captf-demo -- up
