//! What an upstream answer says about the host: the [`Feedback`] class, `Retry-After`, and the
//! server's own budget from RateLimit headers.
//!
//! Pure functions of the response head and an explicit `now` (a `SystemTime`, only because HTTP dates
//! and epoch resets are wall-clock times). This module reads signals; it does not act on them
//! (`crate::pacing::policy` does) and never sees responses that courtesy made itself.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::HeaderName;
use http::{HeaderMap, StatusCode};

/// The class of one upstream result, as the pacing rules care about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feedback {
    /// A 2xx or 3xx: the host coped.
    Success,
    /// 429: the host asks us to slow down.
    Throttled,
    /// A status in `backoff_statuses` (default 500, 502, 503, 504): the host is struggling.
    Overloaded,
    /// No response at all: connect error, reset, timeout.
    Failed,
    /// Anything else (404, 401, ...): says nothing about load.
    Neutral,
}

/// Classifies an upstream status. `backoff_statuses` is the host's configured list.
pub(crate) fn classify(status: StatusCode, backoff_statuses: &[u16]) -> Feedback {
    match status.as_u16() {
        429 => Feedback::Throttled,
        s if backoff_statuses.contains(&s) => Feedback::Overloaded,
        200..=399 => Feedback::Success,
        _ => Feedback::Neutral,
    }
}

/// Parses `Retry-After`: delay-seconds or an HTTP-date in any of RFC 9110's three formats
/// (IMF-fixdate, RFC 850, asctime). A date in the past gives zero; anything unparsable gives `None`
/// (the caller then backs off on its own schedule).
pub(crate) fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // An absurd number of digits saturates instead of failing; the caller caps it anyway.
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

/// What a server said about its remaining budget for us.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServerBudget {
    /// Requests left in the current window, if said.
    pub remaining: Option<u64>,
    /// Time until the window resets, if said.
    pub reset: Option<Duration>,
    /// The server's policy as a rate (quota ÷ window seconds), if said.
    pub policy_rate: Option<f64>,
    /// The quota the server announced (`RateLimit-Policy`, `RateLimit-Limit`, `limit=`,
    /// `X-RateLimit-Limit`), if said: what the learned limit (`controller = "cubic"`) aims just
    /// under, so that a changed quota is followed without waiting for a 429.
    pub quota: Option<Quota>,
}

/// A quota the server announced: requests per window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// Requests allowed in one window.
    pub limit: u64,
    /// The window's length, when the server said it (`;w=`); else only the resets tell it.
    pub window: Option<Duration>,
}

impl Quota {
    /// The stricter of two announcements: the smaller limit, over the longer window said.
    fn stricter(a: Option<Quota>, b: Option<Quota>) -> Option<Quota> {
        match (a, b) {
            (Some(a), Some(b)) => Some(Quota {
                limit: a.limit.min(b.limit),
                window: max_opt(a.window, b.window),
            }),
            (a, b) => a.or(b),
        }
    }
}

impl ServerBudget {
    /// The fastest rate that spends what is left no sooner than the reset: remaining ÷ seconds.
    pub fn spend_rate(&self) -> Option<f64> {
        let remaining = self.remaining? as f64;
        let secs = self.reset?.as_secs_f64();
        (secs > 0.0 && remaining > 0.0).then(|| remaining / secs)
    }
}

