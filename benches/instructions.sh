#!/usr/bin/env bash
# Instructions per proxied request: courtesy's own cost counted by valgrind (cachegrind, no cache
# simulation), which a busy or shared machine does not blur the way it blurs wall-clock and CPU
# time. Two release binaries can be set side by side (a change's before and after).
#
# For each binary, twice per repeat: courtesy starts under valgrind with pacing effectively off in
# front of an nginx origin on loopback, ab sends WARMUP requests (the robots.txt fetch, the first
# upstream connections), then either nothing more or REQUESTS more kept-alive requests over CONNS
# connections, and courtesy is stopped (SIGTERM: it drains and exits, and valgrind writes its count).
# The difference between the two counts, divided by REQUESTS, is what one request costs, with
# start-up, the warm-up and shutdown taken out.
#
# The origin's answers say `Cache-Control: no-store`: every request is one the response store
# cannot serve and coalescing may not share (it goes alone after the first), which is what a
# crawl of distinct pages asks of courtesy, measured on its defaults (`cache = "http"`,
# `coalesce = true`); EXTRA_DEFAULTS adds lines to courtesy's `[defaults]` (`cache = "off"` and
# `coalesce = false`, say, to measure what those defaults cost).
#
# HTTPS (KINDS=https) is the same through interception: an nginx TLS origin serving the same
# body, courtesy intercepting CONNECTs to it (its own CA, trusting the test CA upstream), and
# benches/https_load.rs as the client (ab cannot CONNECT): WARMUP requests on one kept-alive
# CONNECT tunnel, then REQUESTS more over CONNS kept-alive tunnels, a fixed number of both.
#
# With BARE=1 the bare hyper proxy of benches/bare_proxy.rs (the floor: hyper alone, with the same
# CA for interception) is measured beside courtesy in the same run, and the report gives the ratio.
#
# Guard mode (GUARD=1, what .ci/run runs after scripts/test-deploy built target/release/courtesy):
# KINDS="plain https", REPEATS=1, REQUESTS=3000, and courtesy's counts are compared with
# benches/instructions.baseline (one line per kind: `KIND INSTRUCTIONS valgrind-VERSION DATE`):
# more than GUARD_PCT=5 % above the baseline fails the run; more than 5 % below it passes and
# prints the line to commit as the new, lower baseline. UPDATE_BASELINE=1 (with GUARD=1) writes
# the measured counts to the baseline file instead of comparing.
#
# Usage: BASE_BIN=/path/to/old/courtesy benches/instructions.sh > out.md
#        benches/instructions.sh > out.md            (one binary: target/release/courtesy)
#        GUARD=1 benches/instructions.sh             (the CI guard, run by .ci/run)
# Knobs (environment): COURTESY_BIN=target/release/courtesy (built when stale), BASE_BIN (unset:
#   measure COURTESY_BIN only), BARE=0 (1: also the bare hyper proxy; BARE_BIN built if unset),
#   KINDS=plain ("plain", "https" or both), LOAD_BIN (the https_load client; built if unset),
#   REQUESTS=5000 (1..100000), CONNS=8 (1..256), WARMUP=20 (1..1000),
#   REPEATS=3 (1..10), SIZE=1k (1k or 64k: the origin's body), BODY_TYPE=text/html,
#   GUARD=0, GUARD_PCT=5, BASELINE=benches/instructions.baseline, UPDATE_BASELINE=0,
#   ORIGIN_PORT=18280 (its TLS twin on ORIGIN_PORT + 1), COURTESY_PORT=18228 (admin on + 1),
#   EXTRA_DEFAULTS= (lines added to courtesy's [defaults]).
# PROFILE_DIR=DIR (not in guard mode): each binary runs under callgrind instead, its counters zeroed
#   after the warm-up and dumped after the measured requests, into DIR/callgrind.NAME.KIND.PID.1
#   (read it with `callgrind_annotate --inclusive=yes`); the report's figure is then the dump's
#   total over REQUESTS, the warm-up and start-up left out by the zeroing instead of a second life.
# MOVES=1 (not in guard mode): after the instruction counts, what moves per request, each counted
#   the same way (two lives, the difference over REQUESTS): allocations and bytes allocated
#   (valgrind's DHAT, heap mode), calls to memcpy/memmove/strcpy and the bytes they copied (DHAT's
#   copy mode: the calls the compiler left as calls, which is where large futures and buffers
#   move), and L1 data, L1 instruction and last-level cache misses (cachegrind's cache simulation, with the cache
#   sizes valgrind reads off this CPU: a model, as perf's hardware counters are not readable
#   in this VM). Issue 52 asks for these beside the instruction counts.
# Courtesy runs at its default log level (RUST_LOG unset), as shipped; COURTESY_LOG=warn (for
# example) sets its RUST_LOG instead (not in guard mode).
# One repeat of one binary and kind takes about 15-30 s on a 2-core machine with the defaults; the
# counts of repeats differ by less than 0.2 %.
#
# Needs: valgrind, nginx, ab (apache2-utils), curl, openssl (installed with apt-get when missing,
# as root).
# Everything it starts lives in one temp dir and is stopped by PID on exit.

