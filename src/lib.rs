//! courtesy: a local forward HTTP(S) proxy that keeps one budget per target host and makes every
//! client's traffic fit it.
//!
//! `docs/ARCHITECTURE.md` in the repository describes the politeness invariants (the numbers that
//! comments cite), the request's path function by function, and the conventions. The module map:
//!
//! | module | owns |
//! |---|---|
//! | `server` | `run`: build the shared parts, accept on both ports, shut down gracefully |
//! | `connections` | the HTTP server settings and one graceful shutdown that every connection joins |
//! | `gate` | who gets a connection: `allow_clients` at accept, caps per client and in total, the first byte's timeout, the open file limit, upstream connection slots |
//! | `tasks` | beside serving: the state saver, the idle-host sweeper, the shared store's heartbeat and hints, SIGHUP |
//! | `reload` | re-reading the config file and putting it in force |
//! | [`config`] | TOML file → validated [`config::Config`]; host rules → [`config::HostPolicy`]; the config in force |
//! | [`proxy`] | the proxy service: forwarding, the paced send, CONNECT, robots.txt, the response store's use |
//! | [`keys`] | which budget a request spends: `host:port`, its registrable domain or its address (`key`) |
//! | [`jobs`] | who is asking: the job named by the proxy URL's username, its token, its quota window and counts |
//! | [`limiter`] | the host table, per-host queue fair between jobs (`lanes`), the dispatcher, the budget seam (local or shared), the global ceiling, report-only hosts: the only place requests wait |
//! | `shared` | the shared budget's store (Redis): the scripts, the hints, the heartbeat, fallback |
//! | [`policy`] | pure per-host pacing state: token bucket, adaptive rate (AIMD or the learned limit), cooldowns, blocks; takes `now` |
//! | `feedback` | upstream answer → `Feedback`; Retry-After and RateLimit header parsing |
//! | `blocks` | what a block page looks like: markers, the body scan, block redirects |
//! | `body` | the body of every response courtesy sends, holding the request's permit while it streams |
//! | `response` | locally made responses with `Proxy-Status` (RFC 9209) |
//! | `resolve` | DNS with a timeout, so DNS failures get their own `Proxy-Status`; `hosts_file`; the addresses `ip` keys were made from, held for their TTLs; host spellings that are addresses; the destinations never dialed (own listeners, `deny_destinations`) and the connector that keeps to them |
//! | `parent` | leaving through a parent proxy (`upstream_proxy`): HTTP CONNECT, SOCKS5, the pooled client's connector, a parent's errors |
//! | [`tls`] | local CA, leaf certificates (cached), rustls client and server configs |
//! | `robots` | robots.txt rules, cache and verdicts (the fetch itself is the proxy's) |
//! | `cache` | the on-disk response store (`cache = "revalidate" \| "dev"`) |
//! | `alerts` | the block webhook |
//! | `telemetry` | traces of every request over OpenTelemetry (OTLP/HTTP), off unless `[telemetry] otlp_endpoint` is set |
//! | `metrics` | Prometheus metrics, host label bounded |
//! | `state` | what survives a restart: cooldowns, pauses, overrides, learned rates |
//! | `admin` | the admin listener: metrics, host API, overrides, reload, dashboard, CA |
//! | `views` | the typed JSON of the host table, shared by the admin API, the dashboard and `status` |
//! | `explain` | a host's state in words (`explain` in `/hosts`): what its next request waits for, until when |
//! | [`client_env`] | `courtesy env`: the shell lines that point a crawler at courtesy |
//! | [`status`] | `courtesy status`: the host table of a running instance |
//! | [`log_writer`] | log lines to stderr in batches, off the request path |
//! | `files` | files written atomically: temporary file, sync, rename |
//! | `locks` | poison-tolerant locking, in one place |
//! | `heap` | freed memory back to the OS after a large sweep |
//! | `untrusted_input` | (tests) property tests of every parser of untrusted input |
//! | `scratch` | (tests) scratch directories for unit tests |
//!
//! The binary (`main.rs`) parses the CLI, sets up logging, loads the config, binds and calls `run`.

mod admin;
pub mod budget;
pub mod cli;
pub mod config;
mod front;
mod observe;
pub mod pacing;
pub mod proxy;
mod serve;
mod store;
#[cfg(test)]
mod untrusted_input;
pub mod upstream;
pub mod util;
pub mod wire;

// The paths tests, benches and the binary use.
pub use budget::{jobs, keys, limiter};
pub use cli::{client_env, status};
pub use pacing::policy;
pub use serve::server::{run, Listeners};
pub use upstream::tls;
pub use util::log_writer;
pub use wire::host_name;
