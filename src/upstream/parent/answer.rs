//! Telling a parent's own error answer from the target's, for `http://` requests sent in absolute
//! form through an HTTP parent, where both arrive on the same connection as ordinary responses.
//!
//! The rule, chosen to blame the target only for what the target said:
//!
//! - a **407** is always the parent's: courtesy never sends the target proxy credentials, and a
//!   407 is addressed to a proxy's client, which is courtesy;
//! - any other **4xx or 5xx** is the parent's when it carries `X-Squid-Error` (Squid's own error
//!   pages, and those of proxies that imitate it), or a `Proxy-Status` whose **last** member has
//!   an `error` parameter: RFC 9209 appends each intermediary's member, so the last is the hop
//!   nearest courtesy, the parent, and an `error` there says that hop made the response (a
//!   parent's 403 thus never counts towards the target's hard block);
//! - everything else is the target's, and is the target's feedback as on a direct connection.
//!
//! An error page of a parent that says nothing of itself (no Proxy-Status, no X-Squid-Error)
//! therefore counts as the target's: courtesy backs off further than needed, never less.

use http::header::HeaderValue;
use http::Response;

use super::{ParentError, ParentErrorKind};
use crate::config::UpstreamProxy;
use crate::wire::proxy_status::{self, ProxyError};

/// The parent's own failure, if `response` (to an absolute-form request through `parent`) is one.
pub(crate) fn own_answer<B>(parent: &UpstreamProxy, response: &Response<B>) -> Option<ParentError> {
    let status = response.status().as_u16();
    let headers = response.headers();
    let parent_status = headers.get("proxy-status");
    let name = parent.endpoint();
    let failure = match status {
        407 => ParentError::new(
            parent,
            ParentErrorKind::AuthFailed,
            ProxyError::ProxyConfigurationError,
            format!(
                "parent proxy {name} answered 407: the credentials in upstream_proxy are missing \
                 or not accepted"
            ),
        ),
        400..=599
            if headers.contains_key("x-squid-error")
                || parent_status.is_some_and(last_member_is_an_error) =>
        {
            let error = ParentError::declined(status);
            let said = headers
                .get("x-squid-error")
                .and_then(|v| v.to_str().ok())
                .map(|v| format!(" ({})", v.chars().take(80).collect::<String>()))
                .unwrap_or_default();
            ParentError::new(
                parent,
                ParentErrorKind::Refused,
                error,
                format!("parent proxy {name} answered {status}{said} instead of the target"),
            )
        }
        _ => return None,
    };
    Some(failure.answered(status, parent_status))
}

/// Whether the last member of a `Proxy-Status` list (RFC 8941 syntax) has an `error` parameter
/// (a quoted `;error=` inside a details string is not one).
fn last_member_is_an_error(value: &HeaderValue) -> bool {
    let Some(member) = proxy_status::members(value.as_bytes()).last() else {
        return false;
    };
    proxy_status::split_unquoted(member, b';')
        .skip(1)
        .any(|param| param.trim_ascii_start().starts_with(b"error="))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parent() -> UpstreamProxy {
        UpstreamProxy::parse("http://u:pw@p.test:3128").unwrap()
    }

    fn response(status: u16, headers: &[(&str, &str)]) -> Response<()> {
        let mut r = Response::builder().status(status);
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        r.body(()).unwrap()
    }

    #[test]
    fn a_407_and_marked_5xx_are_the_parents_the_rest_the_targets() {
        let e = own_answer(&parent(), &response(407, &[])).unwrap();
        assert_eq!(e.fault.kind, ParentErrorKind::AuthFailed);
        let squid = response(503, &[("x-squid-error", "ERR_CONNECT_FAIL 111")]);
        let e = own_answer(&parent(), &squid).unwrap();
        assert_eq!(
            (e.fault.kind, e.fault.received_status),
            (ParentErrorKind::Refused, Some(503))
        );
        assert!(e.details.contains("ERR_CONNECT_FAIL"), "{}", e.details);
        let marked = response(
            502,
            &[(
                "proxy-status",
                "cdn; received-status=502, pool; error=connection_refused",
            )],
        );
        let e = own_answer(&parent(), &marked).unwrap();
        assert_eq!(
            e.fault.parent_status.unwrap(),
            "cdn; received-status=502, pool; error=connection_refused"
        );
        // The target's own 503, and a site's CDN error that the parent only passed on.
        assert!(own_answer(&parent(), &response(503, &[])).is_none());
        let passed_on = response(
            502,
            &[(
                "proxy-status",
                "cdn; error=connection_refused, pool; received-status=502",
            )],
        );
        assert!(own_answer(&parent(), &passed_on).is_none());
        assert!(own_answer(&parent(), &response(200, &[("x-squid-error", "x")])).is_none());
        let denied = response(403, &[("x-squid-error", "ERR_ACCESS_DENIED 0")]);
        let e = own_answer(&parent(), &denied).unwrap();
        assert_eq!(e.error, ProxyError::DestinationIpProhibited);
        assert!(own_answer(&parent(), &response(403, &[])).is_none());
    }

    #[test]
    fn quoted_text_does_not_fake_an_error_parameter() {
        let v = HeaderValue::from_static(r#"a; error=x, b; details="y, c; error=z""#);
        assert!(!last_member_is_an_error(&v));
        let v = HeaderValue::from_static(r#"b; details="a \"q\" ;error=1"; error=dns_error"#);
        assert!(last_member_is_an_error(&v));
    }
}
