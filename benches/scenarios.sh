#!/usr/bin/env bash
# Performance scenarios (targets 2–5) against the real release binary: pacing precision, many hosts,
# parked requests, fan-out fairness. See the header of benches/scenarios/main.rs for what each measures.
#
# Usage: benches/scenarios.sh [--only 1,2,3,4] [--e2e-hosts 5000] [--out PATH|-]
#   Progress goes to stderr; the Markdown report to stdout and to benches/SCENARIOS_RESULTS.md.
#   About 2.5 minutes on a quiet 2-core machine, up to about 5 when scenario 1 is repeated because
#   other processes were busy (it runs up to 3 times and keeps the quietest run); plus the builds
#   (the release binary is built once and reused).
#
# Scenario 3 holds 10,000 client connections in the bench process and as many in courtesy, so the
# open-file limit is raised first (courtesy inherits it). Loopback only; the only processes started
# are courtesy (one per scenario) and the bench binary itself, each stopped by its own PID.

set -euo pipefail

# shellcheck source=benches/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$ROOT"

raise_open_files
echo "[scenarios.sh] open files: $(ulimit -n)" >&2

cargo build --release --bin courtesy >&2
exec cargo bench --bench scenarios -- "$@"
