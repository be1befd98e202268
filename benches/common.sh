# Shared by the bench scripts (sourced, not run): the prologue every script starts with, logging,
# installing missing Debian packages, knob checks, building the binaries, the temp dir and the
# cleanup of every process started, ports, starting nginx and courtesy, the CPU accounting of
# processes, waiting for a quiet machine and the reruns of disturbed runs, the awk functions their
# reports sum up repeated runs with, the test PKI, TLS origin, courtesy, client runs and path checks
# of the TLS benches, and the Squid and nginx proxies the peer comparisons run. Sets ROOT (the
# repository) when sourced; the port and process helpers expect HOST, and log expects LOG_TAG
# (bench_prologue sets it).
# shellcheck shell=bash

# The repository's root, found from this file's own place (benches/common.sh).
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# The start of a bench script, right after sourcing this file: strict mode (set -e stops the
# script at a failed command, and the ERR trap says which one, inside functions too), the sbin
# directories on PATH (nginx and squid live there), the C locale (the numbers awk and sort read
# and print), and `tag` as LOG_TAG for the log lines.
bench_prologue() {
    LOG_TAG=$1
    set -Eeuo pipefail
    trap 'printf "[%s] error: line %s: %s failed\n" "$LOG_TAG" "$LINENO" "$BASH_COMMAND" >&2' ERR
    export PATH="$PATH:/usr/sbin:/sbin"
    export LC_ALL=C
}

# Logs a progress line (stderr: stdout is the report).
log() { printf '[%s %s] %s\n' "$LOG_TAG" "$(date +%T)" "$*" >&2; }
# Logs `message` as an error and stops the script.
die() {
    log "error: $*"
    exit 1
}

