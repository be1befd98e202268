//! The pacing lines of robots.txt beyond `Crawl-delay`, which texting_robots does not read:
//! `Request-rate: n/T` (n requests per T, in seconds unless `s`, `m` or `h` follows: `1/10`,
//! `1/10s`, `3/1m`; a time window after it is read as applying all day, the stricter reading) and
//! `Visit-time: HHMM-HHMM` (UTC; a window may wrap past midnight). Pure: the time is passed in.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Minutes in a day.
const DAY_MINUTES: u32 = 24 * 60;

/// The seconds between two requests that a `Request-rate` value asks for, if it is one.
pub(crate) fn request_interval(value: &str) -> Option<f64> {
    let rate = value.split_whitespace().next()?;
    let (count, period) = rate.split_once('/')?;
    let count: f64 = count.trim().parse().ok().filter(|n: &f64| *n >= 1.0)?;
    let period = period.trim().to_ascii_lowercase();
    let (number, unit) = match period.char_indices().last()? {
        (at, 's') => (&period[..at], 1.0),
        (at, 'm') => (&period[..at], 60.0),
        (at, 'h') => (&period[..at], 3600.0),
        (at, 'd') => (&period[..at], 86400.0),
        _ => (period.as_str(), 1.0),
    };
    let seconds: f64 = number
        .trim()
        .parse()
        .ok()
        .filter(|s: &f64| s.is_finite() && *s > 0.0)?;
    Some(seconds * unit / count)
}

/// A `Visit-time` window: the hours (UTC) in which the site welcomes crawlers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct VisitWindow {
    /// Minute of the day (UTC) the window opens.
    start: u32,
    /// Minute of the day (UTC) it closes (before `start`: the window wraps past midnight).
    end: u32,
}

impl VisitWindow {
    /// The window of a `Visit-time` value (`0600-0845`, `06:00-08:45`), if it is one. A window
    /// that opens when it closes is no window (it would close the site for good or open it all
    /// day: neither is what a site means by it).
    pub(crate) fn parse(value: &str) -> Option<VisitWindow> {
        let value = value.split_whitespace().next()?;
        let (start, end) = value.split_once('-')?;
        let window = VisitWindow {
            start: minute_of(start)?,
            end: minute_of(end)?,
        };
        (window.start != window.end).then_some(window)
    }

    /// Whether `at` falls inside the window.
    pub(crate) fn contains(&self, at: SystemTime) -> bool {
        let minute = minute_of_day(at);
        if self.start < self.end {
            (self.start..self.end).contains(&minute)
        } else {
            minute >= self.start || minute < self.end
        }
    }

    /// How long after `at` the window opens (zero inside it).
    pub(crate) fn opens_in(&self, at: SystemTime) -> Duration {
        if self.contains(at) {
            return Duration::ZERO;
        }
        let seconds = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let into_day = seconds % 86_400;
        let opens = u64::from(self.start) * 60;
        let wait = if opens > into_day {
            opens - into_day
        } else {
            86_400 - into_day + opens
        };
        Duration::from_secs(wait)
    }

    /// How long after `at` the window closes, while `at` is inside it (`None` outside).
    pub(crate) fn closes_in(&self, at: SystemTime) -> Option<Duration> {
        if !self.contains(at) {
            return None;
        }
        let seconds = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let into_day = seconds % 86_400;
        let closes = u64::from(self.end) * 60;
        let wait = if closes > into_day {
            closes - into_day
        } else {
            86_400 - into_day + closes
        };
        Some(Duration::from_secs(wait))
    }

    /// The window as the file wrote it, `HHMM-HHMM` (for `/hosts` and the log).
    pub(crate) fn text(&self) -> String {
        format!(
            "{:02}{:02}-{:02}{:02} UTC",
            self.start / 60,
            self.start % 60,
            self.end / 60,
            self.end % 60
        )
    }
}

/// The minute of the day of `HHMM` or `HH:MM`, if it is one (`2400` is midnight at the end).
fn minute_of(text: &str) -> Option<u32> {
    let digits: String = text.trim().chars().filter(|c| *c != ':').collect();
    if digits.len() != 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let hours: u32 = digits[..2].parse().ok()?;
    let minutes: u32 = digits[2..].parse().ok()?;
    let minute = hours * 60 + minutes;
    (minutes < 60 && minute <= DAY_MINUTES).then_some(minute % DAY_MINUTES)
}

