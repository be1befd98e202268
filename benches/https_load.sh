#!/usr/bin/env bash
# HTTPS load benchmark: courtesy's TLS interception against the same TLS origin reached directly,
# on loopback only.
#
# The client is benches/https_load.rs (hyper 1 client connections over tokio-rustls, ring, no
# OpenSSL). The origin is nginx (1 worker, TLS on a loopback port, a certificate for IP 127.0.0.1
# signed by a test CA made here with the openssl CLI, serving a 1 KiB static file). Cases:
#   direct         client -TLS-> nginx
#   courtesy       client -CONNECT, TLS with courtesy's local CA-> courtesy (RUST_LOG=warn)
#                  -its own verified TLS (upstream_ca = the test CA)-> nginx
#   courtesy-info  the same at the default log level (one line per request), for INFO_CONNS only
#   bare           client -CONNECT, TLS with a leaf minted from courtesy's CA-> benches/bare_proxy.rs
#                  (a bare hyper + rustls interceptor, nothing else) -verified TLS, pooled-> nginx:
#                  the floor (issue 40)                                   [BARE_CASE=1]
#   courtesy-alt   another courtesy binary, ALT_BIN (e.g. one built with `--features aws-lc-rs`),
#                  run exactly like courtesy (RUST_LOG=warn, its own CA)   [when ALT_BIN is set]
# in two modes:
#   keep  kept-alive: N connections opened before the clock starts, GETs back to back on each
#   new   a new connection per request: TCP (+ CONNECT through courtesy) + a full TLS handshake
#         (the client never resumes sessions) + one GET with Connection: close
# at CONNS (keep) and NEW_CONNS (new) concurrent connections, each run DURATION seconds, REPEATS
# times, the cases interleaved within each repeat. Pacing is effectively off (rate and burst
# 1000000): this measures the proxy's own cost. After the runs it reads courtesy's admin page for
# the leaf-certificate cache counts. With ALT_BIN the report adds courtesy-alt ÷ courtesy per mode
# and connection count: in the new mode, handshakes per second and CPU per handshake of the two
# binaries from one run (rustls's ring against its aws-lc-rs provider, docs/https.md).
#
# Usage: bash benches/https_load.sh > out.md   (progress on stderr, the Markdown report on stdout)
#   rustls's two providers in one run (docs/https.md):
#   cargo build --release --features aws-lc-rs --target-dir target/aws-lc
#   ALT_BIN=target/aws-lc/release/courtesy ALT_LABEL="aws-lc-rs" bash benches/https_load.sh > out.md
# The origin answers `Cache-Control: no-store` (ORIGIN_CACHE_CONTROL; empty: none), so that
# courtesy's default cache and coalescing serve nothing and every request goes upstream.
# Knobs (environment): DURATION=8 REPEATS=3 CONNS="1 16 64" NEW_CONNS="1 16 64" INFO_CONNS=16
#   THREADS=1 (client tokio worker threads), MAX_REQUESTS=5000000 (per run), NOISE_PCT=10 and
#   RETRY_BUDGET=20 (a run during which other processes used more than NOISE_PCT % of a core is
#   run again, at most twice, at most RETRY_BUDGET times in all), QUIET_BUDGET=600 (before each
#   run, wait in 0.5 s steps while other processes use more than NOISE_PCT % of a core, at most
#   this many seconds in all), ORIGIN_PORT=18443 (its plain
#   status port is +1), COURTESY_PORT=18228 COURTESY_INFO_PORT=18238 (admin ports are +1),
#   BARE_CASE=1, BARE_PORT=18258, ALT_BIN (unset: no courtesy-alt), ALT_LABEL=ALT_BIN (its name in
#   the report), ALT_PORT=18248 (admin +1),
#   COURTESY_BIN, LOAD_BIN and BARE_BIN (prebuilt binaries; by default built here with cargo).
# With the defaults one run takes about 8 minutes on a quiet 2-core machine, about 10 with ALT_BIN
# (plus the build, and longer while it waits for other processes).
#
# Needs: nginx, openssl, curl (Debian packages; installed with apt-get when missing, as root).
# Everything it starts lives in one temp dir and is stopped by PID on exit.

# shellcheck source=benches/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bench_prologue https_load

