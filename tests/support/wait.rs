//! Waiting in tests for something that happens on another task or process, bounded in time.

use std::time::Duration;

use tokio::time::Instant;

/// Waits up to `limit` for `cond`, checking every 10 ms (test code only).
pub async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cond()
}
