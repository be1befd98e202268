#!/usr/bin/env bash
# Where a proxy's CPU goes per request under load: a sampling profile of one case of
# benches/load.sh (courtesy, courtesy-warn, courtesy-alt or bare), taken while wrk drives it, and
# summed per request: microseconds of CPU per request in the kernel, in the proxy's own binary and
# in libc (copies and the allocator apart), and the symbols that cost the most.
#
# Instruction counts (benches/instructions.sh) say how much work a request is; this says where the
# time of a request under load goes, which is not the same: on a machine whose cores are shared by
# the client, the origin and the proxy, waking a peer, moving data between cores and the
# scheduler cost time that no instruction count sees. Run it for courtesy and for bare, and with
# TOKIO_WORKER_THREADS=1 beside the default (one worker per core), to tell what two workers cost
# from what one request costs.
#
# Usage: CASE=courtesy bash benches/where_time_goes.sh > out.md   (progress on stderr)
# Knobs (environment): CASE=courtesy, CONNS=16 (wrk's connections), SECONDS_SAMPLED=8 (the profile
#   is taken over that many seconds of the run, which lasts SECONDS_SAMPLED + 6), FREQ=2999
#   (samples per second), TOP=25 (symbols listed); and load.sh's own (COURTESY_BIN, ALT_BIN,
#   BARE_BIN, ...). TOKIO_WORKER_THREADS reaches the proxies, as tokio reads it.
# Needs: perf (Debian's linux-perf; installed as root when missing), and what load.sh needs. The
# profile is of the CPU clock (a software event), so it works where hardware counters do not, in
# a VM too. Everything it starts is load.sh's, stopped by load.sh.

# shellcheck source=benches/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bench_prologue where

CASE=${CASE:-courtesy}
CONNS=${CONNS:-16}
SECONDS_SAMPLED=${SECONDS_SAMPLED:-8}
FREQ=${FREQ:-2999}
TOP=${TOP:-25}
case $CASE in
    courtesy) PORT=${COURTESY_PORT:-18128} ;;
    courtesy-warn) PORT=${COURTESY_WARN_PORT:-18138} ;;
    courtesy-alt) PORT=${COURTESY_ALT_PORT:-18198} ;;
    bare) PORT=${BARE_PORT:-18170} ;;
    *) die "CASE must be courtesy, courtesy-warn, courtesy-alt or bare" ;;
esac
need_range 1 1000 "CONNS must be 1..1000" "$CONNS"
need_range 2 40 "SECONDS_SAMPLED must be 2..40" "$SECONDS_SAMPLED"
need_range 100 10000 "FREQ must be 100..10000" "$FREQ"
need_range 1 200 "TOP must be 1..200" "$TOP"
if ! command -v perf >/dev/null; then
    ((EUID == 0)) || die "perf is missing: install it (apt-get install -y linux-perf)"
    log "installing linux-perf"
    apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q linux-perf >&2
fi
perf record -e cpu-clock -o /dev/null -- true 2>/dev/null || die "perf cannot sample the CPU clock here"

OUT=$(mktemp -d "${TMPDIR:-/tmp}/courtesy-where.XXXXXX")
LOAD_PID=
# Stops load.sh (which stops what it started) if this script ends first.
finish() {
    [[ -z $LOAD_PID ]] || kill -TERM "$LOAD_PID" 2>/dev/null || true
    rm -rf "$OUT"
}
trap finish EXIT

# Only this case runs; the other proxies are not even started.
declare -A ON=([courtesy]=0 [courtesy-warn]=0 [bare]=0)
[[ $CASE == courtesy-alt ]] || ON[$CASE]=1
[[ $CASE != courtesy-alt || -n ${ALT_BIN:-} ]] || die "CASE=courtesy-alt needs ALT_BIN"
log "load.sh: $CASE at $CONNS connections, 1 KiB, one run of $((SECONDS_SAMPLED + 6)) s"
RUN_ONLY=$CASE DEFAULT_CASE=${ON[courtesy]} WARN_CASE=${ON[courtesy-warn]} BARE_CASE=${ON[bare]} \
    SQUID_CASE=0 SQUID_LOG_CASE=0 NGINX_PROXY_CASE=0 NGINX_PROXY_LOG_CASE=0 \
    CONNS=$CONNS SIZES=1k REPEATS=1 DURATION=$((SECONDS_SAMPLED + 6)) \
    bash "$ROOT/benches/load.sh" >"$OUT/load.md" 2>"$OUT/load.log" &
