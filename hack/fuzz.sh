#!/usr/bin/env bash
# The fuzz targets of fuzz/ (docs/fuzzing.md): builds them with cargo-fuzz on the nightly
# toolchain, then runs each for a bounded time on a copy of its checked-in corpus (the checkout
# is never written), prints one line per target and writes a markdown report. Exits 1 when a
# target crashed, panicked, timed out or ran out of memory, naming the input and how to replay it.
#
# Usage: hack/fuzz.sh [TARGET...]        (default: every target of fuzz/Cargo.toml)
#
# Environment:
#   FUZZ_SECONDS     run time of each target (default 15)
#   FUZZ_RSS_MB      libFuzzer -rss_limit_mb (default 2048)
#   FUZZ_MAX_LEN     libFuzzer -max_len, bytes (default 65536)
#   FUZZ_TIMEOUT     libFuzzer -timeout, seconds one input may take (default 10)
#   FUZZ_REPORT      the report (default target/fuzz-report.md)
#   FUZZ_TARGET_DIR  cargo's target directory (default ${CAPTF_CACHE:-$HOME/.cache/captf}/fuzz-target,
#                    outside the checkout, so a fresh clone in CI reuses the build)
#   FUZZ_SANITIZER   cargo fuzz --sanitizer (default none: the code is safe Rust, and without
#                    AddressSanitizer a target runs about twice as fast)
#   FUZZ_KEEP=1      keep the work folder (the grown corpus, the logs) even without a crash
#   FUZZ_WORK        where the work folder goes (default /dev/shm when writable, else $TMPDIR)
#
# cargo-fuzz is installed at the version hack/versions.env pins (CARGO_FUZZ_VERSION) into
# ${CAPTF_CACHE}/tools/cargo-fuzz when missing. Needs the nightly toolchain (rustup).
set -euo pipefail

HACK="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HACK/.." && pwd)"
# shellcheck source=versions.env
source "$HACK/versions.env"

CAPTF_CACHE="${CAPTF_CACHE:-$HOME/.cache/captf}"
SECONDS_EACH="${FUZZ_SECONDS:-15}"
RSS_MB="${FUZZ_RSS_MB:-2048}"
MAX_LEN="${FUZZ_MAX_LEN:-65536}"
TIMEOUT="${FUZZ_TIMEOUT:-10}"
REPORT="${FUZZ_REPORT:-$ROOT/target/fuzz-report.md}"
TARGET_DIR="${FUZZ_TARGET_DIR:-$CAPTF_CACHE/fuzz-target}"
SANITIZER="${FUZZ_SANITIZER:-none}"
TOOLS="$CAPTF_CACHE/tools/cargo-fuzz"

