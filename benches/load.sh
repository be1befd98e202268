#!/usr/bin/env bash
# Load benchmark: courtesy against Squid and an nginx proxy, all in front of the same nginx origin,
# on loopback only.
#
# Measures requests/s, p50/p99 latency (wrk --latency) and the proxy's CPU time per request
# (utime+stime from /proc/PID/stat before and after each run) for:
#   direct         wrk -> nginx
#   courtesy       wrk -> courtesy (pacing effectively off, default log level) -> nginx
#   courtesy-warn  the same with RUST_LOG=warn (no per-request log line)      [WARN_CASE=1]
#   courtesy-nocache  courtesy-warn with the response store and coalescing off (`cache = "off"`,
#                  `coalesce = false`): set against courtesy-warn, what the default cache costs on
#                  a request it cannot serve                                 [NOCACHE_CASE=0]
#   squid          wrk -> squid (caching off, access_log none) -> nginx
#   squid-log      the same with Debian's default access log (a line per request through the
#                  log_file_daemon helper), to set against courtesy's default   [SQUID_LOG_CASE=1]
#   courtesy-alt   courtesy at its default log level, but another binary: ALT_BIN (a PGO build,
#                  another allocator), labelled ALT_LABEL in the report, so that two builds are
#                  compared in one run                                      [when ALT_BIN is set]
#   bare           wrk -> benches/bare_proxy.rs (a bare hyper 1.x forward proxy: pooled hyper-util
#                  client, body streamed, hop-by-hop headers dropped, nothing else) -> nginx: the
#                  floor hyper alone sets (issue 40)                        [BARE_CASE=1]
#   nginx-proxy    wrk -> nginx as a proxy (1 worker, proxy_pass with upstream keep-alive, no
#                  access log, no buffering to disk) -> nginx: the bar of issue 15  [NGINX_PROXY_CASE=1]
#   nginx-proxy-log  the same with nginx's default access log (a line per request), to set
#                  against courtesy's default                               [NGINX_PROXY_LOG_CASE=1]
# at 1, 16 and 64 connections, with a 1 KiB and a 64 KiB body, each run REPEATS times; the cases
# are interleaved within each repeat so that drift on the machine hits them alike. All servers run
# at once on their own loopback ports; an idle one costs nothing.
#
# Usage: benches/load.sh > out.md          (progress goes to stderr, the Markdown report to stdout)
# Knobs (environment): DURATION=8 (seconds per run), REPEATS=3, CONNS="1 16 64", SIZES="1k 64k",
#   ORIGIN_CACHE_CONTROL=no-store (the origin's Cache-Control: with no-store no answer is stored
#   or shared, so every request goes upstream and the bench measures courtesy's cost on requests
#   its cache cannot serve; empty: none sent, and concurrent identical GETs may be coalesced),
#   BODY_TYPE=text/html (the origin's Content-Type: what crawlers fetch, and what courtesy scans
#   for block markers; application/octet-stream skips that scan),
#   WRK_THREADS=1, DEFAULT_CASE=1 (courtesy at its default log level), SQUID_CASE=1, WARN_CASE=1, NOCACHE_CASE=0, BARE_CASE=1 (BARE_BIN: a prebuilt bare_proxy bench; built if unset), SQUID_LOG_CASE=1, NGINX_PROXY_CASE=1, NGINX_PROXY_LOG_CASE=1,
#   RUN_ONLY="" (a space-separated list of cases to measure, e.g. "bare courtesy-warn": every case
#   enabled above is still started, and the others stay idle; with the *_CASE=0 switches this
#   splits what the harness costs from what a proxy costs),
#   COURTESY_BIN=target/release/courtesy (built when stale),
#   NOISE_PCT=10, RETRY_BUDGET=10, QUIET_WAIT=120 (a run during which other processes on the
#   machine used more than NOISE_PCT % of a core is run again, at most twice and at most
#   RETRY_BUDGET times in all, after waiting for the machine to calm down, at most QUIET_WAIT
#   seconds in all; the report counts the runs that stayed disturbed),
#   ORIGIN_PORT=18080 COURTESY_PORT=18128 COURTESY_WARN_PORT=18138 COURTESY_NOCACHE_PORT=18188 SQUID_PORT=18130
#   SQUID_LOG_PORT=18140 NGINX_PROXY_PORT=18150 NGINX_PROXY_LOG_PORT=18160 BARE_PORT=18170
#   (admin ports are the proxy port + 1).
# With the defaults one run takes about 14 minutes on a quiet 2-core machine (at most about 18
# with every retry and wait used).
#
# Needs: nginx, squid, wrk, curl (Debian packages; installed with apt-get when missing, as root).
# Everything it starts lives in one temp dir and is stopped by PID on exit.

