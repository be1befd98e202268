//! `courtesy check-url URL [--job NAME] [--user-agent UA] [--no-fetch] [--json]`: what a running courtesy would do
//! with a GET of the URL now, asked of its admin listener (`GET /v1/check`, found like
//! `courtesy status` finds it) and printed in words, or as the raw JSON object. The exit code is
//! for scripts: 0 when the verdict is `allowed`, 1 for any other verdict (or a URL courtesy
//! refuses to judge, a 400), 2 when courtesy cannot be reached or refuses the call itself (a
//! missing token, another `Host`).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde_json::Value;

/// How long the check may take: a robots.txt fetched through a slow host's budget included.
const TIMEOUT: Duration = Duration::from_secs(60);

/// What asking courtesy came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// courtesy's answer: the JSON object of `/v1/check`.
    Answer(Value),
    /// courtesy answered the call with an error: its status and what it said.
    Refused(u16, String),
    /// courtesy could not be reached (or did not answer in time).
    Unreached(String),
}

impl Outcome {
    /// The exit code for this outcome: 0 allowed, 1 any other verdict or a 400, 2 unreachable or
    /// refused otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            Outcome::Answer(answer) if answer["verdict"] == "allowed" => 0,
            Outcome::Answer(_) | Outcome::Refused(400, _) => 1,
            Outcome::Refused(..) | Outcome::Unreached(_) => 2,
        }
    }
}

/// What to ask: the URL, as which job, and whether an unknown robots.txt may be fetched.
#[derive(Debug, Clone)]
pub struct Question<'a> {
    /// The URL a GET would ask for.
    pub url: &'a str,
    /// The job to ask as (`None`: the default).
    pub job: Option<&'a str>,
    /// The User-Agent the crawler sends (its product token picks the robots.txt group).
    pub user_agent: Option<&'a str>,
    /// Whether courtesy may fetch an unknown robots.txt to answer (`--no-fetch`: not).
    pub fetch: bool,
}

/// Asks the admin listener at `admin` (with `token` as a bearer token if given) what a GET of
/// the question's URL would get now, within [`TIMEOUT`].
pub async fn ask(admin: SocketAddr, token: Option<&str>, question: &Question<'_>) -> Outcome {
    let mut path = format!(
        "/v1/check?url={}",
        utf8_percent_encode(question.url, NON_ALPHANUMERIC)
    );
    if let Some(job) = question.job {
        let _ = write!(path, "&job={}", utf8_percent_encode(job, NON_ALPHANUMERIC));
    }
    if let Some(agent) = question.user_agent {
        let agent = utf8_percent_encode(agent, NON_ALPHANUMERIC);
        let _ = write!(path, "&user_agent={agent}");
    }
    if !question.fetch {
        path.push_str("&fetch=false");
    }
    let mut request = http::Request::get(format!("http://{admin}{path}"));
    if let Some(token) = token {
        request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = match request.body(Empty::<bytes::Bytes>::new()) {
        Ok(request) => request,
        Err(e) => return Outcome::Unreached(format!("cannot build the request: {e}")),
    };
    let client = Client::builder(TokioExecutor::new()).build_http();
    let response = match tokio::time::timeout(TIMEOUT, client.request(request)).await {
        Ok(Ok(response)) => response,
        Ok(Err(e)) => {
            return Outcome::Unreached(format!(
                "cannot reach courtesy's admin listener at {admin} (is courtesy running?): {e}"
            ))
        }
        Err(_) => {
            return Outcome::Unreached(format!(
                "the admin listener at {admin} did not answer within {} s",
                TIMEOUT.as_secs()
            ))
        }
    };
    let status = response.status().as_u16();
    let body = match response.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) => return Outcome::Unreached(format!("the answer could not be read: {e}")),
    };
    let text = String::from_utf8_lossy(&body).into_owned();
    match serde_json::from_str::<Value>(&text) {
        Ok(answer) if status == 200 && answer.is_object() => Outcome::Answer(answer),
        Ok(error) if error["error"].is_string() => {
            Outcome::Refused(status, error["error"].as_str().unwrap_or("").to_string())
        }
        _ => Outcome::Refused(status, text.trim().to_string()),
    }
}

/// The answer in words: the verdict and the URL, then why, then what is known beside it.
pub fn render(answer: &Value) -> String {
    let word = |v: &Value| v.as_str().unwrap_or("?").to_string();
    let seconds = |v: &Value| v.as_f64().map(|s| format!("{s:.1} s"));
    let mut out = format!(
        "{}: {}\n  host {}, job {}\n  {}\n",
        word(&answer["verdict"]),
        word(&answer["url"]),
        word(&answer["host"]),
        word(&answer["job"]),
        word(&answer["reason"]),
    );
    let mut facts = vec![format!("robots.txt {}", word(&answer["robots"]))];
    if let Some(wait) = seconds(&answer["wait_s"]) {
        facts.push(format!("wait about {wait}"));
    }
    if let Some(retry) = seconds(&answer["retry_after_s"]) {
        facts.push(format!("open again in {retry}"));
    }
    if answer["stored"] == true {
        facts.push("served from the store".into());
    }
    facts.push(format!("on_cooldown {}", word(&answer["on_cooldown"])));
    let _ = writeln!(out, "  {}", facts.join("; "));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_code_says_allowed_refused_or_unreachable() {
        let allowed = Outcome::Answer(serde_json::json!({ "verdict": "allowed" }));
        let robots = Outcome::Answer(serde_json::json!({ "verdict": "robots" }));
        assert_eq!(allowed.exit_code(), 0);
        assert_eq!(robots.exit_code(), 1);
        assert_eq!(Outcome::Refused(400, "not a URL".into()).exit_code(), 1);
        assert_eq!(Outcome::Refused(401, "token".into()).exit_code(), 2);
        assert_eq!(Outcome::Unreached("refused".into()).exit_code(), 2);
    }

    #[test]
    fn an_answer_reads_in_words() {
        let answer = serde_json::json!({
            "url": "http://a.test/x", "host": "a.test:80", "job": "default",
            "verdict": "cooling_down", "reason": "a.test:80 is closed for 30.0 s more",
            "retry_after_s": 30.0, "wait_s": null, "stored": false,
            "robots": "allowed", "on_cooldown": "reject"
        });
        let text = render(&answer);
        assert!(
            text.starts_with("cooling_down: http://a.test/x\n"),
            "{text}"
        );
        assert!(text.contains("open again in 30.0 s"), "{text}");
        assert!(text.contains("robots.txt allowed"), "{text}");
        assert!(text.contains("on_cooldown reject"), "{text}");
        assert!(!text.contains("wait about"), "{text}");
    }
}
