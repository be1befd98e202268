//! The kinds of value that only a host's keys take: `backoff_statuses`, `block_markers`,
//! `skip_resources`, `robots_user_agent`, `off_peak`, and `upstream_proxy` (a parent proxy URL,
//! `[proxy]`'s and a `[[host]]` rule's).

use std::sync::Arc;

use serde::Deserialize;

use super::kinds::{array, quoted_words, Kind};
use super::Say;
use crate::config::BlockMarkers;
use crate::config::{ConfigWord, OffPeak, ResourceKind, Route};

/// `backoff_statuses`: HTTP statuses other than 429; a bad entry is reported and left out.
pub(crate) struct Statuses;

impl Kind<Vec<i64>, Vec<u16>> for Statuses {
    fn check(
        &self,
        list: Vec<i64>,
        at: usize,
        key: &str,
        say: &mut Say<'_, '_>,
    ) -> Option<Vec<u16>> {
        let mut statuses = Vec::new();
        for s in list {
            match u16::try_from(s) {
                Ok(code) if (100..=599).contains(&code) && code != 429 => statuses.push(code),
                _ => {
                    let label = say.label;
                    say.error(
                        at,
                        &format!("{label}: {key} must hold HTTP statuses from 100 to 599 other than 429 (always a throttle), got {s}"),
                    );
                }
            }
        }
        Some(statuses)
    }

    fn show(&self, list: &Vec<u16>) -> Option<toml::Value> {
        array(list.iter().map(|s| toml::Value::Integer(i64::from(*s))))
    }

    fn takes(&self) -> String {
        "HTTP statuses, 100 to 599 but 429".into()
    }
}

/// `block_markers`: strings of at least 3 characters, matched case-insensitively.
pub(crate) struct Markers;

impl Kind<Vec<String>, Arc<BlockMarkers>> for Markers {
    fn check(
        &self,
        list: Vec<String>,
        at: usize,
        key: &str,
        say: &mut Say<'_, '_>,
    ) -> Option<Arc<BlockMarkers>> {
        if list.iter().any(|m| m.trim().len() < 3) {
            let label = say.label;
            say.error(
                at,
                &format!("{label}: {key} must each have at least 3 characters, got {list:?}"),
            );
            return None;
        }
        let markers = list.iter().map(|m| m.to_lowercase()).collect();
        Some(Arc::new(BlockMarkers::new(markers)))
    }

    fn show(&self, markers: &Arc<BlockMarkers>) -> Option<toml::Value> {
        array(markers.iter().map(|m| toml::Value::String(m.to_string())))
    }

    fn takes(&self) -> String {
        "strings of 3 characters or more".into()
    }
}

/// `skip_resources`: words of [`ResourceKind`]; a bad entry is reported and left out.
pub(crate) struct Resources;

impl Kind<Vec<String>, Vec<ResourceKind>> for Resources {
    fn check(
        &self,
        list: Vec<String>,
        at: usize,
        key: &str,
        say: &mut Say<'_, '_>,
    ) -> Option<Vec<ResourceKind>> {
        let mut kinds = Vec::new();
        for word in list {
            match ResourceKind::from_word(&word) {
                Some(kind) => kinds.push(kind),
                None => {
                    let label = say.label;
                    say.error(
                        at,
                        &format!(
                            "{label}: {key} takes {}, got {word:?}",
                            quoted_words::<ResourceKind>()
                        ),
                    );
                }
            }
        }
        Some(kinds)
    }

    fn show(&self, kinds: &Vec<ResourceKind>) -> Option<toml::Value> {
        array(
            kinds
                .iter()
                .map(|k| toml::Value::String(k.word().to_string())),
        )
    }

    fn takes(&self) -> String {
        format!("a list of {}", quoted_words::<ResourceKind>())
    }
}

/// `robots_user_agent`: a product token; empty means "the client's own".
pub(crate) struct Agent;

impl Kind<String, Option<String>> for Agent {
    fn check(
        &self,
        agent: String,
        _: usize,
        _: &str,
        _: &mut Say<'_, '_>,
    ) -> Option<Option<String>> {
        let agent = agent.trim();
        Some((!agent.is_empty()).then(|| agent.to_string()))
    }