log() { printf '[fuzz %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 2; }

# A child in the background, so that a TERM (test-all.sh stopping early) reaches it too.
child=
trap '[ -z "$child" ] || kill "$child" 2>/dev/null || true' EXIT
trap 'exit 143' TERM INT
run() {
	"$@" &
	child=$!
	local rc=0
	wait "$child" || rc=$?
	child=
	return "$rc"
}

rustup toolchain list 2>/dev/null | grep -q '^nightly' ||
	die "no nightly toolchain: rustup toolchain install nightly --profile minimal"

if [ "$("$TOOLS/bin/cargo-fuzz" --version 2>/dev/null)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]; then
	log "installing cargo-fuzz $CARGO_FUZZ_VERSION into $TOOLS"
	run cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked --force --root "$TOOLS" --quiet
fi
export PATH="$TOOLS/bin:$PATH"

cd "$ROOT"
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
	mapfile -t TARGETS < <(cargo +nightly fuzz list --fuzz-dir fuzz)
fi
[ ${#TARGETS[@]} -gt 0 ] || die "no fuzz targets in fuzz/"

# The lock file is part of the checkout: a stale one is an error, not rewritten.
cargo metadata --locked --format-version 1 --manifest-path fuzz/Cargo.toml >/dev/null ||
	die "fuzz/Cargo.lock is out of date: run cargo metadata --manifest-path fuzz/Cargo.toml >/dev/null and commit it"

BUILD=(cargo +nightly fuzz build --fuzz-dir fuzz -O --debug-assertions --sanitizer "$SANITIZER"
	--target-dir "$TARGET_DIR")
start=$SECONDS
log "building ${#TARGETS[@]} targets (${BUILD[*]})"
for t in "${TARGETS[@]}"; do
	[ -d "fuzz/corpus/$t" ] || die "no checked-in corpus fuzz/corpus/$t"
done
run "${BUILD[@]}"
log "built in $((SECONDS - start))s"
# One of libFuzzer's final statistics (-print_final_stats=1) from a run's log.
stat_of() { sed -n "s/^stat::$2: *//p" "$1" | tail -n 1; }

BIN="$TARGET_DIR/$(rustc +nightly -vV | sed -n 's/^host: //p')/release"

# The work folder holds each target's copy of its corpus and its temporary folder, where
# tar_unpack and hcl write for every input: on a tmpfs (/dev/shm) they run 10 to 20 times faster
# than on a disk's file system.
scratch="${TMPDIR:-/tmp}"
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
	scratch=/dev/shm
fi
WORK="$(mktemp -d "${FUZZ_WORK:-$scratch}/captf-fuzz.XXXXXX")"
failed=()
rows=()
for t in "${TARGETS[@]}"; do
	corpus="$WORK/corpus/$t" artifacts="$WORK/artifacts/$t/" scratch="$WORK/tmp/$t"
	mkdir -p "$corpus" "$artifacts" "$scratch"
	cp -R "fuzz/corpus/$t/." "$corpus/"
	args=("$corpus" -max_total_time="$SECONDS_EACH" -rss_limit_mb="$RSS_MB" -max_len="$MAX_LEN"
		-timeout="$TIMEOUT" -artifact_prefix="$artifacts" -print_final_stats=1)
	[ -f "fuzz/dict/$t.dict" ] && args+=(-dict="fuzz/dict/$t.dict")
	rc=0
	TMPDIR="$scratch" run "$BIN/$t" "${args[@]}" >"$WORK/$t.log" 2>&1 || rc=$?
	execs="$(stat_of "$WORK/$t.log" number_of_executed_units)"
	new="$(stat_of "$WORK/$t.log" new_units_added)"
	crashes=0 found=""
	for a in "$artifacts"crash-* "$artifacts"oom-* "$artifacts"timeout-* "$artifacts"leak-*; do
		[ -e "$a" ] || continue
		crashes=$((crashes + 1))
		found="$a"
	done
	if [ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ]; then
		crashes=1 found="(no artifact; exit $rc, see $WORK/$t.log)"
	fi
	printf '%-16s %12s execs %6s new units %3s crashes\n' "$t" "${execs:-?}" "${new:-?}" "$crashes"
	rows+=("| \`$t\` | $SECONDS_EACH | ${execs:-?} | ${new:-?} | $crashes |")
	if [ "$crashes" -gt 0 ]; then
		failed+=("$t")
		tail -n 40 "$WORK/$t.log" >&2
		log "$t crashed: $found"
		log "replay: cargo +nightly fuzz run --fuzz-dir fuzz -O --debug-assertions --sanitizer $SANITIZER --target-dir $TARGET_DIR $t '$found'"
	fi
done

mkdir -p "$(dirname "$REPORT")"
{
	echo "# Fuzzing report"
	echo
	echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), $(git rev-parse --short HEAD 2>/dev/null || echo '?'), ${SECONDS_EACH} s per target, sanitizer $SANITIZER (hack/fuzz.sh, docs/fuzzing.md)."
	echo
	echo "| Target | Seconds | Executions | New corpus units | Crashes |"
	echo "| --- | --- | --- | --- | --- |"
	printf '%s\n' "${rows[@]}"
} >"$REPORT"
log "report: $REPORT"

if [ ${#failed[@]} -gt 0 ]; then
	log "crashed: ${failed[*]}; inputs, logs and grown corpora kept in $WORK"
	exit 1
fi
if [ "${FUZZ_KEEP:-}" = 1 ]; then
	log "work folder kept: $WORK"
else
	chmod -R u+rwX "$WORK" 2>/dev/null || true
	rm -rf "$WORK"
fi
log "done in $((SECONDS - start))s"