DURATION=${DURATION:-8}
REPEATS=${REPEATS:-3}
CONNS=${CONNS:-"1 16 64"}
NEW_CONNS=${NEW_CONNS:-"1 16 64"}
INFO_CONNS=${INFO_CONNS:-16}
THREADS=${THREADS:-1}
MAX_REQUESTS=${MAX_REQUESTS:-5000000}
NOISE_PCT=${NOISE_PCT:-10}
RETRY_BUDGET=${RETRY_BUDGET:-20}
QUIET_BUDGET=${QUIET_BUDGET:-600}
ORIGIN_PORT=${ORIGIN_PORT:-18443}
STATUS_PORT=$((ORIGIN_PORT + 1))
COURTESY_PORT=${COURTESY_PORT:-18228}
COURTESY_INFO_PORT=${COURTESY_INFO_PORT:-18238}
BARE_CASE=${BARE_CASE:-1}
BARE_PORT=${BARE_PORT:-18258}
BARE_BIN=${BARE_BIN:-}
ALT_BIN=${ALT_BIN:-}
ALT_LABEL=${ALT_LABEL:-ALT_BIN}
ALT_PORT=${ALT_PORT:-18248}
COURTESY_BIN=${COURTESY_BIN:-}
LOAD_BIN=${LOAD_BIN:-}
HOST=127.0.0.1

need_tls_bench_knobs
for c in $CONNS $NEW_CONNS $INFO_CONNS; do
    need_range 1 1000 "connection counts must be 1..1000, got $c" "$c"
done
need_range 1024 65534 "ports must be 1024..65534" "$ORIGIN_PORT" "$COURTESY_PORT" "$COURTESY_INFO_PORT" "$BARE_PORT" "$ALT_PORT"

# ---- tools and binaries --------------------------------------------------------------------------

install_missing nginx openssl curl

tls_bench_binaries
alt_courtesy_binary
[[ $BARE_CASE != 1 ]] || build_bare_proxy

# ---- temp dir, processes, cleanup ----------------------------------------------------------------

setup_tmp courtesy-https-load
require_free_ports "$ORIGIN_PORT" "$STATUS_PORT" "$COURTESY_PORT" $((COURTESY_PORT + 1)) \
    "$COURTESY_INFO_PORT" $((COURTESY_INFO_PORT + 1)) "$BARE_PORT" "$ALT_PORT" $((ALT_PORT + 1))

# ---- test CA and origin certificate (ECDSA P-256, like courtesy's leaves) -------------------------

make_test_pki "$TMP/pki" "courtesy https_load test CA" "$HOST" "IP:$HOST"
ORIGIN_CA=$TMP/pki/ca.pem

# ---- origin: nginx with TLS ----------------------------------------------------------------------

tls_origin_files "$TMP/nginx" "$TMP/pki"
start_tls_origin "$TMP/nginx" "$TMP/pki"

# ---- courtesy ------------------------------------------------------------------------------------

start_https_courtesy courtesy "$COURTESY_PORT" warn
COURTESY_PID=$STARTED_PID
start_https_courtesy courtesy-info "$COURTESY_INFO_PORT" ""
COURTESY_INFO_PID=$STARTED_PID
ALT_PID=
if [[ -n $ALT_BIN ]]; then
    start_https_courtesy courtesy-alt "$ALT_PORT" warn "$ALT_BIN"
    ALT_PID=$STARTED_PID
fi
# The floor: the bare interceptor mints its leaves from the CA courtesy made in its state_dir.
BARE_PID=
if [[ $BARE_CASE == 1 ]]; then
    "$BARE_BIN" --listen "$HOST:$BARE_PORT" --ca-dir "$TMP/courtesy/state" --upstream-ca "$ORIGIN_CA" \
        >"$TMP/bare.log" 2>&1 &
    BARE_PID=$!
    PIDS+=("$BARE_PID")
    wait_port "$BARE_PID" "$BARE_PORT" bare
fi
PROXIED=(courtesy courtesy-info)
[[ -z $ALT_BIN ]] || PROXIED+=(courtesy-alt)
[[ $BARE_CASE != 1 ]] || PROXIED+=(bare)

proxy_port() {
    case $1 in
        courtesy) echo "$COURTESY_PORT" ;;
        courtesy-info) echo "$COURTESY_INFO_PORT" ;;
        courtesy-alt) echo "$ALT_PORT" ;;
        bare) echo "$BARE_PORT" ;;
    esac
}
proxy_pid() {
    case $1 in
        courtesy) echo "$COURTESY_PID" ;;
        courtesy-info) echo "$COURTESY_INFO_PID" ;;
        courtesy-alt) echo "$ALT_PID" ;;
        bare) echo "$BARE_PID" ;;
        *) echo "" ;;
    esac
}
ca_of() {
    case $1 in
        direct) echo "$ORIGIN_CA" ;;
        bare) echo "$TMP/courtesy/state/ca.pem" ;;
        *) echo "$TMP/$1/state/ca.pem" ;;
    esac
}

