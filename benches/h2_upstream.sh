#!/usr/bin/env bash
# HTTP/2 to origins (issue 39): what `upstream_http2 = "auto"` (h2, the origin's pick) saves
# against `"off"` (HTTP/1.1) on the same origin: connections and TLS handshakes per 1,000
# requests, and CPU per request (courtesy's and the origin's), on loopback.
#
# The origin is nginx (1 worker, TLS with `http2` on its listener, so ALPN offers h2 and
# http/1.1; a 1 KiB static file; every response says which protocol nginx saw in X-Proto). The
# client is benches/https_load.rs through courtesy's interception (HTTP/1.1 to courtesy); only the
# upstream side changes between the cases:
#   h2   courtesy with upstream_http2 = "auto"
#   h1   courtesy with upstream_http2 = "off"
# For each client connection count in CONNS (the requests courtesy has in flight at once; pacing
# is effectively off) and each repeat, a fresh courtesy (an empty upstream pool) serves
#   cold  COLD_REQUESTS requests: the TCP connections nginx accepted meanwhile are the
#         connections and full TLS handshakes courtesy made for them;
#   warm  then DURATION seconds of requests over the pool the cold run filled: requests/s and CPU
#         per request of courtesy and nginx.
# The cases are interleaved within each repeat.
#
# Usage: bash benches/h2_upstream.sh > out.md   (progress on stderr, the Markdown report on stdout)
# Knobs (environment): DURATION=8 REPEATS=3 CONNS="4 16 64" COLD_REQUESTS=1000 THREADS=1
#   MAX_REQUESTS=5000000 (per warm run), NOISE_PCT=10 and QUIET_BUDGET=600 (before each run,
#   wait while other processes use more than NOISE_PCT % of a core, at most QUIET_BUDGET s in all), ORIGIN_PORT=18543 (its plain status port is +1), COURTESY_PORT=18328 (admin
#   +1), COURTESY_BIN and LOAD_BIN (prebuilt binaries; by default both are built here).
#
# Needs: nginx (with its http_v2 module, as Debian's), openssl, curl (installed with apt-get when
# missing, as root). Everything it starts lives in one temp dir and is stopped by PID on exit.

# shellcheck source=benches/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bench_prologue h2_upstream

DURATION=${DURATION:-8}
REPEATS=${REPEATS:-3}
CONNS=${CONNS:-"4 16 64"}
COLD_REQUESTS=${COLD_REQUESTS:-1000}
THREADS=${THREADS:-1}
MAX_REQUESTS=${MAX_REQUESTS:-5000000}
NOISE_PCT=${NOISE_PCT:-10}
RETRY_BUDGET=${RETRY_BUDGET:-20}
QUIET_BUDGET=${QUIET_BUDGET:-600}
ORIGIN_PORT=${ORIGIN_PORT:-18543}
STATUS_PORT=$((ORIGIN_PORT + 1))
COURTESY_PORT=${COURTESY_PORT:-18328}
COURTESY_BIN=${COURTESY_BIN:-}
LOAD_BIN=${LOAD_BIN:-}
HOST=127.0.0.1
WARM_REQUESTS=$MAX_REQUESTS

need_tls_bench_knobs
need_range 1 100000 "COLD_REQUESTS must be 1..100000" "$COLD_REQUESTS"
for c in $CONNS; do
    need_range 1 1000 "connection counts must be 1..1000, got $c" "$c"
done
need_range 1024 65534 "ports must be 1024..65534" "$ORIGIN_PORT" "$COURTESY_PORT"

install_missing nginx openssl curl
nginx -V 2>&1 | grep -q -- --with-http_v2_module || die "this nginx has no http_v2 module"
tls_bench_binaries

setup_tmp courtesy-h2-upstream
require_free_ports "$ORIGIN_PORT" "$STATUS_PORT" "$COURTESY_PORT" $((COURTESY_PORT + 1))

# ---- origin: nginx with TLS and HTTP/2 -----------------------------------------------------------

