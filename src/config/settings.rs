//! Settings of the process rather than of a host: `[proxy]`, `[admin]`, `[alerts]`,
//! `[telemetry]` and `[shared]`, each key written once with its doc, default and range (see `keys`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;

use toml::Spanned;

use super::key_tables::host::Parent;
use super::key_tables::keys;
use super::key_tables::kinds::{Count, Flag, Maybe, Mebibytes, Millis, Number, Seconds, Word};
use super::key_tables::process::{
    Address, ExistingFile, KeyPrefix, Networks, Path, Ports, StoreUrl, Token, Webhook,
};
use super::{ClientAuth, Route};
use crate::wire::hosts_file::StaticHosts;

keys! {
    /// Settings of the proxy process itself (`[proxy]`).
    pub struct ProxySettings in ProxySettings as KEYS {
        /// Where crawlers connect (set HTTP_PROXY / HTTPS_PROXY to http://<this>).
        listen: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 3128)), from listen: String, Address;
        /// The admin listener: the dashboard, /metrics, the host API, operator actions, reload
        /// and the CA certificate. Never the proxy port.
        admin_listen: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 3129)),
            from admin_listen: String, Address;
        /// Clients allowed to use courtesy, as CIDR networks or single IPs; empty: loopback only.
        ///
        /// Required (courtesy refuses to start without it) when listen or admin_listen is not a
        /// loopback address: courtesy is never an open proxy. When set, it replaces the loopback
        /// default, so list "127.0.0.0/8" too if local clients should keep access. A client
        /// outside it is closed at accept, before a byte is read (no answer at all).
        allow_clients: Vec<IpNet> = Vec::new(), from allow_clients: Vec<Spanned<String>>, Networks;
        /// What courtesy does with the credentials of a client's proxy URL: `"none"` (ignored),
        /// `"optional"` (a username names the job) or `"required"` (407 without a job's).
        ///
        ///   "none"     - every request is job "anonymous"
        ///   "optional" - a username names the job, its token checked when the [[job]] has one;
        ///                no credentials: job "anonymous"
        ///   "required" - every request names a [[job]] with its token, else 407
        /// (Proxy-Authenticate: Basic realm="courtesy"). Credentials never reach the origin nor a
        /// parent proxy. See docs/teams.md.
        client_auth: ClientAuth = ClientAuth::Optional, from client_auth: String, Word;
        /// Client connections open at once on the proxy listener; beyond it a new connection gets
        /// a short 503 (connection_limit_reached) and is closed. Unset: sized from the open file
        /// limit.
        ///
        /// courtesy raises its soft RLIMIT_NOFILE to the hard limit at start and logs both; unset,
        /// this is half the descriptors left beside the admin listener's (each client connection
        /// may hold an upstream one too), at most 16384, so that a crawler never meets it before
        /// the machine does. A value set here is lowered at start to fit the same budget. At the
        /// cap, the kept-alive connection idle longest is closed to make room; a fresh one, or
        /// one a request is arriving on, never is.
        max_connections: Option<usize> = None,
            from max_connections: i64, Maybe(Count { min: 1, max: 1_000_000 }), example "4096";
        /// Client connections open at once from one address, on the proxy listener. Unset: all
        /// of max_connections when the proxy listens on loopback (a sidecar: every client is the
        /// crawler's own), else 256 (a team's proxy: one client's share).
        max_connections_per_client: Option<usize> = None,
            from max_connections_per_client: i64, Maybe(Count { min: 1, max: 1_000_000 }),
            example "256";
        /// Upstream connections open at once, to all hosts and through every parent together,
        /// idle pooled ones included.
        ///
        /// Idle ones close after 90 s, or sooner when the table is full: a new connection then
        /// takes the slot of the pooled one idle longest (never of one carrying a request). A
        /// request that finds every connection busy for connect_timeout_seconds gets 503
        /// connection_limit_reached; it is courtesy's own limit, so the host gets no backoff and
        /// no rate cut (nor for courtesy running out of file descriptors: 503
        /// proxy_internal_error). Lowered at start to fit the open file limit.
        max_upstream_connections: usize = 8192,
            from max_upstream_connections: i64, Count { min: 1, max: 1_000_000 };
        /// Upstream connections that WebSockets and blind CONNECT tunnels may hold at once, out
        /// of max_upstream_connections. Unset: half of it.
        ///
        /// A socket or a blind tunnel holds its upstream connection for its whole life; the rest
        /// of the table stays for plain requests, which always find room. A socket or tunnel
        /// beyond it is refused: a handshake gets 503 (connection_limit_reached) with
        /// Retry-After, a blind tunnel is closed. Read at start (a reload keeps it).
        max_upstream_sockets: Option<usize> = None,
            from max_upstream_sockets: i64, Maybe(Count { min: 1, max: 1_000_000 }),
            example "4096";
        /// WebSockets open at once from one client (an IPv6 client by its /64); beyond it a
        /// handshake gets 503 (connection_limit_reached) with Retry-After.
        ///
        /// A WebSocket opened on an HTTP/2 stream (extended CONNECT) also counts as one of the
        /// client's connections (max_connections_per_client), as one opened by HTTP/1.1 does.
        max_websockets_per_client: usize = 64,
            from max_websockets_per_client: i64, Count { min: 1, max: 1_000_000 };
        /// WebSockets open at once to one host (its budget), from all clients together; beyond it
        /// a handshake gets 503 (connection_limit_reached) with Retry-After.
        max_websockets_per_host: usize = 32,
            from max_websockets_per_host: i64, Count { min: 1, max: 1_000_000 };
        /// How long a WebSocket or a blind CONNECT tunnel may carry no byte either way before
        /// courtesy closes it (HAProxy's timeout tunnel).
        ///
        /// A WebSocket's own pings count as bytes, so a live socket with pings more often than
        /// this is never cut.
        socket_idle_timeout: Duration = Duration::from_secs(300),
            from socket_idle_timeout_seconds: f64, Seconds { min: 0.1, max: 86400.0 };
        /// Requests (HTTP/2 streams) one intercepted HTTP/2 connection inside a CONNECT tunnel may
        /// have open at once (SETTINGS_MAX_CONCURRENT_STREAMS; hyper's default is 200).
        ///
        /// Each stream in flight also counts as one of the client's connections
        /// (max_connections_per_client, max_connections), so a client cannot carry more than its
        /// share on one connection. A session with no stream open for header_timeout_seconds is
        /// closed with a GOAWAY.
        tunnel_max_streams: usize = 100,
            from tunnel_max_streams: i64, Count { min: 1, max: 10_000 };
        /// The longest a client may take no byte of a response (or of a tunnel's or a
        /// WebSocket's bytes) that courtesy is sending it; then its connection is closed.
        ///
        /// Like nginx's send_timeout: measured between two writes, so a slow reader that keeps
        /// reading is never cut. A client that stops reading would otherwise hold its host's
        /// concurrency slot (and one of max_in_flight) for ever; the cut frees them at once, is
        /// counted as the client's (courtesy_client_send_timeouts_total) and is never reported to
        /// the host as slowness.
        send_timeout: Duration = Duration::from_secs(60),
            from send_timeout_seconds: f64, Seconds { min: 0.1, max: 86400.0 };
        /// How long a client may take to send its first byte after connecting, and then each
        /// request's whole head, on both listeners and inside CONNECT tunnels; a connection that
        /// does not is closed.
        ///
        /// It is also how long a connection inside a tunnel may stay idle between requests
        /// (HTTP/1.1 and HTTP/2 alike: an HTTP/2 session with no stream open that long gets a
        /// GOAWAY), and how long a tunnel may take to send its first bytes.
        header_timeout: Duration = Duration::from_secs(30),
            from header_timeout_seconds: f64, Seconds { min: 0.1, max: 3600.0 };
        /// The largest request head (request line and headers) a client may send, on both
        /// listeners and inside intercepted tunnels; a larger one is answered 431 with
        /// Proxy-Status and the connection closed.
        ///
        /// It also bounds the memory unfinished heads can hold: at most max_connections of them,
        /// each at most this size (64 KiB, as Squid's request_header_max_size, × 4096
        /// connections = 256 MiB at the very worst; × 16384, the most an unset max_connections
        /// is sized to, 1 GiB). Real crawlers send 1-4 KiB; large cookies reach 16 KiB.
        max_request_head_bytes: usize = 65536,
            from max_request_head_bytes: i64, Count { min: 8192, max: 16_777_216 };
        /// Where state that outlives a run is kept (the CA, cooldowns, the response store).
        /// Default: $XDG_STATE_HOME/courtesy, else ~/.local/state/courtesy.
        state_dir: PathBuf = default_state_dir(), from state_dir: String, Path,
            example "\"~/.local/state/courtesy\"";
        /// Upstream DNS + TCP connect timeout; a miss answers 504 (dns_timeout /
        /// connection_timeout).
        connect_timeout: Duration = Duration::from_secs(10),
            from connect_timeout_seconds: f64, Seconds { min: 0.001, max: 3600.0 };
        /// Time from sending a request upstream to its response headers; a miss answers 504
        /// (http_response_timeout).
        response_timeout: Duration = Duration::from_secs(60),
            from response_timeout_seconds: f64, Seconds { min: 0.001, max: 86400.0 };
        /// Whether every answer to a client carries a Server-Timing header with how long
        /// courtesy held the request and why (and how long the origin took).
        ///
        /// Server-Timing: courtesy-wait;dur=812.4;desc="rate", courtesy-upstream;dur=95.0
        /// (milliseconds). The reason is one word: none, rate, concurrency, cooldown, block,
        /// paused, crawl_delay, global_cap, byte_budget, shared_store, job_share or queue; see
        /// docs/why-did-it-wait.md. Added after an origin's own Server-Timing, never sent
        /// upstream; local answers (429, 503, 502...) carry courtesy-wait too.
        server_timing: bool = true, from server_timing: bool, Flag;
        /// Requests in flight to all hosts together (a global cap on top of each host's
        /// concurrency).
        max_in_flight: usize = 512, from max_in_flight: i64, Count { min: 1, max: 1_000_000 };
        /// A ceiling on requests per second to all hosts together (this crawler's own egress), on
        /// top of every host's budget; unset: no ceiling.
        ///
        /// Waiting for it is FIFO across hosts and costs no CPU; it is per instance, also with
        /// [shared]. Setting or lifting it needs a restart; a new value applies at a reload.
        global_rate: Option<f64> = None,
            from global_rate: f64, Maybe(Number { min: 0.001, max: 1_000_000.0, unit: "/s" }),
            example "50.0";
        /// Requests that may leave back to back under global_rate after a quiet spell.
        global_burst: u32 = 1, from global_burst: i64, Count { min: 1, max: 1_000_000 };
        /// A ceiling on response bytes per second from all hosts together (this crawler's own
        /// downlink), on top of every host's max_bytes_per_second; unset: no ceiling.
        ///
        /// Like a host's byte budget: bytes are charged as responses stream, and while all
        /// hosts together are in debt, no host's next turn starts until it is paid back (one
        /// second's worth may be saved up). Per instance, also with [shared]. A new value
        /// applies at a reload; setting or lifting it needs a restart.
        global_bytes_per_second: Option<u64> = None,
            from global_bytes_per_second: i64, Maybe(Count { min: 1, max: 1 << 40 }),
            example "10485760";
        /// At SIGINT/SIGTERM, queued requests get 503 at once; requests in flight get this long
        /// to finish.
        shutdown_grace: Duration = Duration::from_secs(10),
            from shutdown_grace_seconds: f64, Seconds { min: 0.0, max: 3600.0 };
        /// A host with nothing queued or in flight, idle this long and with a full bucket, is
        /// forgotten (it comes back exactly as a fresh host would).
        ///
        /// Idle upstream connections are closed after 90 s, or after this when it is shorter.
        idle_host: Duration = Duration::from_secs(600),
            from idle_host_seconds: f64, Seconds { min: 1.0, max: 30.0 * 86400.0 };
        /// The size bound of the response store under state_dir/cache (see `cache`), least
        /// recently used out.
        cache_max_bytes: u64 = 512 * 1024 * 1024,
            from cache_max_mb: i64, Mebibytes(Count { min: 1, max: 1024 * 1024 });
        /// Ports a blind tunnel (https = "tunnel") may open to; others get 403
        /// (http_request_denied).
        ///
        /// In intercept mode a CONNECT to any port is served, since what comes inside is HTTP or
        /// TLS that courtesy paces request by request (anything else is refused).
        connect_ports: Vec<u16> = vec![443, 80], from connect_ports: Vec<Spanned<i64>>, Ports;
        /// A PEM file of extra roots to trust for upstream TLS (a company CA, a test CA), on top
        /// of the public webpki roots.
        ///
        /// Upstream certificates are always verified; a failure answers 502
        /// (tls_certificate_error) and no request is sent.
        upstream_ca: Option<PathBuf> = None, from upstream_ca: String, Maybe(ExistingFile),
            example "\"/etc/courtesy/private-roots.pem\"";
        /// A file in /etc/hosts format whose names courtesy resolves itself before asking DNS,
        /// like Squid's hosts_file or curl's --resolve (restart to change).
        ///
        /// "address name name ..." per line: a staging site under its real name. Read at start
        /// (a bad line fails start-up with its line number).
        hosts_file: Option<PathBuf> = None, from hosts_file: String, Maybe(Path),
            example "\"/etc/courtesy/hosts\"";
        /// A parent proxy every request leaves through (a company proxy, a proxy pool);
        /// "direct": none. A [[host]] rule may say otherwise for its hosts.
        ///
        /// Pacing, feedback and interception stay keyed by the target host.
        ///   "http://user:pass@host:port"  http:// targets as absolute-form requests, https://
        ///                                 and tunnels through CONNECT (TLS to the target end to
        ///                                 end); the port is required; the credentials go as
        ///                                 Proxy-Authorization: Basic.
        ///   "socks5://user:pass@host:port"  SOCKS5 (RFC 1928/1929); courtesy resolves the name.
        ///   "socks5h://user:pass@host:port" SOCKS5; the parent resolves the name. Port: 1080.
        /// User and password are optional and percent-decoded (%40 for @); they are never logged
        /// or shown (user:*** at most). The parent's failures answer 502/504 with a Proxy-Status
        /// naming it and do not count against the target. Changes at a reload.
        upstream_proxy: Route = Route::Direct, from upstream_proxy: String, Parent;
        /// Networks courtesy never connects a client to, as CIDR networks or single IPs, judged
        /// on every address the target resolves to (restart to change).
        ///
        /// Never judged on the name's spelling, so DNS rebinding and `127.1` cannot pass; for
        /// plain requests, CONNECT, blind tunnels and robots.txt fetches: 403 with Proxy-Status:
        /// courtesy; error=destination_ip_prohibited, nothing dialed. A name with any address in
        /// the list is refused. An IPv6 address with an IPv4 address inside (NAT64 64:ff9b::/96
        /// and 64:ff9b:1::/48, 6to4 2002::/16, ::a.b.c.d) is judged as that IPv4 address too.
        /// Empty: none (a machine's own crawler), and a warning when listen is not on loopback.
        /// A shared proxy denies this machine, link-local (cloud metadata), the private ranges
        /// and those prefixes; see config/team.toml.
        deny_destinations: Vec<IpNet> = Vec::new(),
            from deny_destinations: Vec<Spanned<String>>, Networks;
        /// Networks inside deny_destinations that are open all the same (the team's staging
        /// subnet).
        allow_destinations: Vec<IpNet> = Vec::new(),
            from allow_destinations: Vec<Spanned<String>>, Networks;
    }
    also {
        /// What `hosts_file` says, read when the config was.
        static_hosts: Arc<StaticHosts> = Arc::default();
    }
}