# shellcheck source=benches/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bench_prologue instructions
# A failure inside a command substitution (a measured life) stops the script too.
shopt -s inherit_errexit

HOST=127.0.0.1
GUARD=${GUARD:-0}
COURTESY_LOG=${COURTESY_LOG:-}
[[ $GUARD == 0 || -z $COURTESY_LOG ]] || die "COURTESY_LOG is not for guard mode: the baseline is the default level"
if [[ $GUARD == 1 ]]; then
    KINDS=${KINDS:-"plain https"}
    REPEATS=${REPEATS:-1}
    REQUESTS=${REQUESTS:-3000}
fi
KINDS=${KINDS:-plain}
REQUESTS=${REQUESTS:-5000}
CONNS=${CONNS:-8}
WARMUP=${WARMUP:-20}
REPEATS=${REPEATS:-3}
SIZE=${SIZE:-1k}
BODY_TYPE=${BODY_TYPE:-text/html}
ORIGIN_PORT=${ORIGIN_PORT:-18280}
TLS_PORT=$((ORIGIN_PORT + 1))
COURTESY_PORT=${COURTESY_PORT:-18228}
COURTESY_BIN=${COURTESY_BIN:-}
BASE_BIN=${BASE_BIN:-}
BARE=${BARE:-0}
BARE_BIN=${BARE_BIN:-}
LOAD_BIN=${LOAD_BIN:-}
GUARD_PCT=${GUARD_PCT:-5}
BASELINE=${BASELINE:-$ROOT/benches/instructions.baseline}
UPDATE_BASELINE=${UPDATE_BASELINE:-0}
PROFILE_DIR=${PROFILE_DIR:-}
MOVES=${MOVES:-0}
[[ $MOVES == 0 || $MOVES == 1 ]] || die "MOVES must be 0 or 1"
[[ $GUARD == 0 || $MOVES == 0 ]] || die "MOVES is not for guard mode"
[[ $GUARD == 0 || -z $PROFILE_DIR ]] || die "PROFILE_DIR is not for guard mode"
[[ -z $PROFILE_DIR ]] || mkdir -p "$PROFILE_DIR" || die "cannot make PROFILE_DIR $PROFILE_DIR"
[[ -z $PROFILE_DIR ]] || PROFILE_DIR=$(cd "$PROFILE_DIR" && pwd)
need_range 1 100000 "REQUESTS must be 1..100000" "$REQUESTS"
need_range 1 256 "CONNS must be 1..256" "$CONNS"
need_range 1 1000 "WARMUP must be 1..1000" "$WARMUP"
need_range 1 10 "REPEATS must be 1..10" "$REPEATS"
need_range 1 50 "GUARD_PCT must be 1..50" "$GUARD_PCT"
[[ $SIZE == 1k || $SIZE == 64k ]] || die "SIZE must be 1k or 64k"
for kind in $KINDS; do [[ $kind == plain || $kind == https ]] || die "KINDS entries must be plain or https"; done
[[ $GUARD == 0 || $GUARD == 1 ]] || die "GUARD must be 0 or 1"
[[ $BARE == 0 || $BARE == 1 ]] || die "BARE must be 0 or 1"
HTTPS=0
[[ " $KINDS " != *" https "* ]] || HTTPS=1
command -v ab >/dev/null || ab_missing=1
if [[ -n ${ab_missing:-} ]]; then
    ((EUID == 0)) || die "missing ab: install it (apt-get install -y apache2-utils)"
    log "installing apache2-utils (ab)"
    apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q apache2-utils >&2