# shellcheck source=benches/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bench_prologue load

DURATION=${DURATION:-8}
REPEATS=${REPEATS:-3}
CONNS=${CONNS:-"1 16 64"}
SIZES=${SIZES:-"1k 64k"}
WRK_THREADS=${WRK_THREADS:-1}
BODY_TYPE=${BODY_TYPE:-text/html}
DEFAULT_CASE=${DEFAULT_CASE:-1}
SQUID_CASE=${SQUID_CASE:-1}
RUN_ONLY=${RUN_ONLY:-}
WARN_CASE=${WARN_CASE:-1}
NOCACHE_CASE=${NOCACHE_CASE:-0}
ORIGIN_CACHE_CONTROL=${ORIGIN_CACHE_CONTROL-no-store}
BARE_CASE=${BARE_CASE:-1}
BARE_PORT=${BARE_PORT:-18170}
SQUID_LOG_CASE=${SQUID_LOG_CASE:-1}
NGINX_PROXY_CASE=${NGINX_PROXY_CASE:-1}
NGINX_PROXY_LOG_CASE=${NGINX_PROXY_LOG_CASE:-1}
NOISE_PCT=${NOISE_PCT:-10}
RETRY_BUDGET=${RETRY_BUDGET:-10}
QUIET_WAIT=${QUIET_WAIT:-120}
QUIET_LEFT=$QUIET_WAIT
ORIGIN_PORT=${ORIGIN_PORT:-18080}
COURTESY_PORT=${COURTESY_PORT:-18128}
COURTESY_WARN_PORT=${COURTESY_WARN_PORT:-18138}
COURTESY_NOCACHE_PORT=${COURTESY_NOCACHE_PORT:-18188}
COURTESY_ALT_PORT=${COURTESY_ALT_PORT:-18198}
ALT_BIN=${ALT_BIN:-}
ALT_LABEL=${ALT_LABEL:-another build}
SQUID_PORT=${SQUID_PORT:-18130}
SQUID_LOG_PORT=${SQUID_LOG_PORT:-18140}
NGINX_PROXY_PORT=${NGINX_PROXY_PORT:-18150}
NGINX_PROXY_LOG_PORT=${NGINX_PROXY_LOG_PORT:-18160}
COURTESY_BIN=${COURTESY_BIN:-}
HOST=127.0.0.1
# The origin serves its own stub_status (origin_counts).
STATUS_PORT=$ORIGIN_PORT

need_range 1 60 "DURATION must be 1..60 seconds" "$DURATION"
need_range 1 10 "REPEATS must be 1..10" "$REPEATS"
[[ $NOISE_PCT =~ ^[0-9]+$ ]] || die "NOISE_PCT must be a whole number (percent of one core)"
need_range 0 30 "RETRY_BUDGET must be 0..30" "$RETRY_BUDGET"
need_range 0 1800 "QUIET_WAIT must be 0..1800 seconds" "$QUIET_WAIT"
# shellcheck disable=SC2086  # CONNS is a list of numbers, one argument each
need_range 1 1000 "CONNS entries must be 1..1000" $CONNS
for s in $SIZES; do [[ $s == 1k || $s == 64k ]] || die "SIZES entries must be 1k or 64k"; done
[[ $BODY_TYPE =~ ^[a-z]+/[a-z0-9.+-]+$ ]] || die "BODY_TYPE must be a media type such as text/html"

# ---- tools ---------------------------------------------------------------------------------------

install_missing nginx squid wrk curl
build_courtesy
[[ -z $ALT_BIN || -x $ALT_BIN ]] || die "no courtesy binary at ALT_BIN='$ALT_BIN'"
[[ $BARE_CASE != 1 ]] || build_bare_proxy
CLK_TCK=$(getconf CLK_TCK)

# ---- temp dir, processes, cleanup ----------------------------------------------------------------

