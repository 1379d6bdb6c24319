# Sourced by hack/test-all.sh and hack/demo.sh: the static manager binary of the test images
# (musl, the `dist` profile, as the Dockerfile builds it), built in the background. Its
# whole-program optimisation ends in a link of about ten minutes on one core, which the other
# builds fill the second core beside. It has a target directory of its own, `<target>/static`,
# because cargo lets one build at a time use a target directory; the tests and the demo find it
# through CAPTF_STATIC_BIN.

static_pid=
static_log=

# Starts the build; its output goes to a temporary log, printed if it fails.
static_build_start() {
	local target="${CARGO_TARGET_DIR:-$PWD/target}/static"
	static_log="$(mktemp)"
	export CAPTF_STATIC_BIN="$target/x86_64-unknown-linux-musl/dist/captf"
	CARGO_TARGET_DIR="$target" \
		cargo build --profile dist --locked -p captf --bin captf --target x86_64-unknown-linux-musl \
		>"$static_log" 2>&1 &
	static_pid=$!
}

# Waits for the build; fails with its log.
static_build_wait() {
	if ! wait "$static_pid"; then
		static_pid=
		cat "$static_log" >&2
		echo "the static build of captf failed" >&2
		return 1
	fi
	static_pid=
	tail -n 1 "$static_log"
}

# Stops a build still running (a script that fails before waiting) and removes the log.
static_build_stop() {
	[ -z "$static_pid" ] || kill "$static_pid" 2>/dev/null || true
	[ -z "$static_log" ] || rm -f "$static_log"
}