/// The minute of the day (UTC) of `at`.
fn minute_of_day(at: SystemTime) -> u32 {
    let seconds = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    u32::try_from((seconds % 86_400) / 60).unwrap_or(0)
}

/// The longer of two delays between requests, either of which may be unstated: the slower pace
/// wins.
pub(crate) fn longest(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// What robots.txt's pacing lines ask of one group, beyond its Crawl-delay.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RobotsPacing {
    /// The longest interval its `Request-rate` lines ask for, in seconds.
    pub request_interval: Option<f64>,
    /// Its first valid `Visit-time` window.
    pub visit: Option<VisitWindow>,
}

impl RobotsPacing {
    /// Takes one line of the group (`request-rate` or `visit-time`, lower-cased) into account.
    pub(crate) fn take(&mut self, key: &str, value: &str) {
        match key {
            "request-rate" => {
                self.request_interval = longest(self.request_interval, request_interval(value));
            }
            "visit-time" if self.visit.is_none() => self.visit = VisitWindow::parse(value),
            _ => {}
        }
    }

    /// The lines of several groups that apply together: the slowest rate, the first window.
    pub(crate) fn join(mut self, other: &RobotsPacing) -> RobotsPacing {
        self.request_interval = longest(self.request_interval, other.request_interval);
        self.visit = self.visit.or(other.visit);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_rate_in_every_spelling() {
        assert_eq!(request_interval("1/10"), Some(10.0));
        assert_eq!(request_interval("1/10s"), Some(10.0));
        assert_eq!(request_interval(" 3/1M "), Some(20.0));
        assert_eq!(request_interval("1/1h 0800-1700"), Some(3600.0));
        assert_eq!(request_interval("2/1d"), Some(43200.0));
        assert_eq!(request_interval("10/1"), Some(0.1));
        for bad in [
            "", "1", "/10", "0/10", "1/0", "1/-5", "a/b", "1/10x", "1/inf",
        ] {
            assert_eq!(request_interval(bad), None, "{bad}");
        }
    }

    fn utc(hours: u64, minutes: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(20_000 * 86_400 + hours * 3600 + minutes * 60)
    }

    #[test]
    fn visit_time_windows_in_a_day_and_across_midnight() {
        let day = VisitWindow::parse("0600-0845").unwrap();
        assert!(!day.contains(utc(5, 59)) && day.contains(utc(6, 0)) && day.contains(utc(8, 44)));
        assert!(!day.contains(utc(8, 45)));
        assert_eq!(day.opens_in(utc(5, 0)), Duration::from_secs(3600));
        assert_eq!(day.opens_in(utc(7, 0)), Duration::ZERO);
        assert_eq!(day.opens_in(utc(9, 0)), Duration::from_secs(21 * 3600));
        assert_eq!(day.text(), "0600-0845 UTC");
        let night = VisitWindow::parse("22:00-02:00 # quiet hours").unwrap();
        assert!(
            night.contains(utc(23, 0)) && night.contains(utc(1, 59)) && !night.contains(utc(2, 0))
        );
        assert_eq!(night.opens_in(utc(12, 0)), Duration::from_secs(10 * 3600));
        let to_midnight = VisitWindow::parse("2200-2400").unwrap();
        assert!(to_midnight.contains(utc(23, 59)) && !to_midnight.contains(utc(0, 0)));
        for bad in [
            "",
            "0600",
            "0600-0600",
            "2500-0100",
            "0660-0700",
            "6-8",
            "0600-08:4",
        ] {
            assert_eq!(VisitWindow::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_group_keeps_the_slowest_rate_and_the_first_window() {
        let mut pacing = RobotsPacing::default();
        pacing.take("request-rate", "1/5");
        pacing.take("request-rate", "1/10");
        pacing.take("request-rate", "1/2");
        pacing.take("visit-time", "nonsense");
        pacing.take("visit-time", "0100-0200");
        pacing.take("visit-time", "0300-0400");
        assert_eq!(pacing.request_interval, Some(10.0));
        assert_eq!(pacing.visit, VisitWindow::parse("0100-0200"));
        let other = RobotsPacing {
            request_interval: Some(30.0),
            visit: VisitWindow::parse("0500-0600"),
        };
        let joined = pacing.join(&other);
        assert_eq!(joined.request_interval, Some(30.0));
        assert_eq!(joined.visit, VisitWindow::parse("0100-0200"));
    }
}