setup_tmp courtesy-load
require_free_ports "$ORIGIN_PORT" "$COURTESY_PORT" $((COURTESY_PORT + 1)) "$COURTESY_WARN_PORT" \
    $((COURTESY_WARN_PORT + 1)) "$COURTESY_NOCACHE_PORT" $((COURTESY_NOCACHE_PORT + 1)) "$COURTESY_ALT_PORT" $((COURTESY_ALT_PORT + 1)) "$SQUID_PORT" "$SQUID_LOG_PORT" "$NGINX_PROXY_PORT" "$NGINX_PROXY_LOG_PORT" "$BARE_PORT"

# Waits until other processes use at most NOISE_PCT of a core over 2 s; all such waits together
# last at most QUIET_WAIT seconds over the whole benchmark.
wait_quiet() {
    while ((QUIET_LEFT > 0)); do
        other_pct 20
        ((OTHER_PCT > NOISE_PCT)) || return 0
        QUIET_LEFT=$((QUIET_LEFT - 2))
        log "waiting for a quiet machine: other processes use ${OTHER_PCT}% of a core (${QUIET_LEFT} s of waiting left)"
    done
}

# ---- origin: nginx -------------------------------------------------------------------------------

mkdir -p "$TMP/nginx/www" "$TMP/nginx/tmp"
# Page-like text (printable, no block marker in it), so a text/html body is plausible.
page() { head -c "$1" /dev/urandom | base64 -w 76 | head -c "$1" || true; }  # base64 may get SIGPIPE
page 1024 >"$TMP/nginx/www/1k"
page 65536 >"$TMP/nginx/www/64k"
chmod -R a+rX "$TMP/nginx"
cat >"$TMP/nginx/nginx.conf" <<EOF
$(nginx_conf_start "$TMP/nginx")
    default_type $BODY_TYPE;
    sendfile on;
    tcp_nodelay on;
$([[ -z $ORIGIN_CACHE_CONTROL ]] || echo "    add_header Cache-Control \"$ORIGIN_CACHE_CONTROL\" always;")
$(static_origin_server "$ORIGIN_PORT" "$TMP/nginx/www")
}
EOF
start_nginx "$TMP/nginx" "$ORIGIN_PORT"

# ---- courtesy ------------------------------------------------------------------------------------

# The cases in the order they run, and each proxy's port and PID (direct has no proxy).
CASES=(direct)
declare -A PORT_OF=([direct]=$ORIGIN_PORT) PID_OF=()

# Records the server just started in the background as the case `name` on `port` (started_server)
# and adds it to the cases.
started() {
    started_server "$1" "$2"
    CASES+=("$1")
}

# Starts courtesy as the case `name` on `port`, with `defaults` as extra [defaults] lines, from
# the binary `bin` (COURTESY_BIN when not given).
start_courtesy() {
    local name=$1 port=$2 rust_log=$3 defaults=${4:-} bin=${5:-$COURTESY_BIN} dir="$TMP/$1"
    mkdir -p "$dir/state"
    pacing_off_conf "$dir" "$port" "" "$defaults" >"$dir/courtesy.toml"
    run_courtesy "$dir" "$rust_log" "$bin"
    started "$name" "$port"
}

if [[ $DEFAULT_CASE == 1 ]]; then
    start_courtesy courtesy "$COURTESY_PORT" ""
fi
if [[ $WARN_CASE == 1 ]]; then
    start_courtesy courtesy-warn "$COURTESY_WARN_PORT" warn
fi
if [[ $NOCACHE_CASE == 1 ]]; then
    start_courtesy courtesy-nocache "$COURTESY_NOCACHE_PORT" warn 'cache = "off"
coalesce = false'
fi
if [[ -n $ALT_BIN ]]; then
    start_courtesy courtesy-alt "$COURTESY_ALT_PORT" "" "" "$ALT_BIN"
fi

# ---- the floor: a bare hyper forward proxy ---------------------------------------------------------

if [[ $BARE_CASE == 1 ]]; then
    "$BARE_BIN" --listen "$HOST:$BARE_PORT" >"$TMP/bare.log" 2>&1 &
    started bare "$BARE_PORT"
fi

# ---- squid ---------------------------------------------------------------------------------------

