#!/usr/bin/env bash
# First requests to many new https hosts: what a host courtesy has never seen costs, above all its
# leaf certificate (minted on the first CONNECT to the name, then cached), on loopback only.
#
# The origin is nginx (1 worker, TLS, one certificate for *.leaf.test signed by a test CA made here
# with the openssl CLI). courtesy (RUST_LOG=warn, pacing effectively off) resolves h0.leaf.test ..
# h<N-1>.leaf.test to 127.0.0.1 through its `hosts_file` and trusts the test CA upstream. The
# client is benches/https_load.rs with `--new-conn --names leaf.test`: each request is a new
# connection (TCP, CONNECT, a full TLS handshake with courtesy, one GET, close) to a host of its
# own. Two passes over the same N names, each run REPEATS times in fresh courtesy processes:
#   new     every request is a host courtesy has not seen: a leaf is minted, a host entry made
#   known   the same names again in the same process: every leaf comes from the cache
# The difference per request (courtesy's CPU, and latency) is what a new host costs: the leaf, and
# courtesy's own first TLS connection to the origin for that name (a known host's is pooled). The
# direct case (the same requests straight to nginx, no proxy) is the floor.
#
# Usage: bash benches/new_hosts.sh > out.md   (progress on stderr, the Markdown report on stdout)
# Knobs (environment): HOSTS=1000 (names per pass, 10..20000), CONNS=16 (concurrent clients),
#   REPEATS=3, ORIGIN_PORT=18543, COURTESY_PORT=18328 (admin +1), COURTESY_BIN and LOAD_BIN
#   (prebuilt binaries; by default both are built here with cargo).
# With the defaults one run takes about a minute on a 2-core machine (plus the build).
#
# Needs: nginx, openssl, curl (Debian packages; installed with apt-get when missing, as root).
# Everything it starts lives in one temp dir and is stopped by PID on exit.

# shellcheck source=benches/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bench_prologue new_hosts

HOSTS=${HOSTS:-1000}
CONNS=${CONNS:-16}
REPEATS=${REPEATS:-3}
ORIGIN_PORT=${ORIGIN_PORT:-18543}
COURTESY_PORT=${COURTESY_PORT:-18328}
COURTESY_BIN=${COURTESY_BIN:-}
LOAD_BIN=${LOAD_BIN:-}
HOST=127.0.0.1
SUFFIX=leaf.test

need_range 10 20000 "HOSTS must be 10..20000" "$HOSTS"
need_range 1 256 "CONNS must be 1..256" "$CONNS"
need_range 1 10 "REPEATS must be 1..10" "$REPEATS"

install_missing nginx openssl curl

build_courtesy_and_load
rev=$(tree_rev)
CLK_TCK=$(getconf CLK_TCK)

setup_tmp courtesy-new-hosts
require_free_ports "$ORIGIN_PORT" "$COURTESY_PORT" $((COURTESY_PORT + 1))

# ---- test CA, a wildcard origin certificate, the names -------------------------------------------

make_test_pki "$TMP/pki" "courtesy new_hosts test CA" "*.$SUFFIX" "DNS:*.$SUFFIX"
{
    printf '%s' "$HOST"
    for ((i = 0; i < HOSTS; i++)); do printf ' h%d.%s' "$i" "$SUFFIX"; done
    printf '\n'
} >"$TMP/hosts"

# ---- origin --------------------------------------------------------------------------------------

tls_origin_files "$TMP/nginx" "$TMP/pki"
cat >"$TMP/nginx/nginx.conf" <<EOF
$(nginx_conf_start "$TMP/nginx")
    default_type application/octet-stream;
    keepalive_timeout 300s;
$(tls_origin_server "$ORIGIN_PORT" "$TMP/pki" "$TMP/nginx/www")
}
EOF
start_nginx "$TMP/nginx" "$ORIGIN_PORT"

# ---- runs ----------------------------------------------------------------------------------------

RUNS="$TMP/runs.tsv"
: >"$RUNS"

