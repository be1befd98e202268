# Shared by benches/load.sh and benches/https_load.sh (sourced, not run): logging, installing
# missing Debian packages, the temp dir and the cleanup of every process started, ports, the CPU
# accounting of processes, and the awk functions their reports sum up repeated runs with. Expects
# HOST and LOG_TAG to be set, and `set -euo pipefail`.
# shellcheck shell=bash

log() { printf '[%s %s] %s\n' "$LOG_TAG" "$(date +%T)" "$*" >&2; }
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

# awk functions for the report tables, to put before a program: add(k, v) appends a run's value to
# the values of key k, kept as "v1 v2 v3"; med, lo and hi give their median, minimum and maximum.
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
'

# The start of an nginx.conf that every bench's nginx shares: one worker in the foreground, its
# pid, log and temp files under `dir`, no access log. It ends inside `http {`: the caller adds its
# own directives and servers, and the closing brace.
nginx_conf_start() {
    local dir=$1
    cat <<CONF
daemon off;
master_process off;
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
worker_rlimit_nofile 16384;
events { worker_connections 8192; }
http {
    access_log off;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
CONF
}

# A test CA and an origin certificate it signed (ECDSA P-256, like courtesy's leaves), made with
# the openssl CLI in `dir`: ca.pem, origin.pem, origin.key. `subject` is the origin's CN, `san`
# its subjectAltName (`IP:127.0.0.1`, `DNS:*.leaf.test`).
make_test_pki() {
    local dir=$1 ca_name=$2 subject=$3 san=$4
    mkdir -p "$dir"
    (
        cd "$dir"
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
            -keyout ca.key -out ca.pem -subj "/CN=$ca_name" 2>/dev/null
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
            -keyout origin.key -out origin.csr -subj "/CN=$subject" 2>/dev/null
        printf '%s\n' "basicConstraints = critical, CA:FALSE" "keyUsage = critical, digitalSignature" \
            "extendedKeyUsage = serverAuth" "subjectAltName = $san" >origin.ext
        openssl x509 -req -in origin.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
            -extfile origin.ext -out origin.pem 2>/dev/null
    ) || die "openssl could not make the test certificates"
}