# Starts Squid as the case `name` on `port` with the given access_log line.
start_squid() {
    local name=$1 port=$2 access_log=$3 dir="$TMP/$1"
    mkdir -p "$dir"
    squid_conf "$dir" "$HOST:$port" "$access_log" >"$dir/squid.conf"
    launch_squid "$dir"
    started "$name" "$port"
}

if [[ $SQUID_CASE == 1 ]]; then
    start_squid squid "$SQUID_PORT" none
fi
if [[ $SQUID_LOG_CASE == 1 ]]; then
    # Debian's default: the squid log format, written by the log_file_daemon helper.
    start_squid squid-log "$SQUID_LOG_PORT" "daemon:$TMP/squid-log/access.log squid"
fi

# ---- nginx as a proxy ----------------------------------------------------------------------------

# An nginx proxying to the origin the way a tuned reverse proxy does: one worker (its CPU is one
# PID), HTTP/1.1 to the origin over kept-alive connections, responses relayed from memory. `log`
# is its access_log: "off", or a file (nginx's default combined format, a line per request).
start_nginx_proxy() {
    local name=$1 port=$2 log=$3 dir="$TMP/$1" access=""
    mkdir -p "$dir/tmp"
    [[ $log == off ]] || access="            access_log $dir/$log;"
    cat >"$dir/nginx.conf" <<EOF
$(nginx_conf_start "$dir")
$(nginx_proxy_blocks "$port" http "" "$access")
}
EOF
    nginx -p "$dir" -e "$dir/error.log" -c "$dir/nginx.conf" >"$dir/out.log" 2>&1 &
    started "$name" "$port"
}
[[ $NGINX_PROXY_CASE == 1 ]] && start_nginx_proxy nginx-proxy "$NGINX_PROXY_PORT" off
# The same with an access log, to set against courtesy's default (a line per request).
[[ $NGINX_PROXY_LOG_CASE == 1 ]] && start_nginx_proxy nginx-proxy-log "$NGINX_PROXY_LOG_PORT" access.log

# ---- check that requests really go through each proxy ----------------------------------------------

for case in "${CASES[@]}"; do
    [[ $case == direct ]] && continue
    headers=$(curl -sS --max-time 5 -D - -o /dev/null -x "http://$HOST:${PORT_OF[$case]}" \
        "http://$HOST:$ORIGIN_PORT/1k")
    status=$(head -n 1 <<<"$headers" | tr -d '\r')
    via=$(grep -i '^via:' <<<"$headers" | tr -d '\r' || true)
    [[ $status == *" 200"* ]] || die "$case: expected 200 through the proxy, got: $status"
    case $case in
        courtesy*) [[ $via == *courtesy* ]] || die "$case: no courtesy Via header ($via)" ;;
        squid*) [[ $via == *squid* ]] || die "$case: no squid Via header ($via)" ;;
        nginx-proxy*) [[ $via == *nginx-proxy* ]] || die "$case: no nginx-proxy Via header ($via)" ;;
        bare) [[ $via == *bare-hyper* ]] || die "$case: no bare-hyper Via header ($via)" ;;
    esac
    log "$case forwards: $status, $via"
done

# The cases measured: every one started, or those RUN_ONLY names (the rest stay idle).
if [[ -n $RUN_ONLY ]]; then
    for case in $RUN_ONLY; do
        [[ $case == direct || -n ${PID_OF[$case]:-} ]] || die "RUN_ONLY: $case is not a case started in this run (${CASES[*]})"
    done
    read -r -a CASES <<<"$RUN_ONLY"
fi

# ---- wrk -----------------------------------------------------------------------------------------

cat >"$TMP/proxy.lua" <<'EOF'
-- With LOAD_TARGET set, wrk sends absolute-form requests (a forward-proxy request) to the
-- address on its command line; otherwise plain origin-form requests.
local target = os.getenv("LOAD_TARGET")
if target and target ~= "" then
    wrk.path = target
    wrk.headers["Host"] = os.getenv("LOAD_HOST")
end

EOF
wrk_result_lua >>"$TMP/proxy.lua"

RUNS="$TMP/runs.tsv"
: >"$RUNS"

