//! What the scenarios compute from the origin's arrival instants: the densest window and the rate,
//! the two figures pacing targets are stated in.

/// The most instants (sorted, seconds) in any closed window of `width` seconds.
pub fn max_in_window(times: &[f64], width: f64) -> usize {
    let mut best = 0;
    let mut j = 0;
    for i in 0..times.len() {
        while j < times.len() && times[j] - times[i] <= width {
            j += 1;
        }
        best = best.max(j - i);
    }
    best
}

/// (n − 1) / (last − first): the rate at which sorted instants arrived.
pub fn rate_of(times: &[f64]) -> f64 {
    match (times.first(), times.last()) {
        (Some(first), Some(last)) if times.len() > 1 && last > first => {
            (times.len() - 1) as f64 / (last - first)
        }
        _ => f64::NAN,
    }
}