/// Reads the server's budget from the IETF httpapi draft fields (`RateLimit: "name";r=R;t=T` and
/// `RateLimit-Policy: "name";q=Q;w=W`), the older `RateLimit-Limit/-Remaining/-Reset`, and
/// `X-RateLimit-Limit/-Remaining/-Reset`. A `-Reset` value is read as seconds from now, unless it is
/// larger than 10^9, which no delay is but every Unix time since 2001 is: then it is an epoch
/// time in seconds (or in milliseconds above 10^12). The quota comes from the same fields
/// (`q=`, an older `RateLimit-Policy: 10;w=1`, `limit=`) and from `RateLimit-Limit` and
/// `X-RateLimit-Limit` (`10`, or draft-01's `10, 10;w=1`).
pub(crate) fn server_budget(headers: &HeaderMap, now: SystemTime) -> Option<ServerBudget> {
    // Every field read below is named `ratelimit…` or `x-ratelimit…`, and most responses carry
    // none: one pass over the names, instead of eight lookups that each hash a name.
    if !headers.keys().any(names_a_rate_limit) {
        return None;
    }
    let mut budget = ServerBudget {
        remaining: None,
        reset: None,
        policy_rate: None,
        quota: None,
    };
    if let Some(v) = header(headers, &RATELIMIT) {
        for item in v.split(',') {
            let (r, t) = (sf_param(item, "r"), sf_param(item, "t"));
            if r.is_some() || t.is_some() {
                budget.remaining = min_opt(budget.remaining, r);
                budget.reset = max_opt(budget.reset, t.map(Duration::from_secs));
            }
            // The draft-03 form: `limit=100, remaining=50, reset=5` as separate list members.
            if let Some(r) = kv_param(item, "remaining") {
                budget.remaining = min_opt(budget.remaining, Some(r));
            }
            if let Some(t) = kv_param(item, "reset") {
                budget.reset = max_opt(budget.reset, Some(Duration::from_secs(t)));
            }
            let limit = kv_param(item, "limit").map(|limit| Quota {
                limit,
                window: None,
            });
            budget.quota = Quota::stricter(budget.quota, limit);
        }
    }
    if let Some(v) = header(headers, &RATELIMIT_POLICY) {
        for item in v.split(',') {
            if let (Some(q), Some(w)) = (sf_param(item, "q"), sf_param(item, "w")) {
                if w > 0 {
                    let rate = q as f64 / w as f64;
                    budget.policy_rate = Some(budget.policy_rate.map_or(rate, |p| p.min(rate)));
                }
            }
            budget.quota = Quota::stricter(budget.quota, policy_quota(item));
        }
    }
    for name in &LIMIT_FIELDS {
        budget.quota = Quota::stricter(budget.quota, header(headers, name).and_then(limit_field));
    }
    // Read on every response: names made at compile time, no parsing, no allocation.
    for (remaining, reset) in &SEPARATE_FIELDS {
        let remaining = header(headers, remaining).and_then(first_number);
        let reset = header(headers, reset)
            .and_then(first_number)
            .map(|n| reset_delay(n, now));
        if remaining.is_some() || reset.is_some() {
            budget.remaining = min_opt(budget.remaining, remaining);
            budget.reset = max_opt(budget.reset, reset);
        }
    }
    let said = budget.remaining.is_some() || budget.policy_rate.is_some() || budget.quota.is_some();
    said.then_some(budget)
}

/// A quota policy list member: `"name";q=Q;w=W` (the draft) or `Q;w=W` (its older form).
fn policy_quota(item: &str) -> Option<Quota> {
    let limit = sf_param(item, "q").or_else(|| leading_number(item))?;
    let window = sf_param(item, "w")
        .filter(|w| *w > 0)
        .map(Duration::from_secs);
    Some(Quota { limit, window })
}

/// `RateLimit-Limit` / `X-RateLimit-Limit`: `Q`, or draft-01's `Q, Q;w=W` (the window from the
/// policy members).
fn limit_field(v: &str) -> Option<Quota> {
    let limit = first_number(v)?;
    let window = v.split(',').find_map(|item| {
        sf_param(item, "w")
            .filter(|w| *w > 0)
            .map(Duration::from_secs)
    });
    Some(Quota { limit, window })
}

/// The number a list member starts with, before its parameters (`10;w=1`): not a quoted name.
fn leading_number(item: &str) -> Option<u64> {
    let bare = item.split(';').next()?.trim();
    (!bare.is_empty() && bare.bytes().all(|b| b.is_ascii_digit()))
        .then(|| bare.parse().ok())
        .flatten()
}

fn reset_delay(n: u64, now: SystemTime) -> Duration {
    let now_secs = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    if n > 1_000_000_000_000 {
        Duration::from_millis(n).saturating_sub(now_secs)
    } else if n > 1_000_000_000 {
        Duration::from_secs(n).saturating_sub(now_secs)
    } else {
        Duration::from_secs(n)
    }
}

