#!/usr/bin/env bash
# What "why did it wait" costs per request: courtesy's CPU per request with traces off (the
# Server-Timing header and the wait accounting on, as by default) against a baseline binary (main's),
# and with traces on to a live OTLP receiver, all in front of one nginx origin, on loopback.
#
#   base       BASE_BIN (main's courtesy), pacing effectively off, RUST_LOG=warn
#   branch     COURTESY_BIN (this tree's), the same config: Server-Timing on, traces off
#   traced     COURTESY_BIN with [telemetry] otlp_endpoint at a live receiver (a small Python
#              HTTP server that answers every POST /v1/traces with 200 and counts the bytes)
#
# wrk -t1 -c CONNS for DURATION s per run, 1 KiB bodies, REPEATS runs per case, the cases
# interleaved within each repeat; CPU per request is utime+stime of the proxy (all threads) from
# /proc before and after each run, divided by wrk's requests. A run during which other processes
# used more than NOISE_PCT % of a core is run again (at most twice). With CALLGRIND=1, each case
# also runs once under valgrind's callgrind: instructions per request (all threads, the exporter's
# included), counted between a zeroing and a dump around CG_SECONDS of load (deterministic, unlike
# the CPU time on a shared machine).
#
# Usage: benches/why_wait.sh > out.md   (progress on stderr, the Markdown report on stdout)
# Knobs: BASE_BIN (required: the baseline binary), COURTESY_BIN=target/release/courtesy,
#   DURATION=5, REPEATS=3, CONNS=16, NOISE_PCT=10, CALLGRIND=1, CG_SECONDS=8, CG_KEEP (a folder
#   the callgrind dumps are copied to, for callgrind_annotate),
#   ORIGIN_PORT=18280 BASE_PORT=18228 BRANCH_PORT=18238 TRACED_PORT=18248 SINK_PORT=18258
#   (admin ports are the proxy port + 1). About 3 minutes with the defaults.
# Needs: nginx, wrk, curl, python3 (and valgrind with CALLGRIND=1): Debian packages, installed
# with apt-get when missing, as root. Everything it starts lives in one temp dir and is stopped by
# PID on exit.

# shellcheck source=benches/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bench_prologue why_wait

DURATION=${DURATION:-5}
REPEATS=${REPEATS:-3}
CONNS=${CONNS:-16}
NOISE_PCT=${NOISE_PCT:-10}
CALLGRIND=${CALLGRIND:-1}
CG_SECONDS=${CG_SECONDS:-8}
ORIGIN_PORT=${ORIGIN_PORT:-18280}
BASE_PORT=${BASE_PORT:-18228}
BRANCH_PORT=${BRANCH_PORT:-18238}
TRACED_PORT=${TRACED_PORT:-18248}
SINK_PORT=${SINK_PORT:-18258}
COURTESY_BIN=${COURTESY_BIN:-$ROOT/target/release/courtesy}
BASE_BIN=${BASE_BIN:-}
RETRY_BUDGET=6
RETRIES=0
HOST=127.0.0.1
STATUS_PORT=$ORIGIN_PORT

need_range 1 60 "DURATION must be 1..60 seconds" "$DURATION"
need_range 1 10 "REPEATS must be 1..10" "$REPEATS"
need_range 1 256 "CONNS must be 1..256" "$CONNS"
need_range 1 60 "CG_SECONDS must be 1..60" "$CG_SECONDS"
[[ $NOISE_PCT =~ ^[0-9]+$ ]] || die "NOISE_PCT must be a whole number (percent of one core)"
[[ -x $COURTESY_BIN ]] || die "no courtesy binary at '$COURTESY_BIN' (cargo build --release)"
[[ -x $BASE_BIN ]] || die "BASE_BIN must name the baseline courtesy binary (main's release build)"

install_missing nginx wrk curl python3
((CALLGRIND)) && install_missing valgrind
CLK_TCK=$(getconf CLK_TCK)

setup_tmp courtesy-why-wait
require_free_ports "$ORIGIN_PORT" "$BASE_PORT" $((BASE_PORT + 1)) "$BRANCH_PORT" \
    $((BRANCH_PORT + 1)) "$TRACED_PORT" $((TRACED_PORT + 1)) "$SINK_PORT"

# ---- origin, receiver ----------------------------------------------------------------------------

mkdir -p "$TMP/nginx/www" "$TMP/nginx/tmp"
head -c 768 /dev/urandom | base64 -w 76 | head -c 1024 >"$TMP/nginx/www/1k" || true
chmod -R a+rX "$TMP/nginx"
cat >"$TMP/nginx/nginx.conf" <<EOF
$(nginx_conf_start "$TMP/nginx")
    default_type text/html;
    sendfile on;
    tcp_nodelay on;
$(static_origin_server "$ORIGIN_PORT" "$TMP/nginx/www")
}
EOF
start_nginx "$TMP/nginx" "$ORIGIN_PORT"

