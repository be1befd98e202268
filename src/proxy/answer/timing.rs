//! What courtesy tells a client about its own part in an answer: the `Server-Timing` header
//! (W3C Server Timing), `courtesy-wait;dur=812.4;desc="rate", courtesy-upstream;dur=95.0`.
//!
//! [`Held`] gathers, over a request's attempts, how long courtesy held it for its turns and why
//! (the reason of the attempt that waited longest; see `crate::budget::limiter`'s `waits.rs` for the
//! reason within one wait) and how long the origin took to its response headers. [`stamp`]
//! appends one `Server-Timing` field line to the answer, after any the origin sent (a new line
//! is the same header as a comma-joined one), so the origin's entries are never dropped. The
//! value is written into a buffer on the stack: no `format!` on the request path, and a local
//! answer that did not wait gets a static value.
//!
//! A client's own `Server-Timing` request header is not passed on (`headers::strip_request`),
//! and courtesy's entries never go upstream.

use std::time::Duration;

use bytes::BytesMut;
use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;

use crate::budget::limiter::WaitReason;
use crate::observe::metrics::NotSent;
use crate::observe::telemetry::RequestTrace;
use std::sync::Arc;

/// The `Server-Timing` header (not among `http`'s constants).
pub(crate) const SERVER_TIMING: HeaderName = HeaderName::from_static("server-timing");

/// The entry of an answer that did not wait (most local answers), made at compile time.
const NOT_HELD: HeaderValue = HeaderValue::from_static("courtesy-wait;dur=0.0;desc=\"none\"");

/// The entries of an answer from the response store, which did not wait.
const STORED: HeaderValue =
    HeaderValue::from_static("courtesy-wait;dur=0.0;desc=\"none\", courtesy-cache;desc=\"stored\"");

/// The entries of an answer shared from an identical request in flight (`coalesce`).
const COALESCED: HeaderValue = HeaderValue::from_static(
    "courtesy-wait;dur=0.0;desc=\"none\", courtesy-cache;desc=\"coalesced\"",
);

/// One request's record on its way through courtesy: what it was held for (`Server-Timing`)
/// and, when traces are on, its trace.
#[derive(Debug, Default)]
pub(crate) struct Trail {
    /// What courtesy held it for.
    pub(crate) held: Held,
    /// Its spans.
    pub(crate) trace: Option<Arc<RequestTrace>>,
    /// How many times it was sent to the origin, courtesy's own resends included
    /// (`Courtesy-Tries`; 0: answered by courtesy before any send).
    pub(crate) tries: u32,
}

/// The header that tells a client how many sends to the origin its answer took.
pub(crate) const TRIES: HeaderName = HeaderName::from_static("courtesy-tries");

/// `Courtesy-Tries: n`, made at compile time for every count courtesy can reach (one send and at
/// most 10 retries of `retry_idempotent`, a signed resend, a resend on a fresh connection and
/// one over HTTP/1.1).
pub(crate) fn tries_value(tries: u32) -> HeaderValue {
    const VALUES: [HeaderValue; 16] = [
        HeaderValue::from_static("0"),
        HeaderValue::from_static("1"),
        HeaderValue::from_static("2"),
        HeaderValue::from_static("3"),
        HeaderValue::from_static("4"),
        HeaderValue::from_static("5"),
        HeaderValue::from_static("6"),
        HeaderValue::from_static("7"),
        HeaderValue::from_static("8"),
        HeaderValue::from_static("9"),
        HeaderValue::from_static("10"),
        HeaderValue::from_static("11"),
        HeaderValue::from_static("12"),
        HeaderValue::from_static("13"),
        HeaderValue::from_static("14"),
        HeaderValue::from_static("15"),
    ];
    match VALUES.get(tries as usize) {
        Some(value) => value.clone(),
        None => HeaderValue::from(tries),
    }
}

/// How long courtesy held one request, why, and how long the origin took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Held {
    /// Every wait for a turn, over all attempts.
    wait: Duration,
    /// What held the attempt that waited longest.
    reason: WaitReason,
    /// That attempt's wait.
    longest: Duration,
    /// Time from sending to the response headers of the answer the client gets.
    upstream: Option<Duration>,
    /// `[proxy] server_timing` as read for this request (`None`: not read yet).
    pub(crate) enabled: Option<bool>,
    /// Answered without asking the host: from the store, or with an identical request's answer.
    pub(crate) not_sent: Option<NotSent>,
}

impl Held {
    /// An answer that was not held, with `[proxy] server_timing` as read.
    pub(crate) fn not_held(enabled: bool) -> Self {
        Held {
            enabled: Some(enabled),
            ..Held::default()
        }
    }

    /// One attempt waited `wait` for its turn, held longest by `reason`.
    pub(crate) fn waited(&mut self, wait: Duration, reason: WaitReason) {
        self.wait += wait;
        if reason != WaitReason::None && wait >= self.longest {
            (self.longest, self.reason) = (wait, reason);
        }
    }

