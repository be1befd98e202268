#!/usr/bin/env bash
# What naming jobs costs a proxied request, on loopback: courtesy's CPU time per request (utime +
# stime from /proc before and after each run) and requests/s for
#   nojobs     wrk -> courtesy without [[job]] (what every request cost before jobs) -> nginx
#   anonymous  the same courtesy with 10 [[job]]s configured, requests without credentials
#   jobs10     requests spread over the 10 jobs, each with its name and token in
#              Proxy-Authorization (a Basic decode and a SHA-256 of the token per request)
# Pacing is effectively off (rate and burst 1000000), so nothing queues: the cost of the fair
# queue itself, with jobs waiting, is benches/lanes.rs (benches/LANES_RESULTS.md). The cases are
# interleaved within each repeat, so that drift on the machine hits them alike.
#
# Usage: bash benches/jobs.sh > out.md      (progress on stderr, the Markdown report on stdout)
# Knobs: DURATION=8 (seconds per run), REPEATS=3, CONNS=16, NOISE_PCT=10, RETRY_BUDGET=6,
#   ORIGIN_PORT=18780, NOJOBS_PORT=18728, JOBS_PORT=18738 (admin ports are +1),
#   COURTESY_BIN=target/release/courtesy (built when stale).
# About 2 minutes with the defaults on a quiet 2-core machine.
# Needs: nginx, wrk, curl (Debian packages; installed with apt-get when missing, as root).
# Everything it starts lives in one temp dir and is stopped by PID on exit.

# shellcheck source=benches/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bench_prologue jobs

DURATION=${DURATION:-8}
REPEATS=${REPEATS:-3}
CONNS=${CONNS:-16}
NOISE_PCT=${NOISE_PCT:-10}
RETRY_BUDGET=${RETRY_BUDGET:-6}
ORIGIN_PORT=${ORIGIN_PORT:-18780}
NOJOBS_PORT=${NOJOBS_PORT:-18728}
JOBS_PORT=${JOBS_PORT:-18738}
COURTESY_BIN=${COURTESY_BIN:-}
HOST=127.0.0.1
STATUS_PORT=$ORIGIN_PORT
RETRIES=0

need_range 1 60 "DURATION must be 1..60 seconds" "$DURATION"
need_range 1 10 "REPEATS must be 1..10" "$REPEATS"
need_range 1 256 "CONNS must be 1..256" "$CONNS"
install_missing nginx wrk curl
CLK_TCK=$(getconf CLK_TCK)

build_courtesy
require_free_ports "$ORIGIN_PORT" "$NOJOBS_PORT" $((NOJOBS_PORT + 1)) "$JOBS_PORT" $((JOBS_PORT + 1))
setup_tmp courtesy-jobs

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

# ---- courtesy: without jobs, and with 10 ---------------------------------------------------------
declare -A PORT_OF PID_OF
mkdir -p "$TMP/nojobs" "$TMP/jobs"
pacing_off_conf "$TMP/nojobs" "$NOJOBS_PORT" >"$TMP/nojobs/courtesy.toml"
pacing_off_conf "$TMP/jobs" "$JOBS_PORT" >"$TMP/jobs/courtesy.toml"
for i in $(seq 0 9); do
    printf '\n[[job]]\nname = "job-%s"\ntoken = "bench-token-of-job-%s-0123456789"\nweight = %s.0\n' \
        "$i" "$i" "$((i % 3 + 1))" >>"$TMP/jobs/courtesy.toml"
done
for case in nojobs jobs; do
    run_courtesy "$TMP/$case" warn
    PID_OF[$case]=$!
    PIDS+=("${PID_OF[$case]}")
done
PORT_OF[nojobs]=$NOJOBS_PORT
PORT_OF[jobs]=$JOBS_PORT
wait_port "${PID_OF[nojobs]}" "$NOJOBS_PORT" courtesy-nojobs
wait_port "${PID_OF[jobs]}" "$JOBS_PORT" courtesy-jobs

# ---- wrk -----------------------------------------------------------------------------------------
# Absolute-form requests (what a forward proxy gets); with LOAD_JOBS=1 each request names one of the
# 10 jobs in turn, with its token (the headers are made here, in AUTH).
AUTH=""
for i in $(seq 0 9); do
    AUTH="$AUTH,Basic $(printf 'job-%s:bench-token-of-job-%s-0123456789' "$i" "$i" | base64 -w0)"
