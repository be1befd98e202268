//! Micro-benchmarks of a host's waiting line: what one request pays to queue and leave
//! (`push` + `pop_front`) in the fair per-job queue (`Lanes`), next to the plain `VecDeque` it
//! replaces, with the queue holding a steady backlog.
//!
//! - `queue/vecdeque_100`, `queue/vecdeque_1000`: `push_back` + `pop_front` on a `VecDeque`
//!   holding 100 (1,000) items.
//! - `queue/lanes_1_job`: one job, 100 items waiting (the common case).
//! - `queue/lanes_10_jobs`: 10 jobs of weight 1, 100 items waiting (about 10 each).
//! - `queue/lanes_1000_jobs_100_waiting`: pushes rotate over 1,000 jobs while 100 items wait, so
//!   nearly every push opens a lane and every pop closes one.
//! - `queue/lanes_1000_jobs_all_waiting`: 1,000 jobs each with one item waiting (1,000 lanes
//!   scanned per turn: the worst case of the linear scan).
//!
//! The tags pushed are other `Arc`s than the ones already queued (as a request's header would
//! give), so finding a job's lane compares names, not pointers. Run with
//! `cargo bench --bench lanes` (about a minute). Figures: `benches/LANES_RESULTS.md`.

use std::collections::VecDeque;
use std::hint::black_box;
use std::time::Duration;

use courtesy::lanes::{JobTag, Lanes, Priority};
use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};

/// Tags for `jobs` jobs, each a fresh allocation of its name.
fn tags(jobs: usize) -> Vec<JobTag> {
    (0..jobs)
        .map(|j| JobTag::new(format!("crawl-job-{j:04}"), 1.0))
        .collect()
}

/// The group every case reports into.
type Group<'a> = BenchmarkGroup<'a, WallTime>;

/// Today's queue: `push_back` + `pop_front` with `depth` items waiting.
fn vecdeque(group: &mut Group<'_>, depth: u64) {
    let mut q: VecDeque<u64> = (0..depth).collect();
    let mut next = depth;
    group.bench_function(format!("vecdeque_{depth}"), |b| {
        b.iter(|| {
            q.push_back(black_box(next));
            next += 1;
            black_box(q.pop_front())
        });
    });
}

/// `push` + `pop_front` on a `Lanes` of `jobs` jobs with `depth` items waiting.
fn lanes(group: &mut Group<'_>, label: &str, jobs: usize, depth: u64) {
    let queued = tags(jobs);
    let pushed = tags(jobs);
    let mut q: Lanes<u64> = Lanes::new();
    for i in 0..depth {
        q.push(&queued[i as usize % jobs], Priority::Normal, i);
    }
    let mut next = depth;
    group.bench_function(label, |b| {
        b.iter(|| {
            let tag = &pushed[next as usize % jobs];
            q.push(black_box(tag), Priority::Normal, next);
            next += 1;
            black_box(q.pop_front())
        });
    });
    assert_eq!(q.len() as u64, depth);
}

fn queue(c: &mut Criterion) {
    let mut group = c.benchmark_group("queue");
    group.throughput(Throughput::Elements(1));
    vecdeque(&mut group, 100);
    vecdeque(&mut group, 1_000);
    lanes(&mut group, "lanes_1_job", 1, 100);
    lanes(&mut group, "lanes_10_jobs", 10, 100);
    lanes(&mut group, "lanes_1000_jobs_100_waiting", 1_000, 100);
    lanes(&mut group, "lanes_1000_jobs_all_waiting", 1_000, 1_000);
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    targets = queue
}
criterion_main!(benches);
