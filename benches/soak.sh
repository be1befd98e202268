#!/usr/bin/env bash
# A bounded fault soak of courtesy: origins that misbehave (resets, hangs, garbage, 429 and 503
# storms with Retry-After), clients on kept-alive connections, and courtesy restarted three times
# with SIGTERM and once with SIGKILL per run. Counts lost, duplicated, corrupted and hung requests
# and arrivals inside Retry-After windows; see the header of benches/soak/main.rs.
#
# Usage: benches/soak.sh [--hosts 5] [--clients 16] [--requests 4000] [--mode reject|hold|both]
#                        [--seed 1] [--max-minutes 30] [--out FILE|-]
#   The big run: benches/soak.sh --hosts 20 --clients 64 --requests 100000
#   The shared budget: SOAK_EXTRA_CONFIG=$'[shared]\nredis_url = "redis://127.0.0.1:6390/0"\n' benches/soak.sh
#   ... with the store stalled and failed over: benches/soak_shared.sh (SOAK_STALL_PID, SOAK_FAILOVER_CMD)
#   Progress goes to stderr; the Markdown report to stdout and to benches/SOAK_RESULTS.md.
#   Exits non-zero when an invariant fails.
#
# Loopback only; the only processes started are courtesy (one at a time, each stopped by its own
# PID) and the bench binary itself.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

cargo build --release --locked --bin courtesy >&2
exec cargo bench --locked --bench soak -- "$@"
