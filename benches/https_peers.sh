#!/usr/bin/env bash
# Intercepted HTTPS against proxies doing the same work: courtesy's TLS interception set against an
# nginx TLS-terminating proxy, a bare hyper interceptor, Squid with ssl-bump and mitmproxy (and
# optionally a second courtesy binary), all in front of the same TLS origin, on loopback only.
#
# The client is benches/https_load.rs (hyper 1 over tokio-rustls, ring; HTTP/1.1, kept-alive
# connections opened before the clock starts, GETs back to back on each). The origin is nginx (1
# worker, TLS 1.2/1.3, an ECDSA P-256 certificate for IP 127.0.0.1 signed by a test CA made here
# with the openssl CLI, static bodies of 1 KiB and 64 KiB). Cases:
#   direct       client -TLS-> origin: the floor
#   courtesy     client -CONNECT, TLS with courtesy's local CA-> courtesy (RUST_LOG=warn, pacing
#                off) -its own TLS, verified with the test CA, pooled-> origin
#   nginx-proxy  client -TLS (its own certificate from the test CA)-> nginx (1 worker) that
#                proxies to the origin over TLS: proxy_pass https:// with upstream keep-alive,
#                proxy_ssl_session_reuse on, the origin verified with the test CA
#   squid        client -CONNECT-> Squid with ssl-bump (Debian's squid-openssl): certificates
#                minted by security_file_certgen from a local ECDSA P-256 CA
#                (generate-host-certificates=on), every connection bumped after staring at the
#                origin's certificate, the origin verified with the test CA (tls_outgoing_options
#                cafile), caching and access log off
#   mitmproxy    client -CONNECT-> mitmdump (quiet, its own CA) -TLS verified with the test CA
#                (ssl_verify_upstream_trusted_ca)-> origin
#   bare         client -CONNECT, TLS with a leaf minted from courtesy's CA-> benches/bare_proxy.rs
#                (a bare hyper + rustls interceptor, nothing else; rustls on ring) -its own TLS,
#                verified with the test CA, pooled-> origin: what hyper and rustls alone cost
#   courtesy-alt another courtesy binary, ALT_BIN (e.g. one built with `--features aws-lc-rs`),
#                run exactly like courtesy (its own CA, port ALT_PORT); only when ALT_BIN is set
# at CONNS connections with each body of BODIES, each run DURATION seconds, REPEATS times, every
# case interleaved within each repeat. Each proxy's CPU per request comes from /proc/PID/stat of
# its process (all threads) and its direct children (Squid's security_file_certgen helper), read
# before and after each run. The report gives courtesy ÷ each peer (nginx-proxy, bare, Squid,
# mitmproxy) for req/s and for CPU per request, courtesy-alt ÷ courtesy when it ran, and which
# targets were met per cell: courtesy ≥ 1× nginx-proxy's req/s at ≤ 1× its CPU per request, and
# ≥ 3× Squid's req/s (bare, mitmproxy: the ratios only).
#
# Usage: bash benches/https_peers.sh > out.md   (progress on stderr, the Markdown report on stdout)
#   rustls's two providers in one run (docs/https.md):
#   cargo build --release --features aws-lc-rs --target-dir target/aws-lc
#   ALT_BIN=target/aws-lc/release/courtesy ALT_LABEL="aws-lc-rs" bash benches/https_peers.sh > out.md
# The origin answers `Cache-Control: no-store` (ORIGIN_CACHE_CONTROL; empty: none), so that
# courtesy's default cache and coalescing serve nothing and every request goes upstream.
# Knobs (environment): DURATION=5 REPEATS=3 CONNS="1 16 64" BODIES="1k 64k" CASES="direct courtesy
#   nginx-proxy bare squid mitmproxy" (direct and courtesy are always run, courtesy-alt whenever
#   ALT_BIN is set) ALT_BIN ALT_LABEL=ALT_BIN (its name in the report) THREADS=1 (client tokio
#   worker threads), MAX_REQUESTS=5000000 (per run), NOISE_PCT=10 and RETRY_BUDGET=15 (a run
#   during which other processes used more than NOISE_PCT % of a core is run again, at most twice,
#   at most RETRY_BUDGET times in all), QUIET_BUDGET=300 (before each run, wait in 0.5 s steps
#   while other processes use more than NOISE_PCT % of a core, at most this many seconds in all),
#   ORIGIN_PORT=18643 (its plain status port is +1), COURTESY_PORT=18628 (admin +1),
#   NGINX_PROXY_PORT=18650 SQUID_PORT=18630 MITM_PORT=18640 BARE_PORT=18670 ALT_PORT=18660 (admin
#   +1), COURTESY_BIN, LOAD_BIN and BARE_BIN (prebuilt binaries; by default built here with cargo),
#   MITMDUMP (a mitmdump to use; by default the one pip installed in
#   MITM_VENV=~/.cache/courtesy-bench/mitmproxy).
# With the defaults one run takes about 14 minutes on a quiet 2-core machine, about 17 with
# ALT_BIN (at most about 25 with every retry and wait used; plus the build and the installs).
#
# Needs: nginx, openssl, curl, squid-openssl (Debian packages; installed with apt-get when
# missing, as root: squid-openssl replaces the squid package, with the same /usr/sbin/squid built
# --with-openssl), python3 with venv, and mitmproxy, installed with pip into MITM_VENV when
# missing (the newest release that supports that python3).
# Everything it starts lives in one temp dir and is stopped by PID on exit.

