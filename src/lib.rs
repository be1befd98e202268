//! courtesy: a local forward HTTP(S) proxy that keeps one budget per target host and makes every
//! client's traffic fit it.
//!
//! Module map (one job each):
//!
//! | module | owns |
//! |---|---|
//! | [`config`] | TOML file → validated [`config::Config`]; host rules → [`config::HostPolicy`] |
//! | [`blocks`] | what a block page looks like: the markers, matched in one pass |
//! | [`server`] | accept loops, connection tasks, graceful shutdown; [`run`] |
//! | [`proxy`] | the hyper service: forwarding, CONNECT tunnels, hop-by-hop headers |
//! | [`response`] | locally made responses with `Proxy-Status`, and the response body type |
//! | [`resolve`] | DNS with a timeout, so DNS failures get their own `Proxy-Status` |
//! | [`policy`] | pure per-host state: token bucket, in-flight count; takes `now` |
//! | [`limiter`] | host table, per-host FIFO, depth cap, deadlines: the only place requests wait |
//! | [`tls`] | local CA, leaf certificates (cached), rustls client and server configs |
//! | [`intercept`] | inside an accepted CONNECT: sniff, terminate TLS, serve the requests |
//! | [`feedback`] | upstream answer → `Feedback`; Retry-After and RateLimit header parsing |
//! | [`robots`] | robots.txt cache and verdicts (the fetch itself is the proxy's) |
//! | [`alerts`] | the block webhook |
//! | [`cache`] | the on-disk response store (`cache = "revalidate" \| "dev"`) |
//! | [`metrics`] | Prometheus metrics, host label bounded |
//! | [`state`] | what survives a restart: cooldowns, pauses, overrides, learned rates |
//! | [`heap`] | freed memory back to the OS after a large sweep |
//! | [`log_writer`] | log lines to stderr in batches, off the request path |
//! | [`admin`] | the admin listener: metrics, host API, overrides, reload, dashboard, CA |
//!
//! The binary (`main.rs`) parses the CLI, sets up logging, loads the config, binds and calls [`run`].

pub mod admin;
pub mod alerts;
pub mod blocks;
pub mod body;
pub mod cache;
pub mod config;
pub mod connections;
pub mod feedback;
pub mod heap;
pub mod limiter;
pub mod locks;
pub mod log_writer;
pub mod metrics;
pub mod policy;
pub mod proxy;
pub mod reload;
pub mod resolve;
pub mod response;
pub mod robots;
pub mod server;
pub mod state;
pub mod status;
mod tasks;
pub mod tls;

pub use server::{run, Listeners};
