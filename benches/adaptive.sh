#!/usr/bin/env bash
# The adaptive-rate benchmark (issue 27, scenario 7 of benches/scenarios): courtesy's default
# controller, "aimd" and an AutoThrottle-style client delay against rate-limited origins on
# loopback (constant 5/s and 5 -> 2 -> 8 kept three ways, limits announced in RateLimit headers,
# one-second windows with whole-second resets, latency under load with fixed rates for the best
# one), 8 polite clients per run, every run at once.
#
# Usage: benches/adaptive.sh [SECONDS]   (per run; default 300, at least 30)
#   Progress goes to stderr; the Markdown report to stdout and to benches/ADAPTIVE_RESULTS.md.
#   Takes SECONDS plus about a minute, plus the release build. The only processes started are
#   the 39 courtesy instances (one per run) and the bench binary, each stopped by its own PID.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

seconds=${1:-300}
export COURTESY_BIN=${COURTESY_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/courtesy}
cargo build --release --bin courtesy >&2
exec cargo bench --bench scenarios -- --only 7 --adaptive-seconds "$seconds"
