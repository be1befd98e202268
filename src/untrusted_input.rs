//! Property tests of every parser that reads what others send: request targets and CONNECT
//! authorities, the budget key made of a request's host, `Retry-After`, RateLimit headers,
//! robots.txt and the preferences it and the `Content-Usage` header state, the first bytes
//! inside a CONNECT, admin API paths and `Host` headers, host spellings
//! that are addresses, config files (their CIDR lists among them) and hosts files, parent
//! proxy URLs and a parent's answers (to CONNECT, and its error pages told from the target's), an
//! origin's answer as courtesy passes it on (`Transfer-Encoding`, `Content-Length`,
//! `Proxy-Status`) and a redirect's `Location` judged for a block page. For
//! arbitrary input each must answer (a value or an error)
//! without panicking, within a bounded time, and without output larger than its input allows.

use std::time::{Duration, Instant, SystemTime};

use http::{HeaderMap, HeaderValue, Uri};
use proptest::prelude::*;

use crate::config::{Config, UpstreamProxy};
use crate::pacing::feedback::{retry_after, server_budget};
use crate::pacing::robots::{Fetched, RobotsCache, Step};
use crate::proxy::testing::{classify_opening, connect_target, request_target};

/// Generous: a parser that needs this long for a few kilobytes is broken, not slow.
const PER_INPUT: Duration = Duration::from_secs(2);

fn bounded<T>(what: &str, run: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = run();
    assert!(
        started.elapsed() < PER_INPUT,
        "{what} took {:?}",
        started.elapsed()
    );
    out
}

/// Text that looks like what the parsers expect some of the time: header-ish punctuation,
/// digits, words and arbitrary characters.
fn texty() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ -~]{0,300}",
        "[0-9a-zA-Z:;,=/.\\[\\]@ \"-]{0,200}",
        any::<String>().prop_map(|s| s.chars().take(300).collect()),
    ]
}