fi
install_missing valgrind nginx curl openssl

build_courtesy
[[ -z $BASE_BIN || -x $BASE_BIN ]] || die "no baseline binary at '$BASE_BIN'"
if ((HTTPS)) && [[ -z $LOAD_BIN ]]; then
    log "building the https_load client (release)"
    json=$(cd "$ROOT" && cargo build --release --bench https_load \
        --message-format=json-render-diagnostics) || die "cargo build failed"
    LOAD_BIN=$(cargo_exe "$json" https_load)
fi
((!HTTPS)) || [[ -x $LOAD_BIN ]] || die "no https_load binary at '$LOAD_BIN'"
[[ $BARE != 1 ]] || build_bare_proxy

setup_tmp courtesy-instructions
require_free_ports "$ORIGIN_PORT" "$TLS_PORT" "$COURTESY_PORT" "$((COURTESY_PORT + 1))"

# The origin: nginx serving one static body of SIZE with BODY_TYPE, plain on ORIGIN_PORT and over
# TLS (a test CA's certificate for HOST) on TLS_PORT.
mkdir -p "$TMP/origin/www" "$TMP/origin/tmp"
head -c 1024 /dev/zero | tr '\0' 'a' >"$TMP/origin/www/1k"
head -c 65536 /dev/zero | tr '\0' 'a' >"$TMP/origin/www/64k"
make_test_pki "$TMP/pki" "courtesy instructions test CA" "$HOST" "IP:$HOST"
ORIGIN_CA=$TMP/pki/ca.pem
chmod -R a+rX "$TMP/origin" "$TMP/pki"
{
    nginx_conf_start "$TMP/origin" 1024
    echo "    default_type $BODY_TYPE;"
    echo "    types { }"
    echo '    add_header Cache-Control "no-store" always;'
    STATUS_PORT=$ORIGIN_PORT static_origin_server "$ORIGIN_PORT" "$TMP/origin/www"
    tls_origin_server "$TLS_PORT" "$TMP/pki" "$TMP/origin/www"
    echo "}"
} >"$TMP/origin/nginx.conf"
start_nginx "$TMP/origin" "$ORIGIN_PORT" origin

URL="http://$HOST:$ORIGIN_PORT/$SIZE"
BYTES=1024
[[ $SIZE == 1k ]] || BYTES=65536

# The CA courtesy intercepts with, made once by a courtesy started (natively) for that alone, so
# that no measured life pays for it; each life gets a fresh state_dir with a copy of it, and the
# bare proxy mints its leaves from the same one.
CA_DIR=$TMP/ca/state
if ((HTTPS)); then
    mkdir -p "$TMP/ca"
    pacing_off_conf "$TMP/ca" "$COURTESY_PORT" >"$TMP/ca/courtesy.toml"
    run_courtesy "$TMP/ca" warn
    ca_pid=$!
    PIDS+=("$ca_pid")
    wait_port "$ca_pid" "$COURTESY_PORT" courtesy
    wait_ca "$TMP/ca" courtesy
    kill -TERM "$ca_pid"
    wait "$ca_pid" 2>/dev/null || true
    [[ -s $CA_DIR/ca-key.pem ]] || die "courtesy wrote no ca-key.pem in $CA_DIR"