    /// The origin answered after `latency`.
    pub(crate) fn answered(&mut self, latency: Duration) {
        self.upstream = Some(latency);
    }

    /// The reason reported for the whole request.
    pub(crate) fn reason(&self) -> WaitReason {
        self.reason
    }

    /// The whole wait.
    pub(crate) fn wait(&self) -> Duration {
        self.wait
    }

    /// The header's value.
    pub(crate) fn header_value(&self) -> HeaderValue {
        match self.not_sent {
            Some(NotSent::Stored) => return STORED,
            Some(NotSent::Coalesced) => return COALESCED,
            None => {}
        }
        if self.wait.is_zero() && self.upstream.is_none() && self.reason == WaitReason::None {
            return NOT_HELD;
        }
        // Written straight into the buffer the value keeps (no second copy).
        let mut out = BytesMut::with_capacity(96);
        out.extend_from_slice(b"courtesy-wait;dur=");
        push_millis(&mut out, self.wait);
        out.extend_from_slice(b";desc=\"");
        out.extend_from_slice(self.reason.word().as_bytes());
        out.extend_from_slice(b"\"");
        if let Some(upstream) = self.upstream {
            out.extend_from_slice(b", courtesy-upstream;dur=");
            push_millis(&mut out, upstream);
        }
        // Only digits, ASCII words and punctuation: always a valid value.
        HeaderValue::from_maybe_shared(out.freeze()).unwrap_or(NOT_HELD)
    }
}

/// Milliseconds with one decimal, rounded to the nearest tenth (`812.4`), in integer arithmetic
/// on 64 bits.
fn push_millis(out: &mut BytesMut, d: Duration) {
    let micros = d
        .as_secs()
        .saturating_mul(1_000_000)
        .saturating_add(u64::from(d.subsec_micros()));
    let tenths = micros.saturating_add(50) / 100;
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut whole = tenths / 10;
    loop {
        i -= 1;
        digits[i] = b'0' + (whole % 10) as u8;
        whole /= 10;
        if whole == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
    out.extend_from_slice(&[b'.', b'0' + (tenths % 10) as u8]);
}

/// Appends courtesy's `Server-Timing` entries to `headers`, after the origin's own.
pub(crate) fn stamp(headers: &mut HeaderMap, held: &Held) {
    headers.append(SERVER_TIMING, held.header_value());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_value_names_the_wait_its_reason_and_the_origins_time() {
        let mut held = Held::default();
        held.waited(Duration::from_micros(812_449), WaitReason::Rate);
        held.answered(Duration::from_micros(95_000));
        assert_eq!(
            held.header_value(),
            "courtesy-wait;dur=812.4;desc=\"rate\", courtesy-upstream;dur=95.0"
        );
        assert_eq!(Held::default().header_value(), NOT_HELD);
        let mut long = Held::default();
        long.waited(
            Duration::from_secs(3 * 3600) + Duration::from_micros(50),
            WaitReason::Cooldown,
        );
        assert_eq!(
            long.header_value(),
            "courtesy-wait;dur=10800000.1;desc=\"cooldown\""
        );
    }

    #[test]
    fn an_answer_not_sent_says_how() {
        let mut held = Held {
            not_sent: Some(NotSent::Stored),
            ..Held::default()
        };
        assert_eq!(
            held.header_value(),
            "courtesy-wait;dur=0.0;desc=\"none\", courtesy-cache;desc=\"stored\""
        );
        held.not_sent = Some(NotSent::Coalesced);
        assert!(held
            .header_value()
            .to_str()
            .unwrap()
            .ends_with("desc=\"coalesced\""));
    }

    #[test]
    fn several_attempts_add_up_and_the_longest_names_the_reason() {
        let mut held = Held::default();
        held.waited(Duration::from_millis(10), WaitReason::Rate);
        held.waited(Duration::from_millis(2000), WaitReason::Cooldown);
        held.waited(Duration::ZERO, WaitReason::None);
        assert_eq!(held.wait(), Duration::from_millis(2010));
        assert_eq!(held.reason(), WaitReason::Cooldown);
    }

    #[test]
    fn ours_is_appended_after_the_origins_and_a_clients_is_never_passed_on() {
        let mut headers = HeaderMap::new();
        headers.insert(SERVER_TIMING, HeaderValue::from_static("db;dur=53"));
        stamp(&mut headers, &Held::default());
        let all: Vec<_> = headers.get_all(SERVER_TIMING).iter().collect();
        assert_eq!(all, ["db;dur=53", "courtesy-wait;dur=0.0;desc=\"none\""]);
        crate::proxy::forward::headers::strip_request(&mut headers);
        assert!(!headers.contains_key(SERVER_TIMING));
    }
}