# shellcheck source=benches/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bench_prologue https_peers

DURATION=${DURATION:-5}
REPEATS=${REPEATS:-3}
CONNS=${CONNS:-"1 16 64"}
BODIES=${BODIES:-"1k 64k"}
CASES=${CASES:-"direct courtesy nginx-proxy bare squid mitmproxy"}
THREADS=${THREADS:-1}
MAX_REQUESTS=${MAX_REQUESTS:-5000000}
NOISE_PCT=${NOISE_PCT:-10}
RETRY_BUDGET=${RETRY_BUDGET:-15}
QUIET_BUDGET=${QUIET_BUDGET:-300}
ORIGIN_PORT=${ORIGIN_PORT:-18643}
STATUS_PORT=$((ORIGIN_PORT + 1))
COURTESY_PORT=${COURTESY_PORT:-18628}
NGINX_PROXY_PORT=${NGINX_PROXY_PORT:-18650}
SQUID_PORT=${SQUID_PORT:-18630}
MITM_PORT=${MITM_PORT:-18640}
BARE_PORT=${BARE_PORT:-18670}
ALT_PORT=${ALT_PORT:-18660}
COURTESY_BIN=${COURTESY_BIN:-}
LOAD_BIN=${LOAD_BIN:-}
BARE_BIN=${BARE_BIN:-}
ALT_BIN=${ALT_BIN:-}
ALT_LABEL=${ALT_LABEL:-ALT_BIN}
MITMDUMP=${MITMDUMP:-}
MITM_VENV=${MITM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/courtesy-bench/mitmproxy}
SQUID_CERTGEN=/usr/lib/squid/security_file_certgen
HOST=127.0.0.1

need_tls_bench_knobs
# shellcheck disable=SC2086  # CONNS is a list of numbers, one argument each
need_range 1 1000 "CONNS entries must be 1..1000" $CONNS
for b in $BODIES; do [[ $b == 1k || $b == 64k ]] || die "BODIES entries must be 1k or 64k"; done
need_range 1024 65534 "ports must be 1024..65534" "$ORIGIN_PORT" "$COURTESY_PORT" \
    "$NGINX_PROXY_PORT" "$SQUID_PORT" "$MITM_PORT" "$BARE_PORT" "$ALT_PORT"
# The cases in their fixed order; direct (the floor) and courtesy always, courtesy-alt with ALT_BIN.
declare -a RUN_CASES=(direct courtesy)
[[ -z $ALT_BIN ]] || RUN_CASES+=(courtesy-alt)
wants() { [[ " ${RUN_CASES[*]} " == *" $1 "* ]]; }
for c in $CASES; do
    case $c in
        direct | courtesy) ;;
        courtesy-alt) [[ -n $ALT_BIN ]] || die "CASES has courtesy-alt: set ALT_BIN to the other courtesy binary" ;;
        nginx-proxy | bare | squid | mitmproxy) wants "$c" || RUN_CASES+=("$c") ;;
        *) die "CASES entries must be direct, courtesy, courtesy-alt, nginx-proxy, bare, squid or mitmproxy, got $c" ;;
    esac
