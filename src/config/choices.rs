//! The keys that take one word from a closed set: `on_cooldown`, `https`, `cache`, `key`,
//! `controller`, `purpose`, `content_preferences`, `[signing] mode`, `trigger` and the entries of `skip_resources`, each as an enum whose serde derive is its word
//! table (see [`ConfigWord`]).

use std::fmt;

use serde::{Deserialize, Serialize};

use super::ConfigWord;

/// Lists every variant of a word enum once, as its [`ConfigWord::ALL`], and shows it as its word.
/// The list is checked against the enum: a variant missing from it does not compile.
macro_rules! word_enum {
    ($ty:ident { $($variant:ident),+ $(,)? }) => {
        impl ConfigWord for $ty {
            const ALL: &'static [Self] = {
                const fn every_variant_is_listed(value: $ty) {
                    match value {
                        $($ty::$variant => {})+
                    }
                }
                let _ = every_variant_is_listed;
                &[$($ty::$variant),+]
            };
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.word())
            }
        }
    };
}

/// What happens to requests for a host that is cooling down (`on_cooldown`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnCooldown {
    /// Answer at once with a local 429 and the time left as `Retry-After`.
    Reject,
    /// Hold them, in order, until the window ends (up to `max_wait_seconds`, then the local 429).
    Hold,
    /// Hold them through a window a client can wait for (at most `max_hold_seconds` left), and
    /// answer a longer one at once with the local 429 (the default: a naive client loses
    /// nothing to a short cooldown, and none hangs for an hour).
    Auto,
}

word_enum!(OnCooldown { Reject, Hold, Auto });

impl OnCooldown {
    /// Whether a request with this answer to a cooldown waits out one with `remaining` left
    /// (`max_hold`: the host's `max_hold_seconds`), rather than getting the local 429 now.
    pub fn holds(self, remaining: std::time::Duration, max_hold: std::time::Duration) -> bool {
        match self {
            OnCooldown::Reject => false,
            OnCooldown::Hold => true,
            OnCooldown::Auto => remaining <= max_hold,
        }
    }
}

/// What courtesy does with a `CONNECT` tunnel (`https`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HttpsMode {
    /// Terminate TLS with the local CA and pace every request inside (the default).
    Intercept,
    /// Copy bytes blindly: one admission per tunnel, which paces connections, not requests.
    Tunnel,
}

word_enum!(HttpsMode { Intercept, Tunnel });

/// Which HTTP versions courtesy offers an `https://` origin (`upstream_http2`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamHttp2 {
    /// `h2` and `http/1.1` offered by ALPN; the origin picks (the default). A 421 or an HTTP/2
    /// protocol error turns the host to HTTP/1.1 while courtesy knows it.
    #[default]
    Auto,
    /// HTTP/1.1 only.
    Off,
}

word_enum!(UpstreamHttp2 { Auto, Off });

/// What courtesy does with stored GET responses (`cache`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheMode {
    /// Nothing is stored.
    Off,
    /// RFC 9111 as a shared cache (the default): a fresh stored answer is served without asking
    /// the origin, a stale one is revalidated, `no-store`, `private`, credentials, cookies and
    /// `Vary` are honoured.
    Http,
    /// Responses with an ETag or Last-Modified are stored; repeats are revalidated with
    /// If-None-Match / If-Modified-Since, and a 304 is answered from the store as the full 200.
    Revalidate,
    /// Development: repeated GETs are answered from the store without asking the origin.
    Dev,
}

word_enum!(CacheMode {
    Off,
    Http,
    Revalidate,
    Dev
});

/// What one budget is kept for (`key`): which requests share a rate, a concurrency cap and a
/// cooldown.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyMode {
    /// One budget per `host:port`, as the request names it (the default).
    #[default]
    Host,
    /// One budget per registrable domain (the Public Suffix List's eTLD+1), port ignored: every
    /// subdomain of one site shares it.
    Domain,
    /// One budget per address courtesy connects to, port ignored: every name served by one
    /// machine shares it.
    Ip,
}

word_enum!(KeyMode { Host, Domain, Ip });