/// `$XDG_STATE_HOME/courtesy`, else `~/.local/state/courtesy`, else a folder in the working directory.
fn default_state_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("courtesy");
    }
    if let Some(home) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(home).join(".local/state/courtesy");
    }
    PathBuf::from(".courtesy-state")
}

keys! {
    /// Where courtesy tells a human that a host blocked it (`[alerts]`).
    pub struct AlertSettings in AlertSettings as KEYS {
        /// A URL that receives one JSON POST when a host is blocked (soft or hard block).
        ///
        /// {"event": "host_blocked", "host", "cause", "detail", "pause_seconds", "until_unix_ms",
        /// "courtesy"}. Sent off the request path, never retried in a loop.
        webhook: Option<http::Uri> = None, from webhook: String, Maybe(Webhook),
            example "\"https://hooks.example.com/courtesy\"";
        /// How long one POST may take; it is never retried in a loop.
        webhook_timeout: Duration = Duration::from_secs(5),
            from webhook_timeout_seconds: f64, Seconds { min: 0.1, max: 60.0 };
    }
}

keys! {
    /// Traces of every request over OpenTelemetry (`[telemetry]`): off unless otlp_endpoint is
    /// set; see docs/why-did-it-wait.md.
    pub struct TelemetrySettings in TelemetrySettings as KEYS {
        /// An OTLP/HTTP receiver (the OpenTelemetry Collector, Jaeger, Tempo...): spans go there as
        /// protobuf, POST <this>/v1/traces; unset: no traces.
        ///
        /// One span per request (courtesy.request) with children for its waits (with the
        /// reason), the robots.txt check, each upstream exchange and the shared store's round
        /// trip; a client's W3C traceparent is continued, and passed to the origin only when the
        /// client sent one. Spans are batched and sent off the request path; a collector that is
        /// down costs a log line now and then, never a wait (spans beyond 2048 queued are
        /// dropped). A reload does not turn traces on or off (restart).
        otlp_endpoint: Option<http::Uri> = None, from otlp_endpoint: String, Maybe(Webhook),
            example "\"http://127.0.0.1:4318\"";
        /// How long one export to the receiver may take, retries included.
        timeout: Duration = Duration::from_secs(10),
            from timeout_seconds: f64, Seconds { min: 0.1, max: 300.0 };
    }
}