# ---- check the paths with curl: direct TLS, and interception (courtesy's CA, its Via header) --------

URL="https://$HOST:$ORIGIN_PORT/1k"
check_tls_path direct "$ORIGIN_CA" "" "" "$URL"
for case in "${PROXIED[@]}"; do
    via=courtesy
    [[ $case != bare ]] || via=bare-hyper
    check_tls_path "$case" "$(ca_of "$case")" "$HOST:$(proxy_port "$case")" "$via" "$URL"
done

# ---- runs ----------------------------------------------------------------------------------------

RUNS="$TMP/runs.tsv"
: >"$RUNS"
OPENED="$TMP/opened.tsv" # connections each courtesy instance was sent (CONNECTs), warm-ups included
: >"$OPENED"

# One bounded client run (https_load_run); with `rep` > 0 the result is appended to $RUNS.
run_load() {
    local case=$1 mode=$2 conns=$3 secs=$4 rep=$5 logfile=""
    local -a args=(--origin "$HOST:$ORIGIN_PORT" --ca "$(ca_of "$case")" --path /1k --body-bytes 1024)
    [[ $case == direct ]] || args+=(--proxy "$HOST:$(proxy_port "$case")")
    [[ $mode == keep ]] || args+=(--new-conn)
    [[ $case != courtesy-info ]] || logfile="$TMP/$case/log"
    https_load_run "$mode" "$conns" "$case" "$rep" "$secs" "$(proxy_pid "$case")" "$logfile" "${args[@]}"
    [[ $case == direct ]] || printf '%s\t%s\n' "$case" "$LAST_OPENED" >>"$OPENED"
}

contains() { [[ " $1 " == *" $2 "* ]]; }

RETRIES=0
START=$(date +%s)
# Warm-ups at the largest connection counts, so that courtesy's upstream pool has grown.
max_of() { tr ' ' '\n' <<<"$1" | sort -n | tail -n 1; }
for case in direct "${PROXIED[@]}"; do
    run_load "$case" keep "$(max_of "$CONNS")" 2 0
    run_load "$case" new "$(max_of "$NEW_CONNS")" 2 0
done
for mode in keep new; do
    if [[ $mode == keep ]]; then list=$CONNS; else list=$NEW_CONNS; fi
    for conns in $list; do
        cases=(direct courtesy)
        [[ -z $ALT_BIN ]] || cases+=(courtesy-alt)
        [[ $BARE_CASE != 1 ]] || cases+=(bare)
        contains "$INFO_CONNS" "$conns" && cases+=(courtesy-info)
        interleaved_repeats "${cases[*]}" run_load "$mode" "$conns"
    done
done
ELAPSED=$(($(date +%s) - START))

# Leaf-certificate cache counts from each courtesy's admin listener: the plain-text line
# `leaf certificates: N cache hits, M minted` of `GET /`, or, where `/` is an HTML dashboard, the
# Prometheus counters of `GET /metrics`.
leaf_line() {
    local admin="http://$HOST:$(($(proxy_port "$1") + 1))" page hits minted
    page=$(curl -sS --max-time 5 "$admin/" || true)
    if grep -q '^leaf certificates:' <<<"$page"; then
        grep '^leaf certificates:' <<<"$page" | head -n 1
        return
    fi
    page=$(curl -sS --max-time 5 "$admin/metrics" || true)
    hits=$(awk '$1 == "courtesy_leaf_certificate_cache_hits_total" { print $2 }' <<<"$page")
    minted=$(awk '$1 == "courtesy_leaf_certificates_minted_total" { print $2 }' <<<"$page")
    echo "leaf certificates: ${hits:-?} cache hits, ${minted:-?} minted (from /metrics)"
}
LEAF_WARN=$(leaf_line courtesy)
LEAF_INFO=$(leaf_line courtesy-info)
LEAF_ALT=
[[ -z $ALT_BIN ]] || LEAF_ALT=$(leaf_line courtesy-alt)

# ---- report --------------------------------------------------------------------------------------

