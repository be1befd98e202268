//! `GET /v1/events[?host=H]`: the host events as Server-Sent Events (`crate::observe::events`),
//! under the admin API's read rules; and `GET /v1/events/stats`, what the hub holds (its bounds
//! measured: streams open, bytes queued for them, events buffered).

use std::time::Duration;

use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue, Response, StatusCode};

use super::{error_json, json_response, percent_decode, query_param, Admin};
use crate::observe::events::{EventStream, Filter, Refused};
use crate::proxy::answer::body::ProxyBody;
use crate::proxy::answer::response::{local, ProxyError};

/// How long a client refused for want of room is told to wait before it tries again.
const FULL_RETRY_AFTER: Duration = Duration::from_secs(10);

impl Admin {
    /// `GET /v1/events`: a stream of host events, those `?host=` names only when given, after
    /// a replay of what was missed since `Last-Event-ID` (or `?last_event_id=`).
    pub(super) async fn events(&self, headers: &HeaderMap, query: &str) -> Response<ProxyBody> {
        let filter = match query_param(query, "host") {
            None => Filter::All,
            Some(host) => match self.filter_of(host).await {
                Ok(filter) => filter,
                Err((status, message)) => return error_json(status, &message),
            },
        };
        let last = match last_event_id(headers, query) {
            Ok(last) => last,
            Err(message) => return error_json(StatusCode::BAD_REQUEST, &message),
        };
        match self.events.subscribe(filter, last) {
            Ok(subscription) => {
                let body = ProxyBody::Events(EventStream::new(subscription));
                let mut r = Response::new(body);
                let headers = r.headers_mut();
                headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
                headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
                // A reverse proxy in front of the admin port passes each event on at once.
                headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
                r
            }
            Err(Refused::Full) => local(
                StatusCode::SERVICE_UNAVAILABLE,
                ProxyError::ConnectionLimitReached,
                &format!(
                    "{} event streams are open, the most courtesy keeps",
                    self.events.max_subscribers()
                ),
                Some(FULL_RETRY_AFTER),
            ),
            Err(Refused::ShuttingDown) => local(
                StatusCode::SERVICE_UNAVAILABLE,
                ProxyError::ConnectionLimitReached,
                "courtesy is shutting down",
                Some(FULL_RETRY_AFTER),
            ),
        }
    }

    /// `GET /v1/events/stats`: what the event hub holds now.
    pub(super) fn events_stats(&self) -> Response<ProxyBody> {
        json_response(StatusCode::OK, &self.events.stats())
    }

    /// The filter `?host=` asks for: a known budget's key or a `host:port` (any spelling: the
    /// budget it spends), or a bare name (every budget of that name, on any port).
    async fn filter_of(&self, host: &str) -> Result<Filter, (StatusCode, String)> {
        let decoded = percent_decode(host).to_ascii_lowercase();
        if let Some(known) = self.limiter.known_key(&decoded) {
            return Ok(Filter::Key(known.key));
        }
        let (name, port) = crate::wire::host_name::split(&decoded)
            .map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?;
        match port {
            Some(_) => Ok(Filter::Key(self.find(host).await?.key)),
            None => Ok(Filter::Name(name)),
        }
    }
}

/// The id the client last saw: the `Last-Event-ID` header (what an EventSource sends on a
/// reconnect), else `?last_event_id=` (for polyfills that cannot set the header).
fn last_event_id(headers: &HeaderMap, query: &str) -> Result<Option<u64>, String> {
    let given = match headers.get("last-event-id") {
        Some(value) => Some(value.to_str().unwrap_or("").trim().to_string()),
        None => query_param(query, "last_event_id").map(percent_decode),
    };
    match given.as_deref() {
        None | Some("") => Ok(None),
        Some(text) => text.parse::<u64>().map(Some).map_err(|_| {
            format!(
                "Last-Event-ID must be an event's id (a whole number), got {:?}",
                text.chars().take(40).collect::<String>()
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_event_id_comes_from_the_header_before_the_query() {
        let mut headers = HeaderMap::new();
        assert_eq!(last_event_id(&headers, ""), Ok(None));
        assert_eq!(last_event_id(&headers, "last_event_id=7"), Ok(Some(7)));
        headers.insert("last-event-id", HeaderValue::from_static(" 12 "));
        assert_eq!(last_event_id(&headers, "last_event_id=7"), Ok(Some(12)));
        headers.insert("last-event-id", HeaderValue::from_static("x"));
        assert!(last_event_id(&headers, "").is_err());
    }
}
