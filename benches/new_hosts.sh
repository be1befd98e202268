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
# With CHUNK below HOSTS, the `new` pass runs as HOSTS/CHUNK client runs in a row (names
# h0..h<CHUNK-1>, then the next CHUNK, ...), and the report adds a table by chunk: latency, CPU,
# and courtesy's resident memory and upstream connections after each one, to show whether the
# thousandth new host costs what the first did (caches bounded, no cliff when a limit is reached).
# The `known` pass then replays the last chunk's names (in the leaf cache if CHUNK <= 4096).
#
# Usage: bash benches/new_hosts.sh > out.md   (progress on stderr, the Markdown report on stdout)
# Knobs (environment): HOSTS=1000 (names per pass, 10..20000), CHUNK=HOSTS (names per client run
#   of the `new` pass; HOSTS must be a multiple), CONNS=16 (concurrent clients),
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
CHUNK=${CHUNK:-$HOSTS}
CONNS=${CONNS:-16}
REPEATS=${REPEATS:-3}
ORIGIN_PORT=${ORIGIN_PORT:-18543}
COURTESY_PORT=${COURTESY_PORT:-18328}
COURTESY_BIN=${COURTESY_BIN:-}
LOAD_BIN=${LOAD_BIN:-}
HOST=127.0.0.1
SUFFIX=leaf.test

need_range 10 20000 "HOSTS must be 10..20000" "$HOSTS"
need_range 10 "$HOSTS" "CHUNK must be 10..HOSTS" "$CHUNK"
((HOSTS % CHUNK == 0)) || die "HOSTS ($HOSTS) must be a multiple of CHUNK ($CHUNK)"
need_range 1 256 "CONNS must be 1..256" "$CONNS"
need_range 1 10 "REPEATS must be 1..10" "$REPEATS"

install_missing nginx openssl curl

build_courtesy_and_load
rev=$(tree_rev)
CLK_TCK=$(getconf CLK_TCK)

# courtesy may keep a pooled connection per host, nginx one per pooled connection.
raise_open_files
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
$(nginx_conf_start "$TMP/nginx" $((HOSTS + 8192)))
    default_type application/octet-stream;
    keepalive_timeout 300s;
$(tls_origin_server "$ORIGIN_PORT" "$TMP/pki" "$TMP/nginx/www")
}
EOF
start_nginx "$TMP/nginx" "$ORIGIN_PORT"

# ---- runs ----------------------------------------------------------------------------------------

RUNS="$TMP/runs.tsv"
: >"$RUNS"

# One client run of `count` requests to the names from h<first> on, with CONNS clients; through
# courtesy when `pid` is given. Appends to RUNS: case, rep, requests, errors, elapsed µs, p50 µs,
# p99 µs, proxy CPU ticks, the run's first name, courtesy's resident KiB and its open upstream
# connections (to the origin's port) after the run.
pass() {
    local case=$1 rep=$2 pid=${3:-} ca=$4 first=${5:-0} count=${6:-$HOSTS} c0=0 c1=0 out result
    local rss=- upstream=-
    [[ -n $pid ]] && c0=$(cpu_ticks "$pid" | awk '{ print $1 + $2 }')
    local proxy_args=()
    [[ -n $pid ]] && proxy_args=(--proxy "$HOST:$COURTESY_PORT")
    out=$(timeout 300 "$LOAD_BIN" --origin "$HOST:$ORIGIN_PORT" "${proxy_args[@]}" --ca "$ca" \
        --new-conn --names "$SUFFIX" --first-name "$first" --conns "$CONNS" --max-requests "$count" \
        --duration 120 --body-bytes 1024 2>"$TMP/load.err") || die "https_load failed ($case): $(tail -n 3 "$TMP/load.err")"
    if [[ -n $pid ]]; then
        c1=$(cpu_ticks "$pid" | awk '{ print $1 + $2 }')
        rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status")
        upstream=$(upstream_connections "$pid")
    fi
    result=$(grep '^RESULT ' <<<"$out") || die "no RESULT from https_load: $out"
    # shellcheck disable=SC2086  # split into $1.. on purpose: the RESULT line (numbers)
    set -- $result
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$case" "$rep" "$2" "$3" "$4" "$5" "$6" \
        $((c1 - c0)) "$first" "$rss" "$upstream" >>"$RUNS"
    log "$case rep $rep h$first..: $2 requests, $3 errors, p50 $(($5 / 1000)).$(($5 % 1000 / 100)) ms, proxy CPU ticks $((c1 - c0)), RSS ${rss} KiB, upstream connections $upstream"
}