# The OTLP receiver: answers POST /v1/traces with 200 (an empty ExportTraceServiceResponse) and
# counts exports and bytes; GET /count says "exports bytes".
cat >"$TMP/sink.py" <<'EOF'
import http.server, sys
class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    exports = 0
    received = 0
    def do_POST(self):
        n = int(self.headers.get("content-length", "0"))
        self.rfile.read(n)
        Sink.exports += 1
        Sink.received += n
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()
    def do_GET(self):
        body = f"{Sink.exports} {Sink.received}\n".encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
EOF
python3 "$TMP/sink.py" "$SINK_PORT" >"$TMP/sink.log" 2>&1 &
PIDS+=("$!")
wait_port "$!" "$SINK_PORT" "the OTLP receiver"

# ---- courtesy ------------------------------------------------------------------------------------

CASES=(base branch traced)
declare -A PORT_OF=([base]=$BASE_PORT [branch]=$BRANCH_PORT [traced]=$TRACED_PORT) PID_OF=()
declare -A BIN_OF=([base]=$BASE_BIN [branch]=$COURTESY_BIN [traced]=$COURTESY_BIN)

# The config of `case` in `dir`.
conf_of() {
    local case=$1 dir=$2
    pacing_off_conf "$dir" "${PORT_OF[$case]}" "" "obey_robots = false"
    if [[ $case == traced ]]; then
        printf '\n[telemetry]\notlp_endpoint = "http://%s:%s"\n' "$HOST" "$SINK_PORT"
    fi
}

# Starts `case` (under `wrapper...`, e.g. valgrind, when given) and waits until it listens.
start_case() {
    local case=$1 dir="$TMP/$1"
    shift
    mkdir -p "$dir"
    conf_of "$case" "$dir" >"$dir/courtesy.toml"
    RUST_LOG=warn "$@" "${BIN_OF[$case]}" run --config "$dir/courtesy.toml" 2>>"$dir/log" >/dev/null &
    PID_OF[$case]=$!
    PIDS+=("$!")
    local i
    for ((i = 0; i < 600; i++)); do
        port_busy "${PORT_OF[$case]}" && break
        kill -0 "${PID_OF[$case]}" 2>/dev/null || die "$case exited at start-up: $(tail -n 5 "$dir/log")"
        sleep 0.1
    done
    port_busy "${PORT_OF[$case]}" || die "$case did not listen within 60 s"
}

for case in "${CASES[@]}"; do start_case "$case"; done
for case in "${CASES[@]}"; do
    head=$(curl -sS --max-time 5 -D - -o /dev/null -x "http://$HOST:${PORT_OF[$case]}" \
        "http://$HOST:$ORIGIN_PORT/1k") || die "$case does not forward"
    grep -q '^HTTP/1.1 200' <<<"$head" || die "$case answered: $head"
    timing=$(grep -i '^server-timing:' <<<"$head" | tr -d '\r' || true)
    log "$case forwards: ${timing:-no Server-Timing}"
done

# ---- wrk -----------------------------------------------------------------------------------------

cat >"$TMP/proxy.lua" <<EOF
wrk.path = "http://$HOST:$ORIGIN_PORT/1k"
wrk.headers["Host"] = "$HOST:$ORIGIN_PORT"
EOF
wrk_result_lua >>"$TMP/proxy.lua"

RUNS="$TMP/runs.tsv"
: >"$RUNS"

# One wrk run of `case` for `secs` seconds; with `rep` > 0, a row in RUNS: case, rep, requests,
# req/s, CPU µs/request, user µs/request, other processes' % of a core (field 17, as
# rerun_while_noisy reads it).
run_wrk() {
    local case=$1 secs=$2 rep=$3 pid out result
    pid=${PID_OF[$case]}
    measure_before "$pid"
    out=$(timeout $((secs + 30)) wrk -t 1 -c "$CONNS" -d "${secs}s" -s "$TMP/proxy.lua" \
        "http://$HOST:${PORT_OF[$case]}/" 2>&1) || die "wrk failed for $case: $out"
    measure_after "$pid"
    ((rep > 0)) || return 0
    result=$(grep '^RESULT ' <<<"$out") || die "no RESULT line from wrk: $out"
    # $2 requests, $3 duration µs, $4/$5 p50/p99 µs, $6/$7 socket/HTTP errors, $8/$9 proxy
    # user/sys ticks before, $10/$11 after.
    # shellcheck disable=SC2086  # split into $1.. on purpose: RESULT line, ticks (numbers)
    set -- $result $PROXY_BEFORE $PROXY_AFTER
    (($2 > 0)) || die "wrk completed no request for $case: $out"
    (($6 + $7 == 0)) || die "$case: $6 socket and $7 HTTP errors"
    awk -v OFS='\t' -v case="$case" -v rep="$rep" -v n="$2" -v dur="$3" \
        -v puser=$((${10} - $8)) -v psys=$((${11} - $9)) -v hz="$CLK_TCK" \
        -v other_ticks=$((OTHER_AFTER - OTHER_BEFORE)) 'BEGIN {
            other = sprintf("%.0f", (other_ticks > 0 ? other_ticks : 0) / hz * 100 / (dur / 1e6))
            print case, rep, n, sprintf("%.0f", n / (dur / 1e6)),
                sprintf("%.2f", (puser + psys) / hz * 1e6 / n), sprintf("%.2f", puser / hz * 1e6 / n),
                "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", other
        }' >>"$RUNS"
}