done

# ---- tools and binaries --------------------------------------------------------------------------

install_missing nginx openssl curl

# Squid with ssl-bump: Debian's squid package is built with GnuTLS and cannot bump; squid-openssl
# (which replaces it, with the same /usr/sbin/squid, so a plain parent proxy still works) can.
ensure_squid_openssl() {
    squid -v 2>/dev/null | grep -q -- '--with-openssl' && [[ -x $SQUID_CERTGEN ]] && return 0
    ((EUID == 0)) || die "squid has no ssl-bump here: install squid-openssl (apt-get install -y squid-openssl; it replaces squid)"
    log "installing squid-openssl (replaces squid: the same /usr/sbin/squid, built --with-openssl)"
    apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q squid-openssl >&2
    squid -v | grep -q -- '--with-openssl' || die "squid -v shows no --with-openssl after installing squid-openssl"
    [[ -x $SQUID_CERTGEN ]] || die "squid-openssl installed no $SQUID_CERTGEN"
}

# mitmproxy from PyPI, in a virtual environment of its own: pip picks the newest release that
# supports this python3.
ensure_mitmproxy() {
    if [[ -n $MITMDUMP ]]; then
        [[ -x $MITMDUMP ]] || die "MITMDUMP=$MITMDUMP is not an executable"
        return 0
    fi
    MITMDUMP=$MITM_VENV/bin/mitmdump
    [[ -x $MITMDUMP ]] && return 0
    install_missing python3
    log "installing mitmproxy with pip into $MITM_VENV"
    if ! python3 -m venv "$MITM_VENV" >&2; then
        ((EUID == 0)) || die "python3 -m venv failed: install python3-venv"
        rm -rf "$MITM_VENV"
        apt-get update -q >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >&2
        python3 -m venv "$MITM_VENV" >&2 || die "python3 -m venv failed"
    fi
    "$MITM_VENV/bin/pip" install -q mitmproxy >&2 || die "pip could not install mitmproxy"
    [[ -x $MITMDUMP ]] || die "no mitmdump at $MITMDUMP after pip install mitmproxy"
}

if wants squid; then ensure_squid_openssl; fi
if wants mitmproxy; then ensure_mitmproxy; fi

tls_bench_binaries
alt_courtesy_binary
if wants bare; then build_bare_proxy; fi

# ---- temp dir, processes, cleanup ----------------------------------------------------------------

setup_tmp courtesy-https-peers
require_free_ports "$ORIGIN_PORT" "$STATUS_PORT" "$COURTESY_PORT" $((COURTESY_PORT + 1)) \
    "$NGINX_PROXY_PORT" "$SQUID_PORT" "$MITM_PORT" "$BARE_PORT" "$ALT_PORT" $((ALT_PORT + 1))

# Each proxy's port (the one the client connects to) and PID; direct has no proxy.
declare -A PORT_OF=([direct]=$ORIGIN_PORT) PID_OF=() CA_OF=()

# ---- test CA, the origin's and nginx-proxy's certificates (ECDSA P-256) ---------------------------

make_test_pki "$TMP/pki" "courtesy https_peers test CA" "$HOST" "IP:$HOST"
make_test_leaf "$TMP/pki" nginx-proxy nginx-proxy "IP:$HOST"
ORIGIN_CA=$TMP/pki/ca.pem
CA_OF[direct]=$ORIGIN_CA

# ---- origin: nginx with TLS ----------------------------------------------------------------------

tls_origin_files "$TMP/nginx" "$TMP/pki"
start_tls_origin "$TMP/nginx" "$TMP/pki"

# ---- courtesy ------------------------------------------------------------------------------------

start_https_courtesy courtesy "$COURTESY_PORT" warn
PORT_OF[courtesy]=$COURTESY_PORT
PID_OF[courtesy]=$STARTED_PID
CA_OF[courtesy]=$TMP/courtesy/state/ca.pem