fi

# One measured life of the proxy `name` (base, courtesy or bare; `bin`) under valgrind for the
# request `kind`: WARMUP requests, then `extra` more; prints what valgrind counted in it: the
# instructions, or with `what` (MOVES) `heap` (allocations, bytes), `copy` (copy calls, bytes) or
# `cache` (L1 data misses, last-level misses).
count_life() {
    local name=$1 bin=$2 kind=$3 extra=$4 what=${5:-instructions} dir=$TMP/life pid
    local -a cmd
    rm -rf "$dir"
    mkdir -p "$dir/state"
    chmod 700 "$dir/state"
    if [[ $name == bare ]]; then
        cmd=("$bin" --listen "$HOST:$COURTESY_PORT")
        [[ $kind == plain ]] || cmd+=(--ca-dir "$CA_DIR" --upstream-ca "$ORIGIN_CA")
    else
        if [[ $kind == plain ]]; then
            pacing_off_conf "$dir" "$COURTESY_PORT" "" "${EXTRA_DEFAULTS:-}" >"$dir/courtesy.toml"
        else
            cp "$CA_DIR/ca.pem" "$CA_DIR/ca-key.pem" "$dir/state/"
            pacing_off_conf "$dir" "$COURTESY_PORT" "upstream_ca = \"$ORIGIN_CA\"
connect_ports = [$TLS_PORT]" "max_queue = 1000000
${EXTRA_DEFAULTS:-}" >"$dir/courtesy.toml"
        fi
        cmd=("$bin" run --config "$dir/courtesy.toml")
    fi
    local -a tool=(--tool=cachegrind --cache-sim=no --cachegrind-out-file="$dir/counts")
    case $what in
        heap) tool=(--tool=dhat --mode=heap --dhat-out-file="$dir/dhat.json") ;;
        copy) tool=(--tool=dhat --mode=copy --dhat-out-file="$dir/dhat.json") ;;
        cache) tool=(--tool=cachegrind --cache-sim=yes --cachegrind-out-file="$dir/counts") ;;
    esac
    local profile=
    if [[ -n $PROFILE_DIR && $what == instructions ]] && ((extra > 0)); then
        profile=$PROFILE_DIR/callgrind.$name.$kind
        tool=(--tool=callgrind --dump-instr=no --callgrind-out-file="$profile.%p")
    fi
    env -u RUST_LOG ${COURTESY_LOG:+RUST_LOG=$COURTESY_LOG} valgrind "${tool[@]}" \
        "${cmd[@]}" >/dev/null 2>"$dir/log" &
    pid=$!
    PIDS+=("$pid")
    # valgrind starts slowly: wait up to 60 s for the listener.
    local i
    for ((i = 0; i < 600; i++)); do
        port_busy "$COURTESY_PORT" && break
        kill -0 "$pid" 2>/dev/null || die "$name exited at start-up: $(tail -n 5 "$dir/log")"
        sleep 0.1
    done
    port_busy "$COURTESY_PORT" || die "$name did not listen within 60 s"
    run_kind "$kind" "$WARMUP" 1 || die "the warm-up failed: $(tail -n 5 "$dir/log")"
    if ((extra > 0)); then
        # A profile counts the measured requests only: zeroed after the warm-up, dumped after.
        [[ -z $profile ]] || callgrind_control -z "$pid" >/dev/null 2>&1
        run_kind "$kind" "$extra" "$CONNS" || die "the measured requests failed"
        if [[ -n $profile ]]; then
            callgrind_control -d "$pid" >/dev/null 2>&1
            log "  callgrind profile of $extra requests: $profile.$pid.1 (callgrind_annotate --inclusive=yes)"
        fi
    fi
    kill -TERM "$pid"
    for ((i = 0; i < 600; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    wait "$pid" 2>/dev/null || true
    if [[ -n $profile ]]; then
        # callgrind's "summary:" line of the dump: the measured requests' instructions.
        awk '/^summary:/ { print $2 }' "$profile.$pid.1"
        return
    fi
    case $what in
        heap | copy)
            # DHAT's "Total: X bytes in Y blocks" (blocks: allocations, or copy calls).
            grep -q 'Total:' "$dir/log" || die "DHAT wrote no total: $(tail -n 5 "$dir/log")"
            awk '/Total:/ { gsub(",", ""); for (i = 1; i <= NF; i++) { if ($i == "bytes") b = $(i - 1); if ($i == "blocks") n = $(i - 1) } } END { print n, b }' "$dir/log"
            return
            ;;
    esac
    [[ -s $dir/counts ]] || die "valgrind wrote no count: $(tail -n 5 "$dir/log")"
    if [[ $what == cache ]]; then
        # events: Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw
        awk '/^summary:/ { print $6 + $9, $4 + $7 + $10, $3 }' "$dir/counts"
        return
    fi
    awk '/^summary:/ { print $2 }' "$dir/counts"
}

