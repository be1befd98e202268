//! RFC 9111 as a shared cache reads it: what a request's and a response's `Cache-Control` say,
//! whether a response may be stored, how long a stored answer stays fresh and how old it is, and
//! whether a request may be answered from it without asking the origin. Pure: the time is passed
//! in, so every rule is tested with explicit instants.

use std::time::{Duration, SystemTime};

use http::header::{
    HeaderName, AGE, AUTHORIZATION, CACHE_CONTROL, DATE, ETAG, EXPIRES, IF_MODIFIED_SINCE,
    IF_NONE_MATCH, LAST_MODIFIED, PRAGMA,
};
use http::{HeaderMap, StatusCode};

/// The longest freshness a heuristic gives (RFC 9111 4.2.2 leaves the bound to the cache; Squid's
/// default `refresh_pattern` caps at three days, courtesy at one, since a crawler polls for changes).
pub(crate) const MAX_HEURISTIC: Duration = Duration::from_secs(24 * 3600);

/// The directives of one message's `Cache-Control` (and, for a request without it, `Pragma:
/// no-cache`, RFC 9111 5.4). A directive given twice with different values makes the message
/// `conflicting`, and a conflicting response is treated as stale (4.2.1).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Directives {
    /// `no-store`.
    pub no_store: bool,
    /// `no-cache` (any form: a qualified one is treated as unqualified, the stricter reading).
    pub no_cache: bool,
    /// `private` (any form: a shared cache stores none of it).
    pub private: bool,
    /// `public`.
    pub public: bool,
    /// `must-revalidate`, or `proxy-revalidate` (the same for a shared cache).
    pub must_revalidate: bool,
    /// `max-age=N`.
    pub max_age: Option<u64>,
    /// `s-maxage=N` (responses).
    pub s_maxage: Option<u64>,
    /// `max-stale` (requests): `Some(None)` accepts any staleness, `Some(Some(n))` up to n s.
    pub max_stale: Option<Option<u64>>,
    /// `min-fresh=N` (requests).
    pub min_fresh: Option<u64>,
    /// `only-if-cached` (requests).
    pub only_if_cached: bool,
    /// A directive repeated with different values, or a number that does not parse.
    pub conflicting: bool,
}

impl Directives {
    /// The directives `headers` carry.
    pub(crate) fn of(headers: &HeaderMap) -> Directives {
        let mut found = Directives::default();
        let mut any = false;
        for value in headers.get_all(CACHE_CONTROL) {
            let Ok(text) = value.to_str() else {
                found.conflicting = true;
                continue;
            };
            for directive in split_directives(text) {
                any = true;
                found.take(directive);
            }
        }
        if !any {
            let pragma_no_cache = headers.get_all(PRAGMA).iter().any(|v| {
                v.to_str().is_ok_and(|v| {
                    v.split(',')
                        .any(|d| d.trim().eq_ignore_ascii_case("no-cache"))
                })
            });
            found.no_cache = pragma_no_cache;
        }
        found
    }

    fn take(&mut self, (name, value): (&str, Option<&str>)) {
        let is = |word: &str| name.eq_ignore_ascii_case(word);
        if is("no-store") {
            self.no_store = true;
        } else if is("no-cache") {
            self.no_cache = true;
        } else if is("private") {
            self.private = true;
        } else if is("public") {
            self.public = true;
        } else if is("must-revalidate") || is("proxy-revalidate") {
            self.must_revalidate = true;
        } else if is("max-age") {
            self.number(value, |d| &mut d.max_age);
        } else if is("s-maxage") {
            self.number(value, |d| &mut d.s_maxage);
        } else if is("min-fresh") {
            self.number(value, |d| &mut d.min_fresh);
        } else if is("max-stale") {
            match value.map(str::parse::<u64>) {
                None => self.max_stale = Some(None),
                Some(Ok(n)) => self.max_stale = Some(Some(n)),
                Some(Err(_)) => self.conflicting = true,
            }
        } else if is("only-if-cached") {
            self.only_if_cached = true;
        }
    }

