//! What an upstream answer says about the host: the [`Feedback`] class, `Retry-After`, and the
//! server's own budget from RateLimit headers.
//!
//! Pure functions of the response head and an explicit `now` (a `SystemTime`, only because HTTP dates
//! and epoch resets are wall-clock times). This module reads signals; it does not act on them
//! (`crate::pacing::policy` does) and never sees responses that courtesy made itself.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::HeaderName;
use http::{HeaderMap, StatusCode};

use crate::pacing::ratelimit::{self, NamedPolicy, QuotaUnit};

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

/// The price a priced page asks: the `crawler-price` of an HTTP 402 (Cloudflare's pay per crawl),
/// as the site wrote it (`USD 0.01`). A 402 without it is an ordinary 4xx.
pub(crate) fn crawler_price(status: StatusCode, headers: &HeaderMap) -> Option<&str> {
    if status != StatusCode::PAYMENT_REQUIRED {
        return None;
    }
    headers
        .get("crawler-price")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// Classifies an upstream answer by its status and head: a priced page (see [`crawler_price`]) is
/// a price, not a refusal or overload, so it is `Neutral` whatever `backoff_statuses` holds;
/// everything else as [`classify`].
pub(crate) fn classify_answer(
    status: StatusCode,
    headers: &HeaderMap,
    backoff_statuses: &[u16],
) -> Feedback {
    if crawler_price(status, headers).is_some() {
        return Feedback::Neutral;
    }
    classify(status, backoff_statuses)
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
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerBudget {
    /// Requests left in the current window, if said (of the strictest request policy).
    pub remaining: Option<u64>,
    /// Time until the window resets, if said (of the same policy as `remaining`).
    pub reset: Option<Duration>,
    /// The server's request policy as a rate (quota ÷ window seconds), the lowest of its named
    /// request policies, if said.
    pub policy_rate: Option<f64>,
    /// The quota the server announced (`RateLimit-Policy`, `RateLimit-Limit`, `limit=`,
    /// `X-RateLimit-Limit`), if said: what the learned limit (`controller = "cubic"`) aims just
    /// under, so that a changed quota is followed without waiting for a 429.
    pub quota: Option<Quota>,
    /// The strictest `qu="content-bytes"` policy: the host's byte budget from the server.
    pub bytes: Option<ByteQuota>,
    /// A `content-bytes` policy whose counter is spent (`r=0`): the time until its reset.
    pub bytes_spent: Option<Duration>,
    /// The lowest `qu="concurrency"` quota: a ceiling on the host's `concurrency`.
    pub concurrency: Option<u32>,
    /// Every policy `RateLimit-Policy` listed (and counters of names it did not), as the
    /// server wrote them, for `/hosts`; `None` when the answer had neither field in the
    /// draft's form. With `RateLimit-Policy` present the list is the server's whole word: a
    /// byte or concurrency policy it no longer lists is lifted.
    pub policies: Option<Arc<[NamedPolicy]>>,
}

/// A byte quota the server announced (`qu="content-bytes"`): bytes per window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ByteQuota {
    /// Bytes per second (quota ÷ window).
    pub rate: f64,
    /// Bytes allowed in one window.
    pub quota: u64,
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

/// (Tests) [`read_server_budget`]'s budget alone.
#[cfg(test)]
pub(crate) fn server_budget(headers: &HeaderMap, now: SystemTime) -> Option<ServerBudget> {
    read_server_budget(headers, now).0
}

/// Reads the server's budget from the IETF httpapi draft fields (`RateLimit: "name";r=R;t=T` and
/// `RateLimit-Policy: "name";q=Q;w=W;qu=U;pk=:K:`, RFC 9651 structured fields: see
/// [`crate::pacing::ratelimit`]), the older `RateLimit-Limit/-Remaining/-Reset`, and
/// `X-RateLimit-Limit/-Remaining/-Reset`. Of several named request policies the strictest is
/// obeyed: the lowest rate `q/w`, and the counter that leaves the least per second with its own
/// reset. A `-Reset` value is read as seconds from now, unless it is larger than 10^9, which no
/// delay is but every Unix time since 2001 is: then it is an epoch time in seconds (or in
/// milliseconds above 10^12). The quota comes from the same fields (`q=`, an older
/// `RateLimit-Policy: 10;w=1`, `limit=`) and from `RateLimit-Limit` and `X-RateLimit-Limit`
/// (`10`, or draft-01's `10, 10;w=1`).
///
/// Also returns the name of a RateLimit field that was ignored as malformed, if any (for the
/// caller to log: this module does no I/O).
pub(crate) fn read_server_budget(
    headers: &HeaderMap,
    now: SystemTime,
) -> (Option<ServerBudget>, Option<&'static str>) {
    // Every field read below is named `ratelimit…` or `x-ratelimit…`, and most responses carry
    // none: one pass over the names, instead of eight lookups that each hash a name.
    if !headers.keys().any(names_a_rate_limit) {
        return (None, None);
    }
    let mut budget = ServerBudget::default();
    let (policy_field, limit_field_value) = (
        field_lines(headers, &RATELIMIT_POLICY),
        field_lines(headers, &RATELIMIT),
    );
    let fields = ratelimit::read(policy_field.as_deref(), limit_field_value.as_deref());
    let mut counters = Vec::new();
    for policy in &fields.policies {
        match policy.unit {
            QuotaUnit::Request => budget.take_request_policy(policy, &mut counters),
            QuotaUnit::ContentBytes => budget.take_bytes_policy(policy),
            QuotaUnit::Concurrency => budget.take_concurrency_policy(policy),
            QuotaUnit::Other(_) => {}
        }
    }
    (budget.remaining, budget.reset) = strictest_counter(&counters);
    if let Some(c) = fields.combined {
        budget.take_combined(c);
    }
    if fields.listed || !fields.policies.is_empty() {
        budget.policies = Some(fields.policies.into());
    }
    budget.take_older_fields(headers, now);
    (budget.said().then_some(budget), fields.malformed)
}

impl ServerBudget {
    /// A named policy counting requests: its rate `q/w` (unless in the older form), its quota,
    /// and its counter `(r, t)` among `counters`.
    fn take_request_policy(
        &mut self,
        policy: &NamedPolicy,
        counters: &mut Vec<(u64, Option<Duration>)>,
    ) {
        if let (Some(q), Some(w), false) = (policy.quota, policy.window, policy.legacy) {
            let rate = q as f64 / w.as_secs_f64();
            self.policy_rate = Some(self.policy_rate.map_or(rate, |p| p.min(rate)));
        }
        let quota = policy.quota.map(|limit| Quota {
            limit,
            window: policy.window,
        });
        self.quota = Quota::stricter(self.quota, quota);
        if let Some(r) = policy.remaining {
            counters.push((r, policy.reset));
        }
    }

    /// A named policy counting `content-bytes`: the slowest byte rate, and a spent counter's
    /// reset.
    fn take_bytes_policy(&mut self, policy: &NamedPolicy) {
        // A quota of 0 bytes would be a debt without end: its spent counter says more.
        if let (Some(q @ 1..), Some(w)) = (policy.quota, policy.window) {
            let rate = q as f64 / w.as_secs_f64();
            if self.bytes.is_none_or(|b| rate < b.rate) {
                self.bytes = Some(ByteQuota { rate, quota: q });
            }
        }
        if let (Some(0), Some(t)) = (policy.remaining, policy.reset) {
            self.bytes_spent = max_opt(self.bytes_spent, Some(t));
        }
    }

    /// A named policy counting `concurrency`: the lowest ceiling, at least 1.
    fn take_concurrency_policy(&mut self, policy: &NamedPolicy) {
        if let Some(q) = policy.quota {
            let q = u32::try_from(q).unwrap_or(u32::MAX).max(1);
            self.concurrency = Some(self.concurrency.map_or(q, |c| c.min(q)));
        }
    }

    /// The draft-03 form: `limit=100, remaining=50, reset=5`.
    fn take_combined(&mut self, c: ratelimit::Combined) {
        self.remaining = min_opt(self.remaining, c.remaining);
        self.reset = max_opt(self.reset, c.reset.map(Duration::from_secs));
        let limit = c.limit.map(|limit| Quota {
            limit,
            window: None,
        });
        self.quota = Quota::stricter(self.quota, limit);
    }

    /// The older separate fields: `RateLimit-Limit/-Remaining/-Reset` and their `X-` forms.
    fn take_older_fields(&mut self, headers: &HeaderMap, now: SystemTime) {
        for name in &LIMIT_FIELDS {
            self.quota = Quota::stricter(self.quota, header(headers, name).and_then(limit_field));
        }
        // Read on every response: names made at compile time, no parsing, no allocation.
        for (remaining, reset) in &SEPARATE_FIELDS {
            let remaining = header(headers, remaining).and_then(first_number);
            let reset = header(headers, reset)
                .and_then(first_number)
                .map(|n| reset_delay(n, now));
            if remaining.is_some() || reset.is_some() {
                self.remaining = min_opt(self.remaining, remaining);
                self.reset = max_opt(self.reset, reset);
            }
        }
    }

    /// Whether the server said anything of its budget.
    fn said(&self) -> bool {
        self.remaining.is_some()
            || self.policy_rate.is_some()
            || self.quota.is_some()
            || self.bytes.is_some()
            || self.bytes_spent.is_some()
            || self.concurrency.is_some()
            || self.policies.as_ref().is_some_and(|p| !p.is_empty())
    }
}

/// Of the request counters `(r, t)`, the strictest, with its own reset: a spent one (`r = 0`)
/// with the longest reset, else the one that leaves the fewest requests per second until its
/// reset, else (no resets said) the fewest left.
fn strictest_counter(counters: &[(u64, Option<Duration>)]) -> (Option<u64>, Option<Duration>) {
    let spent = counters
        .iter()
        .filter(|(r, t)| *r == 0 && t.is_some())
        .max_by_key(|(_, t)| *t);
    if let Some(&(r, t)) = spent {
        return (Some(r), t);
    }
    let per_second = |r: u64, t: Duration| r as f64 / t.as_secs_f64().max(1e-3);
    let paced = counters
        .iter()
        .filter_map(|&(r, t)| Some((r, t?)))
        .min_by(|a, b| per_second(a.0, a.1).total_cmp(&per_second(b.0, b.1)));
    if let Some((r, t)) = paced {
        return (Some(r), Some(t));
    }
    (counters.iter().map(|(r, _)| *r).min(), None)
}

/// The field lines of `name` joined into one value (RFC 9651 4.2: `, ` between lines); `None`
/// when there are none.
pub(crate) fn field_lines(headers: &HeaderMap, name: &HeaderName) -> Option<Vec<u8>> {
    let mut lines = headers.get_all(name).iter();
    let first = lines.next()?;
    let mut value = first.as_bytes().to_vec();
    for line in lines {
        value.extend_from_slice(b", ");
        value.extend_from_slice(line.as_bytes());
    }
    Some(value)
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
    fn a_priced_page_is_neutral_even_as_a_backoff_status() {
        let mut priced = HeaderMap::new();
        priced.insert("crawler-price", "USD 0.01".parse().unwrap());
        let backoff = [402, 500, 502, 503, 504];
        let status = StatusCode::PAYMENT_REQUIRED;
        assert_eq!(crawler_price(status, &priced), Some("USD 0.01"));
        assert_eq!(
            classify_answer(status, &priced, &backoff),
            Feedback::Neutral
        );
        // A 402 without crawler-price is an ordinary status.
        let plain = HeaderMap::new();
        assert_eq!(crawler_price(status, &plain), None);
        assert_eq!(
            classify_answer(status, &plain, &backoff),
            Feedback::Overloaded
        );
        assert_eq!(
            classify_answer(status, &plain, &DEFAULT_BACKOFF),
            Feedback::Neutral
        );
        // crawler-price on another status is no price.
        assert_eq!(crawler_price(StatusCode::OK, &priced), None);
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

    #[test]
    fn of_several_named_request_policies_the_strictest_is_obeyed() {
        let now = at(1_700_000_000);
        let b = server_budget(
            &headers(&[
                (
                    "ratelimit-policy",
                    "\"burst\";q=100;w=60;pk=:cGFydA==:, \"daily\";q=1000;w=86400",
                ),
                ("ratelimit", "\"burst\";r=50;t=30, \"daily\";r=20;t=40000"),
            ]),
            now,
        )
        .unwrap();
        // The lowest rate: 1000 a day, not 100 a minute.
        assert!((b.policy_rate.unwrap() - 1000.0 / 86400.0).abs() < 1e-12);
        // The counter that leaves the least per second, with its own reset: 20 over 40000 s
        // (0.0005/s) before 50 over 30 s; never 20 with the other's 30 s.
        assert_eq!(
            (b.remaining, b.reset),
            (Some(20), Some(Duration::from_secs(40000)))
        );
        let policies = b.policies.as_deref().unwrap();
        assert_eq!(policies.len(), 2);
        assert_eq!(policies[0].partition.as_deref(), Some("cGFydA=="));
        assert_eq!(
            (b.bytes, b.concurrency, b.bytes_spent),
            (None, None, None),
            "request policies only"
        );

        // A spent counter is the strictest, whatever the others say; the longest spent wins.
        let b = server_budget(
            &headers(&[(
                "ratelimit",
                "\"a\";r=0;t=5, \"b\";r=1;t=1000, \"c\";r=0;t=9",
            )]),
            now,
        )
        .unwrap();
        assert_eq!(
            (b.remaining, b.reset),
            (Some(0), Some(Duration::from_secs(9)))
        );
    }

    #[test]
    fn the_quota_unit_picks_the_budget_a_policy_goes_to() {
        let now = at(1_700_000_000);
        let b = server_budget(
            &headers(&[
                (
                    "ratelimit-policy",
                    "\"req\";q=10;w=1, \"bytes\";q=100000;w=10;qu=\"content-bytes\", \
                     \"small\";q=50000;w=10;qu=\"content-bytes\", \"par\";q=3;qu=\"concurrency\", \
                     \"par2\";q=5;qu=\"concurrency\", \"odd\";q=1;w=100;qu=\"widgets\"",
                ),
                ("ratelimit", "\"req\";r=9;t=1, \"small\";r=0;t=7"),
            ]),
            now,
        )
        .unwrap();
        // Only the request policy is a rate: a byte quota is never read as requests.
        assert_eq!(b.policy_rate, Some(10.0));
        assert_eq!(b.quota.map(|q| q.limit), Some(10));
        assert_eq!(
            b.bytes,
            Some(ByteQuota {
                rate: 5000.0,
                quota: 50000
            }),
            "the lower byte rate"
        );
        assert_eq!(b.bytes_spent, Some(Duration::from_secs(7)));
        assert_eq!(b.concurrency, Some(3), "the lower ceiling");
        // The request counter is the request policy's own, not the byte policy's r=0.
        assert_eq!(
            (b.remaining, b.reset),
            (Some(9), Some(Duration::from_secs(1)))
        );
        assert_eq!(b.policies.as_deref().map(<[_]>::len), Some(6));

        // A byte policy alone still says something.
        let b = server_budget(
            &headers(&[("ratelimit-policy", "\"b\";q=1024;w=1;qu=\"content-bytes\"")]),
            now,
        )
        .unwrap();
        assert_eq!((b.policy_rate, b.quota, b.remaining), (None, None, None));
        assert_eq!(b.bytes.map(|q| q.rate), Some(1024.0));
        // A quota of no bytes at all is no byte budget (a debt without end).
        let b = server_budget(
            &headers(&[("ratelimit-policy", "\"b\";q=0;w=1;qu=\"content-bytes\"")]),
            now,
        )
        .unwrap();
        assert_eq!(b.bytes, None);
    }

    #[test]
    fn malformed_fields_are_ignored_and_named_and_the_rest_still_read() {
        let now = at(1_700_000_000);
        let (b, malformed) = read_server_budget(
            &headers(&[
                ("ratelimit-policy", "\"a\";q=10;w=1,,"),
                ("x-ratelimit-remaining", "4"),
                ("x-ratelimit-reset", "10"),
            ]),
            now,
        );
        assert_eq!(malformed, Some("RateLimit-Policy"));
        let b = b.unwrap();
        assert_eq!((b.policy_rate, b.policies), (None, None));
        assert_eq!(b.remaining, Some(4), "the X- fields still read");
        let (b, malformed) = read_server_budget(&headers(&[("ratelimit", "\"a\";r=1 \"b\"")]), now);
        assert_eq!((b, malformed), (None, Some("RateLimit")));
        let (_, malformed) = read_server_budget(&headers(&[("ratelimit", "\"a\";r=1")]), now);
        assert_eq!(malformed, None);
    }

    #[test]
    fn field_lines_of_one_name_are_one_list() {
        let now = at(1_700_000_000);
        let b = server_budget(
            &headers(&[
                ("ratelimit-policy", "\"a\";q=100;w=10"),
                ("ratelimit-policy", "\"b\";q=5;w=10"),
            ]),
            now,
        )
        .unwrap();
        assert_eq!(b.policy_rate, Some(0.5));
        assert_eq!(b.policies.as_deref().map(<[_]>::len), Some(2));
    }
}
