#!/usr/bin/env bash
# The shared-budget fault soak: benches/soak.sh with every courtesy instance on a store reached
# through Redis Sentinel (a master, a replica and three sentinels of its own, on free loopback
# ports), the store stalled (SIGSTOP of master and replica for 1 s every 20 s) and one Sentinel
# failover (SENTINEL FAILOVER) when half of each mode's requests are done. The soak's own checks
# (nothing lost, hung, corrupted or duplicated; no POST resent; no arrival inside a Retry-After
# window) are the gate.
#
# Usage: benches/soak_shared.sh [--roomy] [soak.sh's arguments]
#   (report: benches/SOAK_SHARED_RESULTS.md; with --roomy, benches/SOAK_SHARED_ROOMY_RESULTS.md)
#   --roomy: a deep burst and a wide concurrency cap (rate 200, burst 100, concurrency 32), so
#   that the hosts are served from allowances (turns leased ahead) between the storms.
#
# Loopback only; the processes started (redis-server x2, redis-sentinel x3) are stopped by
# their own PIDs on exit.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# shellcheck source=benches/common.sh
LOG_TAG=soak-shared
. "$ROOT/benches/common.sh"
install_missing redis-server
command -v redis-sentinel >/dev/null 2>&1 || install_missing redis-sentinel

dir=$(mktemp -d /tmp/courtesy-soak-shared.XXXXXX)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -CONT "$pid" 2>/dev/null || true; kill "$pid" 2>/dev/null || true; done
    rm -rf "$dir"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
master=$(free_port); replica=$(free_port)
redis-server --port "$master" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" >/dev/null 2>&1 &
pids+=($!); master_pid=$!
redis-server --port "$replica" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
    --replicaof 127.0.0.1 "$master" >/dev/null 2>&1 &
pids+=($!); replica_pid=$!
sentinels=()
for i in 1 2 3; do
    port=$(free_port)
    cat > "$dir/sentinel$i.conf" <<CONF
port $port
bind 127.0.0.1
dir $dir
sentinel monitor courtesy-soak 127.0.0.1 $master 2
sentinel down-after-milliseconds courtesy-soak 1000
sentinel failover-timeout courtesy-soak 5000
CONF
    redis-sentinel "$dir/sentinel$i.conf" >/dev/null 2>&1 &
    pids+=($!)
    sentinels+=("127.0.0.1:$port")
done
for _ in $(seq 100); do
    redis-cli -p "${sentinels[0]##*:}" SENTINEL get-master-addr-by-name courtesy-soak >/dev/null 2>&1 && break
    sleep 0.1
done
sleep 2
urls=$(IFS=,; echo "${sentinels[*]}")
log "store: master :$master (pid $master_pid), replica :$replica (pid $replica_pid), sentinels $urls"
export SOAK_EXTRA_CONFIG=$'[shared]\nredis_url = "redis+sentinel://'"$urls"$'/courtesy-soak"\ninstances = 1\n'
export SOAK_STALL_PID="$master_pid,$replica_pid"
export SOAK_FAILOVER_CMD="redis-cli -p ${sentinels[0]##*:} SENTINEL FAILOVER courtesy-soak"
out=benches/SOAK_SHARED_RESULTS.md
if [[ ${1:-} == --roomy ]]; then
    shift
    export SOAK_PACING=$'rate = 200.0\nburst = 100\nconcurrency = 32'
    out=benches/SOAK_SHARED_ROOMY_RESULTS.md
fi
bash benches/soak.sh --out "$out" "$@"