    fn number(&mut self, value: Option<&str>, slot: fn(&mut Directives) -> &mut Option<u64>) {
        // RFC 9111 1.2.2: a delta-seconds too large to hold is the largest one can.
        let parsed = value.and_then(|v| {
            if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
                Some(v.parse::<u64>().unwrap_or(u64::from(u32::MAX)))
            } else {
                None
            }
        });
        let Some(parsed) = parsed else {
            self.conflicting = true;
            return;
        };
        let place = slot(self);
        match place {
            Some(before) if *before != parsed => self.conflicting = true,
            _ => *place = Some(parsed),
        }
    }
}

/// `text`'s directives as (name, unquoted value), without allocating: a quoted value may hold
/// commas (`private="set-cookie, x"`), so it is split outside quotes only.
fn split_directives(text: &str) -> impl Iterator<Item = (&str, Option<&str>)> + '_ {
    let mut rest = Some(text);
    std::iter::from_fn(move || loop {
        let left = rest?;
        let mut quoted = false;
        // Bytes, not chars: `,` and `"` are ASCII, so a byte index is a char boundary.
        let end = left.bytes().position(|b| {
            if b == b'"' {
                quoted = !quoted;
            }
            b == b',' && !quoted
        });
        let part = match end {
            Some(i) => {
                rest = Some(&left[i + 1..]);
                &left[..i]
            }
            None => {
                rest = None;
                left
            }
        };
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        return Some(match part.split_once('=') {
            Some((n, v)) => (n.trim(), Some(v.trim().trim_matches('"'))),
            None => (part, None),
        });
    })
}

/// The statuses a cache may give a heuristic freshness to (RFC 9110 15.1), and so the ones
/// courtesy stores when the origin gives them an explicit freshness.
fn heuristically_cacheable(status: StatusCode) -> bool {
    matches!(
        status.as_u16(),
        200 | 203 | 204 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501
    )
}

/// Why a response to a GET was not stored (for the debug log and the tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotStored {
    /// The request or the response said `no-store`.
    NoStore,
    /// The response said `private`.
    Private,
    /// The request carried `Authorization` and the response did not say `public`, `s-maxage` or
    /// `must-revalidate` (RFC 9111 3.5).
    Authorized,
    /// A status courtesy does not store, no explicit freshness and no validator to recheck it
    /// with, or only a validator where no repeat is answered unasked.
    Nothing,
}

/// Whether a shared cache may store `status` with `response` (whose directives are `said`, read
/// once by the caller for the store and the flight alike), answering `request` (a GET, whose
/// directives are `asked`; RFC 9111 3). A response with an explicit freshness above zero is kept.
/// One with only a validator (`ETag`, `Last-Modified`), or a freshness of zero (`max-age=0`,
/// `no-cache`), is kept only when `reused_unasked`: the host turns
/// on heuristic freshness or `min_refetch_seconds`, so that a repeat may be answered without
/// asking the origin. Without either, every use of it would ask the origin anyway, and keeping it
/// would write every such page to disk and read it back on each 304 (a crawl of static pages
/// served with validators and no `Cache-Control`), to save only the body's bytes on the wire:
/// not storing is always allowed (RFC 9111 3). Cookies and `Vary` are the store's own checks
/// (`cache::personal`, `cache::vary_of`).
pub(crate) fn storable(
    status: StatusCode,
    request: &HeaderMap,
    asked: &Directives,
    response: &HeaderMap,
    said: &Directives,
    reused_unasked: bool,
) -> Result<(), NotStored> {
    if asked.no_store || said.no_store {
        return Err(NotStored::NoStore);
    }
    if said.private {
        return Err(NotStored::Private);
    }
    if request.contains_key(AUTHORIZATION)
        && !(said.public || said.s_maxage.is_some() || said.must_revalidate)
    {
        return Err(NotStored::Authorized);
    }
    let explicit =
        said.s_maxage.is_some() || said.max_age.is_some() || response.contains_key(EXPIRES);
    let validated = response.contains_key(ETAG) || response.contains_key(LAST_MODIFIED);
    // An explicit freshness of zero (`max-age=0`, `no-cache`, an `Expires` not after `Date`) is
    // a validator's case again: every use would ask.
    let fresh = explicit && !lifetime(response, false, SystemTime::now()).is_zero();
    let kept =
        heuristically_cacheable(status) && (fresh || (reused_unasked && (explicit || validated)));
    if kept {
        Ok(())
    } else {
        Err(NotStored::Nothing)
    }
}