echo "## HTTPS load benchmark: courtesy's interception vs direct TLS, nginx origin, loopback"
echo
report_machine
echo "- courtesy: $(courtesy_measured)"
echo "- client: benches/https_load.rs, hyper $(lock_version hyper), rustls $(lock_version rustls) (ring), tokio-rustls $(lock_version tokio-rustls), $THREADS tokio worker thread(s), HTTP/1.1, no TLS session resumption; $(rustc --version 2>/dev/null || echo 'rustc ?')"
echo "- origin: nginx $(nginx -v 2>&1 | sed 's/^nginx version: nginx\///') ($(openssl version | cut -d' ' -f1-2)), 1 worker, TLS 1.2/1.3, ECDSA P-256 certificate for IP $HOST, a 1 KiB static file"
[[ $BARE_CASE != 1 ]] || echo "- bare: benches/bare_proxy.rs (release): a bare hyper $(lock_version hyper) + rustls interceptor (leaves minted from courtesy's CA, one per host; pooled hyper-util client to the origin), the floor"
[[ -z $ALT_BIN ]] || echo "- courtesy-alt ($ALT_LABEL): $ALT_VERSION (prebuilt binary ALT_BIN=$ALT_BIN), run exactly like courtesy (RUST_LOG=warn), with a CA of its own"
echo "- courtesy: RUST_LOG=warn for the main figures; courtesy-info = the default level (info), at $INFO_CONNS connections; pacing effectively off (rate = burst = 1000000)"
echo "- runs: ${DURATION} s each, $REPEATS repeats per cell (cases interleaved), 2 s warm-up per case and mode; $RETRIES runs repeated because other processes took more than ${NOISE_PCT}% of a core, $((QUIET_WAITED / 2)) s spent waiting for them to quieten before runs; whole run ${ELAPSED} s"
echo "- all processes share the machine's CPUs: the client, nginx and courtesy"
echo "- keep = kept-alive connections opened before the clock starts; new = a new TCP connection per request (+ CONNECT for courtesy), a full TLS handshake, one GET with Connection: close"
echo
awk -F'\t' -v noise="$NOISE_PCT" -v alt="$ALT_LABEL" "$AWK_SAMPLES"'
    {
        key = run_row()
        if ($8 != "-") add(key SUBSEP "pcpu", $8)
        add(key SUBSEP "ocpu", $9); add(key SUBSEP "ccpu", $10)
        errs[key] += $12
        add(key SUBSEP "fwd", $14 / $11); add(key SUBSEP "acc", $15)
        add(key SUBSEP "lines", $16 / $11)
    }
    END {
        print "| mode | conns | case | req/s median (min–max) | p50 ms | p99 ms | req/s ÷ direct | p50 added vs direct, ms | proxy CPU µs/req | nginx CPU µs/req | client CPU µs/req | req/s ÷ bare | CPU ÷ bare |"
        print "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        for (i = 1; i <= nkeys; i++) {
            key = order[i]; split(key, k, SUBSEP)
            dk = k[1] SUBSEP k[2] SUBSEP "direct"
            rps = med(vals[key SUBSEP "rps"]); p50 = med(vals[key SUBSEP "p50"]) / 1000
            p99 = med(vals[key SUBSEP "p99"]) / 1000
            pcpu = (key SUBSEP "pcpu") in vals ? med(vals[key SUBSEP "pcpu"]) : "-"
            ratio = "-"; added = "-"
            if (k[3] != "direct" && (dk SUBSEP "rps") in vals) {
                ratio = sprintf("%.2f", rps / med(vals[dk SUBSEP "rps"]))
                added = sprintf("%+.3f", p50 - med(vals[dk SUBSEP "p50"]) / 1000)
            }
            br = "-"; bc = "-"; bk = k[1] SUBSEP k[2] SUBSEP "bare"
            if (k[3] ~ /^courtesy/ && (bk SUBSEP "rps") in vals) {
                br = sprintf("%.2f", rps / med(vals[bk SUBSEP "rps"]))
                bcpu = med(vals[bk SUBSEP "pcpu"])
                if (bcpu > 0 && pcpu != "-") bc = sprintf("%.2f", pcpu / bcpu)
            }
            flag = errs[key] > 0 ? " (" errs[key] " errors!)" : ""
            printf "| %s | %s | %s%s | %s (%s–%s) | %.3f | %.3f | %s | %s | %s | %s | %s | %s | %s |\n",
                k[1], k[2], k[3], flag, rps, lo(vals[key SUBSEP "rps"]), hi(vals[key SUBSEP "rps"]),
                p50, p99, ratio, added, pcpu, med(vals[key SUBSEP "ocpu"]), med(vals[key SUBSEP "ccpu"]), br, bc
            if (k[1] == "keep" && k[3] == "courtesy" && ratio != "-") {
                cells++
                if (ratio + 0 >= 0.5) met++
                worst = (worst == "" || ratio + 0 < worst + 0) ? ratio : worst
            }
        }
        print ""
        printf "Target (kept-alive intercepted, RUST_LOG=warn, ≥ 0.5 × direct TLS req/s): met in %d of %d cells (lowest ratio %s).\n", met, cells, worst
        na = 0
        for (i = 1; i <= nkeys; i++) {
            split(order[i], k, SUBSEP)
            if (k[3] == "courtesy-alt") alts[++na] = k[1] SUBSEP k[2]
        }
        if (na > 0) {
            print ""
            print "courtesy-alt (" alt ") ÷ courtesy, per mode and connection count (medians over repeats): req/s (above 1: courtesy-alt serves more; in the new mode, handshakes per second) and proxy CPU per request (below 1: courtesy-alt spends less)."
            print ""
            print "| mode | conns | courtesy req/s | courtesy-alt req/s | req/s alt ÷ courtesy | courtesy CPU µs/req | courtesy-alt CPU µs/req | CPU/req alt ÷ courtesy |"
            print "|---|---|---|---|---|---|---|---|"
            for (i = 1; i <= na; i++) {
                ck = alts[i] SUBSEP "courtesy"; ak = alts[i] SUBSEP "courtesy-alt"; split(alts[i], k, SUBSEP)
                if (!((ck SUBSEP "rps") in vals)) continue
                cr = med(vals[ck SUBSEP "rps"]); ar = med(vals[ak SUBSEP "rps"])
                cc = med(vals[ck SUBSEP "pcpu"]); ac = med(vals[ak SUBSEP "pcpu"])
                rq = (cr > 0) ? sprintf("%.2f", ar / cr) : "-"; cq = (cc > 0) ? sprintf("%.2f", ac / cc) : "-"
                printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", k[1], k[2], cr, ar, rq, cc, ac, cq
            }
        }
        print ""
        printf "Runs disturbed by other processes (more than %d%% of a core used outside this benchmark, after retries): %d of %d.\n", noise, noisy, runs
        print ""
        print "Checks (medians over repeats): origin requests per client request (1.00 = every request reached nginx), new TCP connections nginx accepted per run (courtesy keeps its upstream connections alive), courtesy log lines per request, and the CPU other processes used during the runs, in % of one core (median, max)."
        print ""
        print "| mode | conns | case | origin req / client req | origin new conns | log lines / req | other CPU % (max) |"
        print "|---|---|---|---|---|---|---|"
        for (i = 1; i <= nkeys; i++) {
            key = order[i]; split(key, k, SUBSEP)
            lines = k[3] == "courtesy-info" ? sprintf("%.2f", med(vals[key SUBSEP "lines"])) : "-"
            printf "| %s | %s | %s | %.3f | %s | %s | %s (%s) |\n", k[1], k[2], k[3],
                med(vals[key SUBSEP "fwd"]), med(vals[key SUBSEP "acc"]), lines,
                med(vals[key SUBSEP "other"]), hi(vals[key SUBSEP "other"])
        }
    }' "$RUNS"
echo
# Leaf cache: one lookup per accepted CONNECT; the first for the host mints, the rest should hit.
leaf_cases=(courtesy courtesy-info)
[[ -z $ALT_BIN ]] || leaf_cases+=(courtesy-alt)
for case in "${leaf_cases[@]}"; do
    line=$LEAF_WARN
    [[ $case == courtesy-info ]] && line=$LEAF_INFO
    [[ $case == courtesy-alt ]] && line=$LEAF_ALT
    sent=$(awk -F'\t' -v c="$case" '$1 == c { s += $2 } END { print s + 1 }' "$OPENED") # +1: the curl check
    awk -v c="$case" -v sent="$sent" -v line="$line" 'BEGIN {
        n = split(line, w, " "); hits = w[3]; minted = w[6]
        rate = (hits + minted > 0) ? sprintf("%.4f %%", 100 * hits / (hits + minted)) : "?"
        src = line ~ /from \/metrics/ ? "admin /metrics" : "admin page"
        printf "Leaf-certificate cache (%s, %s after the run): %s cache hits, %s minted: hit rate %s, over %d lookups for %d CONNECTs the clients sent (warm-ups included).\n\n",
            c, src, hits, minted, rate, hits + minted, sent
    }'
done
