//! What sites say about the use of their content (stated preferences), read from the robots.txt
//! lines `texting_robots` drops and from the `Content-Usage` response header: Cloudflare's
//! `Content-Signal` (draft-romm-aipref-contentsignals) and the IETF aipref `Content-Usage`
//! (draft-ietf-aipref-attach, vocabulary draft-ietf-aipref-vocab), mapped onto courtesy's three
//! purposes (`search`, `ai-input`, `ai-train`).
//!
//! This module owns the parsing, the mapping of both vocabularies onto the purposes, the choice
//! of the robots.txt group and the longest-path rule, and the memory of response headers. Pure:
//! what a refusal does to a request (a local 403, a report header, the counts) is the proxy's
//! (`proxy/refuse/preferences.rs`); fetching and caching robots.txt is `pacing/robots.rs`'s.

mod memory;
mod robots_lines;
mod sf;
mod vocab;

pub(crate) use memory::HeaderMemory;
pub(crate) use robots_lines::RobotsPreferences;
pub(crate) use vocab::content_usage;

use crate::config::{ConfigWord as _, Purpose};

/// Where a stated preference was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    /// A `Content-Signal:` line of robots.txt (Cloudflare's content signals).
    RobotsContentSignal,
    /// A `Content-Usage:` rule of robots.txt (IETF aipref).
    RobotsContentUsage,
    /// The `Content-Usage` header of a response (IETF aipref), this response's or one remembered
    /// for the same path.
    ResponseHeader,
}

impl Source {
    /// How `Proxy-Status` details and the report header name it.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Source::RobotsContentSignal => "robots.txt Content-Signal",
            Source::RobotsContentUsage => "robots.txt Content-Usage",
            Source::ResponseHeader => "Content-Usage response header",
        }
    }

    /// The `source` label of the metric.
    pub(crate) fn metric(self) -> &'static str {
        match self {
            Source::RobotsContentSignal => "robots_content_signal",
            Source::RobotsContentUsage => "robots_content_usage",
            Source::ResponseHeader => "content_usage_header",
        }
    }
}

/// One explicit preference about one purpose: allowed or not, and the words that said it
/// (`ai-train=no`, `train-ai=n`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Said {
    /// Whether the use is allowed.
    pub(crate) allowed: bool,
    /// The label and value as the site wrote them.
    pub(crate) words: String,
}

/// One statement of preference (one robots.txt rule, one header): for each purpose, what it
/// says explicitly, if anything (the vocabulary's "unknown" is `None`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Statement {
    by_purpose: [Option<Said>; 3],
}

/// The index of a purpose in a [`Statement`].
fn slot(purpose: Purpose) -> usize {
    match purpose {
        Purpose::Search => 0,
        Purpose::AiInput => 1,
        Purpose::AiTrain => 2,
    }
}

impl Statement {
    /// What the statement says about `purpose`.
    pub(crate) fn about(&self, purpose: Purpose) -> Option<&Said> {
        self.by_purpose[slot(purpose)].as_ref()
    }

    /// Sets what it says about `purpose`.
    fn set(&mut self, purpose: Purpose, said: Said) {
        self.by_purpose[slot(purpose)] = Some(said);
    }

    /// Whether it says nothing about any purpose.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.by_purpose.iter().all(Option::is_none)
    }
}

/// A site's refusal of a purpose: what said it and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused {
    /// The purpose refused.
    pub(crate) purpose: Purpose,
    /// The words that refused it (`ai-train=no`).
    pub(crate) words: String,
    /// Where they were read.
    pub(crate) source: Source,
}

impl Refused {
    /// The refusal of `purpose` in `statement`, read from `source`, if it refuses it.
    pub(crate) fn of(statement: &Statement, purpose: Purpose, source: Source) -> Option<Refused> {
        statement
            .about(purpose)
            .filter(|said| !said.allowed)
            .map(|said| Refused {
                purpose,
                words: said.words.clone(),
                source,
            })
    }

    /// The signal and its source, for `Proxy-Status` details and the report header:
    /// `ai-train=no in robots.txt Content-Signal`.
    pub(crate) fn details(&self) -> String {
        format!("{} in {}", self.words, self.source.label())
    }

    /// The value of the report header: the details and the purpose they refuse.
    pub(crate) fn report(&self) -> String {
        format!(
            "{}; purpose={}",
            self.details().replace(['"', '\\'], ""),
            self.purpose.word()
        )
    }
}