/// One header's value as a date (`Date`, `Expires`, `Last-Modified`), if it parses.
fn date_of(headers: &HeaderMap, name: HeaderName) -> Option<SystemTime> {
    let value = headers.get(name)?.to_str().ok()?;
    httpdate::parse_http_date(value.trim()).ok()
}

/// How long a response stays fresh after it was made (RFC 9111 4.2.1, as a shared cache): its
/// `s-maxage`, else its `max-age`, else `Expires` minus `Date`, else (when `heuristic` is on)
/// a tenth of the time since `Last-Modified`, at most [`MAX_HEURISTIC`]. Zero for a response
/// with conflicting directives, an `Expires` that does not parse, or none of these.
pub(crate) fn lifetime(response: &HeaderMap, heuristic: bool, received: SystemTime) -> Duration {
    let said = Directives::of(response);
    if said.conflicting || said.no_cache {
        return Duration::ZERO;
    }
    if let Some(seconds) = said.s_maxage.or(said.max_age) {
        return Duration::from_secs(seconds);
    }
    let date = date_of(response, DATE).unwrap_or(received);
    if response.contains_key(EXPIRES) {
        // An invalid Expires ("0", "-1") means already expired (RFC 9111 5.3).
        return date_of(response, EXPIRES)
            .and_then(|expires| expires.duration_since(date).ok())
            .unwrap_or(Duration::ZERO);
    }
    if heuristic {
        if let Some(modified) = date_of(response, LAST_MODIFIED) {
            let since = date.duration_since(modified).unwrap_or(Duration::ZERO);
            return (since / 10).min(MAX_HEURISTIC);
        }
    }
    Duration::ZERO
}

/// The freshness a response states for itself, if it states one: `None` when it has no
/// `Cache-Control` freshness directive and no `Expires`; zero for `no-cache`, `no-store` or
/// directives in conflict.
pub(crate) fn explicit_lifetime(response: &HeaderMap, received: SystemTime) -> Option<Duration> {
    let said = Directives::of(response);
    if said.no_store {
        return Some(Duration::ZERO);
    }
    let explicit = said.no_cache
        || said.conflicting
        || said.max_age.is_some()
        || said.s_maxage.is_some()
        || response.contains_key(EXPIRES);
    explicit.then(|| lifetime(response, false, received))
}

/// When a stored response was asked for and received, for its age.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Exchanged {
    /// When courtesy sent the request (`request_time`).
    pub requested: SystemTime,
    /// When the response arrived (`response_time`).
    pub received: SystemTime,
}

/// A stored response's age at `now` (RFC 9111 4.2.3): what it was when it arrived (from its
/// `Date` and `Age`, and the time the exchange took), plus the time it has been stored.
pub(crate) fn age(response: &HeaderMap, at: Exchanged, now: SystemTime) -> Duration {
    let since = |later: SystemTime, earlier: SystemTime| {
        later.duration_since(earlier).unwrap_or(Duration::ZERO)
    };
    let age_value = response
        .get(AGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(Duration::ZERO, Duration::from_secs);
    let apparent = date_of(response, DATE).map_or(Duration::ZERO, |date| since(at.received, date));
    let corrected = age_value + since(at.received, at.requested);
    apparent.max(corrected) + since(now, at.received)
}

/// What a stored response can do for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reuse {
    /// Answer with it; the origin is not asked.
    Serve,
    /// Ask the origin whether it still holds (a conditional request), or for a new one.
    Revalidate,
}