make_test_pki "$TMP/pki" "courtesy h2_upstream test CA" "$HOST" "IP:$HOST"
ORIGIN_CA=$TMP/pki/ca.pem
tls_origin_files "$TMP/nginx" "$TMP/pki"
# `listen ... ssl http2` (nginx 1.22's spelling; `http2 on` from 1.25.1) offers h2 and http/1.1.
cat >"$TMP/nginx/nginx.conf" <<EOF
$(nginx_conf_start "$TMP/nginx")
    default_type application/octet-stream;
    sendfile on;
    tcp_nodelay on;
    keepalive_timeout 300s;
    keepalive_requests 100000000;
    server {
        listen $HOST:$ORIGIN_PORT ssl http2;
        ssl_certificate $TMP/pki/origin.pem;
        ssl_certificate_key $TMP/pki/origin.key;
        ssl_protocols TLSv1.2 TLSv1.3;
        root $TMP/nginx/www;
        add_header X-Proto \$server_protocol always;
    }
    server {
        listen $HOST:$STATUS_PORT;
        location = /nginx_status { stub_status; }
    }
}
EOF
start_nginx "$TMP/nginx" "$ORIGIN_PORT"

# ---- courtesy, fresh for each run pair -----------------------------------------------------------

setting_of() { if [[ $1 == h2 ]]; then echo auto; else echo off; fi; }

# Starts a fresh courtesy for `case` (empty pool, its own state and CA in `dir`), pacing off:
# COURTESY_PID, COURTESY_DIR.
start_case() {
    local case=$1 dir=$2
    mkdir -p "$dir"
    pacing_off_conf "$dir" "$COURTESY_PORT" "upstream_ca = \"$ORIGIN_CA\"
connect_ports = [$ORIGIN_PORT]" "max_queue = 1000000
upstream_http2 = \"$(setting_of "$case")\"" >"$dir/courtesy.toml"
    run_courtesy "$dir" warn
    COURTESY_PID=$!
    COURTESY_DIR=$dir
    PIDS+=("$COURTESY_PID")
    wait_port "$COURTESY_PID" "$COURTESY_PORT" "courtesy ($case)"
    wait_ca "$dir" "courtesy ($case)"
}

# Stops the courtesy start_case started and waits until its port is free.
stop_case() {
    local i
    kill -TERM "$COURTESY_PID" 2>/dev/null || true
    wait "$COURTESY_PID" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        port_busy "$COURTESY_PORT" || return 0
        sleep 0.1
    done
    die "courtesy still listens on $COURTESY_PORT after it was stopped"
}

# The protocol nginx saw for a request through courtesy (its X-Proto header), checked by curl.
upstream_protocol() {
    curl -sS --max-time 10 -D - -o /dev/null --cacert "$COURTESY_DIR/state/ca.pem" \
        -x "http://$HOST:$COURTESY_PORT" "https://$HOST:$ORIGIN_PORT/1k" |
        tr -d '\r' | awk -F': ' 'tolower($1) == "x-proto" { print $2 }' | tail -n 1
}

# ---- runs ----------------------------------------------------------------------------------------

RUNS="$TMP/runs.tsv"
: >"$RUNS"

# The cold and the warm run of `case` at `conns` client connections, repeat `rep`, on a fresh
# courtesy. (`secs` is DURATION, from interleaved_repeats.)
run_pair() {
    local case=$1 conns=$2 secs=$3 rep=$4 want seen
    local -a args=(--origin "$HOST:$ORIGIN_PORT" --path /1k --body-bytes 1024
        --proxy "$HOST:$COURTESY_PORT")
    start_case "$case" "$TMP/$case-$conns-$rep-$RANDOM"
    args+=(--ca "$COURTESY_DIR/state/ca.pem")
    MAX_REQUESTS=$COLD_REQUESTS
    https_load_run cold "$conns" "$case" "$rep" 60 "$COURTESY_PID" "" "${args[@]}"
    MAX_REQUESTS=$WARM_REQUESTS
    https_load_run warm "$conns" "$case" "$rep" "$secs" "$COURTESY_PID" "" "${args[@]}"
    if [[ $case == h2 ]]; then want=HTTP/2.0; else want=HTTP/1.1; fi
    seen=$(upstream_protocol)
    [[ $seen == "$want" ]] || die "$case: nginx saw $seen, not $want"
    stop_case
}

