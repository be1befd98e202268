#!/usr/bin/env bash
# The shared budget benchmark: courtesy instances that keep one budget per host in Redis
# ([shared]), measured against the real release binary and a redis-server of its own. Scenarios 5
# and 6 of the scenario bench (benches/scenarios/shared_rate.rs and shared_cost.rs):
#
#   5. Aggregate: 4 instances on one Redis, 200 hosts at 5/s (burst 1, not adaptive), 4 kept-alive
#      connections per host, one through each instance, 25 s. At the origin: the aggregate
#      arrivals/s (target: within 2 % of 1000/s after a warm-up second), every host's most
#      arrivals in any 1 s window (target: <= burst + rate x 1 s = 6), the client answers (all
#      200); Redis commands and round trips per request, CPU of the instances and of Redis.
#   6. Cost per request: one instance, pacing effectively off (rate 100000, burst 1000,
#      concurrency 1000), kept-alive clients for 5 s per case, the budget local and then shared:
#      1 client on 1 host, 16 clients on 1 host, 16 clients on 16 hosts. Requests/s, latency
#      p50/p99, courtesy's and redis-server's CPU µs per request (utime + stime from
#      /proc/PID/stat), Redis commands per request (INFO commandstats after CONFIG RESETSTAT) and
#      round trips per request by script (a 0.5 s SLOWLOG sample that logs every command).
#      Repeated (at most 3 runs, the quietest kept) while other processes used more than 20 % of
#      a core.
#
# Usage: benches/shared.sh [--only 5,6] [--out PATH|-] [--courtesy PATH]
#   Progress goes to stderr; the Markdown report to stdout and to benches/SHARED_RESULTS.md.
#   Knobs (environment): COURTESY_BIN (default: the release binary under $CARGO_TARGET_DIR or
#   target/), CARGO_TARGET_DIR. The durations are fixed (see the two modules' constants).
#   About 1.5 minutes on a quiet 2-core machine (26 s + 45 s), up to about 3 when scenario 6 is
#   repeated because other processes were busy; plus the builds (the release binary is built
#   once and reused).
#
# Needs redis-server (Debian package redis-server; installed with apt-get when missing, as root).
# Loopback only; the processes started are courtesy (4 for scenario 5, one per case in 6),
# one redis-server per scenario (free loopback port, --save "" --appendonly no) and the bench
# binary, each stopped by its own PID.

set -euo pipefail

export PATH="$PATH:/usr/sbin:/sbin"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

HOST=127.0.0.1
LOG_TAG=shared
# shellcheck source=benches/common.sh
. "$ROOT/benches/common.sh"

# The Debian package of the same name (it pulls in redis-tools).
install_missing redis-server

# 800 client connections, as many in the instances and to the origin.
raise_open_files
log "open files: $(ulimit -n)"

export COURTESY_BIN=${COURTESY_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/courtesy}
cargo build --release --bin courtesy >&2
exec cargo bench --bench scenarios -- --only 5,6 "$@"
