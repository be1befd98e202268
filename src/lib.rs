//! courtesy: a local forward HTTP(S) proxy that keeps one budget per target host and makes every
//! client's traffic fit it.
//!
//! `docs/ARCHITECTURE.md` in the repository describes the politeness invariants (the numbers that
//! comments cite), the request's path function by function, and the conventions. Each folder of
//! `src/` is one layer, and a layer imports only from the layers above it in this table (checked
//! by `tests/layers.rs`, which also checks that this table and ARCHITECTURE's are one list).
//!
//! The layers, bottom first:
//!
//! | layer | holds |
//! |---|---|
//! | `util` | helpers that know nothing of proxies: atomic files, poison-tolerant locks, memory release, batched log lines, URLs shown without their secrets |
//! | `wire` | how a host is spelled: the canonical name, address literals, the `host:port` key, the hosts file; RFC 9209's error types; the URL scheme (`http`, `https`); HTTP Message Signatures and the Ed25519 key that makes them |
//! | `config` | TOML file → validated [`config::Config`]; host rules → [`config::HostPolicy`]; block markers; the store's URL read; the config in force |
//! | `upstream` | reaching an origin: DNS with a timeout and the destinations never dialed, parent proxies, TLS (local CA, leaves, client config) |
//! | `pacing` | per-host pacing, **pure** (`policy`: token bucket, adaptive rate, cooldowns, blocks; takes `now`), answers → feedback, block pages, stated preferences; and two caches the proxy shares, not pure: robots.txt rules, remembered `Content-Usage` headers |
//! | `store` | the shared budget's store (Redis): the scripts, the hints, the heartbeat, fallback |
//! | `budget` | whose budget and when: the budget keys, the jobs, the limiter (host table, fair queue, dispatcher, budget seam): the only place requests wait |
//! | `observe` | Prometheus metrics, OpenTelemetry traces, the block webhook, the host events of `/v1/events` |
//! | `front` | the front door: who gets a connection, caps and timeouts per client, the HTTP server settings every connection is served with |
//! | `proxy` | the proxy service, one file per step of a request's path; the body that holds the permit, locally made responses, the response store |
//! | `admin` | the admin listener: host API, operator actions, reload, dashboard, CA; the typed views and a host's state in words |
//! | `serve` | `run`: build the parts, accept on both ports, the tasks beside serving, what survives a restart, shut down in order |
//! | `cli` | the verbs that talk to a user or a running instance: `courtesy env`, `courtesy status`, `courtesy check-url` |
//!
//! The binary (`main.rs`) parses the CLI, sets up logging, loads the config, binds and calls `run`.

#![warn(unreachable_pub)]

mod admin;
mod budget;
mod cli;
pub mod config;
mod front;
mod observe;
mod pacing;
mod proxy;
mod serve;
mod store;
#[cfg(test)]
mod untrusted_input;
mod upstream;
mod util;
mod wire;

// The public surface, on purpose: what the binary, the tests and the benches use (the config
// and the CLI verbs whole). Everything else is crate-private (`unreachable_pub` keeps it so), so
// that the compiler sees dead code.
pub use budget::limiter::{lanes, Host, HostStats, Limiter};
pub use cli::{check_url, client_env, keys, status};
pub use pacing::policy::Pacing;
pub use proxy::Proxy;
pub use serve::server::{run, Listeners};
pub use upstream::tls::{provider, LocalCa};
pub use util::log_line::direct::write_lines_directly;
pub use util::log_line::request::carry_requests_in_lines;
pub use util::log_line::{PlainFields, PlainLine};
pub use util::log_writer::{BatchedWriter, FlushGuard};
pub use wire::host_key::host_key;
pub use wire::host_name;
pub use wire::httpsig::SigningKey;