# Each run waits for a quiet machine first (wait_quiet_steps); the other processes' share of a
# core during the runs is reported rather than rerun (a pair of runs is one fresh courtesy).
START=$(date +%s)
for conns in $CONNS; do
    for ((rep = 1; rep <= REPEATS; rep++)); do
        for case in h2 h1; do
            run_pair "$case" "$conns" "$DURATION" "$rep"
        done
    done
done
ELAPSED=$(($(date +%s) - START))

# ---- report --------------------------------------------------------------------------------------

echo "## HTTP/2 to origins: upstream_http2 = \"auto\" (h2) vs \"off\" (HTTP/1.1), nginx origin, loopback"
echo
echo "- courtesy: $(courtesy_measured)"
echo "- origin: nginx $(nginx -v 2>&1 | sed 's/^nginx version: nginx\///') with \`listen ... ssl http2\` (ALPN h2, http/1.1), 1 worker, a 1 KiB static file"
echo "- client: benches/https_load.rs through courtesy's interception (HTTP/1.1 to courtesy), kept-alive connections; pacing effectively off"
echo "- each cell: a fresh courtesy; cold = its first $COLD_REQUESTS requests, warm = the next $DURATION s; $REPEATS repeats, cases interleaved; medians (min–max)"
echo "- runs took ${ELAPSED} s; other processes used $(cut -f 17 "$RUNS" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] "% of a core (median run), " a[NR] "% at most" }')"
echo
awk -F'\t' '
    function med(list,   n, a, i, j, t) {
        n = split(list, a, " ")
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    function span(list,   n, a, i, lo, hi) {
        n = split(list, a, " "); lo = a[1]; hi = a[1]
        for (i = 2; i <= n; i++) { if (a[i] + 0 < lo + 0) lo = a[i]; if (a[i] + 0 > hi + 0) hi = a[i] }
        return lo "–" hi
    }
    {
        key = $2 SUBSEP $3
        if ($1 == "cold") {
            conns_per_k[key] = conns_per_k[key] " " sprintf("%.1f", $15 * 1000 / (($11 > 0) ? $11 : 1))
            cold_errs[key] += $12
        } else {
            rps[key] = rps[key] " " $5; pcpu[key] = pcpu[key] " " $8; ocpu[key] = ocpu[key] " " $9
            warm_new[key] = warm_new[key] " " $15; warm_errs[key] += $12
        }
        if (!($2 in seen)) { seen[$2] = 1; order[++nc] = $2 }
    }
    END {
        print "| client conns | case | connections = TLS handshakes per 1,000 requests (cold) | new conns in the warm run | req/s (warm) | courtesy CPU µs/req | nginx CPU µs/req | errors |"
        print "|---:|---|---:|---:|---:|---:|---:|---:|"
        for (i = 1; i <= nc; i++) for (c = 1; c <= 2; c++) {
            cs = c == 1 ? "h2" : "h1"; k = order[i] SUBSEP cs
            printf "| %s | %s | %s (%s) | %s | %s (%s) | %s (%s) | %s (%s) | %d |\n", order[i], cs,
                med(conns_per_k[k]), span(conns_per_k[k]), med(warm_new[k]), med(rps[k]), span(rps[k]),
                med(pcpu[k]), span(pcpu[k]), med(ocpu[k]), span(ocpu[k]), cold_errs[k] + warm_errs[k]
        }
        print ""
        print "Ratios h2 ÷ h1 (medians):"
        print ""
        print "| client conns | connections per 1,000 requests | req/s | courtesy CPU per request | nginx CPU per request |"
        print "|---:|---:|---:|---:|---:|"
        for (i = 1; i <= nc; i++) {
            a = order[i] SUBSEP "h2"; b = order[i] SUBSEP "h1"
            cb = med(conns_per_k[b]); rb = med(rps[b]); pb = med(pcpu[b]); ob = med(ocpu[b])
            # Parenthesised: a bare `>` in a print list is an output redirection.
            printf "| %s | %s | %.2f | %.2f | %.2f |\n", order[i],
                (cb > 0 ? sprintf("%.3f", med(conns_per_k[a]) / cb) : "-"),
                (rb > 0 ? med(rps[a]) / rb : 0), (pb > 0 ? med(pcpu[a]) / pb : 0),
                (ob > 0 ? med(ocpu[a]) / ob : 0)
        }
    }' "$RUNS"