done
export AUTH="${AUTH#,}"
cat >"$TMP/proxy.lua" <<'EOF'
local target = os.getenv("LOAD_TARGET")
local auth = {}
if os.getenv("LOAD_JOBS") == "1" then
    for value in string.gmatch(os.getenv("AUTH"), "[^,]+") do auth[#auth + 1] = value end
end
local n = 0
request = function()
    local headers = { Host = os.getenv("LOAD_HOST") }
    if #auth > 0 then
        headers["Proxy-Authorization"] = auth[n % #auth + 1]
        n = n + 1
    end
    return wrk.format("GET", target, headers)
end
EOF
wrk_result_lua >>"$TMP/proxy.lua"

RUNS="$TMP/runs.tsv"
: >"$RUNS"

# One bounded wrk run of `case` (nojobs, anonymous, jobs10); with `rep` > 0 a row goes to $RUNS:
# case rep requests duration_us p50_us p99_us errors proxy_ticks ... other_pct (field 17).
run_wrk() {
    local case=$1 secs=$2 rep=$3 server jobs=0 pid out result
    case $case in
        nojobs) server="nojobs" ;;
        anonymous) server="jobs" ;;
        jobs10) server="jobs" jobs=1 ;;
    esac
    pid=${PID_OF[$server]}
    measure_before "$pid"
    out=$(LOAD_TARGET="http://$HOST:$ORIGIN_PORT/1k" LOAD_HOST="$HOST:$ORIGIN_PORT" LOAD_JOBS=$jobs \
        timeout $((secs + 30)) wrk -t 1 -c "$CONNS" -d "${secs}s" --latency -s "$TMP/proxy.lua" \
        "http://$HOST:${PORT_OF[$server]}/" 2>&1) || die "wrk failed for $case: $out"
    measure_after "$pid"
    ((rep > 0)) || return 0
    result=$(grep '^RESULT ' <<<"$out") || die "no RESULT line from wrk: $out"
    # shellcheck disable=SC2086  # split into $1.. on purpose: RESULT line, ticks (numbers)
    set -- $result $PROXY_BEFORE $PROXY_AFTER $OTHER_BEFORE $OTHER_AFTER
    # $2 requests, $3 duration µs, $4 p50 µs, $5 p99 µs, $6 socket errors, $7 HTTP errors,
    # $8/$9 courtesy's user/sys ticks before, $10/$11 after, $12/$13 other processes' ticks.
    (($2 > 0)) || die "wrk completed no request for $case: $out"
    (($6 + $7 == 0)) || die "$case: $6 socket errors and $7 HTTP errors: $out"
    local ticks=$((${10} + ${11} - $8 - $9)) other=$(((${13} - ${12}) * 100 / CLK_TCK / secs))
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
        "$case" "$rep" "$2" "$3" "$4" "$5" 0 "$ticks" 0 0 0 0 0 0 0 0 "$other" >>"$RUNS"
}

log "warming up"
for case in nojobs anonymous jobs10; do run_wrk "$case" 2 0; done
curl -sS --max-time 5 -o /dev/null -w '%{http_code}\n' -x "http://$HOST:$JOBS_PORT" \
    -U "job-3:bench-token-of-job-3-0123456789" "http://$HOST:$ORIGIN_PORT/1k" | grep -q '^200$' ||
    die "a request naming job-3 was not answered 200"
for rep in $(seq 1 "$REPEATS"); do
    for case in nojobs anonymous jobs10; do
        log "repeat $rep: $case"
        rerun_while_noisy "sleep 3" run_wrk "$case" "$DURATION" "$rep"
    done
done
jobs_seen=$(curl -sS --max-time 5 "http://$HOST:$((JOBS_PORT + 1))/jobs" |
    grep -o '"served": *[0-9]*' | awk -F': *' '$2 > 0 { n++ } END { print n + 0 }')

# ---- report --------------------------------------------------------------------------------------
echo "## What naming jobs costs a proxied request (courtesy, loopback, pacing off)"
echo
report_machine
echo "- courtesy $(tree_rev), RUST_LOG=warn; wrk 1 thread, $CONNS connections, ${DURATION} s per run, $REPEATS repeats interleaved; nginx origin, 1 KiB"
echo "- jobs10: each request names one of 10 [[job]]s (weights 1 to 3) with its token; /jobs counted $jobs_seen jobs served"
echo "- runs repeated because other processes used over ${NOISE_PCT}% of a core: $RETRIES"
echo
awk -F'\t' -v hz="$CLK_TCK" '
    { n = $3; dur = $4 / 1e6; us = $8 / hz * 1e6 / n
      rps[$1] = rps[$1] " " n / dur; cpu[$1] = cpu[$1] " " us; p50[$1] = p50[$1] " " $5 / 1000 }
    function median(list,   a, k, i, j, t) {
        k = split(list, a, " ")
        for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        return (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
    }
    END {
        base = median(cpu["nojobs"])
        print "| case | req/s (median) | p50 ms | courtesy CPU µs/req (median) | CPU ÷ nojobs |"
        print "|---|---:|---:|---:|---:|"
        split("nojobs anonymous jobs10", order, " ")
        for (i = 1; i <= 3; i++) {
            c = order[i]
            printf "| %s | %.0f | %.2f | %.1f | %.3f |\n", c, median(rps[c]), median(p50[c]), median(cpu[c]), median(cpu[c]) / base
        }
    }' "$RUNS"