keys! {
    /// Settings of the admin listener (`[admin]`).
    pub struct AdminSettings in AdminSettings as KEYS {
        /// Bearer token required on every admin request when set; required when [proxy]
        /// admin_listen is not a loopback address.
        ///
        /// `courtesy status` reads it from here or from $COURTESY_ADMIN_TOKEN.
        token: Option<String> = None, from token: String, Maybe(Token),
            example "\"change-me-to-a-long-random-string\"";
        /// Hosts that get their own `host` label in /metrics; the rest are summed as
        /// host="other".
        ///
        /// A forgotten (idle) host's series are dropped and its slot goes to the next host.
        metrics_max_hosts: usize = 1000,
            from metrics_max_hosts: i64, Count { min: 0, max: 1_000_000 };
        /// Connections open at once on the admin listener, counted apart from the proxy's so
        /// that a flood there never starves /healthz.
        ///
        /// Beyond it a short 503 (connection_limit_reached) and a close.
        max_connections: usize = 64, from max_connections: i64, Count { min: 1, max: 100_000 };
        /// Admin connections open at once from one address.
        max_connections_per_client: usize = 16,
            from max_connections_per_client: i64, Count { min: 1, max: 100_000 };
    }
}

keys! {
    /// Settings of the shared budget (`[shared]`): several instances on one Redis (or Valkey)
    /// keep one budget per host, as if they were one courtesy: rate and burst, concurrency,
    /// every cooldown, the learned rate, Crawl-delay caps and operator actions are shared.
    /// Without it each instance's budgets are its own.
    pub struct SharedSettings in SharedSettings as KEYS {
        /// The store's URL (required): `redis://` or `rediss://` (TLS through rustls) for one
        /// server, `redis+cluster://h1:p1,h2:p2,…` for a Redis Cluster,
        /// `redis+sentinel://s1:p1,…/<master>` for a master found through Sentinel.
        ///
        /// A password goes in the URL (redis://:secret@host:6379/0) and is never logged or
        /// shown. A plain redis:// to a cluster node is refused at start. Under Sentinel the
        /// password in the URL is the master's: redis+sentinel://s1:26379,s2:26379/<name>[/<db>].
        /// rediss+cluster:// and rediss+sentinel:// with TLS.
        redis_url: String = String::new(), from redis_url: String, StoreUrl,
            example "\"redis://127.0.0.1:6379/0\"";
        /// A file that holds the store's password (a mounted Kubernetes Secret, a compose
        /// secret, systemd's LoadCredential), so that the config holds none; it replaces any
        /// password in redis_url, read at start.
        ///
        /// One trailing newline is ignored. With a user in redis_url (`redis://courtesy@host`),
        /// it is that ACL user's password; under Sentinel, the master's.
        password_file: Option<PathBuf> = None, from password_file: String, Maybe(Path),
            example "\"/run/secrets/redis-password\"";
        /// Instances with the same redis_url and key_prefix share budgets.
        key_prefix: String = "courtesy".into(), from key_prefix: String, KeyPrefix;
        /// How many instances share the budget: while the store cannot be reached, each keeps
        /// 1/instances of every budget; unset: the most live instances seen recently.
        ///
        /// Each keeps 1/instances of every host's rate, burst and concurrency (at least 1) and
        /// every cooldown it knows. Unset: the most live instances the store counted in the last
        /// 10 minutes (1 if it was never reached, so set it when instances may start while the
        /// store is down).
        instances: Option<u32> = None, from instances: i64, Maybe(Count { min: 1, max: 10_000 }),
            example "4";
        /// A round trip to the store slower than this switches this instance to its share; it
        /// rejoins (without a burst) within about a second of the store answering again.
        timeout: Duration = Duration::from_millis(250),
            from timeout_ms: i64, Millis(Count { min: 1, max: 60_000 });
        /// How long a concurrency slot outlives an instance that died holding it; live
        /// instances renew their slots while their requests last.
        lease: Duration = Duration::from_secs(30),
            from lease_seconds: f64, Seconds { min: 1.0, max: 86_400.0 };
        /// With a TLS URL, the PEM file of the CA(s) that sign the store's certificate; unset,
        /// the system's roots (and $SSL_CERT_FILE) are trusted.
        ///
        /// A certificate that is not trusted keeps the instance in fallback, with a warning.
        ca_file: Option<PathBuf> = None, from ca_file: String, Maybe(Path),
            example "\"/etc/courtesy/redis-ca.pem\"";
        /// With a TLS URL and a store that asks for a client certificate (--tls-auth-clients
        /// yes): this instance's certificate, PEM; with key_file, both or neither.
        cert_file: Option<PathBuf> = None, from cert_file: String, Maybe(Path),
            example "\"/etc/courtesy/redis-client.pem\"";
        /// The private key of cert_file, PEM.
        key_file: Option<PathBuf> = None, from key_file: String, Maybe(Path),
            example "\"/etc/courtesy/redis-client-key.pem\"";
        /// Whether /readyz answers 200 while this instance is on its fallback share (the
        /// "budget" field says so), or 503 so that a load balancer sends to the instances on the
        /// shared budget.
        ready_in_fallback: bool = true, from ready_in_fallback: bool, Flag;
    }
}