# One bounded wrk run of `case` with `conns` connections for `secs` seconds; with `rep` > 0 the
# result is appended to $RUNS.
run_wrk() {
    local case=$1 size=$2 conns=$3 secs=$4 rep=$5
    local port pid threads out result logfile="" lines=0 target="" url
    port=${PORT_OF[$case]}
    pid=${PID_OF[$case]:-}
    threads=$((WRK_THREADS < conns ? WRK_THREADS : conns))
    if [[ $case == direct ]]; then
        url="http://$HOST:$ORIGIN_PORT/$size"
    else
        url="http://$HOST:$port/"
        target="http://$HOST:$ORIGIN_PORT/$size"
    fi
    [[ $case == courtesy* ]] && logfile="$TMP/$case/log" && : >"$logfile"
    measure_before "$pid"
    out=$(LOAD_TARGET=$target LOAD_HOST="$HOST:$ORIGIN_PORT" timeout $((secs + 30)) \
        wrk -t "$threads" -c "$conns" -d "${secs}s" --latency -s "$TMP/proxy.lua" "$url" 2>&1) ||
        die "wrk failed for $case $size c=$conns: $out"
    measure_after "$pid"
    ((rep > 0)) || return 0
    result=$(grep '^RESULT ' <<<"$out") || die "no RESULT line from wrk: $out"
    [[ -n $logfile ]] && lines=$(grep -c 'upstream response' "$logfile" || true)
    # shellcheck disable=SC2086  # split into $1.. on purpose: RESULT line, counters (numbers)
    set -- $result $COUNTS_BEFORE $COUNTS_AFTER $PROXY_BEFORE $PROXY_AFTER $ORIGIN_BEFORE $ORIGIN_AFTER
    (($2 > 0)) || die "wrk completed no request for $case $size c=$conns: $out"
    # $2 requests, $3 duration µs, $4 p50 µs, $5 p99 µs, $6 socket errors, $7 HTTP errors,
    # $8/$9 origin accepts/requests before, $10/$11 after (each status request counts itself),
    # $12/$13 proxy user/sys ticks before, $14/$15 after, $16..$19 the same for the origin.
    awk -v OFS='\t' -v case="$case" -v size="$size" -v conns="$conns" -v rep="$rep" \
        -v n="$2" -v dur="$3" -v p50="$4" -v p99="$5" -v serr="$6" -v herr="$7" \
        -v acc=$((${10} - $8 - 1)) -v oreq=$((${11} - $9 - 1)) -v lines="$lines" \
        -v puser=$((${14} - ${12})) -v psys=$((${15} - ${13})) \
        -v origin_ticks=$((${18} + ${19} - ${16} - ${17})) -v hz="$CLK_TCK" -v haspid="${pid:+1}" \
        -v other_ticks=$((OTHER_AFTER - OTHER_BEFORE)) \
        'BEGIN {
            rps = n / (dur / 1e6)
            pcpu = haspid ? sprintf("%.1f", (puser + psys) / hz * 1e6 / n) : "-"
            pusr = haspid ? sprintf("%.1f", puser / hz * 1e6 / n) : "-"
            ocpu = sprintf("%.1f", origin_ticks / hz * 1e6 / n)
            # Negative when a process whose parent does not collect its times exited: count as 0.
            other = sprintf("%.0f", (other_ticks > 0 ? other_ticks : 0) / hz * 100 / (dur / 1e6))
            print size, conns, case, rep, sprintf("%.0f", rps), p50, p99, pcpu, ocpu, n, oreq, acc,
                lines, serr, herr, pusr, other
        }' >>"$RUNS"
    log "$(tail -n 1 "$RUNS" | awk -F'\t' '{ printf "%-4s c=%-3s %-13s rep %s: %7s req/s  p50 %6.2f ms  p99 %7.2f ms  proxy %6s µs/req (user %5s)  origin %5s µs/req  origin saw %s req on %s new conns  log lines %s  errors %s/%s  other CPU %s%%",
        $1, $2, $3, $4, $5, $6 / 1000, $7 / 1000, $8, $16, $9, $11, $12, $13, $14, $15, $17 }')"
}

RETRIES=0
START=$(date +%s)
for size in $SIZES; do
    wait_quiet
    for case in "${CASES[@]}"; do
        log "warm-up $case $size"
        run_wrk "$case" "$size" 16 2 0
    done
    for conns in $CONNS; do
        for ((rep = 1; rep <= REPEATS; rep++)); do
            for case in "${CASES[@]}"; do
                rerun_while_noisy wait_quiet run_wrk "$case" "$size" "$conns" "$DURATION" "$rep"
            done
        done
    done