/// Whether a response `age` old with `lifetime` of freshness may answer a request with `request`'s
/// headers (RFC 9111 4.2, 4.2.4 and 5.2.1): fresh enough for the request's `max-age` and
/// `min-fresh`, or stale within its `max-stale` when the response allows serving stale. A request's
/// `no-cache` always goes to the origin, and so does a response's own `no-cache`.
pub(crate) fn reuse(
    request: &HeaderMap,
    response: &HeaderMap,
    lifetime: Duration,
    age: Duration,
) -> Reuse {
    let asked = Directives::of(request);
    let said = Directives::of(response);
    if asked.no_cache || said.no_cache || asked.conflicting {
        return Reuse::Revalidate;
    }
    if asked
        .max_age
        .is_some_and(|max| age > Duration::from_secs(max))
    {
        return Reuse::Revalidate;
    }
    let wanted = lifetime.saturating_sub(Duration::from_secs(asked.min_fresh.unwrap_or(0)));
    if age < wanted {
        return Reuse::Serve;
    }
    // Stale: only with the request's leave, never when the response forbids it (a shared cache
    // reads s-maxage as proxy-revalidate).
    let may_serve_stale = !(said.must_revalidate || said.s_maxage.is_some());
    let stale_for = age.saturating_sub(lifetime);
    let accepted = match asked.max_stale {
        Some(None) => true,
        Some(Some(seconds)) => stale_for <= Duration::from_secs(seconds),
        None => false,
    };
    if may_serve_stale && accepted && asked.min_fresh.is_none() {
        Reuse::Serve
    } else {
        Reuse::Revalidate
    }
}

/// Whether `request` brings validators of its own (a browser rechecking what it holds).
pub(crate) fn conditional(request: &HeaderMap) -> bool {
    request.contains_key(IF_NONE_MATCH) || request.contains_key(IF_MODIFIED_SINCE)
}

/// Whether a stored response with `stored` headers satisfies `request`'s conditions, so that the
/// client's copy is current and a 304 is its answer (RFC 9110 13.1.2 and 13.1.3 for GET and HEAD:
/// `If-None-Match` by weak comparison, else `If-Modified-Since` against `Last-Modified`).
pub(crate) fn not_modified(request: &HeaderMap, stored: &HeaderMap) -> bool {
    if request.contains_key(IF_NONE_MATCH) {
        let Some(etag) = stored.get(ETAG).and_then(|v| v.to_str().ok()) else {
            return false;
        };
        let ours = weak_form(etag);
        return request.get_all(IF_NONE_MATCH).iter().any(|value| {
            value.to_str().is_ok_and(|list| {
                list.split(',')
                    .map(str::trim)
                    .any(|tag| tag == "*" || weak_form(tag) == ours)
            })
        });
    }
    match (
        date_of(request, IF_MODIFIED_SINCE),
        date_of(stored, LAST_MODIFIED),
    ) {
        (Some(since), Some(modified)) => modified <= since,
        _ => false,
    }
}

/// An entity tag without its weakness mark, for the weak comparison.
fn weak_form(tag: &str) -> &str {
    tag.trim().strip_prefix("W/").unwrap_or(tag.trim())
}

/// The fields a 304 made from a stored response carries (RFC 9110 15.4.5).
pub(crate) const NOT_MODIFIED_FIELDS: [HeaderName; 6] = [
    http::header::CACHE_CONTROL,
    http::header::CONTENT_LOCATION,
    DATE,
    ETAG,
    EXPIRES,
    http::header::VARY,
];

