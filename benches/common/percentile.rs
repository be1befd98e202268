//! Percentiles of measured values (latencies, gaps, CPU shares), so that every report ranks its
//! samples by the same rule.

/// Nearest-rank percentile of `sorted` (ascending) at `fraction` of the way up (0.5 is the
/// median, 0.99 the 99th percentile); `None` when there are no values, so that each caller says
/// what an empty set prints as.
pub fn percentile_at_fraction<T: Copy>(sorted: &[T], fraction: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((fraction * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}
