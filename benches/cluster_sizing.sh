#!/usr/bin/env bash
# Sizing a fleet (issue 40): how many requests per second one shard of a Redis Cluster holds under
# the shared budget, and what each costs it, on loopback only. A 3-master Redis Cluster
# (redis-server from Debian, cluster mode, no replicas), courtesy instances on it
# (`redis_url = "redis+cluster://..."`), an nginx origin (1 KiB), and wrk sending absolute-form
# GETs for HOSTS distinct names (h00001.test ..., resolved to 127.0.0.1 by courtesy's
# `hosts_file`), picked so that each shard owns a third of them (CLUSTER KEYSLOT of each host's
# hash tag) and interleaved, so that the load spreads over the shards at every moment.
#
# Every request costs a reservation: the hosts are paced far above what they are asked (rate
# 100000/s, concurrency 1000) but with `burst = 16`, under the 32 an allowance needs, so no turn is
# ever spent locally. Each connection is a wrk process of its own (1 thread, 1 connection) that
# sends RUN requests in a row to one host, back to back, then moves on to its next host, as a
# crawler with a connection per host does: the end of a turn then rides on the host's next
# reservation (within 5 ms), and only the last of a run is released on its own. RUN=1 makes every
# request a new host (about two script calls per request).
#
# The offered load steps through CONNS (closed-loop connections, connection j through instance
# j mod INSTANCES). Per step: requests/s and p50/p99 latency (the wrk processes' histograms
# merged), courtesy's CPU per request and each instance's % of a core (utime + stime from
# /proc/PID/stat), and per shard: script calls/s (`cmdstat_evalsha` in INFO commandstats, before
# and after), redis-server's CPU per call and its % of a core (/proc/PID/stat), Redis' own time
# per call (usec_per_call), calls per request; store errors (courtesy_shared_errors_total) and the
# CPU other processes used. After each step, a SAMPLE-second run with SLOWLOG logging every call
# splits the calls by script (reserve, release, withdraw, other). The derived figure: what the
# busiest shard carried at the last step before latency bent (p99 over BEND x the first step's,
# store errors, or requests/s falling by over 10 %), at how much Redis CPU per call, and what a
# full core would hold at that cost.
#
# Usage: bash benches/cluster_sizing.sh > out.md  (progress on stderr, the Markdown report on stdout)
# Knobs (environment): DURATION=10 (seconds per step, 1..120), CONNS="4 8 16 32 64 128" (the
#   steps: 1..12 of them, each 1..256), HOSTS=3000 (names, 16..50000, at least the largest step),
#   INSTANCES=1 (courtesy instances, 1..8), RUN=16 (requests per host in a row, 1..64),
#   ONE_SHARD=0 (1: every name on the first master, so that one shard takes all the load),
#   BEND=2 (2..10), SAMPLE=1 (seconds of the SLOWLOG run after each step, 0..10; 0: none),
#   REDIS_PORT=17300 (nodes on REDIS_PORT..+2, their cluster bus +10000), ORIGIN_PORT=18880,
#   COURTESY_PORT=18828 (instance i on COURTESY_PORT + 10 i, admin +1),
#   COURTESY_BIN=target/release/courtesy (built when stale).
# With the defaults one run takes about 1.5 minutes (6 steps of 10 s plus 1 s samples, set-up,
# a 3 s warm-up per instance), plus the build.
#
# Needs: redis-server (with redis-cli), nginx, wrk, curl (Debian packages; installed with apt-get
# when missing, as root). Everything it starts lives in one temp dir and is stopped by PID on
# exit: three redis-servers, nginx, the courtesy instances, one wrk per connection.

# shellcheck source=benches/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bench_prologue cluster

