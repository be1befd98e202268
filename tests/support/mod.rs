//! Shared test harness for the end-to-end tests: a scripted origin on a loopback address, courtesy
//! started in-process on `127.0.0.1:0` (or as its own process), and clients that talk to courtesy
//! the way a crawler's HTTP_PROXY client does (absolute-form requests).
//!
//! Each file has one job:
//! - [`body`]: the body type origins and clients share;
//! - [`origin`]: the scripted origin that records what reached it;
//! - [`h2_script`]: an HTTP/2 origin that refuses streams or sends GOAWAY on cue;
//! - [`in_process`]: courtesy started in this test process;
//! - [`instances`]: several instances on one shared store, and the bound their site must see;
//! - [`proxy_client`]: requests and tunnels through courtesy;
//! - [`crowd`]: many clients at once, and what they all got;
//! - [`direct`]: requests that bypass the proxy (the admin listener);
//! - [`binary`]: courtesy run as its own process, from the built binary;
//! - [`real_clients`]: real client programs (curl, Python, Node);
//! - [`otlp`]: an OTLP/HTTP trace receiver on the `opentelemetry-proto` types;
//! - [`redis`]: a real redis-server for the shared budget;
//! - [`redis_topology`]: a Redis Cluster, and a master with a replica under Sentinel;
//! - [`parent`]: real parent proxies (Squid, microsocks) for `upstream_proxy`;
//! - [`tls`]: the test CA and client TLS configs;
//! - [`temp`]: fresh temporary directories;
//! - [`throttled_site`]: a linked site with its own 429 limiter and robots.txt, and the checks
//!   that a crawl got every page while the site kept its budget;
//! - [`wait`]: bounded waits for what happens elsewhere.
//!
//! `tests/it/main.rs` declares it (`mod support;`, by path) and each capability's module says
//! `use crate::support::*;`: every helper is re-exported here.

mod binary;
mod body;
mod crowd;
mod direct;
mod h2_script;
mod in_process;
mod instances;
mod origin;
mod otlp;
mod parent;
mod proxy_client;
mod real_clients;
mod redis;
mod redis_topology;
mod temp;
mod throttled_site;
mod tls;
mod wait;

pub use self::{
    binary::{
        listening, spawn_courtesy_logging, spawn_courtesy_process, stop_for_log, vm_hwm_kib, Ports,
    },
    body::{empty, full, TestBody},
    crowd::{assert_each_ok, hammer_until},
    direct::{admin_call, direct_client, fetch_direct},
    h2_script::{H2Move, ScriptedH2},
    in_process::Courtesy,
    instances::{
        all_seen, assert_within_budget, budget_mode, failed_store_calls, failed_store_calls_in,
        hammer_instances, instance_on, instances_on, readiness,
    },
    origin::{come_back_later, read_request_head, Arrival, Origin, Speaks},
    otlp::{OtlpReceiver, Received},
    parent::{free_port, ParentProxy},
    proxy_client::{open_tunnel, Got, ProxyClient},
    real_clients::{
        client_command, run_to_success, run_with_input, trust_in_nss_home, undici_through,
    },
    redis::RedisServer,
    redis_topology::{cli_at, RedisCluster, RedisSentinels, TlsRedis},
    temp::temp_dir,
    throttled_site::{
        assert_every_page_once_and_the_site_kept, throttled_site, SiteLimits, SiteShape,
    },
    tls::{client_tls_trusting, TestCa},
    wait::eventually,
};