impl SharedSettings {
    /// The settings for `redis_url` with every other key at its default.
    pub fn new(redis_url: &str) -> Self {
        SharedSettings {
            redis_url: redis_url.to_string(),
            ..SharedSettings::default()
        }
    }

    /// The CA and client certificate files, read for the redis crate; `None` when none is set.
    pub(crate) fn tls_certificates(&self) -> Result<Option<redis::TlsCertificates>, String> {
        let read = |key: &str, path: &PathBuf| {
            std::fs::read(path).map_err(|e| format!("[shared] {key} {}: {e}", path.display()))
        };
        let root_cert = match &self.ca_file {
            Some(path) => Some(read("ca_file", path)?),
            None => None,
        };
        let client_tls = match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
                client_cert: read("cert_file", cert)?,
                client_key: read("key_file", key)?,
            }),
            _ => None,
        };
        if root_cert.is_none() && client_tls.is_none() {
            return Ok(None);
        }
        Ok(Some(redis::TlsCertificates {
            client_tls,
            root_cert,
        }))
    }

    /// `redis_url` with the password of `password_file` in its userinfo (percent-encoded), or as
    /// it is without one. The error names the file, never the password.
    pub(crate) fn url_with_password(&self) -> Result<String, String> {
        let Some(path) = &self.password_file else {
            return Ok(self.redis_url.clone());
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("[shared] password_file {}: {e}", path.display()))?;
        let password = text.strip_suffix('\n').unwrap_or(&text);
        let password = password.strip_suffix('\r').unwrap_or(password);
        if password.is_empty() {
            return Err(format!(
                "[shared] password_file {} is empty",
                path.display()
            ));
        }
        let encoded: String = password
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                    char::from(b).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        let Some((scheme, rest)) = self.redis_url.split_once("://") else {
            return Ok(self.redis_url.clone());
        };
        // The userinfo comes once, before the hosts, and ends at the last '@'.
        let (user, hosts) = match rest.rsplit_once('@') {
            Some((userinfo, hosts)) => (userinfo.split(':').next().unwrap_or(""), hosts),
            None => ("", rest),
        };
        Ok(format!("{scheme}://{user}:{encoded}@{hosts}"))
    }

    /// The URL with any user and password replaced by `***`, for logs and pages; for every form
    /// (one server, cluster seeds, sentinels), whose userinfo comes once, before the hosts.
    pub fn redacted_url(&self) -> String {
        super::redis_url::redacted(&self.redis_url)
    }
}