# `n` kept-alive requests over `c` connections through the proxy; fails unless every one was a 200.
run_plain() {
    local n=$1 c=$2 out
    out=$(ab -q -k -n "$n" -c "$c" -X "$HOST:$COURTESY_PORT" "$URL" 2>&1) || {
        log "ab failed: $out"
        return 1
    }
    if ! grep -q '^Failed requests: *0$' <<<"$out" || grep -q '^Non-2xx responses' <<<"$out"; then
        log "ab saw failures: $(grep -E 'Failed|Non-2xx' <<<"$out")"
        return 1
    fi
}

# `n` GETs over `c` kept-alive CONNECT tunnels through the proxy (its leaves signed by CA_DIR's
# CA); fails unless all `n` were answered with the whole body and `c` tunnels were opened.
run_https() {
    local n=$1 c=$2 out result
    out=$(timeout 600 "$LOAD_BIN" --origin "$HOST:$TLS_PORT" --proxy "$HOST:$COURTESY_PORT" \
        --ca "$CA_DIR/ca.pem" --path "/$SIZE" --body-bytes "$BYTES" --conns "$c" \
        --duration 300 --max-requests "$n" --threads 1 2>&1) || {
        log "https_load failed: $out"
        return 1
    }
    result=$(grep '^RESULT ' <<<"$out") || {
        log "no RESULT line from https_load: $out"
        return 1
    }
    # RESULT requests errors elapsed p50 p99 opened ticks
    # shellcheck disable=SC2086  # split into $1.. on purpose: the RESULT line (numbers)
    set -- $result
    if (($2 != n || $3 != 0 || $7 != c)); then
        log "https_load: $2 of $n requests, $3 errors, $7 of $c connections: $out"
        return 1
    fi
}

# What moves per request of `bin` for `kind` (`what`: heap, copy or cache): two values, each the
# difference of two lives over REQUESTS.
moves_per_request() {
    local name=$1 bin=$2 kind=$3 what=$4 base full
    base=$(count_life "$name" "$bin" "$kind" 0 "$what")
    full=$(count_life "$name" "$bin" "$kind" "$REQUESTS" "$what")
    awk -v b="$base" -v f="$full" -v n="$REQUESTS" \
        'BEGIN { k = split(b, x, " "); split(f, y, " ")
                 out = sprintf("%.1f %.0f", (y[1] - x[1]) / n, (y[2] - x[2]) / n)
                 if (k > 2) out = out sprintf(" %.1f", (y[3] - x[3]) / n)
                 print out }'
}