# The same, from ALT_BIN, with a CA of its own.
if wants courtesy-alt; then
    start_https_courtesy courtesy-alt "$ALT_PORT" warn "$ALT_BIN"
    PORT_OF[courtesy-alt]=$ALT_PORT
    PID_OF[courtesy-alt]=$STARTED_PID
    CA_OF[courtesy-alt]=$TMP/courtesy-alt/state/ca.pem
fi

# ---- bare: a hyper + rustls interceptor minting its leaves from courtesy's CA ----------------------

if wants bare; then
    "$BARE_BIN" --listen "$HOST:$BARE_PORT" --ca-dir "$TMP/courtesy/state" --upstream-ca "$ORIGIN_CA" \
        >"$TMP/bare.log" 2>&1 &
    started_server bare "$BARE_PORT"
    CA_OF[bare]=$TMP/courtesy/state/ca.pem
fi

# ---- nginx as a TLS-terminating proxy re-encrypting to the origin ---------------------------------

if wants nginx-proxy; then
    dir="$TMP/nginx-proxy"
    mkdir -p "$dir/tmp"
    # The origin's name is its IP: its certificate's CN and subjectAltName.
    cat >"$dir/nginx.conf" <<EOF
$(nginx_conf_start "$dir")
$(nginx_proxy_blocks "$NGINX_PROXY_PORT" https "$TMP/pki/nginx-proxy" "            proxy_ssl_session_reuse on;
            proxy_ssl_protocols TLSv1.2 TLSv1.3;
            proxy_ssl_verify on;
            proxy_ssl_trusted_certificate $ORIGIN_CA;
            proxy_ssl_name $HOST;")
}
EOF
    nginx -p "$dir" -e "$dir/error.log" -c "$dir/nginx.conf" >"$dir/out.log" 2>&1 &
    started_server nginx-proxy "$NGINX_PROXY_PORT"
    CA_OF[nginx-proxy]=$ORIGIN_CA
fi

# ---- Squid with ssl-bump -------------------------------------------------------------------------

if wants squid; then
    dir="$TMP/squid"
    make_test_ca "$dir" "squid https_peers CA"
    "$SQUID_CERTGEN" -c -s "$dir/ssl_db" -M 4MB >"$dir/certgen.log" 2>&1 ||
        die "security_file_certgen could not make its database: $(cat "$dir/certgen.log")"
    # Bumping at step 1 (client-first) mints a certificate from the CONNECT's host alone, with no
    # subjectAltName for an IP address, which rustls and curl reject; staring first mints one that
    # mimics the origin's (its IP subjectAltName) after Squid verified it.
    squid_conf "$dir" "$HOST:$SQUID_PORT ssl-bump generate-host-certificates=on dynamic_cert_mem_cache_size=4MB tls-cert=$dir/ca.pem tls-key=$dir/ca.key" none \
        "sslcrtd_program $SQUID_CERTGEN -s $dir/ssl_db -M 4MB
sslcrtd_children 1 startup=1 idle=1
ssl_bump stare all
ssl_bump bump all
tls_outgoing_options cafile=$ORIGIN_CA" >"$dir/squid.conf"
    launch_squid "$dir"
    started_server squid "$SQUID_PORT"
    CA_OF[squid]=$dir/ca.pem
fi

# ---- mitmproxy -----------------------------------------------------------------------------------

if wants mitmproxy; then
    dir="$TMP/mitmproxy"
    mkdir -p "$dir"
    # -q: no line per flow. Its CA is made in confdir at start-up.
    "$MITMDUMP" -q --listen-host "$HOST" -p "$MITM_PORT" --set confdir="$dir" \
        --set ssl_verify_upstream_trusted_ca="$ORIGIN_CA" >"$dir/log" 2>&1 &
    started_server mitmproxy "$MITM_PORT"
    CA_OF[mitmproxy]=$dir/mitmproxy-ca-cert.pem
    wait_file "${CA_OF[mitmproxy]}" mitmproxy
fi

# ---- check every path with curl: 200, through the proxy (its certificate, its Via header) ---------