#[cfg(test)]
mod tests {
    use super::SharedSettings;

    #[test]
    fn a_password_file_fills_the_urls_password_percent_encoded() {
        let dir = crate::util::scratch::dir("password-file");
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("password");
        std::fs::write(&file, "p@ss:w/rd\n").unwrap();
        for (url, with) in [
            ("redis://h:6379/0", "redis://:p%40ss%3Aw%2Frd@h:6379/0"),
            ("redis://:old@h:6379/0", "redis://:p%40ss%3Aw%2Frd@h:6379/0"),
            (
                "rediss://courtesy@h:6380",
                "rediss://courtesy:p%40ss%3Aw%2Frd@h:6380",
            ),
            (
                "redis+sentinel://s1:26379,s2:26379/main",
                "redis+sentinel://:p%40ss%3Aw%2Frd@s1:26379,s2:26379/main",
            ),
        ] {
            let settings = SharedSettings {
                password_file: Some(file.clone()),
                ..SharedSettings::new(url)
            };
            assert_eq!(settings.url_with_password().unwrap(), with, "{url}");
            assert!(!settings.redacted_url().contains("p@ss"));
        }
        assert_eq!(
            SharedSettings::new("redis://:x@h/0")
                .url_with_password()
                .unwrap(),
            "redis://:x@h/0"
        );
        let missing = SharedSettings {
            password_file: Some(dir.join("none")),
            ..SharedSettings::new("redis://h/0")
        };
        let err = missing.url_with_password().unwrap_err();
        assert!(
            err.contains("password_file") && err.contains("none"),
            "{err}"
        );
    }

    #[test]
    fn redacted_urls_hide_the_password_of_every_form() {
        for (url, shown) in [
            ("redis://:secret@h:6379/0", "redis://***@h:6379/0"),
            ("rediss://user:secret@h:6380", "rediss://***@h:6380"),
            (
                "redis+cluster://:secret@h1:7000,h2:7001",
                "redis+cluster://***@h1:7000,h2:7001",
            ),
            (
                "rediss+sentinel://u:s3cr@t@s1:26379,s2:26379/mymaster/2",
                "rediss+sentinel://***@s1:26379,s2:26379/mymaster/2",
            ),
            ("redis+sentinel://s1,s2/m", "redis+sentinel://s1,s2/m"),
        ] {
            let redacted = SharedSettings::new(url).redacted_url();
            assert_eq!(redacted, shown);
            assert!(!redacted.contains("secret") && !redacted.contains("s3cr"));
        }
    }
}
