//! A job's settings (`[[job]]`): who a job is (its name, the username of the proxy URL, and its
//! token), its share of each host's turns, its default priority and answer to a cooldown, its quota, and what courtesy
//! stamps on its requests, and the key it signs with. Keeping per-job state is `crate::budget::jobs`'s job.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::key_tables::keys;
use super::key_tables::kinds::{between, Count, Maybe, Seconds, Word};
use super::key_tables::process::{AgentUrl, HeaderText, JobName, Path, Sha256Hex, Token};
use super::{OnCooldown, Priority, Purpose, Trigger};
use crate::wire::httpsig::SigningKey;

keys! {
    /// One job (`[[job]]`): a crawler, a person or a pipeline, named by the username of its proxy
    /// URL (`http://crawl-a:TOKEN@127.0.0.1:3128`).
    pub struct JobSettings in JobSettings as KEYS {
        /// The job's name: the username of its proxy URL.
        name: String = String::new(), from name: String, JobName,
            example "\"crawl-a\"";
        /// Its password, checked when a client gives it (and needed with client_auth =
        /// "required"); at least 16 printable characters.
        ///
        /// Never logged or shown. Give `token_sha256` instead to keep the token out of the file.
        token: Option<String> = None, from token: String, Maybe(Token),
            example "\"a-long-random-token-for-crawl-a\"";
        /// The SHA-256 of its token, as 64 hex digits (`printf %s TOKEN | sha256sum`), instead
        /// of the token itself.
        ///
        /// A token is random, not a password a person chose: a fast hash is enough to keep it
        /// out of a config file that leaks (nobody can search 2^96 tokens), and a slow one
        /// (bcrypt, argon2) would cost CPU on every request.
        token_sha256: Option<[u8; 32]> = None, from token_sha256: String, Maybe(Sha256Hex),
            example "\"<64 hex digits>\"";
        /// Its share of each host's turns while it has requests waiting, against the other jobs
        /// waiting for that host (a job alone gets every turn).
        weight: f64 = 1.0, from weight: f64, between(0.01, 1000.0);
        /// The priority of its requests that do not say theirs in Courtesy-Priority.
        priority: Priority = Priority::Normal, from priority: String, Word;
        /// What its requests get while a host cools down, over the host's `on_cooldown`:
        /// `"auto"`, `"hold"` or `"reject"` (a request's own Courtesy-On-Cooldown wins); unset:
        /// the host's.
        on_cooldown: Option<OnCooldown> = None, from on_cooldown: String, Maybe(Word),
            example "\"reject\"";
        /// Requests it may send to all hosts together per `per_seconds`; past it, local 429s
        /// until the window frees. Unset: no quota.
        max_requests: Option<u64> = None,
            from max_requests: i64, Maybe(Count { min: 1, max: 1_000_000_000_000 }),
            example "10000";
        /// The length of the quota's window.
        per_seconds: Duration = Duration::from_secs(3600),
            from per_seconds: f64, Seconds { min: 1.0, max: 31.0 * 86400.0 };
        /// The User-Agent stamped on its requests (a host's own `user_agent` wins); unset: the
        /// client's.
        user_agent: Option<String> = None, from user_agent: String, Maybe(HeaderText),
            example "\"crawl-a/1.0 (+https://example.org/bot)\"";
        /// The From header stamped on its requests (RFC 9110 10.1.2: a mailbox to write to about
        /// the crawl; a host's own `from` wins); unset: the client's.
        from: Option<String> = None, from from: String, Maybe(HeaderText),
            example "\"ops@example.org\"";
        /// What the job uses the content for: `"search"`, `"ai-input"` or `"ai-train"`, checked
        /// against the preferences sites state (Content-Signal, Content-Usage); unset: the
        /// `[defaults]` purpose (see content_preferences).
        purpose: Option<Purpose> = None, from purpose: String, Maybe(Word),
            example "\"ai-train\"";
        /// The job's own Web Bot Auth key (a JWK file, as [signing] key_file), over [signing]'s:
        /// a team's jobs can be different bots.
        signing_key_file: Option<PathBuf> = None, from signing_key_file: String, Maybe(Path),
            example "\"/etc/courtesy/crawl-a.jwk\"";
        /// The job's own Signature-Agent (where its key directory is published), over
        /// [signing]'s.
        signature_agent: Option<String> = None, from signature_agent: String, Maybe(AgentUrl),
            example "\"https://crawl-a.example.com\"";
        /// How the job's requests come about, for its agent's Signature Agent Card:
        /// `"crawler"` or `"fetcher"`; unset: [signing]'s `trigger`.
        trigger: Option<Trigger> = None, from trigger: String, Maybe(Word),
            example "\"fetcher\"";
    }
    also {
        /// The key of signing_key_file, read when the config was read.
        signing_key: Option<Arc<SigningKey>> = None;
    }
}

impl JobSettings {
    /// Whether the job has a token to check (itself, or its hash).
    pub fn has_token(&self) -> bool {
        self.token.is_some() || self.token_sha256.is_some()
    }
}