log "warm-up"
for case in "${CASES[@]}"; do run_wrk "$case" 2 0; done
for ((rep = 1; rep <= REPEATS; rep++)); do
    for case in "${CASES[@]}"; do
        log "repeat $rep: $case"
        rerun_while_noisy "sleep 5" run_wrk "$case" "$DURATION" "$rep"
    done
done
sink_after_load=$(curl -sS --max-time 5 "http://$HOST:$SINK_PORT/count")

# ---- callgrind -----------------------------------------------------------------------------------

declare -A INSTR_OF=()
if ((CALLGRIND)); then
    for case in "${CASES[@]}"; do
        kill -TERM "${PID_OF[$case]}" 2>/dev/null || true
        wait "${PID_OF[$case]}" 2>/dev/null || true
        log "callgrind: $case"
        cg="$TMP/$case/callgrind.out"
        start_case "$case" valgrind --tool=callgrind --callgrind-out-file="$cg" --dump-instr=no
        pid=${PID_OF[$case]}
        timeout 60 wrk -t 1 -c "$CONNS" -d 3s -s "$TMP/proxy.lua" "http://$HOST:${PORT_OF[$case]}/" >/dev/null 2>&1 || true
        callgrind_control -z "$pid" >/dev/null
        out=$(timeout $((CG_SECONDS + 60)) wrk -t 1 -c "$CONNS" -d "${CG_SECONDS}s" -s "$TMP/proxy.lua" \
            "http://$HOST:${PORT_OF[$case]}/" 2>&1) || die "wrk under callgrind failed for $case: $out"
        # Let the exporter send what the load queued (it runs every second): its cost counts.
        [[ $case == traced ]] && sleep 3
        callgrind_control -d "$pid" >/dev/null
        n=$(grep '^RESULT ' <<<"$out" | awk '{ print $2 }')
        ((n > 0)) || die "wrk completed no request under callgrind for $case: $out"
        # The newest of the dumps callgrind_control wrote ($cg.1, ...).
        dump=
        for cg_file in "$cg".*; do
            if [[ -e $cg_file ]] && [[ -z $dump || $cg_file -nt $dump ]]; then dump=$cg_file; fi
        done
        [[ -n $dump ]] || die "callgrind wrote no dump for $case"
        if [[ -n ${CG_KEEP:-} ]]; then mkdir -p "$CG_KEEP" && cp "$dump" "$CG_KEEP/$case.callgrind"; fi
        ir=$(awk '/^(summary|totals):/ { print $2; exit }' "$dump")
        INSTR_OF[$case]=$(awk -v ir="$ir" -v n="$n" 'BEGIN { printf "%.1fk (%d requests)", ir / n / 1000, n }')
        log "$case: ${INSTR_OF[$case]} instructions per request"
    done
fi

# ---- report --------------------------------------------------------------------------------------

echo "### Why did it wait: CPU per request, traces off and on"
echo
report_machine
echo "- base: $BASE_BIN; branch and traced: $COURTESY_BIN (git $(tree_rev))"
echo "- load: wrk -t1 -c$CONNS -d${DURATION}s, 1 KiB text/html bodies through each proxy to one nginx origin, $REPEATS repeats, cases interleaved; RUST_LOG=warn, pacing off"
echo "- traced: [telemetry] otlp_endpoint at a Python OTLP receiver on loopback; it got (exports bytes) $sink_after_load during the load"
echo "- runs rerun because other processes used more than $NOISE_PCT% of a core: $RETRIES"
echo
echo "| case | req/s median (min–max) | CPU µs/req median (min–max) | user µs/req | CPU ÷ base | other CPU % (max) | callgrind instructions/req |"
echo "|---|---|---|---|---|---|---|"
awk -F'\t' -v noise="$NOISE_PCT" "$AWK_SAMPLES"'
    { k = $1; if (!(k in seen)) { seen[k] = 1; order[++n] = k }
      add(k SUBSEP "rps", $4); add(k SUBSEP "cpu", $5); add(k SUBSEP "usr", $6); add(k SUBSEP "oth", $17) }
    END {
        base = med(vals["base" SUBSEP "cpu"])
        for (i = 1; i <= n; i++) {
            k = order[i]
            printf "%s\t%s (%s–%s)\t%s (%s–%s)\t%s\t%.3f\t%s (%s)\n", k,
                med(vals[k SUBSEP "rps"]), lo(vals[k SUBSEP "rps"]), hi(vals[k SUBSEP "rps"]),
                med(vals[k SUBSEP "cpu"]), lo(vals[k SUBSEP "cpu"]), hi(vals[k SUBSEP "cpu"]),
                med(vals[k SUBSEP "usr"]), med(vals[k SUBSEP "cpu"]) / base,
                med(vals[k SUBSEP "oth"]), hi(vals[k SUBSEP "oth"])
        }
    }' "$RUNS" | while IFS=$'\t' read -r case rps cpu usr ratio other; do
    echo "| $case | $rps | $cpu | $usr | $ratio | $other | ${INSTR_OF[$case]:--} |"
done
