//! Asking before queueing on the admin listener: `GET /v1/check?url=URL[&job=NAME][&fetch=false]`
//! (one URL) and `POST /v1/check[?job=NAME][&fetch=false]` (a JSON list of up to
//! [`MAX_BATCH`] URLs, or `{"urls": [...], "job": "x", "fetch": true}`, the body's fields over
//! the query's). `user_agent` (query or body) names the User-Agent the crawler sends, whose
//! product token picks its robots.txt group as it does for its GET. This module reads the request
//! and writes the JSON; what a GET would get is the proxy's to decide (`Proxy::check`,
//! `Proxy::check_batch`), by the phases it runs itself. A check may fetch robots.txt, so without
//! a token it is kept from web pages as a write is (`Admin::serve`). Every error is JSON
//! (`{"error": "..."}`) with a `Proxy-Status`.

use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde::Deserialize;

use super::{error_json, json_response, percent_decode, query_param, Admin};
use crate::proxy::answer::body::ProxyBody;
use crate::proxy::answer::response::{proxy_status_member, ProxyError};
use crate::proxy::check::{CheckAsk, MAX_BATCH};

/// The most bytes a `POST /v1/check` body may hold: [`MAX_BATCH`] URLs of up to 4 KiB each.
pub(crate) const MAX_BODY: usize = 4 * 1024 * 1024;

/// A batch as a client sends it: a plain list of URLs, or an object naming the job and whether
/// robots.txt may be fetched.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Batch {
    /// `["https://a.test/x", ...]`.
    Urls(Vec<String>),
    /// `{"urls": [...], "job": "x", "fetch": true}`.
    Asked {
        urls: Vec<String>,
        #[serde(default)]
        job: Option<String>,
        #[serde(default)]
        fetch: Option<bool>,
        #[serde(default)]
        user_agent: Option<String>,
    },
}

/// What the query of a check asks: the job, the crawler's User-Agent, and whether robots.txt may
/// be fetched.
struct Asked {
    job: Option<String>,
    user_agent: Option<String>,
    fetch: bool,
}

impl Asked {
    /// The job and `fetch` of `query`, or why a `fetch` that is neither true nor false is a 400.
    fn of(query: &str) -> Result<Asked, String> {
        let fetch = match query_param(query, "fetch") {
            None | Some("true" | "1") => true,
            Some("false" | "0") => false,
            Some(other) => return Err(format!("fetch must be true or false, got {other:?}")),
        };
        let text = |name| {
            query_param(query, name)
                .map(percent_decode)
                .filter(|v| !v.is_empty())
        };
        Ok(Asked {
            job: text("job"),
            user_agent: text("user_agent"),
            fetch,
        })
    }

    /// What `Proxy::check` is asked.
    fn ask(&self) -> CheckAsk<'_> {
        CheckAsk {
            job: self.job.as_deref(),
            user_agent: self.user_agent.as_deref(),
            fetch: self.fetch,
        }
    }
}

impl Admin {
    /// `GET /v1/check?url=URL[&job=NAME][&fetch=false]`: what a GET of the URL would get now; a
    /// malformed URL is a 400.
    pub(super) async fn check_one(&self, query: &str) -> Response<ProxyBody> {
        let Some(proxy) = &self.checker else {
            return check_error(StatusCode::SERVICE_UNAVAILABLE, "no proxy to check with");
        };
        let asked = match Asked::of(query) {
            Ok(asked) => asked,
            Err(why) => return check_error(StatusCode::BAD_REQUEST, &why),
        };
        let Some(url) = query_param(query, "url").map(percent_decode) else {
            return check_error(StatusCode::BAD_REQUEST, "check needs ?url=URL");
        };
        match proxy.check(&url, asked.ask()).await {
            Ok(answer) => json_response(StatusCode::OK, &answer),
            Err(why) => check_error(StatusCode::BAD_REQUEST, &why),
        }
    }

