//! The [`OffPeak`] window: a daily stretch of wall-clock time with its own rate. Plain data,
//! read by the key tables (`key_tables/host.rs`) and kept in a host's policy.

/// A daily window with its own rate (`off_peak = { hours, timezone, rate }`).
#[derive(Debug, Clone)]
pub struct OffPeak {
    /// Start of the window, minutes after local midnight.
    pub start_minute: u16,
    /// End of the window (exclusive), minutes after local midnight; may be before the start
    /// (a window across midnight).
    pub end_minute: u16,
    /// The IANA time zone name, as written.
    pub timezone_name: String,
    /// The time zone.
    pub timezone: jiff::tz::TimeZone,
    /// The rate inside the window.
    pub rate: f64,
}

impl PartialEq for OffPeak {
    fn eq(&self, other: &Self) -> bool {
        (
            self.start_minute,
            self.end_minute,
            &self.timezone_name,
            self.rate,
        ) == (
            other.start_minute,
            other.end_minute,
            &other.timezone_name,
            other.rate,
        )
    }
}

impl OffPeak {
    /// The first wall-clock time after `after` at which the window opens or closes.
    pub fn next_edge(&self, after: std::time::SystemTime) -> Option<std::time::SystemTime> {
        let now = jiff::Timestamp::try_from(after).ok()?;
        let today = self.timezone.to_datetime(now).date();
        let mut best: Option<jiff::Timestamp> = None;
        for date in [Some(today), today.tomorrow().ok()].into_iter().flatten() {
            for minute in [self.start_minute, self.end_minute] {
                let local = date.at((minute / 60) as i8, (minute % 60) as i8, 0, 0);
                let Ok(at) = self.timezone.to_ambiguous_timestamp(local).compatible() else {
                    continue;
                };
                if at > now && best.is_none_or(|b| at < b) {
                    best = Some(at);
                }
            }
        }
        std::time::SystemTime::try_from(best?).ok()
    }

    /// Whether the wall-clock time `at` falls inside the window.
    pub fn contains(&self, at: std::time::SystemTime) -> bool {
        let Ok(ts) = jiff::Timestamp::try_from(at) else {
            return false;
        };
        let local = self.timezone.to_datetime(ts);
        let minute = local.hour() as u16 * 60 + local.minute() as u16;
        if self.start_minute <= self.end_minute {
            (self.start_minute..self.end_minute).contains(&minute)
        } else {
            minute >= self.start_minute || minute < self.end_minute
        }
    }
}
