//! Micro-benchmarks of the limiter's admit path: what one request pays for `admit` + drop when pacing
//! does not make it wait (huge rate, burst and concurrency), so that only the bookkeeping is measured.
//!
//! - `admit/uncontended`: one task, one host, admit + `mark_sent` + drop.
//! - `admit/64_tasks_one_host`: 64 tokio tasks on a multi-thread runtime admit on the same host at
//!   once; the reported time is per admit (the iterations are split among the tasks).
//! - `admit/new_hosts_10k`: 10,000 admits on 10,000 distinct hosts in a fresh limiter (the host table
//!   insert path); the reported time is per 10,000 admits, the throughput per admit.
//! - `admit/known_hosts_10k`: the same 10,000 hosts once they are in the table (lookup path).
//!
//! Run with `cargo bench --bench limiter` (about a minute on 2 cores).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use courtesy::config::{Config, HostPolicy};
use courtesy::Limiter;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

/// Tasks admitting at once in the contended case.
const TASKS: u64 = 64;
/// Distinct hosts in the host-table cases.
const HOSTS: usize = 10_000;

/// A limiter whose pacing never makes a request wait.
fn open_limiter() -> Arc<Limiter> {
    let mut config = Config {
        defaults: Arc::new({
            let mut p = HostPolicy::default();
            p.pacing.rate = 1e9;
            p.pacing.burst = 1_000_000;
            p.pacing.concurrency = 1_000_000;
            p
        }),
        ..Config::default()
    };
    config.proxy.max_in_flight = 1_000_000;
    Limiter::new(Arc::new(config))
}

/// One request's turn: admit, mark it sent, give the slot back.
async fn admit_once(limiter: &Arc<Limiter>, host: &str) {
    let mut permit = limiter.admit((host, 80)).await.expect("admit");
    permit.mark_sent();
    drop(black_box(permit));
}

fn runtime_current() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn runtime_multi() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn uncontended(c: &mut Criterion) {
    let rt = runtime_current();
    let limiter = open_limiter();
    let mut group = c.benchmark_group("admit");
    group.throughput(Throughput::Elements(1));
    group.bench_function("uncontended", |b| {
        b.to_async(&rt)
            .iter(|| admit_once(&limiter, black_box("host.test")));
    });
    group.finish();
}

fn contended(c: &mut Criterion) {
    let rt = runtime_multi();
    let limiter = open_limiter();
    let mut group = c.benchmark_group("admit");
    group.throughput(Throughput::Elements(1));
    group.bench_function("64_tasks_one_host", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let limiter = limiter.clone();
            async move {
                // `iters` admits in all, split among the tasks, which start together.
                let barrier = Arc::new(tokio::sync::Barrier::new(TASKS as usize + 1));
                let mut tasks = Vec::with_capacity(TASKS as usize);
                for t in 0..TASKS {
                    let share = iters / TASKS + u64::from(t < iters % TASKS);
                    let limiter = limiter.clone();
                    let barrier = barrier.clone();
                    tasks.push(tokio::spawn(async move {
                        barrier.wait().await;
                        for _ in 0..share {
                            admit_once(&limiter, "host.test").await;
                        }
                    }));
                }
                barrier.wait().await;
                let start = Instant::now();
                for task in tasks {
                    task.await.expect("admitting task");
                }
                start.elapsed()
            }
        });
    });
    group.finish();
}

fn many_hosts(c: &mut Criterion) {
    let rt = runtime_current();
    let names: Vec<String> = (0..HOSTS).map(|i| format!("h{i}.example.test")).collect();
    let mut group = c.benchmark_group("admit");
    group.throughput(Throughput::Elements(HOSTS as u64));
    group.bench_function("new_hosts_10k", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let names = &names;
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    // A fresh table each time, so that every admit inserts a host.
                    let limiter = open_limiter();
                    let start = Instant::now();
                    for name in names {
                        admit_once(&limiter, name).await;
                    }
                    total += start.elapsed();
                    assert_eq!(limiter.host_count(), HOSTS);
                    drop(limiter);
                }
                total
            }
        });
    });
    let known = open_limiter();
    rt.block_on(async {
        for name in &names {
            admit_once(&known, name).await;
        }
    });
    group.bench_function("known_hosts_10k", |b| {
        b.to_async(&rt).iter(|| async {
            for name in &names {
                admit_once(&known, name).await;
            }
        });
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    targets = uncontended, contended, many_hosts
}
criterion_main!(benches);