done
ELAPSED=$(($(date +%s) - START))

# ---- report --------------------------------------------------------------------------------------

rev=$(tree_rev)

echo "## Load benchmark: courtesy vs Squid and an nginx proxy, nginx origin, loopback"
echo
report_machine
echo "- courtesy: $("$COURTESY_BIN" --version 2>/dev/null || echo '?') (release build, git $rev)"
[[ -z $ALT_BIN ]] || echo "- courtesy-alt: $ALT_LABEL, \`$ALT_BIN\`"
echo "- origin: nginx, static files, \`Cache-Control: ${ORIGIN_CACHE_CONTROL:-(none)}\`"
if [[ $SQUID_CASE == 1 || $SQUID_LOG_CASE == 1 ]]; then
    echo "- squid: $(squid -v | head -n 1)"
fi
echo "- nginx: $(nginx -v 2>&1 | sed 's/^nginx version: //')"
[[ $BARE_CASE != 1 ]] || echo "- bare: benches/bare_proxy.rs (release), hyper $(lock_version hyper), hyper-util $(lock_version hyper-util), tokio $(lock_version tokio) multi-threaded"
echo "- wrk: $( (wrk -v 2>&1 || true) | head -n 1 | sed 's/ Copyright.*//')"
echo "- origin: nginx, 1 worker, static bodies of 1 KiB and 64 KiB served as $BODY_TYPE"
[[ -z $RUN_ONLY ]] || echo "- measured: $RUN_ONLY; started and idle: $(for c in "${!PID_OF[@]}"; do [[ " $RUN_ONLY " == *" $c "* ]] || printf '%s ' "$c"; done)"
echo "- runs: wrk -t $WRK_THREADS, ${DURATION} s each, $REPEATS repeats per cell (cases interleaved), 2 s warm-up per case and body size; $RETRIES runs repeated because other processes took more than ${NOISE_PCT}% of a core; whole run ${ELAPSED} s"
echo "- all processes share the machine's CPUs: wrk, nginx (1 worker) and the proxy under test"
echo
awk -F'\t' -v noise="$NOISE_PCT" "$AWK_SAMPLES"'
    {
        key = run_row()
        if ($8 != "-") { add(key SUBSEP "pcpu", $8); add(key SUBSEP "pusr", $16) }
        add(key SUBSEP "ocpu", $9)
        add(key SUBSEP "fwd", $11 / $10); add(key SUBSEP "conns", $12); add(key SUBSEP "lines", $13 / $10)
        errs[key] += $14 + $15
    }
    END {
        print "| body | conns | case | req/s median (min–max) | p50 ms | p99 ms | proxy CPU µs/req | origin CPU µs/req | req/s ÷ squid | CPU ÷ squid | req/s ÷ nginx-proxy | CPU ÷ nginx-proxy | req/s ÷ bare | CPU ÷ bare | p50 added vs direct, ms |"
        print "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        for (i = 1; i <= nkeys; i++) {
            key = order[i]; split(key, k, SUBSEP)
            sq = k[1] SUBSEP k[2] SUBSEP "squid"; dk = k[1] SUBSEP k[2] SUBSEP "direct"
            rps = med(vals[key SUBSEP "rps"]); p50 = med(vals[key SUBSEP "p50"]) / 1000
            p99 = med(vals[key SUBSEP "p99"]) / 1000
            pcpu = (key SUBSEP "pcpu") in vals ? med(vals[key SUBSEP "pcpu"]) : "-"
            ocpu = med(vals[key SUBSEP "ocpu"])
            rr = "-"; cr = "-"; added = "-"; nr = "-"; nc = "-"; br = "-"; bc = "-"
            bk = k[1] SUBSEP k[2] SUBSEP "bare"
            if (k[3] ~ /^courtesy/ && (bk SUBSEP "rps") in vals) {
                br = sprintf("%.2f", rps / med(vals[bk SUBSEP "rps"]))
                bcpu = med(vals[bk SUBSEP "pcpu"])
                if (bcpu > 0) bc = sprintf("%.2f", pcpu / bcpu)
                bcells[k[3]]++
                if (br + 0 >= 0.9) b_rps[k[3]]++
                if (bc != "-" && bc + 0 <= 1.25) b_cpu[k[3]]++
            }
            nx = k[1] SUBSEP k[2] SUBSEP "nginx-proxy"
            if (k[3] ~ /^courtesy/ && (nx SUBSEP "rps") in vals) {
                nr = sprintf("%.2f", rps / med(vals[nx SUBSEP "rps"]))
                ncpu = med(vals[nx SUBSEP "pcpu"])
                if (ncpu > 0) nc = sprintf("%.2f", pcpu / ncpu)
            }
            if (k[3] ~ /^courtesy/ && (sq SUBSEP "rps") in vals) {
                rr = sprintf("%.2f", rps / med(vals[sq SUBSEP "rps"]))
                scpu = med(vals[sq SUBSEP "pcpu"])
                if (scpu > 0) cr = sprintf("%.2f", pcpu / scpu)
            }
            if (k[3] != "direct" && (dk SUBSEP "p50") in vals)
                added = sprintf("%+.3f", p50 - med(vals[dk SUBSEP "p50"]) / 1000)
            flag = errs[key] > 0 ? " (" errs[key] " errors!)" : ""
            printf "| %s | %s | %s%s | %s (%s–%s) | %.3f | %.3f | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
                k[1], k[2], k[3], flag, rps, lo(vals[key SUBSEP "rps"]), hi(vals[key SUBSEP "rps"]),
                p50, p99, pcpu, ocpu, rr, cr, nr, nc, br, bc, added
            if (k[3] ~ /^courtesy/ && nr != "-") {
                ncells[k[3]]++
                if (nr + 0 >= 1) n_rps[k[3]]++
                if (nc != "-" && nc + 0 <= 1) n_cpu[k[3]]++
                if (k[2] == 1) {
                    n1[k[3]]++
                    nxadd = med(vals[nx SUBSEP "p50"]) / 1000 - med(vals[dk SUBSEP "p50"]) / 1000
                    if (added != "-" && added + 0 <= nxadd) n_p50[k[3]]++
                }
            }
            if (k[3] ~ /^courtesy/ && rr != "-") {
                c = k[3]; cells[c]++
                if (rr + 0 >= 2) met_rps[c]++
                if (cr != "-" && cr + 0 <= 1 / 3) met_cpu[c]++
                sqadd = med(vals[sq SUBSEP "p50"]) / 1000 - med(vals[dk SUBSEP "p50"]) / 1000
                if (added != "-" && added + 0 <= sqadd / 3) met_p50[c]++
            }
        }
        print ""
        print "Targets per cell: req/s ≥ 2× Squid; CPU per request ≤ 1/3 of Squid; p50 added over direct ≤ 1/3 of what Squid adds. Squid runs with access_log none, so courtesy-warn (no line per request) is the like-for-like case:"
        print ""
        for (c in cells)
            printf "- %s: req/s met in %d of %d cells, CPU in %d of %d, p50 added in %d of %d.\n", c,
                met_rps[c], cells[c], met_cpu[c], cells[c], met_p50[c], cells[c]
        nn = 0
        for (c in ncells) nn++
        if (nn > 0) {
            print ""
            print "Targets of issue 15 per cell: req/s at least the nginx proxy'"'"'s; CPU per request at most its; at 1 connection, p50 added over direct at most what it adds:"
            print ""
            for (c in ncells)
                printf "- %s: req/s met in %d of %d cells, CPU in %d of %d, p50 added (1 connection) in %d of %d.\n", c,
                    n_rps[c], ncells[c], n_cpu[c], ncells[c], n_p50[c], n1[c]
        }
        nb = 0
        for (c in bcells) nb++
        if (nb > 0) {
            print ""
            print "Targets of issue 40 per cell, against the bare hyper proxy (the floor): req/s ≥ 0.9× its; CPU per request ≤ 1.25× its:"
            print ""
            for (c in bcells)
                printf "- %s: req/s met in %d of %d cells, CPU in %d of %d.\n", c, b_rps[c], bcells[c], b_cpu[c], bcells[c]
        }
        # Like for like against nginx (issue 29): courtesy-warn against nginx-proxy (no line per
        # request), courtesy against nginx-proxy-log (a line per request each).
        header = 0
        for (i = 1; i <= nkeys; i++) {
            key = order[i]; split(key, k, SUBSEP)
            peer = k[3] == "courtesy-warn" ? "nginx-proxy" : (k[3] == "courtesy" ? "nginx-proxy-log" : "")
            pk = k[1] SUBSEP k[2] SUBSEP peer
            if (peer == "" || !((pk SUBSEP "rps") in vals)) continue
            if (!header) {
                print ""
                print "Like for like against nginx (targets of issue 29: req/s ≥ 1× the nginx proxy'"'"'s, CPU per request ≤ 1.1× its): courtesy-warn against nginx-proxy (neither writes a line per request), courtesy (default log level) against nginx-proxy-log (nginx'"'"'s default access log):"
                print ""
                print "| body | conns | courtesy case | nginx case | req/s ÷ nginx | CPU ÷ nginx | met |"
                print "|---|---|---|---|---|---|---|"
                header = 1
            }
            r = med(vals[key SUBSEP "rps"]) / med(vals[pk SUBSEP "rps"])
            pc = med(vals[pk SUBSEP "pcpu"])
            c = pc > 0 ? med(vals[key SUBSEP "pcpu"]) / pc : 0
            printf "| %s | %s | %s | %s | %.2f | %.2f | %s |\n", k[1], k[2], k[3], peer, r, c,
                (r >= 1 && c > 0 && c <= 1.1) ? "yes" : "no"
        }
        # Defaults against defaults: courtesy (a line per response) and squid-log (access.log).
        header = 0
        for (i = 1; i <= nkeys; i++) {
            key = order[i]; split(key, k, SUBSEP)
            sl = k[1] SUBSEP k[2] SUBSEP "squid-log"; dk = k[1] SUBSEP k[2] SUBSEP "direct"
            if (k[3] != "courtesy" || !((sl SUBSEP "rps") in vals)) continue
            if (!header) {
                print ""
                print "Both with a line per request: courtesy at its default log level against squid-log (Debian default access log):"
                print ""
                print "| body | conns | req/s ÷ squid-log | CPU ÷ squid-log | p50 added: courtesy / squid-log, ms |"
                print "|---|---|---|---|---|"
                header = 1
            }
            lcpu = med(vals[sl SUBSEP "pcpu"])
            dp50 = med(vals[dk SUBSEP "p50"]) / 1000
            printf "| %s | %s | %.2f | %s | %+.3f / %+.3f |\n", k[1], k[2],
                med(vals[key SUBSEP "rps"]) / med(vals[sl SUBSEP "rps"]),
                (lcpu > 0 ? sprintf("%.2f", med(vals[key SUBSEP "pcpu"]) / lcpu) : "-"),
                med(vals[key SUBSEP "p50"]) / 1000 - dp50, med(vals[sl SUBSEP "p50"]) / 1000 - dp50
        }
        print ""
        printf "Runs disturbed by other processes (more than %d%% of a core used outside this benchmark, after retries): %d of %d.\n", noise, noisy, runs
        print ""
        print "Checks (medians over repeats): origin requests per wrk request (1.00 = every request went upstream, nothing cached), new upstream connections the origin accepted per run, courtesy log lines per request, the user-space part of the proxy CPU per request (the rest is kernel time, mostly loopback TCP), and the CPU used by other processes on the machine during the runs, in % of one core (median, max)."
        print ""
        print "| body | conns | case | origin req / wrk req | origin new conns | log lines / req | proxy user CPU µs/req | other CPU % (max) |"
        print "|---|---|---|---|---|---|---|---|"
        for (i = 1; i <= nkeys; i++) {
            key = order[i]; split(key, k, SUBSEP)
            lines = k[3] ~ /^courtesy/ ? sprintf("%.2f", med(vals[key SUBSEP "lines"])) : "-"
            pusr = (key SUBSEP "pusr") in vals ? med(vals[key SUBSEP "pusr"]) : "-"
            printf "| %s | %s | %s | %.3f | %s | %s | %s | %s (%s) |\n", k[1], k[2], k[3],
                med(vals[key SUBSEP "fwd"]), med(vals[key SUBSEP "conns"]), lines, pusr,
                med(vals[key SUBSEP "other"]), hi(vals[key SUBSEP "other"])
        }
    }' "$RUNS"