DURATION=${DURATION:-10}
CONNS=${CONNS:-"4 8 16 32 64 128"}
HOSTS=${HOSTS:-3000}
INSTANCES=${INSTANCES:-1}
RUN=${RUN:-16}
ONE_SHARD=${ONE_SHARD:-0}
BEND=${BEND:-2}
SAMPLE=${SAMPLE:-1}
REDIS_PORT=${REDIS_PORT:-17300}
ORIGIN_PORT=${ORIGIN_PORT:-18880}
COURTESY_PORT=${COURTESY_PORT:-18828}
COURTESY_BIN=${COURTESY_BIN:-}
HOST=127.0.0.1
SHARDS=3
read -r -a STEPS <<<"$CONNS"

need_range 1 120 "DURATION must be 1..120 seconds" "$DURATION"
need_range 1 8 "INSTANCES must be 1..8" "$INSTANCES"
((${#STEPS[@]} >= 1 && ${#STEPS[@]} <= 12)) || die "CONNS must list 1..12 steps"
need_range 1 256 "each of CONNS must be 1..256" "${STEPS[@]}"
max_conns=$(printf '%s\n' "${STEPS[@]}" | sort -n | tail -n 1)
need_range "$((max_conns > 16 ? max_conns : 16))" 50000 "HOSTS must be 16..50000 and at least the largest of CONNS" "$HOSTS"
need_range 1 64 "RUN must be 1..64" "$RUN"
need_range 0 1 "ONE_SHARD must be 0 or 1" "$ONE_SHARD"
need_range 2 10 "BEND must be 2..10" "$BEND"
need_range 0 10 "SAMPLE must be 0..10 seconds" "$SAMPLE"
need_range 1024 55000 "REDIS_PORT must be 1024..55000 (its cluster bus is +10000)" "$REDIS_PORT"
need_range 1024 65000 "ORIGIN_PORT and COURTESY_PORT must be 1024..65000" "$ORIGIN_PORT" "$COURTESY_PORT"

# The Debian package redis-server pulls in redis-tools (redis-cli).
install_missing redis-server nginx wrk curl
command -v redis-cli >/dev/null || die "redis-cli missing (Debian package redis-tools)"
CLK_TCK=$(getconf CLK_TCK)

build_courtesy
rev=$(tree_rev)

# Up to 256 client connections (one wrk each), as many upstream, plus the cluster's own.
raise_open_files
NODE_PORTS=()
for ((s = 0; s < SHARDS; s++)); do NODE_PORTS+=($((REDIS_PORT + s))); done
COURTESY_PORTS=()
for ((i = 0; i < INSTANCES; i++)); do COURTESY_PORTS+=($((COURTESY_PORT + 10 * i))); done
ports=("$ORIGIN_PORT")
for port in "${NODE_PORTS[@]}"; do ports+=("$port" $((port + 10000))); done
for port in "${COURTESY_PORTS[@]}"; do ports+=("$port" $((port + 1))); done
require_free_ports "${ports[@]}"
setup_tmp courtesy-cluster
started=$(date +%s)

# ---- the Redis Cluster: 3 masters, no replicas ---------------------------------------------------

REDIS_PIDS=()
for ((s = 0; s < SHARDS; s++)); do
    dir="$TMP/redis$s"
    mkdir -p "$dir"
    redis-server --bind "$HOST" --port "${NODE_PORTS[s]}" --cluster-enabled yes \
        --cluster-config-file "$dir/nodes.conf" --cluster-node-timeout 5000 --dir "$dir" \
        --save "" --appendonly no --logfile "$dir/log" --daemonize no >/dev/null 2>&1 &
    REDIS_PIDS+=($!)
    PIDS+=($!)
done
for ((s = 0; s < SHARDS; s++)); do wait_port "${REDIS_PIDS[s]}" "${NODE_PORTS[s]}" "redis-server $s"; done
nodes=()
for port in "${NODE_PORTS[@]}"; do nodes+=("$HOST:$port"); done
log "creating the cluster on ${nodes[*]}"
redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >"$TMP/cluster-create.log" 2>&1 ||
    die "redis-cli --cluster create failed: $(tail -n 5 "$TMP/cluster-create.log")"
for port in "${NODE_PORTS[@]}"; do
    for ((i = 0; i < 100; i++)); do
        redis-cli -h "$HOST" -p "$port" cluster info 2>/dev/null | grep -q '^cluster_state:ok' && break
        sleep 0.1
    done
    ((i < 100)) || die "the cluster node on port $port was not cluster_state:ok within 10 s"
done
# Which shard (index into NODE_PORTS) owns each slot: "first last shard" lines.
redis-cli -h "$HOST" -p "${NODE_PORTS[0]}" cluster nodes |
    awk -v ports=" ${NODE_PORTS[*]} " '$3 ~ /master/ {
        split($2, a, "[:@]")
        n = split(ports, p, " ")
        for (s = 1; s <= n; s++) if (p[s] == a[2]) shard = s - 1
        for (f = 9; f <= NF; f++) if ($f !~ /^\[/) { split($f, r, "-"); print r[1], (r[2] == "" ? r[1] : r[2]), shard }
    }' >"$TMP/slots"
(($(awk '{ n += $2 - $1 + 1 } END { print n + 0 }' "$TMP/slots") == 16384)) ||
    die "the cluster's masters do not cover the 16384 slots: $(cat "$TMP/slots")"
log "cluster ok: $(awk '{ printf "%s%s-%s on shard %s", sep, $1, $2, $3; sep = ", " }' "$TMP/slots")"

# ---- the names and their shards ------------------------------------------------------------------

# Each host's keys share the hash tag {host:port} (docs/several-instances.md), so its shard is
# the one owning CLUSTER KEYSLOT of "host:port". Names in a row do not spread evenly (CRC16 is
# linear: the first 3000 fall 1055 / 879 / 1066), so the names are taken in order until each
# shard has its third of HOSTS; with ONE_SHARD=1, shard 0 gets them all. At most 4 x HOSTS + 1000
# candidates are tried.
tries=$((4 * HOSTS + 1000))
for ((i = 1; i <= tries; i++)); do printf 'h%05d.test\n' "$i"; done >"$TMP/candidates"
sed "s/\$/:$ORIGIN_PORT/; s/^/CLUSTER KEYSLOT /" "$TMP/candidates" |
    redis-cli -h "$HOST" -p "${NODE_PORTS[0]}" >"$TMP/keyslots"
paste -d ' ' "$TMP/candidates" "$TMP/keyslots" |
    awk -v want="$HOSTS" -v one="$ONE_SHARD" -v k="$SHARDS" '
        NR == FNR { first[NR] = $1; last[NR] = $2; shard[NR] = $3; n = NR; next }
        FNR == 1 { for (s = 0; s < k; s++) quota[s] = one ? (s ? 0 : want) : int((want + k - 1 - s) / k) }
        {
            # Read to the end (no exit: paste would die of SIGPIPE).
            if (kept == want) next
            for (r = 1; r <= n; r++) if ($2 >= first[r] && $2 <= last[r]) s = shard[r]
            if (taken[s] >= quota[s]) next
            taken[s]++
            kept++
            print $1, $2, s
        }' "$TMP/slots" - >"$TMP/picked"
# Interleaved by shard (the first name of each shard, then the second of each, ...), so that the
# names a step goes through at any moment are spread over the shards like all of them.
awk '{ print seq[$3]++, $0 }' "$TMP/picked" | sort -s -n -k1,1 -k4,4 | cut -d ' ' -f 2- >"$TMP/names"
(($(wc -l <"$TMP/names") == HOSTS)) || die "found $(wc -l <"$TMP/names") names for $HOSTS hosts"
cut -d ' ' -f 1 "$TMP/names" >"$TMP/hostnames"
{
    printf '%s' "$HOST"
    awk '{ printf " %s", $1 }' "$TMP/names"
    printf '\n'
} >"$TMP/hosts"
HOSTS_PER_SHARD=$(awk -v k="$SHARDS" '{ n[$3]++ } END { for (s = 0; s < k; s++) printf "%s%d", (s ? " / " : ""), n[s] }' "$TMP/names")
log "$HOSTS names, per shard: $HOSTS_PER_SHARD"

# ---- origin: nginx with a 1 KiB file -------------------------------------------------------------

mkdir -p "$TMP/nginx/www" "$TMP/nginx/tmp"
head -c 1024 /dev/urandom >"$TMP/nginx/www/1k"
chmod -R a+rX "$TMP/nginx"
cat >"$TMP/nginx/nginx.conf" <<EOF
$(nginx_conf_start "$TMP/nginx")
$(static_origin_server "$ORIGIN_PORT" "$TMP/nginx/www")
}
EOF
start_nginx "$TMP/nginx" "$ORIGIN_PORT"

# ---- courtesy instances on the cluster -----------------------------------------------------------

seeds=$(
    IFS=,
    echo "${nodes[*]}"
)
COURTESY_PIDS=()
for ((i = 0; i < INSTANCES; i++)); do
    dir="$TMP/courtesy$i"
    port=${COURTESY_PORTS[i]}
    mkdir -p "$dir"
    cat >"$dir/courtesy.toml" <<EOF
# Every request takes its turn from the store: a rate far above the load, and a burst under the
# 32 an allowance needs (so none is granted: no turn is spent locally).
[proxy]
listen = "$HOST:$port"
admin_listen = "$HOST:$((port + 1))"
state_dir = "$dir/state"
hosts_file = "$TMP/hosts"
max_in_flight = 100000
max_connections_per_client = 100000

[defaults]
rate = 100000
burst = 16
concurrency = 1000
obey_robots = false

[shared]
redis_url = "redis+cluster://$seeds"
instances = $INSTANCES
EOF
    run_courtesy "$dir" warn
    COURTESY_PIDS+=($!)
    PIDS+=($!)
done
for ((i = 0; i < INSTANCES; i++)); do
    port=${COURTESY_PORTS[i]}
    wait_port "${COURTESY_PIDS[i]}" "$port" "courtesy $i"
    for ((t = 0; t < 50; t++)); do
        curl -sS --max-time 2 "http://$HOST:$((port + 1))/readyz" 2>/dev/null |
            grep -q '"budget": *"shared"' && break
        sleep 0.1
    done
    ((t < 50)) || die "courtesy $i is not on the shared budget after 5 s: $(tail -n 5 "$TMP/courtesy$i/log")"
    code=$(curl -sS --max-time 5 -o /dev/null -w '%{http_code}' -x "http://$HOST:${COURTESY_PORTS[i]}" \
        "http://$(head -n 1 "$TMP/hostnames"):$ORIGIN_PORT/1k") || code=000
    [[ $code == 200 ]] || die "a request through courtesy $i was answered $code"
done
log "courtesy: $INSTANCES instance(s) on the shared budget"

# ---- wrk -----------------------------------------------------------------------------------------

# Absolute-form GETs for the names in LOAD_HOSTS, on one connection: request n goes to name
# LOAD_START + floor(n / LOAD_RUN) x LOAD_STRIDE, so that the connection sends LOAD_RUN requests in
# a row to one host, back to back, then moves on to its next host. done() writes the RESULT line
# and the latency histogram ("H µs count"), which a step merges over its wrk processes.
cat >"$TMP/load.lua" <<'EOF'
local requests = {}
local port = os.getenv("LOAD_PORT")
for name in io.lines(os.getenv("LOAD_HOSTS")) do
    local authority = name .. ":" .. port
    requests[#requests + 1] = wrk.format("GET", "http://" .. authority .. "/1k", { Host = authority })
end
local run = tonumber(os.getenv("LOAD_RUN"))
local start = tonumber(os.getenv("LOAD_START"))
local stride = tonumber(os.getenv("LOAD_STRIDE"))
local n = 0
request = function()
    local i = (start + math.floor(n / run) * stride) % #requests + 1
    n = n + 1
    return requests[i]
end
EOF
wrk_result_lua >>"$TMP/load.lua"
cat >>"$TMP/load.lua" <<'EOF'
local result_done = done
done = function(summary, latency, requests)
    result_done(summary, latency, requests)
    for i = 1, #latency do
        local value, count = latency(i)
        io.write(string.format("H %d %d\n", value, count))
    end
end
EOF

# The counters a step is measured between, one "name value" a line: per shard, the script calls
# and their µs (cmdstat_evalsha) and redis-server's CPU ticks; per instance, its CPU ticks and
# store errors; the CPU ticks of every other process.
snapshot() {
    local s i port
    for ((s = 0; s < SHARDS; s++)); do
        redis-cli -h "$HOST" -p "${NODE_PORTS[s]}" info commandstats |
            awk -F'[:=,]' -v s="$s" '$1 == "cmdstat_evalsha" { print "calls" s, $3; print "usec" s, $5; print "failed" s, $9 + $11; found = 1 }
                END { if (!found) { print "calls" s, 0; print "usec" s, 0; print "failed" s, 0 } }'
        # shellcheck disable=SC2046  # split on purpose: cpu_ticks prints "utime stime", $1 and $2
        set -- $(cpu_ticks "${REDIS_PIDS[s]}")
        echo "redis$s $(($1 + $2))"
    done
    for ((i = 0; i < INSTANCES; i++)); do
        port=${COURTESY_PORTS[i]}
        # shellcheck disable=SC2046  # split on purpose: cpu_ticks prints "utime stime", $1 and $2
        set -- $(cpu_ticks "${COURTESY_PIDS[i]}")
        echo "courtesy$i $(($1 + $2))"
        curl -sS --max-time 5 "http://$HOST:$((port + 1))/metrics" |
            awk -v i="$i" '/^courtesy_shared_errors_total\{/ { n += $NF }
                /^courtesy_shared_mode\{mode="fallback"\}/ { f = $NF }
                END { print "errors" i, n + 0; print "fallback" i, f + 0 }'
    done
    echo "other $(other_ticks)"
}

RUNS="$TMP/steps.tsv"
SHARD_ROWS="$TMP/shards.tsv"
: >"$RUNS"
: >"$SHARD_ROWS"

# One bounded step: `conns` connections, each a wrk process of its own (1 thread, 1 connection, so
# that a connection keeps to its host for `run` requests, default RUN), connection j through
# instance j mod INSTANCES (or all through instance `only`, when given), for `secs` seconds. With `record` 1, a row goes to RUNS (conns,
# req/s, p50 µs, p99 µs, requests, socket and HTTP errors, courtesy CPU µs per request (all
# instances), each instance's % of a core, script calls per request, store errors, other
# processes' % of a core, busiest shard's calls/s, its redis CPU µs per call, its % of a core, its
# usec_per_call, instances in fallback, failed script calls) and one per shard to SHARD_ROWS.
run_step() {
    local conns=$1 secs=$2 record=$3 run=${4:-$RUN} only=${5:-} j inst pcts pids=()
    rm -f "$TMP"/wrk*.out
    snapshot >"$TMP/before"
    for ((j = 0; j < conns; j++)); do
        inst=${only:-$((j % INSTANCES))}
        LOAD_HOSTS="$TMP/hostnames" LOAD_PORT=$ORIGIN_PORT LOAD_RUN=$run LOAD_START=$j LOAD_STRIDE=$conns \
            timeout $((secs + 30)) wrk -t 1 -c 1 -d "${secs}s" --timeout 10s -s "$TMP/load.lua" \
            "http://$HOST:${COURTESY_PORTS[inst]}/" >"$TMP/wrk$j.out" 2>&1 &
        pids+=($!)
    done
    for ((j = 0; j < conns; j++)); do
        wait "${pids[j]}" || die "wrk failed at c=$conns: $(head -c 2000 "$TMP/wrk$j.out")"
        grep -q '^RESULT ' "$TMP/wrk$j.out" || die "no RESULT line from wrk: $(head -c 2000 "$TMP/wrk$j.out")"
    done
    snapshot >"$TMP/after"
    ((record)) || {
        WARM=$(awk '$1 == "RESULT" { n += $2; e += $6 + $7 } END { print n + 0, e + 0 }' "$TMP"/wrk*.out)
        return 0
    }
    # Latency percentiles over the histograms of every wrk process, merged: "p50 p99" in µs.
    pcts=$(cat "$TMP"/wrk*.out | awk '$1 == "H" { print $2, $3 }' | sort -n -k1,1 |
        awk '{ v[NR] = $1; c[NR] = $2; total += $2 }
            END { for (x = 1; x <= NR; x++) { cum += c[x]
                    if (p50 == "" && cum >= 0.50 * total) p50 = v[x]
                    if (p99 == "" && cum >= 0.99 * total) p99 = v[x] }
                print p50 + 0, p99 + 0 }')
    cat "$TMP"/wrk*.out | awk -v conns="$conns" -v shards="$SHARDS" -v inst="$INSTANCES" -v hz="$CLK_TCK" \
        -v before="$TMP/before" -v after="$TMP/after" -v shard_rows="$SHARD_ROWS" -v pcts="$pcts" '
        BEGIN {
            while ((getline line < before) > 0) { split(line, f, " "); b[f[1]] = f[2] }
            while ((getline line < after) > 0) { split(line, f, " "); a[f[1]] = f[2] }
        }
        $1 == "RESULT" { n += $2; rps += $2 / ($3 / 1e6); dur += $3 / 1e6; procs++; serr += $6; herr += $7 }
        END {
            secs = dur / procs
            split(pcts, pc, " "); p50 = pc[1]; p99 = pc[2]
            cticks = 0; errs = 0; fb = 0; each = ""
            for (i = 0; i < inst; i++) {
                cticks += a["courtesy" i] - b["courtesy" i]
                each = each (i ? "/" : "") sprintf("%.0f", (a["courtesy" i] - b["courtesy" i]) / hz * 100 / secs)
                errs += a["errors" i] - b["errors" i]
                fb += a["fallback" i]
            }
            calls = 0; best = -1
            for (s = 0; s < shards; s++) {
                c = a["calls" s] - b["calls" s]; u = a["usec" s] - b["usec" s]; r = a["redis" s] - b["redis" s]
                calls += c
                failed += a["failed" s] - b["failed" s]
                cps = c / secs
                cpu = c > 0 ? r / hz * 1e6 / c : 0
                pct = r / hz * 100 / secs
                upc = c > 0 ? u / c : 0
                printf "%s\t%s\t%.0f\t%.1f\t%.1f\t%.1f\t%.2f\n", conns, s, cps, cpu, upc, pct, (n > 0 ? c / n : 0) >> shard_rows
                if (cps > best) { best = cps; bcpu = cpu; bpct = pct; bupc = upc }
            }
            other = (a["other"] - b["other"]) / hz * 100 / secs
            if (other < 0) other = 0
            printf "%s\t%.0f\t%d\t%d\t%d\t%d\t%d\t%.1f\t%s\t%.2f\t%d\t%.0f\t%.0f\t%.1f\t%.0f\t%.1f\t%d\t%d\n",
                conns, rps, p50, p99, n, serr, herr, (n > 0 ? cticks / hz * 1e6 / n : 0), each,
                (n > 0 ? calls / n : 0), errs, other, best, bcpu, bpct, bupc, fb, failed
        }' >>"$RUNS"
    log "$(tail -n 1 "$RUNS" | awk -F'\t' '{ printf "c=%s: %s req/s, p50 %.2f ms, p99 %.2f ms, errors %s/%s, courtesy %s µs/req, %s script calls/req, busiest shard %s calls/s at %s µs Redis CPU each (%s%% of a core), store errors %s, other CPU %s%%",
        $1, $2, $3 / 1000, $4 / 1000, $6, $7, $8, $10, $13, $14, $15, $11, $12 }')"
}

# Each instance meets every name before the steps (it tells the store of a host's first answer,
# once per host; the scripts get loaded): one request per name, through each instance in turn.
for ((i = 0; i < INSTANCES; i++)); do
    run_step "${STEPS[0]}" 3 0 1 "$i"
    read -r warm_requests warm_errors <<<"$WARM"
    log "warm-up through instance $i: $warm_requests requests for $HOSTS names, $warm_errors errors"
    ((warm_requests >= HOSTS)) || log "warning: the warm-up did not reach every name: the first steps count some first answers"
done
# The calls the warm-up left behind (the first answers told off the request path) drain first.
sleep 2
# Which scripts the calls were: a SAMPLE-second run after each step at its connections, with every
# call on every shard logged by SLOWLOG (which costs Redis time: that is why it is a run of its
# own), each EVALSHA told by its keys (src/store/calls.rs): reserve (5 keys), release (3, the
# budget first), withdraw (3, the waiting list first), other (1 key: report, bill, operator,
# renew, heartbeat). Appends "conns requests reserve release withdraw other" to SPLIT.
split_sample() {
    local conns=$1 port requests
    for port in "${NODE_PORTS[@]}"; do
        redis-cli -h "$HOST" -p "$port" config set slowlog-max-len 1000000 >/dev/null
        redis-cli -h "$HOST" -p "$port" slowlog reset >/dev/null
        redis-cli -h "$HOST" -p "$port" config set slowlog-log-slower-than 0 >/dev/null
    done
    run_step "$conns" "$SAMPLE" 0
    for port in "${NODE_PORTS[@]}"; do
        redis-cli -h "$HOST" -p "$port" config set slowlog-log-slower-than 10000 >/dev/null
    done
    read -r requests _ <<<"$WARM"
    for port in "${NODE_PORTS[@]}"; do
        redis-cli -h "$HOST" -p "$port" slowlog get -1
        redis-cli -h "$HOST" -p "$port" slowlog reset >/dev/null
    done | awk -v conns="$conns" -v requests="$requests" '
        want == 3 { key = $0; want = 0
            if (numkeys == 5) reserve++
            else if (numkeys == 3 && key ~ /:b$/) release++
            else if (numkeys == 3) withdraw++
            else other++
            next }
        want == 2 { numkeys = $0 + 0; want = 3; next }
        want == 1 { want = 2; next }
        toupper($0) == "EVALSHA" { want = 1 }
        END { print conns, requests, reserve + 0, release + 0, withdraw + 0, other + 0 }' >>"$SPLIT"
}

SPLIT="$TMP/split"
: >"$SPLIT"
for conns in "${STEPS[@]}"; do
    log "step c=$conns (${DURATION} s)"
    run_step "$conns" "$DURATION" 1
    ((SAMPLE == 0)) || split_sample "$conns"
done
ELAPSED=$(($(date +%s) - started))

# ---- report --------------------------------------------------------------------------------------

echo "## Sizing a fleet: one Redis Cluster shard under the shared budget (3 masters, loopback)"
echo
report_machine
echo "- courtesy: $("$COURTESY_BIN" --version 2>/dev/null || echo '?') ($COURTESY_BIN), tree at git $rev, RUST_LOG=warn; $INSTANCES instance(s)"
echo "- $(redis-server --version | sed 's/ sha=.*//'), 3 masters on $HOST:${NODE_PORTS[0]}..${NODE_PORTS[2]}, no replicas, --save \"\" --appendonly no; $(nginx -v 2>&1 | sed 's/^nginx version: //') origin (1 worker, 1 KiB); $( (wrk -v 2>&1 || true) | head -n 1 | sed 's/ Copyright.*//')"
echo "- load: $HOSTS hosts (h00001.test ... via hosts_file; per shard: $HOSTS_PER_SHARD$( ((ONE_SHARD)) && echo ', ONE_SHARD=1')), rate 100000/s, burst 16 (no allowance), concurrency 1000, obey_robots off; RUN=$RUN requests per host in a row on a connection; one wrk process (1 thread, 1 connection, closed loop) per connection, connection j through instance j mod $INSTANCES; ${DURATION} s per step; whole run ${ELAPSED} s"
echo "- all processes share the machine's CPUs: wrk, nginx, courtesy and the three redis-servers"
echo
echo "| conns | req/s | p50 ms | p99 ms | socket / HTTP errors | courtesy CPU µs/req | courtesy % of a core (each) | script calls / req | failed calls (NOSCRIPT, errors) | store errors | busiest shard calls/s | its Redis CPU µs/call | its % of a core | its usec_per_call | other CPU % |"
echo "|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
awk -F'\t' '{ printf "| %s | %s | %.2f | %.2f | %s / %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
    $1, $2, $3 / 1000, $4 / 1000, $6, $7, $8, $9, $10, $18, $11, $13, $14, $15, $16, $12 }' "$RUNS"
echo
if [[ -s $SPLIT ]]; then
    echo "Script calls per request by script (a ${SAMPLE} s run after each step at its connections, every call logged by SLOWLOG and told by its keys; the measured steps ran without it):"
    echo
    echo "| conns | requests | reserve | release (alone) | withdraw | other | all |"
    echo "|---:|---:|---:|---:|---:|---:|---:|"
    awk '{ n = $2 > 0 ? $2 : 1; printf "| %s | %s | %.3f | %.3f | %.3f | %.3f | %.3f |\n", $1, $2, $3 / n, $4 / n, $5 / n, $6 / n, ($3 + $4 + $5 + $6) / n }' "$SPLIT"
    echo
fi
echo "Per shard and step (script calls are \`cmdstat_evalsha\`: the reservations, releases no reservation carried, heartbeats; Redis CPU per call is redis-server's utime + stime over the step, I/O included, per call; usec_per_call is the time Redis measured in the script, wall clock: on a busy machine it counts the time Redis was preempted):"
echo
echo "| conns | shard | calls/s | Redis CPU µs/call | usec_per_call | % of a core | calls / req |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
awk -F'\t' '{ printf "| %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7 }' "$SHARD_ROWS"
echo
# The knee: the last step before p99 went over BEND x the first step's, store errors or a
# fallback appeared, or requests/s fell by over 10 %.
awk -F'\t' -v bend="$BEND" -v split_file="$SPLIT" '
    BEGIN { while ((getline line < split_file) > 0) { split(line, f, " "); all = f[3] + f[4] + f[5] + f[6]; if (all > 0) share[f[1]] = f[3] / all } }
    NR == 1 { base = $4 }
    !stop && NR > 1 && ($4 > bend * base || $11 > 0 || $17 > 0 || $2 < 0.9 * prev) { stop = NR; why = ($11 > 0 || $17 > 0) ? "store errors" : ($2 < 0.9 * prev ? "requests/s fell by over 10 %" : "p99 over " bend "x the first step'"'"'s") }
    !stop { knee = $1; rps = $2; p99 = $4; calls = $13; cpu = $14; pct = $15; upc = $16; cpr = $10 }
    { prev = $2 }
    END {
        if (knee == "") { print "No step before the bend: the first step already had store errors."; exit }
        if (knee in share) printf "**One shard holds about %d reservations/s (%d script calls/s) at %.1f µs of Redis CPU per call before p99 bends**", calls * share[knee], calls, cpu
        else printf "**One shard holds about %d script calls/s at %.1f µs of Redis CPU each before p99 bends**", calls, cpu
        printf " (the busiest shard at %s connections, %d req/s through courtesy, p99 %.2f ms, %s script calls per request", knee, rps, p99 / 1000, cpr
        if (knee in share) printf ", %.1f %% of them reservations in the SLOWLOG sample", 100 * share[knee]
        printf "; the shard at %s%% of a core, usec_per_call %s). ", pct, upc
        if (stop) printf "The next step bent (%s). ", why
        else printf "No step bent (p99 within %sx the first step'"'"'s throughout): the figure is a floor. ", bend
        if (cpu > 0) printf "At that cost a shard given a full core would hold about %d calls/s; on a machine shared with courtesy, wrk and nginx the bend usually comes from the CPUs, not from the shard (see its %% of a core).\n", 1e6 / cpu
    }' "$RUNS"