/// One list member of `RateLimit` or `RateLimit-Policy`, near the draft's shape.
const SF_MEMBER: &str = "(\"[a-z ]{0,5}\"|[a-z][a-z0-9]{0,4}|-?[0-9]{1,4}|\\(\"a\" b\\))\
    (;(q|w|r|t|qu|pk|limit)(=(-?[0-9]{0,17}|\"(request|content-bytes|concurrency|[a-z]{0,4})\"|\
    :[A-Za-z0-9+/=]{0,12}:|[a-z-]{1,13}|[0-9]\\.[0-9]|\\?[01]))?){0,5}|[a-z]{1,9}=-?[0-9]{1,5}";

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn request_targets_and_connect_authorities(text in texty()) {
        if let Ok(uri) = text.parse::<Uri>() {
            bounded("a request target", || {
                if let Ok(target) = request_target(&uri) {
                    prop_assert!(!target.is_empty());
                }
                let _ = connect_target(&uri);
                Ok(())
            })?;
        }
    }

    #[test]
    fn budget_keys_of_request_hosts(text in texty()) {
        if let Ok(uri) = text.parse::<Uri>() {
            if let Some(host) = uri.host() {
                let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
                let key = bounded("a domain key", || crate::budget::keys::domain_key(&host));
                prop_assert!(key.len() <= host.len() + 2, "{} -> {}", host, key);
            }
        }
    }

    #[test]
    fn hosts_files(text in texty()) {
        bounded("a hosts file", || crate::wire::hosts_file::StaticHosts::parse(&text).map(|h| h.len()).ok());
    }

    #[test]
    fn host_spellings_that_are_addresses(
        text in prop_oneof![
            texty(),
            "(0x[0-9a-fA-F]{0,10}|0[0-7]{0,12}|[0-9]{1,11})(\\.(0x[0-9a-fA-F]{0,4}|0[0-7]{0,4}|[0-9]{1,5})){0,4}\\.?",
        ],
    ) {
        let ip = bounded("a numeric host", || crate::wire::literal::numeric_ipv4(&text));
        if let Some(ip) = ip {
            // An address reads back as itself.
            let dotted = ip.to_string();
            prop_assert_eq!(crate::wire::literal::numeric_ipv4(&dotted), Some(ip));
            prop_assert_eq!(crate::wire::literal::literal_ip(&dotted), Some(std::net::IpAddr::V4(ip)));
        }
        let _ = bounded("a host literal", || crate::wire::literal::literal_ip(&text));
    }

    #[test]
    fn admin_host_headers(text in texty(), port in 1u16..) {
        let own = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let _ = bounded("a Host header", || crate::admin::names_listener(&text, own));
    }

    #[test]
    fn cidr_lists_in_the_config(
        entries in proptest::collection::vec(
            prop_oneof![
                texty(),
                "[0-9a-f:.]{0,40}(/[0-9]{0,4})?",
            ],
            0..8,
        ),
    ) {
        let list = entries
            .iter()
            .map(|e| format!("{e:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        let text = format!("[proxy]\ndeny_destinations = [{list}]\nallow_destinations = [{list}]\n");
        bounded("a CIDR list", || {
            match Config::parse(&text, "fuzz.toml") {
                Ok(config) => prop_assert!(config.proxy.deny_destinations.len() <= entries.len()),
                Err(errors) => {
                    for e in &errors.errors {
                        prop_assert!(e.starts_with("fuzz.toml"), "{}", e);
                    }
                }
            }
            Ok(())
        })?;
    }

    #[test]
    fn retry_after_values(text in texty(), now_s in 0u64..4_000_000_000) {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(now_s);
        bounded("Retry-After", || retry_after(&text, now));
    }

    #[test]
    fn ratelimit_headers(
        values in proptest::collection::vec(("[a-z-]{0,24}", texty()), 0..8),
        now_s in 0u64..4_000_000_000,
    ) {
        let mut headers = HeaderMap::new();
        let names = ["ratelimit", "ratelimit-policy", "ratelimit-remaining", "ratelimit-reset",
            "x-ratelimit-remaining", "x-ratelimit-reset", "x-ratelimit-limit", "retry-after"];
        for (i, (name, value)) in values.iter().enumerate() {
            let name = if name.is_empty() { names[i % names.len()] } else { name.as_str() };
            if let (Ok(name), Ok(value)) = (
                http::header::HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                headers.append(name, value);
            }
        }
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(now_s);
        bounded("RateLimit headers", || server_budget(&headers, now));
    }

    #[test]
    fn ratelimit_structured_fields(
        policy in proptest::collection::vec(SF_MEMBER, 0..6),
        limit in proptest::collection::vec(SF_MEMBER, 0..6),
        now_s in 0u64..4_000_000_000,
    ) {
        // Members close to the draft's shape (names, q/w/qu/pk/r/t of every kind, negative and
        // huge numbers), so that the structured-field paths are reached, not only refusals.
        let mut headers = HeaderMap::new();
        for (name, members) in [("ratelimit-policy", &policy), ("ratelimit", &limit)] {
            if let Ok(value) = HeaderValue::from_str(&members.join(", ")) {
                headers.append(name, value);
            }
        }
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(now_s);
        bounded("RateLimit structured fields", || server_budget(&headers, now));
    }

    #[test]
    fn robots_txt_files(
        body in proptest::collection::vec(any::<u8>(), 0..4096),
        lines in proptest::collection::vec("(User-agent|Disallow|Allow|Crawl-delay|Request-rate|Visit-time|Sitemap): [ -~]{0,40}", 0..40),
        path in "/[ -~]{0,60}",
    ) {
        for rules in [body, lines.join("\n").into_bytes()] {
            let cache = RobotsCache::new();
            bounded("robots.txt", || {
                if let Step::Fetch(guard) = cache.step("http://a.test:80", "bot", &path) {
                    guard.finish(
                        Fetched::Rules(rules, crate::pacing::robots::CACHE_FOR),
                        std::time::Duration::from_secs(86_400),
                    );
                }
                prop_assert!(matches!(cache.step("http://a.test:80", "bot", &path), Step::Known(_)));
                Ok(())
            })?;
        }
    }

    #[test]
    fn stated_preferences(
        header in proptest::collection::vec(any::<u8>(), 0..512),
        dictionary in "[a-z*(); =,?:\"0-9.@yn-]{0,120}",
        lines in proptest::collection::vec(
            "(User-agent|Allow|Content-Signal|Content-Usage|content-usage): [ -~]{0,60}", 0..40),
        path in "/[ -~]{0,60}",
    ) {
        use crate::config::Purpose;
        use crate::pacing::preferences::{content_usage, RobotsPreferences};
        for value in [header.as_slice(), dictionary.as_bytes()] {
            bounded("a Content-Usage header", || content_usage(value));
        }
        let txt = lines.join("\n");
        bounded("robots.txt preference lines", || {
            let preferences = RobotsPreferences::parse(txt.as_bytes());
            for purpose in [Purpose::Search, Purpose::AiInput, Purpose::AiTrain] {
                let _ = preferences.refusal("bot", purpose, &path);
            }
        });
    }

    #[test]
    fn the_first_bytes_inside_a_connect(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        bounded("a tunnel's first bytes", || classify_opening(&bytes));
    }

    #[test]
    fn parent_proxy_urls(text in texty()) {
        bounded("an upstream_proxy URL", || {
            if let Ok(parent) = UpstreamProxy::parse(&text) {
                prop_assert!(parent.port > 0);
                prop_assert!(!parent.to_string().is_empty());
            }
            Ok(())
        })?;
    }

    #[test]
    fn an_origins_framing_and_proxy_status(
        codings in proptest::collection::vec("[a-zA-Z ;=,]{0,20}", 0..3),
        lines in proptest::collection::vec(
            prop_oneof![texty(), "((courtesy|cdn|\"Courtesy\")(; ?[a-z]{1,8}=(\"[a-z ,;]{0,9}\"|[a-z_]{1,9})){0,3}(, ?)?){0,4}"],
            0..3,
        ),
        length in any::<bool>(),
        head in any::<bool>(),
    ) {
        let mut response = http::Response::new(());
        for coding in &codings {
            if let Ok(value) = HeaderValue::from_str(coding) {
                response.headers_mut().append("transfer-encoding", value);
            }
        }
        for line in &lines {
            if let Ok(value) = HeaderValue::from_str(line) {
                response.headers_mut().append("proxy-status", value);
            }
        }
        if length {
            response.headers_mut().insert("content-length", HeaderValue::from_static("5"));
        }
        let (refused, dropped) =
            bounded("an origin's answer", || crate::proxy::testing::sanitized(&mut response, head));
        let headers = response.headers();
        if !refused {
            prop_assert!(!(headers.contains_key("transfer-encoding") && headers.contains_key("content-length")));
            prop_assert_eq!(dropped, length && headers.contains_key("transfer-encoding"));
        }
        for line in headers.get_all("proxy-status") {
            for member in crate::wire::proxy_status::members(line.as_bytes()) {
                prop_assert!(!crate::wire::proxy_status::names_us(member), "{:?}", line);
            }
        }
    }

    #[test]
    fn redirect_locations(location in texty(), host in "[a-z.]{1,20}", status in 300u16..309) {
        let mut response = http::Response::new(());
        if let Ok(code) = http::StatusCode::from_u16(status) {
            *response.status_mut() = code;
        }
        if let Ok(value) = HeaderValue::from_str(&location) {
            response.headers_mut().insert("location", value);
        }
        let (parts, ()) = response.into_parts();
        let markers = crate::config::BlockMarkers::new(
            crate::config::DEFAULT_BLOCK_MARKERS.iter().map(|m| m.to_string()).collect(),
        );
        let judged = bounded("a redirect's Location", || {
            crate::pacing::blocks::block_redirect(&parts, &markers, &host).is_some()
        });
        // A marker only in the query never counts.
        if let Some((_, query)) = location.split_once('?') {
            if !location[..location.len() - query.len()].to_ascii_lowercase().contains("sorry") {
                prop_assert!(!judged, "{}", location);
            }
        }
    }

    #[test]
    fn a_parents_answers(
        head in proptest::collection::vec(any::<u8>(), 0..512),
        status in 100u16..600,
        proxy_status in texty(),
        squid in any::<bool>(),
    ) {
        let _ = bounded("a parent's answer to CONNECT", || crate::upstream::parent::testing::connect_answer(&head));
        let mut response = http::Response::new(());
        if let Ok(code) = http::StatusCode::from_u16(status) {
            *response.status_mut() = code;
        }
        if let Ok(value) = HeaderValue::from_str(&proxy_status) {
            response.headers_mut().insert("proxy-status", value);
        }
        if squid {
            response.headers_mut().insert("x-squid-error", HeaderValue::from_static("ERR_X 0"));
        }
        let parent = UpstreamProxy::parse("http://u:secret@p.test:3128").map_err(TestCaseError::fail)?;
        bounded("a parent's error page", || {
            if let Some(own) = crate::upstream::parent::own_answer(&parent, &response) {
                prop_assert!(!own.details.contains("secret"));
                prop_assert!(status >= 400);
            }
            Ok(())
        })?;
    }

    #[test]
    fn config_files(text in prop_oneof![
        texty(),
        proptest::collection::vec(
            "(\\[defaults\\]|\\[proxy\\]|\\[\\[host\\]\\]|rate = [0-9.e-]{1,8}|match = \"[a-z*.:0-9]{0,20}\"|on_cooldown = \"[a-z]{0,8}\"|burst = -?[0-9]{1,12}|[a-z_]{1,20} = [ -~]{0,20})",
            0..30,
        ).prop_map(|lines| lines.join("\n")),
    ]) {
        bounded("a config file", || {
            if let Err(errors) = Config::parse(&text, "fuzz.toml") {
                prop_assert!(!errors.errors.is_empty());
                for e in &errors.errors {
                    prop_assert!(e.starts_with("fuzz.toml"), "{}", e);
                }
            }
            Ok(())
        })?;
    }
}