/// `RateLimit` (draft-ietf-httpapi-ratelimit-headers, the combined field).
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `RateLimit-Policy`.
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// The older separate quota fields: the draft's and the common `X-` one.
static LIMIT_FIELDS: [HeaderName; 2] = [
    HeaderName::from_static("ratelimit-limit"),
    HeaderName::from_static("x-ratelimit-limit"),
];
/// The older separate fields, remaining and reset: the draft's and the common `X-` ones.
static SEPARATE_FIELDS: [(HeaderName, HeaderName); 2] = [
    (
        HeaderName::from_static("ratelimit-remaining"),
        HeaderName::from_static("ratelimit-reset"),
    ),
    (
        HeaderName::from_static("x-ratelimit-remaining"),
        HeaderName::from_static("x-ratelimit-reset"),
    ),
];

/// Whether `name` is one of the rate-limit fields `server_budget` reads (or another of their
/// family): it begins `ratelimit` or `x-ratelimit`.
fn names_a_rate_limit(name: &HeaderName) -> bool {
    let name = name.as_str();
    name.strip_prefix("x-")
        .unwrap_or(name)
        .starts_with("ratelimit")
}

fn header<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The leading whole number of a header value (`"100"`, `"100, 100;w=60"`).
fn first_number(v: &str) -> Option<u64> {
    let digits: String = v
        .trim()
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// A structured-field parameter `;key=N` of a list member.
fn sf_param(item: &str, key: &str) -> Option<u64> {
    item.split(';').skip(1).find_map(|p| {
        let (k, v) = p.split_once('=')?;
        (k.trim() == key).then(|| first_number(v)).flatten()
    })
}

/// A bare `key=N` list member (the older draft's dictionary form).
fn kv_param(item: &str, key: &str) -> Option<u64> {
    let (k, v) = item.split_once('=')?;
    (k.trim() == key && !item.contains(';'))
        .then(|| first_number(v))
        .flatten()
}

fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn max_opt(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    const DEFAULT_BACKOFF: [u16; 4] = [500, 502, 503, 504];

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn every_field_the_budget_reads_passes_the_first_look() {
        let (limit, policy) = (RATELIMIT, RATELIMIT_POLICY);
        let read = [&limit, &policy]
            .into_iter()
            .chain(&LIMIT_FIELDS)
            .chain(SEPARATE_FIELDS.iter().flat_map(|(a, b)| [a, b]));
        for name in read {
            assert!(names_a_rate_limit(name), "{name}");
        }
        for other in ["retry-after", "x-rate", "content-type", "x-"] {
            assert!(
                !names_a_rate_limit(&HeaderName::from_static(other)),
                "{other}"
            );
        }
    }

    #[test]
    fn statuses_are_classified_in_one_table() {
        let table = [
            (200, Feedback::Success),
            (204, Feedback::Success),
            (301, Feedback::Success),
            (304, Feedback::Success),
            (400, Feedback::Neutral),
            (403, Feedback::Neutral),
            (404, Feedback::Neutral),
            (429, Feedback::Throttled),
            (500, Feedback::Overloaded),
            (501, Feedback::Neutral),
            (502, Feedback::Overloaded),
            (503, Feedback::Overloaded),
            (504, Feedback::Overloaded),
            (520, Feedback::Neutral),
        ];
        for (status, expected) in table {
            let got = classify(StatusCode::from_u16(status).unwrap(), &DEFAULT_BACKOFF);
            assert_eq!(got, expected, "status {status}");
        }
        assert_eq!(
            classify(StatusCode::from_u16(520).unwrap(), &[520]),
            Feedback::Overloaded
        );
        assert_eq!(
            classify(StatusCode::SERVICE_UNAVAILABLE, &[]),
            Feedback::Neutral
        );
    }

    #[test]
    fn retry_after_parses_seconds_and_all_three_date_formats() {
        // 1994-11-06 08:49:37 UTC is RFC 9110's example date.
        let now = at(784_111_777 - 30);
        let table: [(&str, Option<u64>); 9] = [
            ("120", Some(120)),
            (" 5 ", Some(5)),
            ("0", Some(0)),
            ("Sun, 06 Nov 1994 08:49:37 GMT", Some(30)),
            ("Sunday, 06-Nov-94 08:49:37 GMT", Some(30)),
            ("Sun Nov  6 08:49:37 1994", Some(30)),
            ("Sun, 06 Nov 1994 08:48:37 GMT", Some(0)), // already past
            ("soon", None),
            ("-5", None),
        ];
        for (value, expected) in table {
            assert_eq!(
                retry_after(value, now),
                expected.map(Duration::from_secs),
                "Retry-After: {value}"
            );
        }
        assert_eq!(retry_after("", now), None);
        assert_eq!(retry_after("1.5", now), None);
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn the_ietf_draft_fields_are_read() {
        let now = at(1_700_000_000);
        let b = server_budget(
            &headers(&[
                ("ratelimit", "\"default\";r=3;t=10"),
                ("ratelimit-policy", "\"default\";q=100;w=60"),
            ]),
            now,
        )
        .unwrap();
        assert_eq!(b.remaining, Some(3));
        assert_eq!(b.reset, Some(Duration::from_secs(10)));
        assert!((b.spend_rate().unwrap() - 0.3).abs() < 1e-9);
        assert!((b.policy_rate.unwrap() - 100.0 / 60.0).abs() < 1e-9);
    }

    #[test]
    fn the_older_and_x_prefixed_fields_are_read() {
        let now = at(1_700_000_000);
        let b = server_budget(
            &headers(&[
                ("ratelimit-limit", "100"),
                ("ratelimit-remaining", "7"),
                ("ratelimit-reset", "20"),
            ]),
            now,
        )
        .unwrap();
        assert_eq!(
            (b.remaining, b.reset),
            (Some(7), Some(Duration::from_secs(20)))
        );

        let b = server_budget(
            &headers(&[
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "1700000045"),
            ]),
            now,
        )
        .unwrap();
        assert_eq!(
            (b.remaining, b.reset),
            (Some(0), Some(Duration::from_secs(45)))
        );
        assert_eq!(b.spend_rate(), None);

        let b = server_budget(
            &headers(&[
                ("x-ratelimit-remaining", "2"),
                ("x-ratelimit-reset", "1700000004500"),
            ]),
            now,
        )
        .unwrap();
        assert_eq!(b.reset, Some(Duration::from_millis(4500)));

        let b = server_budget(
            &headers(&[("ratelimit", "limit=100, remaining=50, reset=5")]),
            now,
        )
        .unwrap();
        assert_eq!(
            (b.remaining, b.reset),
            (Some(50), Some(Duration::from_secs(5)))
        );
    }

    #[test]
    fn the_quota_is_read_from_every_form() {
        let now = at(1_700_000_000);
        let quota = |pairs: &[(&'static str, &'static str)]| {
            server_budget(&headers(pairs), now).and_then(|b| b.quota)
        };
        let q = |limit, window: Option<u64>| {
            Some(Quota {
                limit,
                window: window.map(Duration::from_secs),
            })
        };
        assert_eq!(
            quota(&[("ratelimit-policy", "\"default\";q=100;w=60")]),
            q(100, Some(60))
        );
        assert_eq!(quota(&[("ratelimit-policy", "8;w=1")]), q(8, Some(1)));
        assert_eq!(
            quota(&[("ratelimit", "limit=8, remaining=3, reset=1")]),
            q(8, None)
        );
        assert_eq!(quota(&[("ratelimit-limit", "10, 10;w=1")]), q(10, Some(1)));
        assert_eq!(quota(&[("x-ratelimit-limit", "5000")]), q(5000, None));
        // The stricter of two: the smaller limit, over the longer window said.
        assert_eq!(
            quota(&[("ratelimit-policy", "8;w=1"), ("x-ratelimit-limit", "5")]),
            q(5, Some(1))
        );
        assert_eq!(quota(&[("ratelimit-policy", "\"a\";w=1")]), None);
    }

    #[test]
    fn the_strictest_of_several_fields_wins_and_no_fields_say_nothing() {
        let now = at(1_700_000_000);
        let b = server_budget(
            &headers(&[
                ("ratelimit", "\"a\";r=9;t=5, \"b\";r=2;t=30"),
                ("x-ratelimit-remaining", "4"),
            ]),
            now,
        )
        .unwrap();
        assert_eq!(
            (b.remaining, b.reset),
            (Some(2), Some(Duration::from_secs(30)))
        );
        assert_eq!(server_budget(&headers(&[("x-other", "1")]), now), None);
        assert_eq!(
            server_budget(&headers(&[("ratelimit", "garbage")]), now),
            None
        );
    }
}