for case in "${RUN_CASES[@]}"; do
    port=$ORIGIN_PORT proxy="" via=""
    case $case in
        courtesy) proxy="$HOST:$COURTESY_PORT" via=courtesy ;;
        courtesy-alt) proxy="$HOST:$ALT_PORT" via=courtesy ;;
        bare) proxy="$HOST:$BARE_PORT" via=bare-hyper ;;
        nginx-proxy) port=$NGINX_PROXY_PORT via=nginx-proxy ;;
        squid) proxy="$HOST:$SQUID_PORT" via=squid ;;
        # mitmproxy adds no Via header: its certificate shows the response came through it.
        mitmproxy) proxy="$HOST:$MITM_PORT" ;;
    esac
    check_tls_path "$case" "${CA_OF[$case]}" "$proxy" "$via" "https://$HOST:$port/1k"
done

# ---- runs ----------------------------------------------------------------------------------------

RUNS="$TMP/runs.tsv"
: >"$RUNS"

# One bounded client run of `case` (https_load_run); with `rep` > 0 the result is appended to $RUNS.
run_case() {
    local case=$1 body=$2 conns=$3 secs=$4 rep=$5 bytes=1024
    [[ $body == 1k ]] || bytes=65536
    local -a args=(--ca "${CA_OF[$case]}" --path "/$body" --body-bytes "$bytes")
    case $case in
        direct) args+=(--origin "$HOST:$ORIGIN_PORT") ;;
        nginx-proxy) args+=(--origin "$HOST:$NGINX_PROXY_PORT") ;;
        *) args+=(--origin "$HOST:$ORIGIN_PORT" --proxy "$HOST:${PORT_OF[$case]}") ;;
    esac
    https_load_run "$body" "$conns" "$case" "$rep" "$secs" "${PID_OF[$case]:-}" "" "${args[@]}"
}

RETRIES=0
START=$(date +%s)
max_conns=$(tr ' ' '\n' <<<"$CONNS" | sort -n | tail -n 1)
for body in $BODIES; do
    # Warm-ups at the largest connection count, so that the upstream pools have grown.
    for case in "${RUN_CASES[@]}"; do run_case "$case" "$body" "$max_conns" 2 0; done
    for conns in $CONNS; do
        interleaved_repeats "${RUN_CASES[*]}" run_case "$body" "$conns"
    done
done
ELAPSED=$(($(date +%s) - START))

# ---- report --------------------------------------------------------------------------------------

echo "## Intercepted HTTPS against proxies doing the same work: courtesy vs nginx, bare hyper, Squid ssl-bump, mitmproxy"
echo
report_machine
echo "- courtesy: $(courtesy_measured), RUST_LOG=warn, pacing effectively off (rate = burst = 1000000); CONNECT, TLS with its local CA (ECDSA P-256 leaves), its own TLS to the origin from a pool"
echo "- client: benches/https_load.rs, hyper $(lock_version hyper), rustls $(lock_version rustls) (ring), $THREADS tokio worker thread(s), HTTP/1.1, kept-alive connections opened before the clock starts"
echo "- origin: nginx $(nginx -v 2>&1 | sed 's/^nginx version: nginx\///') ($(openssl version | cut -d' ' -f1-2)), 1 worker, TLS 1.2/1.3, ECDSA P-256 certificate for IP $HOST from a test CA, static bodies of 1 KiB and 64 KiB (application/octet-stream)"
if wants courtesy-alt; then
    echo "- courtesy-alt ($ALT_LABEL): $ALT_VERSION (prebuilt binary ALT_BIN=$ALT_BIN), run exactly like courtesy, with a CA of its own"
fi
if wants nginx-proxy; then
    echo "- nginx-proxy: the same nginx, 1 worker (master_process off: its CPU is one PID), TLS with its own certificate from the test CA; proxy_pass https:// with upstream keepalive 256, proxy_ssl_session_reuse on, proxy_ssl_verify on with the test CA, TLS 1.2/1.3 upstream, responses relayed from memory (proxy_buffers 16 16k), no access log"
fi
if wants bare; then
    echo "- bare: benches/bare_proxy.rs (release): a bare hyper $(lock_version hyper) + rustls (ring) interceptor, leaves minted from courtesy's CA (one per host), a pooled hyper-util client verifying the origin with the test CA; what hyper and rustls alone cost"