# Installs (as root, with apt-get) the given commands' Debian packages of the same name that are
# missing.
install_missing() {
    local missing=() cmd
    for cmd in "$@"; do command -v "$cmd" >/dev/null || missing+=("$cmd"); done
    ((${#missing[@]})) || return 0
    ((EUID == 0)) || die "missing ${missing[*]}: install them (apt-get install -y ${missing[*]})"
    log "installing ${missing[*]}"
    apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2
}

# Dies with `message` unless every `value` is a whole number from `lo` to `hi`: every loop of a
# bench is bounded, and these caps keep a typo in the environment from making it long.
need_range() {
    local lo=$1 hi=$2 message=$3 value
    shift 3
    for value in "$@"; do
        { [[ $value =~ ^[0-9]+$ ]] && ((value >= lo && value <= hi)); } || die "$message"
    done
}

# The executable that cargo's JSON messages `json` (--message-format=json...) report for the
# target `name`: a bench's file name carries a hash, so it cannot be guessed.
cargo_exe() {
    grep -F '"reason":"compiler-artifact"' <<<"$1" | grep -F "\"name\":\"$2\"" |
        grep -o '"executable":"[^"]*"' | tail -n 1 | sed 's/^"executable":"//; s/"$//'
}

# Builds the release courtesy unless COURTESY_BIN names a binary, and sets COURTESY_BIN to it.
# Built whenever stale, not only when missing: `cargo bench` (which scripts/test runs) writes its
# own build of courtesy, without LTO, to the same path; a no-op when fresh. Dies unless it is an
# executable.
build_courtesy() {
    if [[ -z ${COURTESY_BIN:-} ]]; then
        COURTESY_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/courtesy
        log "building courtesy (release)"
        (cd "$ROOT" && cargo build --release --bin courtesy >&2) || die "cargo build failed"
    fi
    [[ -x $COURTESY_BIN ]] || die "no courtesy binary at '$COURTESY_BIN'"
}

# Builds the release courtesy and the https_load bench client, unless COURTESY_BIN and LOAD_BIN
# both name prebuilt ones, and sets each one that was empty to what was built. BUILT_HERE=1 when
# courtesy was built here (the report says which binary it measured). Dies unless both are
# executables.
build_courtesy_and_load() {
    local json
    BUILT_HERE=0
    if [[ -z $COURTESY_BIN || -z $LOAD_BIN ]]; then
        [[ -z $COURTESY_BIN ]] && BUILT_HERE=1
        log "building courtesy and the https_load bench (release)"
        json=$(cd "$ROOT" && cargo build --release --bin courtesy --bench https_load \
            --message-format=json-render-diagnostics) || die "cargo build failed"
        [[ -n $COURTESY_BIN ]] || COURTESY_BIN=$(cargo_exe "$json" courtesy)
        [[ -n $LOAD_BIN ]] || LOAD_BIN=$(cargo_exe "$json" https_load)
    fi
    [[ -x $COURTESY_BIN ]] || die "no courtesy binary at '$COURTESY_BIN'"
    [[ -x $LOAD_BIN ]] || die "no https_load binary at '$LOAD_BIN'"
}

# Builds the floor of the load benches, benches/bare_proxy.rs (a bare hyper forward proxy and
# interceptor), in release unless BARE_BIN names a prebuilt one; sets BARE_BIN. Dies unless it is
# an executable.
build_bare_proxy() {
    local json
    if [[ -z ${BARE_BIN:-} ]]; then
        log "building the bare_proxy bench (release)"
        json=$(cd "$ROOT" && cargo build --release --bench bare_proxy \
            --message-format=json-render-diagnostics) || die "cargo build failed"
        BARE_BIN=$(cargo_exe "$json" bare_proxy)
    fi
    [[ -x $BARE_BIN ]] || die "no bare_proxy binary at '$BARE_BIN'"
}

# The commit the tree is at, with "+uncommitted changes" when its source differs from it: what a
# report says it measured.
tree_rev() {
    local rev
    rev=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
    git -C "$ROOT" diff --quiet HEAD -- src Cargo.toml Cargo.lock 2>/dev/null || rev="$rev+uncommitted changes"
    echo "$rev"
}

# Checks the knobs every TLS load bench (https_load.sh, https_peers.sh) has: DURATION, REPEATS,
# THREADS, MAX_REQUESTS, NOISE_PCT, RETRY_BUDGET and QUIET_BUDGET.
need_tls_bench_knobs() {
    need_range 1 60 "DURATION must be 1..60 seconds" "$DURATION"
    need_range 1 10 "REPEATS must be 1..10" "$REPEATS"
    need_range 1 16 "THREADS must be 1..16" "$THREADS"
    need_range 1 20000000 "MAX_REQUESTS must be 1..20000000" "$MAX_REQUESTS"
    [[ $NOISE_PCT =~ ^[0-9]+$ ]] || die "NOISE_PCT must be a whole number (percent of one core)"
    need_range 0 30 "RETRY_BUDGET must be 0..30" "$RETRY_BUDGET"
    need_range 0 3600 "QUIET_BUDGET must be 0..3600 seconds" "$QUIET_BUDGET"
}

# The binaries of a TLS load bench (build_courtesy_and_load), logged, and what its report says of
# them: REV (the tree as built, with the time: others may commit while the benchmark runs),
# COURTESY_VERSION, and CLK_TCK for the CPU accounting.
tls_bench_binaries() {
    build_courtesy_and_load
    REV="$(tree_rev) at $(date -u +%H:%M) UTC"
    COURTESY_VERSION=$("$COURTESY_BIN" --version 2>/dev/null || echo 'courtesy ?')
    log "courtesy: $COURTESY_BIN"
    log "client:   $LOAD_BIN"
    CLK_TCK=$(getconf CLK_TCK)
}

# The optional second courtesy of a TLS load bench (https_load.sh, https_peers.sh): ALT_BIN, run as
# the case courtesy-alt exactly like courtesy (e.g. one built with `--features aws-lc-rs`, to set
# rustls's two crypto providers side by side in one run), named ALT_LABEL in the report. Nothing
# when ALT_BIN is empty; else dies unless it is an executable, and sets ALT_VERSION.
alt_courtesy_binary() {
    [[ -n $ALT_BIN ]] || return 0
    [[ -x $ALT_BIN ]] || die "no courtesy binary at ALT_BIN='$ALT_BIN'"
    # shellcheck disable=SC2034  # read by the scripts that source this file (the report)
    ALT_VERSION=$("$ALT_BIN" --version 2>/dev/null || echo 'courtesy ?')
    log "courtesy-alt ($ALT_LABEL): $ALT_BIN"
}

# The courtesy a TLS load bench measured, for its report: its version and which binary.
courtesy_measured() {
    if ((BUILT_HERE)); then
        echo "$COURTESY_VERSION (release build of this tree, git $REV)"
    else
        echo "$COURTESY_VERSION (prebuilt binary COURTESY_BIN=$COURTESY_BIN; this tree is at git $REV)"
    fi
}

# The version of the crate `name` in Cargo.lock.
lock_version() { awk -v n="$1" '$0 == "name = \"" n "\"" { getline; gsub(/version = |"/, ""); print; exit }' "$ROOT/Cargo.lock"; }

# Raises this shell's open-file limit to 65536 (or as far as it may go) for a bench that holds
# thousands of connections; everything it starts inherits the limit.
raise_open_files() {
    local want=65536 hard
    hard=$(ulimit -Hn)
    if [[ $hard != unlimited ]] && ((hard < want)); then
        # Raising the hard limit needs privileges; fall back to what is allowed.
        ulimit -Hn "$want" 2>/dev/null || want=$hard
    fi
    ulimit -n "$want" 2>/dev/null || ulimit -n "$hard"
}

# Makes TMP (named after `name`) and arranges for every PID in PIDS to be stopped (TERM, then KILL
# after 5 s) and TMP removed when the script exits, however it exits.
setup_tmp() {
    TMP=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
    chmod 755 "$TMP"
    PIDS=()
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# The EXIT trap of setup_tmp: stops every PID in PIDS, removes TMP, keeps the exit status.
cleanup() {
    local rc=$? pid i
    trap - EXIT INT TERM
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do
        for ((i = 0; i < 50; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$TMP"
    exit "$rc"
}

# Whether something accepts connections on `port` of HOST.
port_busy() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# Fails when any of the given ports already accepts connections.
require_free_ports() {
    local port
    for port in "$@"; do
        port_busy "$port" && die "port $HOST:$port is already in use (set the *_PORT variables)"
    done
    return 0
}

# Waits (at most 10 s) until `port` accepts connections, failing early if `pid` died.
wait_port() {
    local pid=$1 port=$2 name=$3 i
    for ((i = 0; i < 100; i++)); do
        port_busy "$port" && return 0
        kill -0 "$pid" 2>/dev/null ||
            die "$name exited at start-up (logs in $TMP): $(tail -n 5 "$TMP"/*/log* 2>/dev/null)"
        sleep 0.1
    done
    die "$name did not listen on $HOST:$port within 10 s"
}

# Starts nginx with `dir/nginx.conf` (its prefix and logs in `dir`), adds it to PIDS, sets
# NGINX_PID and waits until it listens on `port`.
start_nginx() {
    local dir=$1 port=$2 name=${3:-nginx}
    nginx -p "$dir" -e "$dir/error.log" -c "$dir/nginx.conf" >"$dir/log" 2>&1 &
    NGINX_PID=$!
    PIDS+=("$NGINX_PID")
    wait_port "$NGINX_PID" "$port" "$name"
}

# Starts courtesy (COURTESY_BIN, or the binary `bin` when given) in the background with
# `dir/courtesy.toml`, its stderr appended to `dir/log` (append mode, so that the log can be emptied
# between runs while courtesy writes), at the log level `rust_log`, or at courtesy's default
# (RUST_LOG unset) when that is empty. `$!` is its PID afterwards: the caller adds it to PIDS (not
# echoed: a command substitution would run this in a subshell).
run_courtesy() {
    local dir=$1 rust_log=$2 bin=${3:-$COURTESY_BIN}
    if [[ -n $rust_log ]]; then
        RUST_LOG=$rust_log "$bin" run --config "$dir/courtesy.toml" 2>>"$dir/log" >/dev/null &
    else
        env -u RUST_LOG "$bin" run --config "$dir/courtesy.toml" 2>>"$dir/log" >/dev/null &
    fi
}

# A courtesy.toml with its state in `dir/state`, listening on `port` of HOST (admin on port + 1),
# with pacing effectively off, so that a bench measures the proxy's own cost. `proxy` and
# `defaults` are extra lines for those two sections.
pacing_off_conf() {
    local dir=$1 port=$2 proxy=${3:-} defaults=${4:-}
    cat <<EOF
# Pacing effectively off: this measures the proxy's own cost.
[proxy]
listen = "$HOST:$port"
admin_listen = "$HOST:$((port + 1))"
state_dir = "$dir/state"
max_in_flight = 100000
EOF
    [[ -z $proxy ]] || printf '%s\n' "$proxy"
    cat <<EOF

[defaults]
rate = 1000000
burst = 1000000
concurrency = 100000
EOF
    [[ -z $defaults ]] || printf '%s\n' "$defaults"
}

# Waits (at most 5 s) until `file` (of the server `name`) exists and is not empty.
wait_file() {
    local file=$1 name=$2 i
    for ((i = 0; i < 50; i++)); do
        [[ -s $file ]] && return 0
        sleep 0.1
    done
    die "$name wrote no $file"
}

# Waits (at most 5 s) until the courtesy instance `name` with its state in `dir/state` has written
# its local CA certificate: an intercepting bench's clients must trust it.
wait_ca() { wait_file "$1/state/ca.pem" "$2"; }

# "utime stime" in clock ticks of a process (all its threads) and of its direct children.
cpu_ticks() {
    local pid=$1 user=0 sys=0 p stat
    local -a f
    for p in "$pid" $(pgrep -P "$pid" 2>/dev/null || true); do
        stat=$(cat "/proc/$p/stat" 2>/dev/null) || continue
        read -r -a f <<<"${stat##*) }"
        user=$((user + f[11]))
        sys=$((sys + f[12]))
    done
    echo "$user $sys"
}

# CPU ticks (utime+stime+cutime+cstime) of every process on the machine except this script and
# the servers it started (with their helper processes): what else ran during a run (a build, a
# test suite) and disturbed it. Processes that came and went are counted through their parent's
# cutime/cstime; a client this script started and reaped counts in this script's (skipped).
other_ticks() {
    local kids p
    kids=$(for p in "${PIDS[@]}"; do pgrep -P "$p" 2>/dev/null || true; done | tr '\n' ' ')
    # A process may exit between the glob and cat: cat then fails, which is fine here.
    { cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v skip=" $$ ${PIDS[*]} $kids " '{
        pid = $1
        sub(/^.*\) /, "")
        if (index(skip, " " pid " ") == 0) total += $12 + $13 + $14 + $15
    } END { printf "%d\n", total }'
}

# Sets OTHER_PCT to the share of one core, in %, that other processes (other_ticks) used over the
# next `tenths` tenths of a second: how busy the machine is apart from the bench. (Not echoed: in a
# command substitution its own subshells would count as other processes.)
other_pct() {
    local tenths=$1 a b
    a=$(other_ticks)
    sleep "$((tenths / 10)).$((tenths % 10))"
    b=$(other_ticks)
    OTHER_PCT=$(((b - a) * 1000 / CLK_TCK / tenths))
}

# "accepts requests" of the origin nginx so far, from its stub_status on STATUS_PORT; each status
# request counts itself.
origin_counts() {
    curl -sS --max-time 5 "http://$HOST:$STATUS_PORT/nginx_status" | awk 'NR == 3 { print $1, $3 }'
}

# Reads the counters a run is measured between, before it: COUNTS_BEFORE (origin_counts),
# OTHER_BEFORE (other_ticks), ORIGIN_BEFORE and PROXY_BEFORE (cpu_ticks of NGINX_PID and of the
# proxy `pid`; "0 0" for a run with no proxy). measure_after reads them again in reverse order, so
# that the run's own traffic stays inside the brackets.
measure_before() {
    local pid=$1
    COUNTS_BEFORE=$(origin_counts)
    OTHER_BEFORE=$(other_ticks)
    ORIGIN_BEFORE=$(cpu_ticks "$NGINX_PID")
    PROXY_BEFORE="0 0"
    if [[ -n $pid ]]; then PROXY_BEFORE=$(cpu_ticks "$pid"); fi
}

# The counters of measure_before after the run: PROXY_AFTER, ORIGIN_AFTER, OTHER_AFTER and
# COUNTS_AFTER.
measure_after() {
    local pid=$1
    PROXY_AFTER="0 0"
    if [[ -n $pid ]]; then PROXY_AFTER=$(cpu_ticks "$pid"); fi
    ORIGIN_AFTER=$(cpu_ticks "$NGINX_PID")
    OTHER_AFTER=$(other_ticks)
    COUNTS_AFTER=$(origin_counts)
}

# Runs `run...` (a command that appends a row to RUNS whose 17th field is the % of a core other
# processes used during it) and, while that is over NOISE_PCT, drops the row and runs it again
# after `pause` (a command line), at most twice and at most RETRY_BUDGET times in all: a disturbed
# run measures the other processes. Counts the reruns in RETRIES.
rerun_while_noisy() {
    local -a pause
    local try other
    read -r -a pause <<<"$1"
    shift
    for ((try = 0; try <= 2; try++)); do
        "$@"
        other=$(tail -n 1 "$RUNS" | cut -f 17)
        ((other > NOISE_PCT && try < 2 && RETRY_BUDGET > 0)) || break
        RETRY_BUDGET=$((RETRY_BUDGET - 1))
        RETRIES=$((RETRIES + 1))
        log "other processes used ${other}% of a core during that run: running it again"
        sed -i '$d' "$RUNS"
        "${pause[@]}"
    done
}

# REPEATS repeats of a cell with every case interleaved within each repeat, so that drift on the
# machine hits them alike: for each repeat and each of the space-separated `cases`, runs
# `run case args... DURATION rep` through rerun_while_noisy (pausing 3 s before a rerun).
interleaved_repeats() {
    local cases=$1 run=$2 rep case
    shift 2
    for ((rep = 1; rep <= REPEATS; rep++)); do
        for case in $cases; do
            rerun_while_noisy "sleep 3" "$run" "$case" "$@" "$DURATION" "$rep"
        done
    done
}

# Records the server just started in the background as the case `name` of a bench, listening on
# `port`: its PID in PIDS and PID_OF[name], its port in PORT_OF[name] (associative arrays the bench
# declares); waits until it listens. (Not a command substitution: that would run in a subshell and
# lose PIDS.)
started_server() {
    local name=$1 port=$2 pid=$!
    PIDS+=("$pid")
    # shellcheck disable=SC2034  # the array the sourcing bench declares and reads
    PORT_OF["$name"]=$port
    # shellcheck disable=SC2034  # the array the sourcing bench declares and reads
    PID_OF["$name"]=$pid
    wait_port "$pid" "$port" "$name"
}

# The `done` function of a wrk Lua script: one line `RESULT requests duration_us p50_us p99_us
# socket_errors http_errors` that the scripts read their runs from.
wrk_result_lua() {
    cat <<'EOF'
done = function(summary, latency, requests)
    local e = summary.errors
    io.write(string.format("RESULT %d %d %d %d %d %d\n", summary.requests, summary.duration,
        latency:percentile(50), latency:percentile(99),
        e.connect + e.read + e.write + e.timeout, e.status))
end
EOF
}

# The report's date and machine lines (CPUs, model, RAM, kernel).
report_machine() {
    local cpu_model
    cpu_model=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo)
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "- machine: $(nproc) CPUs, $cpu_model, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo) RAM, Linux $(uname -r)"
}

# awk functions for the report tables, to put before a program: add(k, v) appends a run's value to
# the values of key k, kept as "v1 v2 v3"; med, lo and hi give their median, minimum and maximum.
# run_row() takes the current row of a RUNS table whose fields 1-3 name the cell, 5-7 are req/s,
# p50 and p99, and 17 the % of a core other processes used: it adds those to the cell, keeps the
# cells in the order first seen (order[1..nkeys]), counts the rows (runs) and those over the awk
# variable noise (noisy), and returns the cell's key.
# shellcheck disable=SC2016,SC2034  # awk's fields, not the shell's; read by the benches
AWK_SAMPLES='
    function sortv(a, n,    i, j, t) {
        for (i = 2; i <= n; i++) {
            t = a[i]
            for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]
            a[j + 1] = t
        }
    }
    function med(s,    a, n) { n = split(s, a, " "); sortv(a, n); return a[int((n + 1) / 2)] }
    function lo(s,    a, n) { n = split(s, a, " "); sortv(a, n); return a[1] }
    function hi(s,    a, n) { n = split(s, a, " "); sortv(a, n); return a[n] }
    function add(k, v) { vals[k] = (k in vals) ? vals[k] " " v : v }
    function run_row(    key) {
        key = $1 SUBSEP $2 SUBSEP $3
        if (!(key in seen)) { seen[key] = 1; order[++nkeys] = key }
        add(key SUBSEP "rps", $5); add(key SUBSEP "p50", $6); add(key SUBSEP "p99", $7)
        add(key SUBSEP "other", $17)
        if ($17 + 0 > noise) noisy++
        runs++
        return key
    }
'

# The start of an nginx.conf that every bench's nginx shares: one worker in the foreground, its
# pid, log and temp files under `dir`, no access log. It ends inside `http {`: the caller adds its
# own directives and servers, and the closing brace. `connections` (default 8192) is the worker's
# connection cap; its descriptor limit is twice that.
nginx_conf_start() {
    local dir=$1 connections=${2:-8192}
    cat <<CONF
daemon off;
master_process off;
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
worker_rlimit_nofile $((connections * 2));
events { worker_connections $connections; }
http {
    access_log off;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
CONF
}

# The origin's files for a TLS bench: nginx's `dir` with www/1k and www/64k (1 KiB and 64 KiB of
# random bytes) and tmp/, all of it and the test PKI in `pki` readable by nginx's worker user.
tls_origin_files() {
    local dir=$1 pki=$2
    mkdir -p "$dir/www" "$dir/tmp"
    head -c 1024 /dev/urandom >"$dir/www/1k"
    head -c 65536 /dev/urandom >"$dir/www/64k"
    chmod -R a+rX "$dir" "$pki"
}

# An nginx server block for a config begun with nginx_conf_start: TLS on `port` of HOST with the
# origin certificate make_test_pki made in `pki`, serving the files in `root`.
tls_origin_server() {
    local port=$1 pki=$2 root=$3
    cat <<CONF
    server {
        listen $HOST:$port ssl;
        ssl_certificate $pki/origin.pem;
        ssl_certificate_key $pki/origin.key;
        ssl_protocols TLSv1.2 TLSv1.3;
        root $root;
    }
CONF
}

# An nginx server block for a config begun with nginx_conf_start: plain HTTP on `port` of HOST,
# serving the files in `root`, with its own stub_status (origin_counts reads it), kept-alive
# connections that a load run never runs out of.
static_origin_server() {
    local port=$1 root=$2
    cat <<CONF
    keepalive_timeout 300s;
    keepalive_requests 100000000;
    server {
        listen $HOST:$port;
        root $root;
        location = /nginx_status { stub_status; }
    }
CONF
}

# A test CA (ECDSA P-256, like courtesy's) made with the openssl CLI in `dir`: ca.pem and ca.key,
# with `ca_name` as its CN.
make_test_ca() {
    local dir=$1 ca_name=$2
    mkdir -p "$dir"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
        -keyout "$dir/ca.key" -out "$dir/ca.pem" -subj "/CN=$ca_name" 2>/dev/null ||
        die "openssl could not make the test CA in $dir"
}

# A server certificate `dir/name.pem` with its key `dir/name.key` (ECDSA P-256), signed by the CA
# make_test_ca made in `dir`. `subject` is its CN, `san` its subjectAltName (`IP:127.0.0.1`,
# `DNS:*.leaf.test`).
make_test_leaf() {
    local dir=$1 name=$2 subject=$3 san=$4
    {
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$dir/$name.key" \
            -out "$dir/$name.csr" -subj "/CN=$subject" 2>/dev/null &&
            printf '%s\n' "basicConstraints = critical, CA:FALSE" "keyUsage = critical, digitalSignature" \
                "extendedKeyUsage = serverAuth" "subjectAltName = $san" >"$dir/$name.ext" &&
            openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
                -CAcreateserial -days 2 -extfile "$dir/$name.ext" -out "$dir/$name.pem" 2>/dev/null
    } ||
        die "openssl could not make the certificate $dir/$name.pem"
}

# A test CA and an origin certificate it signed, in `dir`: ca.pem, origin.pem, origin.key.
# `subject` is the origin's CN, `san` its subjectAltName (see make_test_leaf).
make_test_pki() {
    local dir=$1 ca_name=$2 subject=$3 san=$4
    make_test_ca "$dir" "$ca_name"
    make_test_leaf "$dir" origin "$subject" "$san"
}

# ---- shared by the TLS benches (https_load.sh, https_peers.sh) -----------------------------------

# The nginx.conf of the TLS origin in `dir` (tls_origin_files made its files there): 1 worker, TLS
# on ORIGIN_PORT of HOST with the origin certificate of `pki`, serving www/ as
# application/octet-stream over connections kept alive as long as a run lasts, and stub_status
# (origin_counts) on plain STATUS_PORT. Its answers carry `Cache-Control: $ORIGIN_CACHE_CONTROL`
# (default no-store: nothing is stored or shared, every request goes upstream and the bench
# measures the proxy's cost, not its cache; empty: none sent). Starts it (start_nginx: NGINX_PID).
start_tls_origin() {
    local dir=$1 pki=$2 cache_control=${ORIGIN_CACHE_CONTROL-no-store}
    cat >"$dir/nginx.conf" <<EOF
$(nginx_conf_start "$dir")
    default_type application/octet-stream;
$([[ -z $cache_control ]] || echo "    add_header Cache-Control \"$cache_control\" always;")
    sendfile on;
    tcp_nodelay on;
    keepalive_timeout 300s;
    keepalive_requests 100000000;
$(tls_origin_server "$ORIGIN_PORT" "$pki" "$dir/www")
    server {
        listen $HOST:$STATUS_PORT;
        location = /nginx_status { stub_status; }
    }
}
EOF
    start_nginx "$dir" "$ORIGIN_PORT"
}

# Starts courtesy (COURTESY_BIN, or the binary `bin` when given) as `name` on `port` (admin on
# port + 1), its state in TMP/name, at the log level `rust_log` (see run_courtesy), pacing off,
# intercepting CONNECTs to ORIGIN_PORT and trusting ORIGIN_CA upstream; waits until it listens and
# has written its CA. Its PID goes to PIDS and to STARTED_PID (not echoed: a command substitution
# would run this in a subshell and lose PIDS).
start_https_courtesy() {
    local name=$1 port=$2 rust_log=$3 bin=${4:-$COURTESY_BIN} dir="$TMP/$1"
    mkdir -p "$dir"
    pacing_off_conf "$dir" "$port" "upstream_ca = \"$ORIGIN_CA\"
connect_ports = [$ORIGIN_PORT]" "max_queue = 1000000" >"$dir/courtesy.toml"
    run_courtesy "$dir" "$rust_log" "$bin"
    STARTED_PID=$!
    PIDS+=("$STARTED_PID")
    wait_port "$STARTED_PID" "$port" "$name"
    wait_ca "$dir" "$name"
}

# Checks with curl, before any run, that GET `url` answers 200 on the path of the case `name`,
# trusting only the CA file `ca`: through the forward proxy `proxy` (host:port; empty for none),
# with a Via header containing `via` in the final response (empty: not asked), and a server
# certificate issued by `ca` itself (an interceptor that passed the origin's certificate through
# would fail here). Logs what it saw.
check_tls_path() {
    local name=$1 ca=$2 proxy=$3 via=$4 url=$5 certs last issuer ca_cn seen_via
    local -a through=()
    [[ -z $proxy ]] || through=(-x "http://$proxy")
    certs=$(curl -sS --max-time 10 -D "$TMP/check.head" -o /dev/null -w '%{certs}' --cacert "$ca" \
        "${through[@]}" "$url") || die "$name: curl could not GET $url${proxy:+ through $proxy}"
    # Through a proxy the first head is the CONNECT's 200; the last one is the origin's answer.
    last=$(awk 'BEGIN { RS = "\r\n\r\n" } NF { h = $0 } END { print h }' "$TMP/check.head")
    [[ $(head -n 1 <<<"$last") == *" 200"* ]] || die "$name: expected 200, got: $last"
    seen_via=$(grep -i '^via:' <<<"$last" | tr -d '\r' || true)
    [[ -z $via || $seen_via == *"$via"* ]] || die "$name: no '$via' in the Via header: not through it? ($seen_via)"
    issuer=$(grep -m 1 '^Issuer:' <<<"$certs" || true)
    ca_cn=$(openssl x509 -noout -subject -nameopt RFC2253 -in "$ca" | sed -n 's/.*CN=\([^,]*\).*/\1/p')
    [[ -n $ca_cn && $issuer == *"CN = $ca_cn"* ]] || die "$name: the certificate was not issued by $ca ($issuer)"
    log "$name: $(head -n 1 <<<"$last" | tr -d '\r')${seen_via:+, $seen_via}, certificate ${issuer#Issuer:}"
}

# Waits (0.5 s at a time, out of QUIET_BUDGET seconds in all; QUIET_WAITED counts the steps) until
# the other processes on the machine use at most NOISE_PCT % of a core: other engineers' builds
# share these 2 cores.
QUIET_WAITED=0
wait_quiet_steps() {
    local waited=0
    while ((QUIET_BUDGET * 2 > QUIET_WAITED)); do
        other_pct 5
        ((OTHER_PCT > NOISE_PCT)) || break
        QUIET_WAITED=$((QUIET_WAITED + 1))
        waited=$((waited + 1))
    done
    ((waited == 0)) || log "waited $((waited / 2)).$((waited % 2 * 5)) s for other processes to quieten (last 0.5 s: ${OTHER_PCT}% of a core)"
}

# One bounded run of the https_load client (LOAD_BIN) for the cell `label conns case`, repeat `rep`
# (0: a warm-up, checked for errors and not recorded), `secs` seconds long, with the client
# arguments `args...` (origin, proxy, CA, path, body size, mode); this adds --conns, --duration,
# --max-requests MAX_REQUESTS and --threads THREADS. It waits for a quiet machine
# (wait_quiet_steps), reads the counters of measure_before/measure_after around the run for the
# proxy `pid` (empty for none) and appends a row to RUNS: label, conns, case, rep, req/s, p50 µs,
# p99 µs, proxy, origin and client CPU µs per request, requests, errors, connections the client
# opened, requests and new connections the origin saw, `logfile`'s "upstream response" lines
# (emptied before the run; 0 when `logfile` is empty) and the % of a core other processes used.
# Sets LAST_OPENED to the connections the client opened.
https_load_run() {
    local label=$1 conns=$2 case=$3 rep=$4 secs=$5 pid=$6 logfile=$7 out err result lines=0
    shift 7
    [[ -z $logfile ]] || : >"$logfile"
    wait_quiet_steps
    measure_before "$pid"
    out=$(timeout $((secs + 60)) "$LOAD_BIN" "$@" --conns "$conns" --duration "$secs" \
        --max-requests "$MAX_REQUESTS" --threads "$THREADS" 2>"$TMP/client.err") ||
        die "client failed for $case $label c=$conns: $(cat "$TMP/client.err")"
    measure_after "$pid"
    err=$(cat "$TMP/client.err")
    result=$(grep '^RESULT ' <<<"$out") || die "no RESULT line from the client: $out $err"
    # shellcheck disable=SC2086  # split into $1.. on purpose: RESULT line, counters (numbers)
    set -- $result $COUNTS_BEFORE $COUNTS_AFTER $PROXY_BEFORE $PROXY_AFTER $ORIGIN_BEFORE $ORIGIN_AFTER
    # $2 requests, $3 errors, $4 elapsed µs, $5 p50 µs, $6 p99 µs, $7 connections opened,
    # $8 client CPU ticks, $9/$10 origin accepts/requests before, $11/$12 after,
    # $13/$14 proxy user/sys ticks before, $15/$16 after, $17..$20 the same for the origin.
    # shellcheck disable=SC2034  # read by the script that sources this file (https_load.sh)
    LAST_OPENED=$7
    ((rep > 0)) || {
        log "warm-up $case $label c=$conns: ${err%%$'\n'*}"
        (($3 == 0)) || die "errors during the warm-up of $case $label: $err"
        return 0
    }
    [[ -z $logfile ]] || lines=$(grep -c 'upstream response' "$logfile" || true)
    awk -v OFS='\t' -v case="$case" -v label="$label" -v conns="$conns" -v rep="$rep" \
        -v n="$2" -v errs="$3" -v dur="$4" -v p50="$5" -v p99="$6" -v opened="$7" \
        -v cticks="$8" -v acc=$((${11} - $9 - 1)) -v oreq=$((${12} - ${10} - 1)) -v lines="$lines" \
        -v pticks=$((${15} + ${16} - ${13} - ${14})) -v haspid="${pid:+1}" \
        -v oticks=$((${19} + ${20} - ${17} - ${18})) -v hz="$CLK_TCK" -v xticks=$((OTHER_AFTER - OTHER_BEFORE)) \
        'BEGIN {
            rps = n / (dur / 1e6)
            pcpu = haspid ? sprintf("%.1f", pticks / hz * 1e6 / n) : "-"
            ocpu = sprintf("%.1f", oticks / hz * 1e6 / n)
            ccpu = sprintf("%.1f", cticks / hz * 1e6 / n)
            # Negative when a process whose parent does not collect its times exited: count as 0.
            other = sprintf("%.0f", (xticks > 0 ? xticks : 0) / hz * 100 / (dur / 1e6))
            print label, conns, case, rep, sprintf("%.0f", rps), p50, p99, pcpu, ocpu, ccpu, n,
                errs, opened, oreq, acc, lines, other
        }' >>"$RUNS"
    log "$(tail -n 1 "$RUNS" | awk -F'\t' '{ printf "%-4s c=%-3s %-13s rep %s: %6s req/s  p50 %7.3f ms  p99 %7.3f ms  CPU µs/req proxy %6s origin %5s client %5s  requests %s errors %s conns %s  origin saw %s req, %s new conns  log lines %s  other CPU %s%%",
        $1, $2, $3, $4, $5, $6 / 1000, $7 / 1000, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17 }')"
}

# ---- peers: Squid and an nginx proxy (load.sh, https_peers.sh) ------------------------------------

# A squid.conf for a Squid in `dir` that caches nothing, as close to the defaults as a temp dir
# allows: `http_port` is its http_port line's value, `access_log` its access_log's, `extra` more
# lines (TLS, bumping).
squid_conf() {
    local dir=$1 http_port=$2 access_log=$3 extra=${4:-}
    cat <<EOF
http_port $http_port
$extra
http_access allow localhost
http_access deny all
cache deny all
access_log $access_log
cache_store_log none
cache_log $dir/cache.log
pid_filename $dir/squid.pid
coredump_dir $dir
netdb_filename none
pinger_enable off
visible_hostname load.localhost
shutdown_lifetime 0 seconds
max_filedescriptors 16384
EOF
}

# Starts Squid in the foreground (-N: one process, its helpers its children) in the background
# with `dir/squid.conf`, its output in `dir/out.log`. `$!` is its PID afterwards (see run_courtesy).
launch_squid() {
    local dir=$1
    # Squid started as root switches to its effective user (proxy on Debian), which writes the logs.
    if id proxy >/dev/null 2>&1; then chown -R proxy: "$dir"; else chmod -R 777 "$dir"; fi
    squid -N -f "$dir/squid.conf" >"$dir/out.log" 2>&1 &
}

# The upstream and server blocks, for a config begun with nginx_conf_start, of an nginx that
# proxies everything it gets on `port` of HOST to the origin on ORIGIN_PORT the way a tuned
# reverse proxy does: HTTP/1.1 over kept-alive upstream connections, responses relayed from
# memory, a `Via: 1.1 nginx-proxy` header. `scheme` is the origin's (http, or https: re-encrypted);
# `cert` the path of a certificate and key without their .pem/.key for a TLS listener (empty: plain
# HTTP); `extra` more location directives (the upstream TLS's).
nginx_proxy_blocks() {
    local port=$1 scheme=$2 cert=$3 extra=${4:-}
    cat <<CONF
    tcp_nodelay on;
    keepalive_timeout 300s;
    keepalive_requests 100000000;
    upstream origin {
        server $HOST:$ORIGIN_PORT;
        keepalive 256;
        keepalive_requests 100000000;
    }
    server {
CONF
    if [[ -n $cert ]]; then
        cat <<CONF
        listen $HOST:$port ssl;
        ssl_certificate $cert.pem;
        ssl_certificate_key $cert.key;
        ssl_protocols TLSv1.2 TLSv1.3;
CONF
    else
        echo "        listen $HOST:$port;"
    fi
    cat <<CONF
        location / {
            proxy_pass $scheme://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host \$host;
            proxy_buffers 16 16k;
            proxy_max_temp_file_size 0;
            add_header Via "1.1 nginx-proxy";
$extra
        }
    }
CONF
}
