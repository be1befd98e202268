//! The end-to-end tests, one binary: a module per capability (`core`, `https`, `shared`, ...), each
//! the file that was `tests/<capability>.rs`, all on the harness in `tests/support/`. One binary
//! compiles the harness once and links the proxy once, where one binary per file did it
//! thirty-eight times over (most of a clean build's time and of target/'s size). Run one
//! capability with its module path as the filter: `cargo test --test it core::` (what
//! `cargo test --test core` was), or one test: `cargo test --test it core::a_test_name`. A filter
//! matches anywhere in `module::test`, so `shared::` also runs `teams_shared::` and `clients::`
//! `teams_clients::` (`cargo test --test it -- --skip teams_shared shared::` keeps to `shared`).
//!
//! The harness stays at `tests/support/` (`#[path]` below), not under `tests/it/`: a unit test in
//! `src/` includes `tests/support/zstd_frame.rs` and `tests/support/redis.rs`, and the scenarios
//! bench `tests/support/redis.rs`, by those paths.
//!
//! Nothing here needs a process of its own: no test sets an environment variable, changes the
//! current directory, installs a tracing subscriber or handles a signal in the test process
//! (courtesy runs as a child process where signals, `ulimit` or an environment are needed, and
//! every TLS config names its crypto provider). Tests that ran side by side only with their own
//! file's now run beside any other, as many at once as before (one per CPU), so each keeps to its
//! own: temporary directories named by process and a counter (`temp_dir`), ports from `bind(0)` or
//! from one process-wide counter (`Ports::free`), its own origins, redis-server and parents. The
//! one process-wide setting a test changes, the open file limit that `limits` raises to the hard
//! limit before its floods of connections, only helps the others.
//!
//! Two test binaries stay apart, and why: `tests/layers.rs` and `tests/docs.rs` read the source
//! tree and the docs as text (the layer order, the docs' links and names). They are the check run
//! before every commit (`cargo test --test layers --test docs`), which should not wait for this
//! binary to compile and link, and they must still run and say what is wrong when these tests do
//! not build.

#[path = "../support/mod.rs"]
mod support;

mod admin;
mod ask_less;
mod bandwidth;
mod block_detection;
mod browser;
mod check_api;
mod client_snippets;
mod clients;
mod config_files;
mod core;
mod crawlee;
mod dashboard;
mod defaults;
mod env;
mod feedback;
mod frontier_clients;
mod hardening;
mod host_events;
mod http2;
mod https;
mod keys;
mod limits;
mod origin_answers;
mod parent;
mod preferences;
mod ratelimit_fields;
mod read_timeout;
mod robots_blocks;
mod security;
mod shadow;
mod shared;
mod shared_ahead;
mod shared_fairness;
mod shared_topologies;
mod shutdown;
mod signing;
mod teams;
mod teams_clients;
mod teams_shared;
mod traces;
mod websockets;
mod why_wait;