# The TCP connections `pid` has open to the origin's port (its pooled upstream connections).
upstream_connections() {
    local port_hex
    port_hex=$(printf '%04X' "$ORIGIN_PORT")
    # Socket inodes of the process, then the established ones among them whose remote port is
    # the origin's (state 01 in /proc/net/tcp).
    find "/proc/$1/fd" -lname 'socket:*' -printf '%l\n' 2>/dev/null | tr -dc '0-9\n' | sort -u >"$TMP/inodes"
    awk -v port="$port_hex" 'NR > 1 && $4 == "01" { split($3, r, ":"); if (r[2] == port) print $10 }' \
        /proc/net/tcp | sort -u | comm -12 - "$TMP/inodes" | wc -l
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
    for ((first = 0; first < HOSTS; first += CHUNK)); do
        pass new "$rep" "$pid" "$dir/state/ca.pem" "$first" "$CHUNK"
    done
    pass known "$rep" "$pid" "$dir/state/ca.pem" $((HOSTS - CHUNK)) "$CHUNK"
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
if ((CHUNK < HOSTS)); then
    echo "- $REPEATS repeats, each in a fresh courtesy process: \`new\` is the first pass over the names ($((HOSTS / CHUNK)) client runs of $CHUNK names in a row), \`known\` the last $CHUNK names again (leaves cached); medians over repeats (and chunks)"
else
    echo "- $REPEATS repeats, each in a fresh courtesy process: \`new\` is the first pass over the names, \`known\` the second (leaves cached); medians over repeats"
fi
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
            printf "A new host costs courtesy %.0f µs of CPU more than a known one (its leaf certificate: one ECDSA signature by the CA; its own first TLS handshake with the origin, which a known host reuses from the pool; its first host entry), and adds %.3f ms to the p50 of its first request.\n",
                med(cpu["new"]) - med(cpu["known"]), (med(p50["new"]) - med(p50["known"])) / 1000
        }
    }' "$RUNS"
if ((CHUNK < HOSTS)); then
    echo
    echo "### The new pass by chunk of $CHUNK hosts (medians over repeats)"
    echo
    awk -F'\t' -v hz="$CLK_TCK" -v chunk="$CHUNK" '
        function med(list,   n, a, i, j, t) {
            n = split(list, a, " ")
            for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
            return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
        }
        $1 == "new" {
            k = $9
            if (!(k in seen)) { seen[k] = 1; order[++n] = k }
            rps[k] = rps[k] " " ($3 / ($5 / 1e6)); p50[k] = p50[k] " " $6; p99[k] = p99[k] " " $7
            cpu[k] = cpu[k] " " ($8 / hz * 1e6 / $3); errs[k] += $4; rss[k] = rss[k] " " $10; up[k] = up[k] " " $11
        }
        END {
            print "| hosts | requests/s | p50 ms | p99 ms | courtesy CPU µs per request | courtesy RSS MiB after | upstream connections open after | errors |"
            print "|---|---|---|---|---|---|---|---|"
            for (i = 1; i <= n; i++) {
                k = order[i]
                printf "| h%d..h%d | %.0f | %.3f | %.3f | %.0f | %.1f | %d | %d |\n", k, k + chunk - 1, med(rps[k]),
                    med(p50[k]) / 1000, med(p99[k]) / 1000, med(cpu[k]), med(rss[k]) / 1024, med(up[k]), errs[k]
            }
        }' "$RUNS"
fi
