//! One host event as Server-Sent Events write it: `id:`, `event:` and one `data:` line of JSON,
//! then a blank line (`docs/see-and-steer.md` lists every type and its fields).

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde_json::{json, Map, Value};

use crate::budget::limiter::{EventKind, HostEvent, PausedBy, RateWhy, ResumedBy, Source};

/// The longest `reason` or `detail` an event carries, in bytes (cut at a character boundary):
/// an event stays small whatever a page or a marker says.
const MAX_WORDS: usize = 200;

/// Milliseconds since the Unix epoch (0 before it).
pub(crate) fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis().min(u128::from(u64::MAX)) as u64)
}

/// The event's type, as `event:` and `type` name it.
pub(crate) fn type_of(kind: &EventKind) -> &'static str {
    match kind {
        EventKind::CooldownStarted { .. } => "cooldown_started",
        EventKind::CooldownEnded { .. } => "cooldown_ended",
        EventKind::Paused { .. } => "paused",
        EventKind::Resumed { .. } => "resumed",
        EventKind::BlockDetected { .. } => "block_detected",
        EventKind::RateChanged { .. } => "rate_changed",
        EventKind::RobotsFetched { .. } => "robots_fetched",
        EventKind::QueueFull { .. } => "queue_full",
    }
}

/// `text` cut to at most [`MAX_WORDS`] bytes.
fn bounded(text: &str) -> String {
    let mut end = text.len().min(MAX_WORDS);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// A rate as JSON: requests per second to the microsecond.
fn rate(value: f64) -> Value {
    json!((value * 1e6).round() / 1e6)
}

/// The fields of one type of event, beside those every event has.
fn fields(kind: &EventKind) -> Value {
    match kind {
        EventKind::CooldownStarted {
            until,
            cause,
            extended,
        } => json!({
            "until_unix_ms": unix_ms(*until),
            "cause": cause.word(),
            "reason": bounded(&cause.to_string()),
            "extended": extended,
        }),
        EventKind::CooldownEnded { cause } => json!({ "cause": cause.word() }),
        EventKind::Paused { until, by, reason } => {
            let by = match by {
                PausedBy::Operator => "operator",
                PausedBy::Block => "block",
            };
            json!({ "until_unix_ms": unix_ms(*until), "by": by, "reason": bounded(reason) })
        }
        EventKind::Resumed { by } => {
            let by = match by {
                ResumedBy::Operator => "operator",
                ResumedBy::Expired => "expired",
            };
            json!({ "by": by })
        }
        EventKind::BlockDetected {
            signal,
            detail,
            status,
        } => json!({ "signal": signal, "detail": bounded(detail), "status": status }),
        EventKind::RateChanged { old, new, why } => json!({
            "old": rate(*old),
            "new": rate(*new),
            "why": rate_why(*why),
        }),
        EventKind::RobotsFetched {
            status,
            disallows_any,
            crawl_delay_s,
        } => json!({
            "status": status,
            "disallows_any": disallows_any,
            "crawl_delay_s": crawl_delay_s,
        }),
        EventKind::QueueFull { max_queue } => json!({ "max_queue": max_queue }),
    }
}

/// The word of a rate change's cause.
fn rate_why(why: RateWhy) -> &'static str {
    match why {
        RateWhy::Backoff => "backoff",
        RateWhy::Recovery => "recovery",
        RateWhy::Latency => "latency",
        RateWhy::Ratelimit => "ratelimit",
        RateWhy::Operator => "operator",
        RateWhy::Robots => "robots",
    }
}

/// The SSE frame of `event`, numbered `id`.
pub(crate) fn render(id: u64, event: &HostEvent) -> Bytes {
    let kind = type_of(&event.kind);
    let mut object = Map::new();
    object.insert("id".into(), json!(id));
    object.insert("type".into(), json!(kind));
    object.insert("host".into(), json!(&*event.host));
    object.insert("at_unix_ms".into(), json!(unix_ms(event.at)));
    let source = match event.source {
        Source::Local => "local",
        Source::Shared => "shared",
    };
    object.insert("source".into(), json!(source));
    if let Value::Object(extra) = fields(&event.kind) {
        object.extend(extra);
    }
    sse(id, kind, &Value::Object(object))
}

/// The `missed` frame: the client's `last_event_id` is older than the oldest still buffered
/// (`oldest_id`), or from another run; numbered just before the oldest, so that the client's
/// `Last-Event-ID` moves to where the buffer starts. `host` is the filter, if any.
pub(crate) fn missed(last_event_id: u64, oldest_id: u64, host: Option<&str>) -> Bytes {
    let id = oldest_id.saturating_sub(1);
    let value = json!({
        "id": id,
        "type": "missed",
        "host": host,
        "at_unix_ms": unix_ms(SystemTime::now()),
        "source": "local",
        "last_event_id": last_event_id,
        "oldest_id": oldest_id,
    });
    sse(id, "missed", &value)
}

/// `id:`, `event:`, `data:` and the blank line that ends an event.
fn sse(id: u64, kind: &str, data: &Value) -> Bytes {
    Bytes::from(format!("id: {id}\nevent: {kind}\ndata: {data}\n\n"))
}

/// The keep-alive comment: idle proxies and clients keep the stream open.
pub(crate) const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pacing::policy::CooldownCause;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_frame_is_one_sse_event_with_its_json_on_one_line() {
        let at = UNIX_EPOCH + Duration::from_millis(1_765_000_000_000);
        let event = HostEvent {
            host: Arc::from("a.test:443"),
            source: Source::Local,
            at,
            kind: EventKind::CooldownStarted {
                until: at + Duration::from_secs(3),
                cause: CooldownCause::Status(429),
                extended: false,
            },
        };
        let text = String::from_utf8(render(42, &event).to_vec()).expect("utf-8");
        let mut lines = text.split('\n');
        assert_eq!(lines.next(), Some("id: 42"));
        assert_eq!(lines.next(), Some("event: cooldown_started"));
        let data = lines
            .next()
            .and_then(|l| l.strip_prefix("data: "))
            .expect("data");
        assert_eq!(lines.collect::<Vec<_>>(), ["", ""]);
        let json: Value = serde_json::from_str(data).expect("json");
        assert_eq!(json["id"], 42);
        assert_eq!(json["type"], "cooldown_started");
        assert_eq!(json["host"], "a.test:443");
        assert_eq!(json["at_unix_ms"], 1_765_000_000_000u64);
        assert_eq!(json["until_unix_ms"], 1_765_000_003_000u64);
        assert_eq!(json["cause"], "status:429");
        assert_eq!(json["source"], "local");
        assert_eq!(json["reason"], "the host answered 429");
    }

    #[test]
    fn words_are_bounded_at_a_character_boundary() {
        let long = "é".repeat(300);
        let cut = bounded(&long);
        assert!(cut.len() <= MAX_WORDS);
        assert!(cut.chars().all(|c| c == 'é'));
    }

    #[test]
    fn missed_names_the_id_sent_and_the_oldest_kept() {
        let text = String::from_utf8(missed(3, 10, Some("a.test:80")).to_vec()).expect("utf-8");
        assert!(text.starts_with("id: 9\nevent: missed\ndata: "), "{text}");
        let data = text.lines().nth(2).and_then(|l| l.strip_prefix("data: "));
        let json: Value = serde_json::from_str(data.expect("data")).expect("json");
        assert_eq!(json["last_event_id"], 3);
        assert_eq!(json["oldest_id"], 10);
        assert_eq!(json["host"], "a.test:80");
    }
}