# `n` requests of `kind` (plain or https) over `c` connections: run_plain or run_https.
run_kind() {
    local kind=$1
    shift
    if [[ $kind == plain ]]; then run_plain "$@"; else run_https "$@"; fi
}

# Instructions per request of `bin` for `kind`, one value.
per_request() {
    local name=$1 bin=$2 kind=$3 base full
    if [[ -n $PROFILE_DIR ]]; then
        full=$(count_life "$name" "$bin" "$kind" "$REQUESTS")
        awk -v f="$full" -v n="$REQUESTS" 'BEGIN { printf "%.0f\n", f / n }'
        return
    fi
    base=$(count_life "$name" "$bin" "$kind" 0)
    full=$(count_life "$name" "$bin" "$kind" "$REQUESTS")
    awk -v b="$base" -v f="$full" -v n="$REQUESTS" 'BEGIN { printf "%.0f\n", (f - b) / n }'
}

declare -A VALUES
names=(courtesy)
[[ -z $BASE_BIN ]] || names=(base courtesy)
[[ $BARE != 1 ]] || names+=(bare)
bin_of() {
    case $1 in
        base) echo "$BASE_BIN" ;;
        bare) echo "$BARE_BIN" ;;
        *) echo "$COURTESY_BIN" ;;
    esac
}
for ((r = 1; r <= REPEATS; r++)); do
    for kind in $KINDS; do
        for name in "${names[@]}"; do
            log "repeat $r/$REPEATS: $name, $kind"
            v=$(per_request "$name" "$(bin_of "$name")" "$kind")
            log "  $v instructions per request"
            VALUES[$kind.$name]="${VALUES[$kind.$name]:-} $v"
        done
    done
done

median() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
spread() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk 'NR == 1 { lo = $1 } { hi = $1 } END { print lo "–" hi }'; }
VALGRIND_VERSION=$(valgrind --version)

echo "# Instructions per request"
echo
report_machine
echo "- ${VALGRIND_VERSION}, cachegrind without cache simulation"
echo "- $REQUESTS kept-alive requests over $CONNS connections after $WARMUP warm-up requests on one"
echo "  (plain: ab -k; https: benches/https_load.rs through kept-alive CONNECT tunnels);"
echo "  origin body $SIZE of $BODY_TYPE; pacing effectively off; $REPEATS repeats"
echo "- courtesy: $COURTESY_BIN ($("$COURTESY_BIN" --version 2>/dev/null || echo '?')), git $(tree_rev)"
echo "- courtesy's log level: RUST_LOG=${COURTESY_LOG:-unset (its default, info: a line per response)}"
[[ -z $BASE_BIN ]] || echo "- base: $BASE_BIN ($("$BASE_BIN" --version 2>/dev/null || echo '?'))"
[[ $BARE != 1 ]] || echo "- bare: benches/bare_proxy.rs, a bare hyper $(lock_version hyper) forward proxy (and rustls interceptor), $BARE_BIN"
echo
echo "| kind | binary | instructions per request (median) | range | ratio to base | ratio to bare |"
echo "|---|---|---:|---:|---:|---:|"
for kind in $KINDS; do
    base_median=
    bare_median=
    [[ -z $BASE_BIN ]] || base_median=$(median "${VALUES[$kind.base]}")
    [[ $BARE != 1 ]] || bare_median=$(median "${VALUES[$kind.bare]}")
    for name in "${names[@]}"; do
        m=$(median "${VALUES[$kind.$name]}")
        ratio="–"
        [[ -z $base_median ]] || ratio=$(awk -v a="$m" -v b="$base_median" 'BEGIN { printf "%.3f", a / b }')
        bratio="–"
        [[ -z $bare_median ]] || bratio=$(awk -v a="$m" -v b="$bare_median" 'BEGIN { printf "%.3f", a / b }')
        echo "| $kind | $name | $m | $(spread "${VALUES[$kind.$name]}") | $ratio | $bratio |"
    done
done