/// Kinds of sub-resources a plain crawler rarely needs (`skip_resources`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceKind {
    /// Pictures: .png, .jpg, image/*.
    Image,
    /// Web fonts.
    Font,
    /// JavaScript.
    Script,
    /// CSS.
    Stylesheet,
    /// Audio and video.
    Media,
}

word_enum!(ResourceKind {
    Image,
    Font,
    Script,
    Stylesheet,
    Media,
});

/// How an adaptive host's rate moves on what the server says (`controller`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Controller {
    /// Additive increase, multiplicative decrease: + `increase_step` per healthy answer that
    /// waited, × `decrease_factor` per wave of 429s, × `slow_factor` per wave of slow answers.
    Aimd,
    /// The learned limit: after a 429 the rate goes back to just below the rate the server
    /// turned out to allow (estimated from what it served and how long it asked to wait),
    /// approaches it on a cubic curve and probes past it only after `probe_after_seconds`;
    /// latency holds the rate where it stays within `slow_response_ms`; a quota the server
    /// announces in RateLimit headers is the learned limit at once.
    Cubic,
}

word_enum!(Controller { Aimd, Cubic });

/// What courtesy does with the credentials a client puts in its proxy URL (`client_auth`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientAuth {
    /// Credentials are ignored: every request is job "anonymous".
    None,
    /// A username names the job (its token is checked when the job has one); no credentials:
    /// job "anonymous" (the default).
    #[default]
    Optional,
    /// Every request names a configured `[[job]]` with its token; otherwise 407.
    Required,
}

word_enum!(ClientAuth {
    None,
    Optional,
    Required
});

/// Which class of a job's requests goes first (`priority`, `Courtesy-Priority`): high before
/// normal before low, a lower class waiting never starved.
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    /// The interactive lane: ahead of the job's other requests.
    High,
    /// The default.
    #[default]
    Normal,
    /// Bulk work: after the job's other requests, but never starved.
    Low,
}

word_enum!(Priority { High, Normal, Low });

impl Priority {
    /// The class a `Courtesy-Priority` header names (`high`, `normal`, `low`; any case, spaces
    /// around ignored), or `None` for anything else: the caller answers a bad value.
    pub fn from_header(value: &str) -> Option<Priority> {
        let value = value.trim();
        Priority::ALL
            .iter()
            .copied()
            .find(|p| value.eq_ignore_ascii_case(p.word()))
    }
}

/// What a job will use the content it fetches for (`purpose`): the use a site's stated
/// preferences (Content-Signal, aipref Content-Usage) are checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Purpose {
    /// Building a search index and showing results that link to the page.
    Search,
    /// Giving the content to an AI model as input (retrieval-augmented generation, grounding).
    #[serde(rename = "ai-input")]
    AiInput,
    /// Training or fine-tuning AI models.
    #[serde(rename = "ai-train")]
    AiTrain,
}

word_enum!(Purpose {
    Search,
    AiInput,
    AiTrain
});

/// What courtesy does when a site's stated preferences refuse a request's purpose
/// (`content_preferences`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContentPreferences {
    /// Answer it locally with a 403; it is never sent.
    Enforce,
    /// Forward it and name the refusing signal in a response header (the default).
    #[default]
    Report,
    /// Read nothing: no robots.txt fetched for it, no header read.
    Off,
}

word_enum!(ContentPreferences {
    Enforce,
    Report,
    Off
});

/// When courtesy signs the requests it forwards (`[signing] mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SigningMode {
    /// Every request, from the first.
    Always,
    /// A host's requests once it answered 401/403/429 with `Accept-Signature`.
    OnChallenge,
    /// None.
    Off,
}

word_enum!(SigningMode {
    Always,
    OnChallenge,
    Off
});

/// How an agent's requests come about (`trigger`, published in its Signature Agent Card,
/// draft-meunier-webbotauth-registry): a crawler scans on its own, a fetcher fetches what a
/// user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// Autonomous scanning.
    Crawler,
    /// Requests a user initiated.
    Fetcher,
}

word_enum!(Trigger { Crawler, Fetcher });