/// `stored` brought up to date by a 304's `fresh` headers (RFC 9111 3.2 and 4.3.4): each field the
/// 304 carries replaces the stored one, except those that describe the stored body itself.
pub(crate) fn freshen(stored: &mut HeaderMap, fresh: &HeaderMap) {
    let kept = |name: &HeaderName| {
        // The body's own description, and what describes one connection (never stored).
        matches!(
            name.as_str(),
            "content-length"
                | "content-encoding"
                | "content-type"
                | "content-range"
                | "transfer-encoding"
                | "connection"
                | "keep-alive"
                | "proxy-connection"
                | "te"
                | "trailer"
                | "upgrade"
        )
    };
    for name in fresh.keys() {
        if kept(name) {
            continue;
        }
        stored.remove(name);
        for value in fresh.get_all(name) {
            stored.append(name.clone(), value.clone());
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use http::HeaderValue;

    /// Headers from name and value pairs (the other cache modules' tests use it too).
    pub(crate) fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        headers
    }

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + seconds)
    }

    fn date(seconds: u64) -> String {
        httpdate::fmt_http_date(at(seconds))
    }

    #[test]
    fn directives_are_read_in_every_spelling() {
        let d = Directives::of(&map(&[
            ("cache-control", "Public, MAX-AGE=\"60\""),
            (
                "cache-control",
                "s-maxage=30, private=\"set-cookie, x\", no-cache",
            ),
        ]));
        assert!(d.public && d.private && d.no_cache && !d.no_store);
        assert_eq!((d.max_age, d.s_maxage), (Some(60), Some(30)));
        assert!(!d.conflicting);
        let twice = Directives::of(&map(&[("cache-control", "max-age=60, max-age=10")]));
        assert!(twice.conflicting);
        let bad = Directives::of(&map(&[("cache-control", "max-age=ten")]));
        assert!(bad.conflicting && bad.max_age.is_none());
        let huge = Directives::of(&map(&[(
            "cache-control",
            "max-age=99999999999999999999999",
        )]));
        assert_eq!(huge.max_age, Some(u64::from(u32::MAX)));
        let pragma = Directives::of(&map(&[("pragma", "no-cache")]));
        assert!(pragma.no_cache);
        let both = Directives::of(&map(&[
            ("pragma", "no-cache"),
            ("cache-control", "max-age=5"),
        ]));
        assert!(
            !both.no_cache,
            "Cache-Control wins over Pragma (RFC 9111 5.4)"
        );
        let stale = Directives::of(&map(&[(
            "cache-control",
            "max-stale, min-fresh=3, only-if-cached",
        )]));
        assert_eq!((stale.max_stale, stale.min_fresh), (Some(None), Some(3)));
        assert!(stale.only_if_cached);
    }

    #[test]
    fn a_shared_cache_stores_only_what_rfc_9111_lets_it() {
        let stores = |status, request: &HeaderMap, response: &HeaderMap, heuristic| {
            storable(
                status,
                request,
                &Directives::of(request),
                response,
                &Directives::of(response),
                heuristic,
            )
        };
        let none = HeaderMap::new();
        let ok = StatusCode::OK;
        let fresh = map(&[("cache-control", "max-age=60")]);
        assert_eq!(stores(ok, &none, &fresh, false), Ok(()));
        let no_store = map(&[("cache-control", "max-age=60, no-store")]);
        assert_eq!(stores(ok, &none, &no_store, false), Err(NotStored::NoStore));
        let asked_no_store = map(&[("cache-control", "no-store")]);
        assert_eq!(
            stores(ok, &asked_no_store, &fresh, false),
            Err(NotStored::NoStore)
        );
        let private = map(&[("cache-control", "private, max-age=60")]);
        assert_eq!(stores(ok, &none, &private, false), Err(NotStored::Private));
        let authorized = map(&[("authorization", "Bearer x")]);
        assert_eq!(
            stores(ok, &authorized, &fresh, false),
            Err(NotStored::Authorized)
        );
        for allowed in [
            "public, max-age=60",
            "s-maxage=60",
            "must-revalidate, max-age=60",
        ] {
            let response = map(&[("cache-control", allowed)]);
            assert_eq!(
                stores(ok, &authorized, &response, false),
                Ok(()),
                "{allowed}"
            );
        }
        // A validator alone is kept only where a repeat may be answered unasked (heuristic
        // freshness or min_refetch_seconds): else each use asks the origin anyway.
        let validated = map(&[("etag", "\"a\"")]);
        assert_eq!(
            stores(ok, &none, &validated, false),
            Err(NotStored::Nothing)
        );
        assert_eq!(stores(ok, &none, &validated, true), Ok(()));
        for zero in [
            "max-age=0",
            "no-cache",
            "no-cache, max-age=60",
            "s-maxage=0, max-age=60",
        ] {
            let response = map(&[("cache-control", zero), ("etag", "\"z\"")]);
            assert_eq!(
                stores(ok, &none, &response, false),
                Err(NotStored::Nothing),
                "{zero}"
            );
            assert_eq!(stores(ok, &none, &response, true), Ok(()), "{zero}");
        }
        assert_eq!(stores(ok, &none, &none, false), Err(NotStored::Nothing));
        let gone = StatusCode::GONE;
        assert_eq!(stores(gone, &none, &fresh, false), Ok(()));
        assert_eq!(
            stores(gone, &none, &validated, false),
            Err(NotStored::Nothing)
        );
        assert_eq!(stores(gone, &none, &validated, true), Ok(()));
        let partial = StatusCode::PARTIAL_CONTENT;
        assert_eq!(
            stores(partial, &none, &fresh, false),
            Err(NotStored::Nothing)
        );
    }

    #[test]
    fn freshness_comes_from_s_maxage_then_max_age_then_expires_then_a_heuristic() {
        let now = at(0);
        let both = map(&[("cache-control", "max-age=60, s-maxage=10")]);
        assert_eq!(lifetime(&both, false, now), Duration::from_secs(10));
        let expires = map(&[("date", &date(0)), ("expires", &date(300))]);
        assert_eq!(lifetime(&expires, false, now), Duration::from_secs(300));
        let no_date = map(&[("expires", &date(300))]);
        assert_eq!(lifetime(&no_date, false, now), Duration::from_secs(300));
        let invalid = map(&[("expires", "0")]);
        assert_eq!(lifetime(&invalid, false, now), Duration::ZERO);
        let past = map(&[("date", &date(100)), ("expires", &date(0))]);
        assert_eq!(lifetime(&past, false, now), Duration::ZERO);
        let modified = map(&[("date", &date(10_000)), ("last-modified", &date(0))]);
        assert_eq!(
            lifetime(&modified, false, now),
            Duration::ZERO,
            "heuristic off"
        );
        assert_eq!(lifetime(&modified, true, now), Duration::from_secs(1_000));
        let old = map(&[
            ("date", &date(100 * 24 * 3600)),
            ("last-modified", &date(0)),
        ]);
        assert_eq!(lifetime(&old, true, now), MAX_HEURISTIC);
        let conflicting = map(&[("cache-control", "max-age=60, max-age=61")]);
        assert_eq!(lifetime(&conflicting, false, now), Duration::ZERO);
        let no_cache = map(&[("cache-control", "no-cache, max-age=60")]);
        assert_eq!(lifetime(&no_cache, false, now), Duration::ZERO);
    }

    #[test]
    fn an_explicit_lifetime_is_none_only_when_the_response_states_nothing() {
        let now = at(0);
        assert_eq!(explicit_lifetime(&HeaderMap::new(), now), None);
        assert_eq!(explicit_lifetime(&map(&[("etag", "\"a\"")]), now), None);
        let five = map(&[("cache-control", "max-age=5")]);
        assert_eq!(explicit_lifetime(&five, now), Some(Duration::from_secs(5)));
        for zero in ["no-cache", "no-store, max-age=60", "max-age=1, max-age=2"] {
            let response = map(&[("cache-control", zero)]);
            assert_eq!(
                explicit_lifetime(&response, now),
                Some(Duration::ZERO),
                "{zero}"
            );
        }
        let expired = map(&[("expires", "0")]);
        assert_eq!(explicit_lifetime(&expired, now), Some(Duration::ZERO));
    }

    #[test]
    fn age_counts_the_origin_s_age_the_trip_and_the_time_stored() {
        let exchanged = Exchanged {
            requested: at(100),
            received: at(102),
        };
        let plain = map(&[("date", &date(101))]);
        assert_eq!(age(&plain, exchanged, at(110)), Duration::from_secs(8 + 2));
        let aged = map(&[("date", &date(101)), ("age", "30")]);
        assert_eq!(age(&aged, exchanged, at(110)), Duration::from_secs(32 + 8));
        // A Date far in the past (a clock behind, or a response held upstream) makes it older.
        let old = map(&[("date", &date(2))]);
        assert_eq!(age(&old, exchanged, at(102)), Duration::from_secs(100));
        // A Date ahead of ours counts nothing.
        let ahead = map(&[("date", &date(500))]);
        assert_eq!(age(&ahead, exchanged, at(102)), Duration::from_secs(2));
    }

    #[test]
    fn a_request_is_served_only_while_fresh_enough_for_it() {
        let none = HeaderMap::new();
        let response = map(&[("cache-control", "max-age=60")]);
        let sixty = Duration::from_secs(60);
        let s = Duration::from_secs;
        assert_eq!(reuse(&none, &response, sixty, s(59)), Reuse::Serve);
        assert_eq!(reuse(&none, &response, sixty, s(60)), Reuse::Revalidate);
        for asked in ["no-cache", "max-age=0", "max-age=10"] {
            let request = map(&[("cache-control", asked)]);
            assert_eq!(
                reuse(&request, &response, sixty, s(20)),
                Reuse::Revalidate,
                "{asked}"
            );
        }
        let pragma = map(&[("pragma", "no-cache")]);
        assert_eq!(reuse(&pragma, &response, sixty, s(1)), Reuse::Revalidate);
        let min_fresh = map(&[("cache-control", "min-fresh=30")]);
        assert_eq!(reuse(&min_fresh, &response, sixty, s(20)), Reuse::Serve);
        assert_eq!(
            reuse(&min_fresh, &response, sixty, s(40)),
            Reuse::Revalidate
        );
        let max_stale = map(&[("cache-control", "max-stale=10")]);
        assert_eq!(reuse(&max_stale, &response, sixty, s(65)), Reuse::Serve);
        assert_eq!(
            reuse(&max_stale, &response, sixty, s(75)),
            Reuse::Revalidate
        );
        let must = map(&[("cache-control", "max-age=60, must-revalidate")]);
        assert_eq!(reuse(&max_stale, &must, sixty, s(65)), Reuse::Revalidate);
        let shared = map(&[("cache-control", "s-maxage=60")]);
        assert_eq!(reuse(&max_stale, &shared, sixty, s(65)), Reuse::Revalidate);
        let revalidate_always = map(&[("cache-control", "no-cache")]);
        assert_eq!(
            reuse(&none, &revalidate_always, sixty, s(0)),
            Reuse::Revalidate
        );
    }

    #[test]
    fn a_client_s_validators_match_by_weak_comparison_then_by_date() {
        let stored = map(&[("etag", "W/\"v1\""), ("last-modified", &date(0))]);
        for matching in ["\"v1\"", "W/\"v1\"", "\"x\", W/\"v1\"", "*"] {
            let request = map(&[("if-none-match", matching)]);
            assert!(not_modified(&request, &stored), "{matching}");
        }
        let other = map(&[
            ("if-none-match", "\"v2\""),
            ("if-modified-since", &date(10)),
        ]);
        assert!(
            !not_modified(&other, &stored),
            "If-None-Match decides when present"
        );
        assert!(not_modified(
            &map(&[("if-modified-since", &date(10))]),
            &stored
        ));
        assert!(!not_modified(
            &map(&[("if-modified-since", &date(0).replace("GMT", "XYZ"))]),
            &stored
        ));
        let earlier = map(&[(
            "if-modified-since",
            &httpdate::fmt_http_date(at(0) - Duration::from_secs(5)),
        )]);
        assert!(!not_modified(&earlier, &stored));
        assert!(conditional(&earlier) && !conditional(&stored));
    }

    #[test]
    fn a_304_freshens_the_stored_fields_but_not_the_body_s() {
        let mut stored = map(&[
            ("cache-control", "max-age=10"),
            ("content-type", "text/html"),
            ("content-length", "12"),
            ("etag", "\"v1\""),
            ("x-old", "kept"),
        ]);
        let fresh = map(&[
            ("cache-control", "max-age=600"),
            ("content-type", "text/plain"),
            ("content-length", "0"),
            ("date", &date(0)),
            ("connection", "close"),
        ]);
        freshen(&mut stored, &fresh);
        assert_eq!(stored["cache-control"], "max-age=600");
        assert_eq!(stored["content-type"], "text/html");
        assert_eq!(stored["content-length"], "12");
        assert_eq!(stored["x-old"], "kept");
        assert!(stored.contains_key("date") && !stored.contains_key("connection"));
    }
}