if ((MOVES)); then
    echo
    echo "What moves per request (one life pair each, the difference over $REQUESTS requests): allocations and bytes allocated (DHAT heap mode); memcpy/memmove/strcpy calls and the bytes they copied (DHAT copy mode: copies the compiler inlined are not counted); L1 data, L1 instruction (code fetched) and last-level cache misses (cachegrind's simulation of this CPU's caches, reads and writes):"
    echo
    echo "| kind | binary | allocations | bytes allocated | copy calls | bytes copied | L1d misses | L1i misses | LL misses |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
    for kind in $KINDS; do
        for name in "${names[@]}"; do
            log "moves: $name, $kind"
            read -r allocs alloc_bytes <<<"$(moves_per_request "$name" "$(bin_of "$name")" "$kind" heap)"
            read -r copies copy_bytes <<<"$(moves_per_request "$name" "$(bin_of "$name")" "$kind" copy)"
            read -r l1 ll i1 <<<"$(moves_per_request "$name" "$(bin_of "$name")" "$kind" cache)"
            log "  $allocs allocations ($alloc_bytes B), $copies copies ($copy_bytes B), $l1 L1d, $i1 L1i and $ll LL misses per request"
            echo "| $kind | $name | $allocs | $alloc_bytes | $copies | $copy_bytes | $l1 | $i1 | $ll |"
        done
    done
fi

((GUARD)) || exit 0

# ---- the guard -----------------------------------------------------------------------------------

echo
if [[ $UPDATE_BASELINE == 1 ]]; then
    {
        echo "# Instructions per proxied request of target/release/courtesy, counted by benches/instructions.sh"
        echo "# (GUARD=1: $REQUESTS requests over $CONNS kept-alive connections, $SIZE of $BODY_TYPE)."
        echo "# kind instructions valgrind date. Lower a line when a change saves more than ${GUARD_PCT} %."
        for kind in $KINDS; do
            echo "$kind $(median "${VALUES[$kind.courtesy]}") $VALGRIND_VERSION $(date -u +%F)"
        done
    } >"$BASELINE"
    log "wrote $BASELINE"
    cat "$BASELINE"
    exit 0
fi
[[ -s $BASELINE ]] || die "no baseline at $BASELINE: run GUARD=1 UPDATE_BASELINE=1 $0 and commit it"
failed=0
for kind in $KINDS; do
    now=$(median "${VALUES[$kind.courtesy]}")
    line=$(awk -v k="$kind" '$1 == k { print; exit }' "$BASELINE")
    [[ -n $line ]] || die "$BASELINE has no line for $kind"
    # shellcheck disable=SC2086  # split into $1.. on purpose: kind instructions valgrind date
    set -- $line
    was=$2
    [[ $3 == "$VALGRIND_VERSION" ]] ||
        log "warning: the baseline of $kind was counted with $3, this run with $VALGRIND_VERSION"
    change=$(awk -v a="$now" -v b="$was" 'BEGIN { printf "%+.1f", (a - b) * 100 / b }')
    verdict=$(awk -v a="$now" -v b="$was" -v p="$GUARD_PCT" \
        'BEGIN { v = "ok"; if (a > b * (1 + p / 100)) v = "over"; else if (a < b * (1 - p / 100)) v = "under"; print v }')
    echo "- $kind: $now instructions per request, baseline $was ($change %)"
    case $verdict in
        over)
            log "FAIL: $kind costs ${change#[+-]} % more instructions per request than the baseline ($now vs $was)"
            failed=1
            ;;
        under)
            log "$kind saves ${change#[+-]} %: lower the baseline, set this line in ${BASELINE#"$ROOT"/}:"
            log "  $kind $now $VALGRIND_VERSION $(date -u +%F)"
            ;;
        *) log "$kind: $now instructions per request, within ${GUARD_PCT} % of the baseline $was ($change %)" ;;
    esac
done
exit "$failed"