# One pass of HOSTS requests (one per name) with CONNS clients; through courtesy when `pid` is
# given. Appends: case, rep, requests, errors, elapsed µs, p50 µs, p99 µs, proxy CPU ticks.
pass() {
    local case=$1 rep=$2 pid=${3:-} ca=$4 c0=0 c1=0 out result
    [[ -n $pid ]] && c0=$(cpu_ticks "$pid" | awk '{ print $1 + $2 }')
    local proxy_args=()
    [[ -n $pid ]] && proxy_args=(--proxy "$HOST:$COURTESY_PORT")
    out=$(timeout 300 "$LOAD_BIN" --origin "$HOST:$ORIGIN_PORT" "${proxy_args[@]}" --ca "$ca" \
        --new-conn --names "$SUFFIX" --conns "$CONNS" --max-requests "$HOSTS" --duration 120 \
        --body-bytes 1024 2>"$TMP/load.err") || die "https_load failed ($case): $(tail -n 3 "$TMP/load.err")"
    [[ -n $pid ]] && c1=$(cpu_ticks "$pid" | awk '{ print $1 + $2 }')
    result=$(grep '^RESULT ' <<<"$out") || die "no RESULT from https_load: $out"
    # shellcheck disable=SC2086
    set -- $result
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$case" "$rep" "$2" "$3" "$4" "$5" "$6" $((c1 - c0)) >>"$RUNS"
    log "$case rep $rep: $2 requests, $3 errors, p50 $(($5 / 1000)).$(($5 % 1000 / 100)) ms, proxy CPU ticks $((c1 - c0))"
}

MINTED=""
for ((rep = 1; rep <= REPEATS; rep++)); do
    pass direct "$rep" "" "$TMP/pki/ca.pem"
    dir="$TMP/courtesy-$rep"
    mkdir -p "$dir"
    pacing_off_conf "$dir" "$COURTESY_PORT" "upstream_ca = \"$TMP/pki/ca.pem\"
hosts_file = \"$TMP/hosts\"
connect_ports = [$ORIGIN_PORT]" "obey_robots = false" >"$dir/courtesy.toml"
    run_courtesy "$dir" warn
    pid=$!
    PIDS+=("$pid")
    wait_port "$pid" "$COURTESY_PORT" courtesy
    wait_ca "$dir" courtesy
    pass new "$rep" "$pid" "$dir/state/ca.pem"
    pass known "$rep" "$pid" "$dir/state/ca.pem"
    metrics=$(curl -sS --max-time 5 "http://$HOST:$((COURTESY_PORT + 1))/metrics" || true)
    MINTED="$(awk '$1 == "courtesy_leaf_certificates_minted_total" { print $2 }' <<<"$metrics") minted, $(awk '$1 == "courtesy_leaf_certificate_cache_hits_total" { print $2 }' <<<"$metrics") cache hits (/metrics)"
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
done

# ---- report --------------------------------------------------------------------------------------

echo "## First requests to $HOSTS new https hosts"
echo
echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); git $rev; $(nproc) CPUs, $(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
echo "- each request: a new TCP connection, CONNECT h<i>.$SUFFIX:$ORIGIN_PORT, a full TLS handshake with courtesy's leaf for that name (no resumption), one GET of 1 KiB, close; $CONNS clients at once; courtesy then makes its own TLS connection to nginx (*.$SUFFIX certificate)"
echo "- $REPEATS repeats, each in a fresh courtesy process: \`new\` is the first pass over the names, \`known\` the second (leaves cached); medians over repeats"
echo "- courtesy's leaf certificates after the last repeat's two passes: ${MINTED:-?}"
echo
awk -F'\t' -v hz="$CLK_TCK" '
    function med(list,   n, a, i, j, t) {
        n = split(list, a, " ")
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    {
        c = $1
        if (!(c in seen)) { seen[c] = 1; order[++n] = c }
        rps[c] = rps[c] " " ($3 / ($5 / 1e6)); p50[c] = p50[c] " " $6; p99[c] = p99[c] " " $7
        cpu[c] = cpu[c] " " ($8 / hz * 1e6 / $3); errs[c] += $4
    }
    END {
        print "| case | requests/s | p50 ms | p99 ms | courtesy CPU µs per request | errors |"
        print "|---|---|---|---|---|---|"
        for (i = 1; i <= n; i++) {
            c = order[i]
            printf "| %s | %.0f | %.3f | %.3f | %s | %d |\n", c, med(rps[c]), med(p50[c]) / 1000,
                med(p99[c]) / 1000, (c == "direct" ? "-" : sprintf("%.0f", med(cpu[c]))), errs[c]
        }
        if (("new" in seen) && ("known" in seen)) {
            print ""
            printf "A new host costs courtesy %.0f µs of CPU more than a known one (its leaf certificate: an ECDSA P-256 key pair and a signature; its own first TLS handshake with the origin, which a known host reuses from the pool; its first host entry), and adds %.3f ms to the p50 of its first request.\n",
                med(cpu["new"]) - med(cpu["known"]), (med(p50["new"]) - med(p50["known"])) / 1000
        }
    }' "$RUNS"