    fn show(&self, agent: &Option<String>) -> Option<toml::Value> {
        Some(toml::Value::String(agent.clone().unwrap_or_default()))
    }

    fn takes(&self) -> String {
        "a product token, or empty".into()
    }
}

/// `off_peak = { hours, timezone, rate }`, as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileOffPeak {
    hours: String,
    timezone: String,
    rate: f64,
}

/// `off_peak`: a daily window in a time zone, with its own rate.
pub(crate) struct OffPeakWindow;

impl Kind<FileOffPeak, Option<OffPeak>> for OffPeakWindow {
    fn check(
        &self,
        file: FileOffPeak,
        at: usize,
        key: &str,
        say: &mut Say<'_, '_>,
    ) -> Option<Option<OffPeak>> {
        match parse_off_peak(&file) {
            Ok(window) => Some(Some(window)),
            Err(why) => {
                let label = say.label;
                say.error(at, &format!("{label}: {key} {why}"));
                None
            }
        }
    }

    fn show(&self, window: &Option<OffPeak>) -> Option<toml::Value> {
        let w = window.as_ref()?;
        let hhmm = |m: u16| format!("{:02}:{:02}", m / 60, m % 60);
        let mut table = toml::Table::new();
        let hours = format!("{}-{}", hhmm(w.start_minute), hhmm(w.end_minute));
        table.insert("hours".into(), toml::Value::String(hours));
        table.insert(
            "timezone".into(),
            toml::Value::String(w.timezone_name.clone()),
        );
        table.insert("rate".into(), toml::Value::Float(w.rate));
        Some(toml::Value::Table(table))
    }

    fn takes(&self) -> String {
        "{ hours = \"HH:MM-HH:MM\", timezone = IANA name, rate = requests per second }".into()
    }
}

/// An `off_peak` table as a window, or why it is not one.
fn parse_off_peak(file: &FileOffPeak) -> Result<OffPeak, String> {
    let minute = |t: &str| -> Option<u16> {
        let (h, m) = t.trim().split_once(':')?;
        let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
        (h <= 24 && m < 60 && h * 60 + m <= 24 * 60).then_some(h * 60 + m)
    };
    let (start, end) = file
        .hours
        .split_once('-')
        .and_then(|(a, b)| Some((minute(a)?, minute(b)?)))
        .ok_or_else(|| format!("hours must look like \"01:00-06:00\", got {:?}", file.hours))?;
    if start == end {
        return Err(format!("hours {:?} is an empty window", file.hours));
    }
    let timezone = jiff::tz::TimeZone::get(&file.timezone).map_err(|_| {
        format!(
            "timezone must be an IANA name such as \"Europe/Berlin\" or \"UTC\", got {:?}",
            file.timezone
        )
    })?;
    if !(file.rate.is_finite() && file.rate > 0.0) {
        return Err(format!("rate must be > 0, got {}", file.rate));
    }
    Ok(OffPeak {
        start_minute: start,
        end_minute: end % (24 * 60),
        timezone_name: file.timezone.clone(),
        timezone,
        rate: file.rate,
    })
}

/// `upstream_proxy`: `"direct"` or a parent proxy URL. Its message never repeats the value: it
/// may hold a password. That the parent is not courtesy itself is checked with `listen`, by the
/// section.
pub(crate) struct Parent;

impl Kind<String, Route> for Parent {
    fn check(&self, url: String, at: usize, key: &str, say: &mut Say<'_, '_>) -> Option<Route> {
        match Route::parse(&url) {
            Ok(route) => Some(route),
            Err(why) => {
                let label = say.label;
                say.error(at, &format!("{label}: {key} {why}"));
                None
            }
        }
    }

    fn show(&self, route: &Route) -> Option<toml::Value> {
        Some(toml::Value::String(route.to_string()))
    }

    fn takes(&self) -> String {
        "\"direct\", or http://, socks5:// or socks5h:// [user:pass@]host:port".into()
    }

    fn secret(&self) -> bool {
        true
    }
}