LOAD_PID=$!

# The measured run: wrk at the run's length (not the 2 s warm-up) on the case's port; sampled
# from 2 s in, the case's process found by its listening port.
RUN_SECONDS=$((SECONDS_SAMPLED + 6))
pid=
for ((i = 0; i < 3000; i++)); do
    kill -0 "$LOAD_PID" 2>/dev/null || die "load.sh ended early: $(tail -n 5 "$OUT/load.log")"
    if pgrep -f "wrk .*-d ${RUN_SECONDS}s .*:$PORT/" >/dev/null; then
        sleep 2
        pid=$(ss -Htlnp "sport = :$PORT" | grep -o 'pid=[0-9]*' | head -n 1 | cut -d= -f2)
        break
    fi
    sleep 0.2
done
[[ -n $pid ]] || die "no $CASE process listening on $PORT while wrk ran"
log "recording $CASE (pid $pid) for $SECONDS_SAMPLED s"
perf record -F "$FREQ" -e cpu-clock -p "$pid" -o "$OUT/perf.data" -- sleep "$SECONDS_SAMPLED" \
    2>"$OUT/perf.log" >/dev/null
wait "$LOAD_PID" || die "load.sh failed: $(tail -n 5 "$OUT/load.log")"
LOAD_PID=

# req/s of the run (load.sh's first table: | 1k | conns | case | median (min–max) | ...).
RATE=$(awk -F'|' -v c="$CASE" -v n="$CONNS" '
    $2 ~ /1k/ && $3 + 0 == n && $4 ~ "^ *" c " *$" { split($5, r, " "); print r[1]; exit }' \
    "$OUT/load.md")
[[ $RATE =~ ^[0-9]+$ ]] || die "no req/s for $CASE in load.sh's report"
perf report -i "$OUT/perf.data" --stdio --sort dso,sym -F sample,dso,sym 2>/dev/null |
    grep -v '^#' | grep -v '^$' >"$OUT/symbols" || die "perf report failed"

echo "## Where $CASE's CPU goes per request ($CONNS connections, 1 KiB)"
echo
report_machine
echo "- git $(tree_rev); TOKIO_WORKER_THREADS=${TOKIO_WORKER_THREADS:-unset}"
echo "- $RATE req/s over the run; perf cpu-clock at $FREQ Hz over $SECONDS_SAMPLED s of it"
echo
# µs per request of a sample count: samples / FREQ seconds, over RATE * SECONDS_SAMPLED requests.
awk -v f="$FREQ" -v r="$RATE" -v s="$SECONDS_SAMPLED" -v top="$TOP" '
    function us(n) { return n / f / (r * s) * 1e6 }
    match($0, /^ *[0-9]+ +/) {
        n = $1; dso = $2; kind = $3; sym = $0
        sub(/^ *[0-9]+ +[^ ]+ +\[.\] +/, "", sym)
        if (kind == "[k]") g = "kernel"
        else if (dso ~ /^libc/ && sym ~ /mem(move|cpy)/) g = "libc: copies"
        else if (dso ~ /^libc/ && sym ~ /(malloc|free|unlink_chunk|consolidate)/) g = "libc: allocator"
        else if (dso ~ /^libc/) g = "libc: other"
        else if (dso ~ /vdso/) g = "vdso (clock reads)"
        else g = "the proxy binary"
        group[g] += n; total += n
        count[sym] += n
    }
    END {
        printf "| where | µs CPU per request | share |\n|---|---:|---:|\n"
        split("kernel;the proxy binary;libc: copies;libc: allocator;libc: other;vdso (clock reads)", order, ";")
        for (i = 1; i <= 6; i++) {
            g = order[i]
            printf "| %s | %.2f | %.0f %% |\n", g, us(group[g]), 100 * group[g] / total
        }
        printf "| all | %.2f | 100 %% |\n\n", us(total)
        printf "| symbol | µs per request |\n|---|---:|\n"
        for (k in count) print count[k] "\t" k | "sort -rn | head -n " top " > /dev/stderr"
    }' "$OUT/symbols" 2>"$OUT/top"
awk -F'\t' -v f="$FREQ" -v r="$RATE" -v s="$SECONDS_SAMPLED" '
    { sym = substr($2, 1, 110); gsub(/\|/, "\\|", sym); printf "| `%s` | %.2f |\n", sym, $1 / f / (r * s) * 1e6 }' \
    "$OUT/top"
