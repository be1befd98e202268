//! What a stored entry can do for a request under `cache = "http"` (RFC 9111 as a shared
//! cache): answer it (in full, or with a local 304 when the client's own validators match),
//! be revalidated with the origin, or nothing. Pure: the time is passed in.

use std::time::{Duration, SystemTime};

use http::HeaderMap;

use super::freshness::{self, Directives, Reuse};
use super::store::{personal, Head};

/// The host's settings the decision reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Knobs {
    /// `heuristic_freshness`: a freshness guessed from `Last-Modified`.
    pub heuristic: bool,
    /// `min_refetch_seconds`: within it, a repeat is answered from the store even when stale.
    pub min_refetch: Duration,
}

/// What the store does for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// Answer from the entry without asking the origin; `age` is its `Age`.
    Serve {
        /// The client's own validators match: a 304 is its answer.
        not_modified: bool,
        /// The entry's age now.
        age: Duration,
    },
    /// Ask the origin whether the entry still holds, with its validators.
    Revalidate,
    /// The entry cannot be used for this request: the request goes as it came.
    Pass,
}

/// What `head` (the entry for the request's key) can do for a request with `request`'s headers
/// at `now`.
pub(crate) fn lookup(head: &Head, request: &HeaderMap, knobs: Knobs, now: SystemTime) -> Lookup {
    let stored = head.header_map();
    if !head.matches(request) || personal(request, &stored) {
        return Lookup::Pass;
    }
    let exchanged = head.exchanged();
    let lifetime = freshness::lifetime(&stored, knobs.heuristic, exchanged.received);
    let age = freshness::age(&stored, exchanged, now);
    let asked = Directives::of(request);
    // A client's no-cache or max-age=0 always reaches the origin, min_refetch_seconds or not.
    let insists = asked.no_cache || asked.max_age == Some(0);
    let recent = now
        .duration_since(exchanged.received)
        .is_ok_and(|since| since < knobs.min_refetch);
    let serve =
        freshness::reuse(request, &stored, lifetime, age) == Reuse::Serve || (recent && !insists);
    if serve {
        let not_modified =
            freshness::conditional(request) && freshness::not_modified(request, &stored);
        return Lookup::Serve { not_modified, age };
    }
    if head.etag.is_some() || head.last_modified.is_some() {
        Lookup::Revalidate
    } else {
        Lookup::Pass
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::cache::freshness::tests::map;
    use crate::proxy::cache::store::head_of;
    use http::StatusCode;

    /// An entry with `headers`, received at `received` (seconds after an epoch of the tests).
    fn entry(headers: &[(&str, &str)], received: u64) -> Head {
        let mut head = head_of("http://a.test/x", StatusCode::OK, &map(headers));
        head.stored_at_unix_ms = received * 1000;
        head.requested_at_unix_ms = received * 1000;
        head
    }

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)
    }

    const OFF: Knobs = Knobs {
        heuristic: false,
        min_refetch: Duration::ZERO,
    };

    #[test]
    fn a_fresh_entry_answers_and_a_stale_one_is_revalidated_or_passed() {
        let none = HeaderMap::new();
        let fresh = entry(&[("cache-control", "max-age=60"), ("etag", "\"a\"")], 1000);
        let served = |age| Lookup::Serve {
            not_modified: false,
            age: Duration::from_secs(age),
        };
        assert_eq!(lookup(&fresh, &none, OFF, at(1030)), served(30));
        assert_eq!(lookup(&fresh, &none, OFF, at(1060)), Lookup::Revalidate);
        let no_validator = entry(&[("cache-control", "max-age=60")], 1000);
        assert_eq!(lookup(&no_validator, &none, OFF, at(2000)), Lookup::Pass);
        let validated_only = entry(&[("etag", "\"a\"")], 1000);
        assert_eq!(
            lookup(&validated_only, &none, OFF, at(1000)),
            Lookup::Revalidate
        );
    }

    #[test]
    fn a_client_s_matching_validators_get_a_local_304() {
        let fresh = entry(&[("cache-control", "max-age=60"), ("etag", "\"a\"")], 1000);
        let matching = map(&[("if-none-match", "\"a\"")]);
        assert_eq!(
            lookup(&fresh, &matching, OFF, at(1001)),
            Lookup::Serve {
                not_modified: true,
                age: Duration::from_secs(1)
            }
        );
        let other = map(&[("if-none-match", "\"b\"")]);
        assert!(matches!(
            lookup(&fresh, &other, OFF, at(1001)),
            Lookup::Serve {
                not_modified: false,
                ..
            }
        ));
    }

    #[test]
    fn min_refetch_answers_a_stale_repeat_unless_the_client_insists() {
        let knobs = Knobs {
            heuristic: false,
            min_refetch: Duration::from_secs(30),
        };
        let stale = entry(&[("etag", "\"a\"")], 1000);
        let none = HeaderMap::new();
        assert!(matches!(
            lookup(&stale, &none, knobs, at(1029)),
            Lookup::Serve { .. }
        ));
        assert_eq!(lookup(&stale, &none, knobs, at(1030)), Lookup::Revalidate);
        for insisting in [
            ("cache-control", "no-cache"),
            ("cache-control", "max-age=0"),
            ("pragma", "no-cache"),
        ] {
            let request = map(&[insisting]);
            assert_eq!(
                lookup(&stale, &request, knobs, at(1001)),
                Lookup::Revalidate,
                "{insisting:?}"
            );
        }
    }

    #[test]
    fn another_variant_or_a_personal_entry_is_passed() {
        let mut varying = entry(
            &[("cache-control", "max-age=60"), ("vary", "accept-language")],
            1000,
        );
        varying.vary = vec![("accept-language".into(), Some("en".into()))];
        let english = map(&[("accept-language", "en")]);
        let german = map(&[("accept-language", "de")]);
        assert!(matches!(
            lookup(&varying, &english, OFF, at(1001)),
            Lookup::Serve { .. }
        ));
        assert_eq!(lookup(&varying, &german, OFF, at(1001)), Lookup::Pass);
        let cookie = map(&[("cookie", "a=1")]);
        let fresh = entry(&[("cache-control", "max-age=60")], 1000);
        assert_eq!(lookup(&fresh, &cookie, OFF, at(1001)), Lookup::Pass);
        let setting = entry(
            &[("cache-control", "max-age=60"), ("set-cookie", "a=1")],
            1000,
        );
        assert_eq!(
            lookup(&setting, &HeaderMap::new(), OFF, at(1001)),
            Lookup::Pass
        );
    }

    #[test]
    fn heuristic_freshness_only_when_asked() {
        let modified = entry(
            &[
                ("date", &httpdate::fmt_http_date(at(10_000))),
                ("last-modified", &httpdate::fmt_http_date(at(0))),
            ],
            10_000,
        );
        let none = HeaderMap::new();
        assert_eq!(
            lookup(&modified, &none, OFF, at(10_100)),
            Lookup::Revalidate
        );
        let heuristic = Knobs {
            heuristic: true,
            ..OFF
        };
        assert!(matches!(
            lookup(&modified, &none, heuristic, at(10_100)),
            Lookup::Serve { .. }
        ));
        assert_eq!(
            lookup(&modified, &none, heuristic, at(11_000)),
            Lookup::Revalidate
        );
    }
}