fi
if wants squid; then
    echo "- squid: $(squid -v | head -n 1) ($(squid -v | grep -o -- '--with-openssl' | head -n 1)), squid -N (one process; its security_file_certgen helper counted as a child); ssl-bump with generate-host-certificates=on from a local ECDSA P-256 CA, \`ssl_bump stare all\` + \`ssl_bump bump all\`, origin verified with the test CA; cache deny all, access_log none"
fi
if wants mitmproxy; then
    echo "- mitmproxy: $("$MITMDUMP" --version 2>/dev/null | head -n 2 | tr -s ' \n' ' ' | sed 's/ $//') (pip; the newest release for this python3), mitmdump -q, its own CA, ssl_verify_upstream_trusted_ca = the test CA"
fi
echo "- runs: ${DURATION} s each, $REPEATS repeats per cell (every case interleaved within each repeat), 2 s warm-up per case and body at $max_conns connections; $RETRIES runs repeated because other processes took more than ${NOISE_PCT}% of a core, $((QUIET_WAITED / 2)) s spent waiting for them to quieten before runs; whole run ${ELAPSED} s"
echo "- all processes share the machine's 2 CPUs: the client, the origin and the proxy under test. CPU per request is the proxy process's (all threads, and its live children) utime + stime over the run, including its share of opening the run's connections (CONNECT, TLS with the client and the origin)"
echo
awk -F'\t' -v noise="$NOISE_PCT" -v alt="$ALT_LABEL" "$AWK_SAMPLES"'
    function ratio(a, b) { return (b + 0 > 0) ? sprintf("%.2f", a / b) : "-" }
    {
        key = run_row()
        if ($8 != "-") add(key SUBSEP "pcpu", $8)
        add(key SUBSEP "ocpu", $9); add(key SUBSEP "ccpu", $10)
        errs[key] += $12
        add(key SUBSEP "opened", $13); add(key SUBSEP "fwd", $14 / $11); add(key SUBSEP "acc", $15)
        cell = $1 SUBSEP $2
        if (!(cell in cseen)) { cseen[cell] = 1; cells[++ncells] = cell }
    }
    function rps(cell, c) { return med(vals[cell SUBSEP c SUBSEP "rps"]) }
    function cpu(cell, c) { return med(vals[cell SUBSEP c SUBSEP "pcpu"]) }
    function has(cell, c) { return (cell SUBSEP c SUBSEP "rps") in vals }
    END {
        print "| body | conns | case | req/s median (min–max) | p50 ms | p99 ms | proxy CPU µs/req | origin CPU µs/req | client CPU µs/req | req/s ÷ direct |"
        print "|---|---|---|---|---|---|---|---|---|---|"
        for (i = 1; i <= nkeys; i++) {
            key = order[i]; split(key, k, SUBSEP); cell = k[1] SUBSEP k[2]
            pcpu = (key SUBSEP "pcpu") in vals ? med(vals[key SUBSEP "pcpu"]) : "-"
            flag = errs[key] > 0 ? " (" errs[key] " errors!)" : ""
            printf "| %s | %s | %s%s | %s (%s–%s) | %.3f | %.3f | %s | %s | %s | %s |\n",
                k[1], k[2], k[3], flag, rps(cell, k[3]), lo(vals[key SUBSEP "rps"]), hi(vals[key SUBSEP "rps"]),
                med(vals[key SUBSEP "p50"]) / 1000, med(vals[key SUBSEP "p99"]) / 1000, pcpu,
                med(vals[key SUBSEP "ocpu"]), med(vals[key SUBSEP "ccpu"]),
                k[3] == "direct" ? "-" : ratio(rps(cell, k[3]), rps(cell, "direct"))
        }
        npeers = split("nginx-proxy bare squid mitmproxy", peers, " ")
        withalt = 0
        for (i = 1; i <= ncells; i++) if (has(cells[i], "courtesy-alt")) withalt = 1
        print ""
        print "Courtesy ÷ each peer, per cell (medians over repeats): req/s (above 1: courtesy serves more) and proxy CPU per request (below 1: courtesy spends less)" (withalt ? "; and courtesy-alt (" alt ") ÷ courtesy, the same way round (above 1: courtesy-alt serves more; below 1: it spends less)." : ".")
        print ""
        head = "| body | conns |"; rule = "|---|---|"
        for (p = 1; p <= npeers; p++) {
            head = head " req/s ÷ " peers[p] " | CPU/req ÷ " peers[p] " |"; rule = rule "---|---|"
        }
        if (withalt) { head = head " req/s alt ÷ courtesy | CPU/req alt ÷ courtesy |"; rule = rule "---|---|" }
        print head; print rule
        for (i = 1; i <= ncells; i++) {
            cell = cells[i]; split(cell, k, SUBSEP)
            line = "| " k[1] " | " k[2] " |"
            for (p = 1; p <= npeers; p++) {
                if (!has(cell, peers[p])) { line = line " - | - |"; continue }
                rr[cell, peers[p]] = ratio(rps(cell, "courtesy"), rps(cell, peers[p]))
                cr[cell, peers[p]] = ratio(cpu(cell, "courtesy"), cpu(cell, peers[p]))
                line = line " " rr[cell, peers[p]] " | " cr[cell, peers[p]] " |"
            }
            if (withalt) {
                if (!has(cell, "courtesy-alt")) line = line " - | - |"
                else line = line " " ratio(rps(cell, "courtesy-alt"), rps(cell, "courtesy")) " | " ratio(cpu(cell, "courtesy-alt"), cpu(cell, "courtesy")) " |"
            }
            print line
        }
        print ""
        printf "Runs disturbed by other processes (more than %d%% of a core used outside this benchmark, after retries): %d of %d.\n", noise, noisy, runs
        print ""
        print "Checks (medians over repeats): origin requests per client request (1.00 = every request reached the origin, nothing cached), connections the client opened per run, new connections the origin accepted per run (at most one per client connection, and none per request: the proxy keeps its upstream connections alive; 0 = reused from its pool), and the CPU other processes used during the runs, in % of one core (median, max)."
        print ""
        print "| body | conns | case | origin req / client req | client conns | origin new conns | other CPU % (max) |"
        print "|---|---|---|---|---|---|---|"
        for (i = 1; i <= nkeys; i++) {
            key = order[i]; split(key, k, SUBSEP)
            printf "| %s | %s | %s | %.3f | %s | %s | %s (%s) |\n", k[1], k[2], k[3],
                med(vals[key SUBSEP "fwd"]), med(vals[key SUBSEP "opened"]), med(vals[key SUBSEP "acc"]),
                med(vals[key SUBSEP "other"]), hi(vals[key SUBSEP "other"])
        }
        # The targets, per cell.
        nx = 0; sq = 0; nxmet = 0; sqmet = 0; list = ""
        for (i = 1; i <= ncells; i++) {
            cell = cells[i]; split(cell, k, SUBSEP); parts = ""
            if ((cell, "nginx-proxy") in rr) {
                nx++
                ok = rr[cell, "nginx-proxy"] + 0 >= 1 && cr[cell, "nginx-proxy"] != "-" && cr[cell, "nginx-proxy"] + 0 <= 1
                nxmet += ok
                parts = sprintf("nginx-proxy %s (%s× req/s, %s× CPU/req)", ok ? "met" : "missed",
                    rr[cell, "nginx-proxy"], cr[cell, "nginx-proxy"])
            }
            if ((cell, "squid") in rr) {
                sq++
                ok = rr[cell, "squid"] + 0 >= 3
                sqmet += ok
                parts = parts (parts == "" ? "" : ", ") sprintf("squid %s (%s× req/s)", ok ? "met" : "missed", rr[cell, "squid"])
            }
            if (parts != "") list = list (list == "" ? "" : "; ") k[1] " c=" k[2] ": " parts
        }
        print ""
        printf "Targets (courtesy ≥ 1× nginx-proxy'"'"'s req/s at ≤ 1× its CPU per request; ≥ 3× Squid'"'"'s req/s): nginx-proxy met in %d of %d cells, Squid in %d of %d. Per cell: %s.\n",
            nxmet, nx, sqmet, sq, list
    }' "$RUNS"
