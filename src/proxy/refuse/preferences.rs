//! Stated preferences on the request path (`content_preferences`, a job's `purpose`): before
//! the turn, the preference lines of the host's robots.txt (fetched for it even where
//! `obey_robots = false`) and the `Content-Usage` headers remembered for the path; after the
//! answer, the response's own `Content-Usage` header. A refusal of the request's purpose is a
//! local 403 under "enforce", the `Courtesy-Content-Preference` response header under "report"
//! (and for a response header, which arrives after the request left, under either), counted in
//! `/metrics` and `/jobs`. The local 403 is courtesy's own: it is never reported to the host's
//! pacing, so it is no block and pauses nothing.
//!
//! The parsing, the vocabularies and the memory of headers are `crate::pacing::preferences`'s.

use http::{HeaderValue, Response};
use tokio::time::Instant;
use tracing::info;

use crate::budget::jobs::{Caller, JobState};
use crate::config::{HostPolicy, Purpose};
use crate::pacing::preferences::{content_usage, Refused, Source};
use crate::proxy::answer::body::ProxyBody;
use crate::proxy::answer::response::PROXY_NAME;
use crate::proxy::forward::target::Target;
use crate::proxy::Proxy;
use crate::wire::scheme::Scheme;

/// The response header that names a refusing signal (`report`), in courtesy's `Courtesy-*`
/// family: `ai-train=no in robots.txt Content-Signal; purpose=ai-train`.
pub(crate) const REPORT_HEADER: &str = "courtesy-content-preference";
/// The header that names the licences a site's robots.txt points to (RSL 1.0 `License:`), one
/// URL a line, on the answers of that site.
pub(crate) const LICENSE_HEADER: &str = "courtesy-content-license";

/// What a request's purpose met before it left, carried to its answer.
#[derive(Debug)]
pub(crate) struct Checked {
    /// The request's purpose.
    pub(crate) purpose: Purpose,
    /// Whether a refusal is enforced ("enforce" on an enforcing host) or only reported.
    pub(crate) enforce: bool,
    /// The origin's key (`scheme://host:port`).
    pub(crate) origin: String,
    /// The request's path and query.
    pub(crate) path: String,
    /// The budget key, for the metrics.
    pub(crate) host: String,
    /// The refusal found before the request left (reported on its answer).
    pub(crate) before: Option<Refused>,
}

/// The purpose of a request of `caller` to a host under `policy`: the job's own, else the
/// host's (`[defaults]`, or its `[[host]]` rule's) `purpose`.
pub(crate) fn purpose_of(caller: &Caller, policy: &HostPolicy) -> Option<Purpose> {
    caller
        .settings
        .as_ref()
        .and_then(|s| s.purpose)
        .or(policy.preferences.purpose)
}

impl Proxy {
    /// Names on an upstream answer from `target` (over `scheme`) the licences its robots.txt points to (RSL 1.0
    /// `License:` lines): reported, never enforced, as the AI-use preferences beside them.
    /// courtesy's own answers are left as they are, and an origin's own header of that name is
    /// replaced.
    pub(crate) fn report_licenses(
        &self,
        response: &mut Response<ProxyBody>,
        target: &Target,
        scheme: Scheme,
    ) {
        let Some(headers) = upstream_headers(response) else {
            return;
        };
        headers.remove(LICENSE_HEADER);
        if !self.robots.any_licensed() {
            return;
        }
        for url in self.robots.licenses(&target.origin_key(scheme)) {
            if let Ok(value) = HeaderValue::from_str(&url) {
                headers.append(LICENSE_HEADER, value);
            }
        }
    }

    /// The answer to a checked request as the client gets it: an upstream answer gets
    /// `Courtesy-Content-Preference` for the refusal found before it left and for its own
    /// `Content-Usage` header refusing the purpose (remembered for the path's later requests);
    /// each reported refusal is counted. courtesy's own answers are left as they are.
    pub(crate) fn report_preferences(
        &self,
        response: &mut Response<ProxyBody>,
        checked: Checked,
        job: &JobState,
    ) {
        let Some(headers) = upstream_headers(response) else {
            return;
        };
        // Only courtesy names a refusal to its client.
        headers.remove(REPORT_HEADER);
        let now = Instant::now();
        let stated: Vec<u8> = headers
            .get_all("content-usage")
            .iter()
            .map(HeaderValue::as_bytes)
            .collect::<Vec<_>>()
            .join(&b", "[..]);
        let statement = content_usage(&stated);
        // A header remembered from an earlier answer and said again is one refusal, not two.
        let after = Refused::of(&statement, checked.purpose, Source::ResponseHeader)
            .filter(|after| checked.before.as_ref() != Some(after));
        self.stated
            .note(&checked.origin, &checked.path, statement, now);
        for refused in checked.before.iter().chain(after.iter()) {
            if let Ok(value) = HeaderValue::from_str(&refused.report()) {
                headers.append(REPORT_HEADER, value);
            }
            info!(
                details = %refused.details(),
                enforce = checked.enforce,
                "forwarded: the site's stated preferences refuse the job's purpose (reported)"
            );
            self.metrics.content_preference(
                (job, &checked.host),
                checked.purpose,
                refused.source,
                false,
            );
            job.preferences_reported
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// The headers of `response` when it is an origin's answer; `None` for courtesy's own (its
/// `Proxy-Status` names courtesy), which reports nothing of a site's.
fn upstream_headers(response: &mut Response<ProxyBody>) -> Option<&mut http::HeaderMap> {
    let headers = response.headers_mut();
    let local = headers
        .get("proxy-status")
        .is_some_and(|v| v.as_bytes().starts_with(PROXY_NAME.as_bytes()));
    (!local).then_some(headers)
}