    /// `POST /v1/check`: the answers to a batch of URLs, in their order; more than
    /// [`MAX_BATCH`] URLs (or a body over [`MAX_BODY`]) is a 413.
    pub(super) async fn check_many(
        &self,
        query: &str,
        req: Request<Incoming>,
    ) -> Response<ProxyBody> {
        let Some(proxy) = &self.checker else {
            return check_error(StatusCode::SERVICE_UNAVAILABLE, "no proxy to check with");
        };
        let mut asked = match Asked::of(query) {
            Ok(asked) => asked,
            Err(why) => return check_error(StatusCode::BAD_REQUEST, &why),
        };
        let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
            Ok(body) => body.to_bytes(),
            Err(_) => {
                let message = format!("the body could not be read (at most {MAX_BODY} bytes)");
                return check_error(StatusCode::PAYLOAD_TOO_LARGE, &message);
            }
        };
        let urls = match serde_json::from_slice::<Batch>(&body) {
            Ok(Batch::Urls(urls)) => urls,
            Ok(Batch::Asked {
                urls,
                job,
                fetch,
                user_agent,
            }) => {
                asked.job = job.filter(|j| !j.is_empty()).or(asked.job);
                asked.user_agent = user_agent.filter(|a| !a.is_empty()).or(asked.user_agent);
                asked.fetch = fetch.unwrap_or(asked.fetch);
                urls
            }
            Err(e) => {
                let message = format!(
                    "the body must be a JSON list of URLs, or {{\"urls\": [...], \"job\": \"...\", \"fetch\": true}}: {e}"
                );
                return check_error(StatusCode::BAD_REQUEST, &message);
            }
        };
        if urls.len() > MAX_BATCH {
            let message = format!(
                "at most {MAX_BATCH} URLs per check, got {}: send them in batches",
                urls.len()
            );
            return check_error(StatusCode::PAYLOAD_TOO_LARGE, &message);
        }
        let answers = proxy.check_batch(&urls, asked.ask()).await;
        json_response(StatusCode::OK, &answers)
    }
}

/// An error of the check API: `{"error": message}` with courtesy's `Proxy-Status`, like every
/// local answer.
fn check_error(status: StatusCode, message: &str) -> Response<ProxyBody> {
    let mut response = error_json(status, message);
    let member = proxy_status_member(ProxyError::HttpRequestDenied, "", message);
    if let Ok(value) = HeaderValue::from_str(&member) {
        response.headers_mut().insert("proxy-status", value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_a_list_or_an_object_and_the_query_is_read() {
        let list: Batch = serde_json::from_str(r#"["http://a.test/", "nope"]"#).expect("a list");
        assert!(matches!(list, Batch::Urls(ref urls) if urls.len() == 2));
        let object: Batch =
            serde_json::from_str(r#"{"urls": ["http://a.test/"], "job": "crawl", "fetch": false}"#)
                .expect("an object");
        match object {
            Batch::Asked {
                urls, job, fetch, ..
            } => {
                assert_eq!(urls, vec!["http://a.test/".to_string()]);
                assert_eq!(job.as_deref(), Some("crawl"));
                assert_eq!(fetch, Some(false));
            }
            Batch::Urls(_) => panic!("an object read as a list"),
        }
        assert!(serde_json::from_str::<Batch>(r#"[1, 2]"#).is_err());
        let asked = Asked::of("url=x&job=crawl&fetch=false").expect("read");
        assert_eq!((asked.job.as_deref(), asked.fetch), (Some("crawl"), false));
        let asked = Asked::of("url=x").expect("read");
        assert_eq!((asked.job, asked.fetch), (None, true));
        assert!(Asked::of("fetch=maybe").is_err());
        let refused = check_error(StatusCode::BAD_REQUEST, "fetch must be true or false");
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
        assert!(refused.headers()["proxy-status"]
            .to_str()
            .is_ok_and(|v| v.starts_with("courtesy")));
    }
}
