#!/usr/bin/env bash
# A profile-guided build of courtesy, to measure what profile-guided optimisation (PGO) buys on
# this CPU kind (issue 52: kept only if it pays on every CPU kind; the default build does not use
# it yet). Three steps, each in its own target directory so that `target/` is left as it is:
#   1. an instrumented release build (RUSTFLAGS=-Cprofile-generate) in PGO_DIR/gen;
#   2. training: that binary proxies the benches' own loads, plain (benches/load.sh, 1 KiB and
#      64 KiB, courtesy at its defaults) and intercepted HTTPS (benches/https_peers.sh, 1 KiB), and
#      writes its counts when it exits; only the counts of courtesy's own binary (by build id) are
#      merged with llvm-profdata;
#   3. the release build that uses them (RUSTFLAGS=-Cprofile-use) in PGO_DIR/use.
# The last line on stdout is the optimised binary's path; compare it with the default build with
#   BASE_BIN=target/release/courtesy COURTESY_BIN=PATH BARE=1 MOVES=1 KINDS="plain https" \
#     bash benches/instructions.sh
#   COURTESY_BIN=PATH bash benches/load.sh; COURTESY_BIN=PATH bash benches/https_peers.sh
# (benches/RESULTS.md section 20 has the first figures, on an Intel Xeon.)
#
# Needs llvm-profdata of the same LLVM major version as rustc (`rustc -vV`); on Debian that is
# the package llvm-NN (apt-get install llvm-22 for rustc's LLVM 22), or set PROFDATA. Training
# needs what load.sh and https_peers.sh need (nginx, wrk, openssl, curl).
# Knobs (environment): PGO_DIR=target/pgo, PROFDATA (found from rustc's LLVM version if unset),
#   TRAIN_SECONDS=5 (1..60, seconds per training run).
# Takes about 15 minutes on 2 cores (two release builds with LTO, a minute of training).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

log() { echo "[pgo $(date -u +%H:%M:%S)] $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

PGO_DIR=${PGO_DIR:-$ROOT/target/pgo}
TRAIN_SECONDS=${TRAIN_SECONDS:-5}
if ! [[ $TRAIN_SECONDS =~ ^[0-9]+$ ]] || ((TRAIN_SECONDS < 1 || TRAIN_SECONDS > 60)); then
    die "TRAIN_SECONDS must be 1..60"
fi

llvm_major=$(rustc -vV | awk '/^LLVM version:/ { split($3, v, "."); print v[1] }')
[[ -n $llvm_major ]] || die "rustc -vV names no LLVM version"
PROFDATA=${PROFDATA:-}
if [[ -z $PROFDATA ]]; then
    for candidate in "llvm-profdata-$llvm_major" "/usr/lib/llvm-$llvm_major/bin/llvm-profdata"; do
        if command -v "$candidate" >/dev/null 2>&1; then
            PROFDATA=$(command -v "$candidate")
            break
        fi
    done
fi
[[ -n $PROFDATA ]] || die "no llvm-profdata for LLVM $llvm_major (apt-get install llvm-$llvm_major, or set PROFDATA)"
log "rustc's LLVM is $llvm_major; llvm-profdata: $PROFDATA"

raw="$PGO_DIR/raw"
rm -rf "$raw"
mkdir -p "$raw"

log "1/3: instrumented build in $PGO_DIR/gen"
RUSTFLAGS="-Cprofile-generate=$raw" CARGO_TARGET_DIR="$PGO_DIR/gen" \
    cargo build --release --locked --bin courtesy >&2
gen_bin="$PGO_DIR/gen/release/courtesy"
build_id=$(readelf -n "$gen_bin" | awk '/Build ID:/ { print $3 }')
[[ -n $build_id ]] || die "no build id in $gen_bin"

log "2/3: training (plain, then intercepted HTTPS), ${TRAIN_SECONDS} s per run"
SIZES="1k 64k" CONNS=16 REPEATS=1 DURATION="$TRAIN_SECONDS" RUN_ONLY=courtesy \
    COURTESY_BIN="$gen_bin" bash benches/load.sh >/dev/null
CASES=courtesy CONNS=16 BODIES=1k REPEATS=1 DURATION="$TRAIN_SECONDS" \
    COURTESY_BIN="$gen_bin" bash benches/https_peers.sh >/dev/null

# Only courtesy's own counts: the training's other instrumented processes (none today, but a
# build script run meanwhile would be one) would only blur the profile.
ours=()
for file in "$raw"/*.profraw; do
    if "$PROFDATA" show --binary-ids "$file" 2>/dev/null | grep -qx "$build_id"; then
        ours+=("$file")
    fi
done
((${#ours[@]} > 0)) || die "no counts from courtesy ($build_id) in $raw"
"$PROFDATA" merge -o "$PGO_DIR/courtesy.profdata" "${ours[@]}"
log "merged ${#ours[@]} profile(s) into $PGO_DIR/courtesy.profdata"

log "3/3: optimised build in $PGO_DIR/use"
RUSTFLAGS="-Cprofile-use=$PGO_DIR/courtesy.profdata -Cllvm-args=-pgo-warn-missing-function=false" \
    CARGO_TARGET_DIR="$PGO_DIR/use" cargo build --release --locked --bin courtesy >&2
echo "$PGO_DIR/use/release/courtesy"
