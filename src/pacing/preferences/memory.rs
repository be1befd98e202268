//! The `Content-Usage` response headers seen, remembered per path: a header arrives only after
//! its request was sent, so it can only be reported on that response; remembered, it decides the
//! later requests for the same path (scheme, host, port and path, the query left out) like a
//! robots.txt rule. Bounded (least recently used forgotten first) and trusted as long as a
//! robots.txt, a day.

use std::num::NonZeroUsize;
use std::sync::Mutex;

use lru::LruCache;
use tokio::time::Instant;

use super::{Refused, Source, Statement};
use crate::config::Purpose;
use crate::pacing::robots::CACHE_FOR;
use crate::util::locks::lock;

/// The most paths remembered.
const MAX_PATHS: usize = 4096;

/// The last `Content-Usage` header of each path, while it refuses something.
#[derive(Debug)]
pub(crate) struct HeaderMemory {
    paths: Mutex<LruCache<String, (Statement, Instant)>>,
}

impl Default for HeaderMemory {
    fn default() -> Self {
        HeaderMemory {
            paths: Mutex::new(LruCache::new(
                NonZeroUsize::new(MAX_PATHS).unwrap_or(NonZeroUsize::MIN),
            )),
        }
    }
}

/// The key of a path on an origin (`origin` as the robots.txt cache spells it).
fn key_of(origin: &str, path: &str) -> String {
    let path = path.split('?').next().unwrap_or(path);
    format!("{origin}{path}")
}

impl HeaderMemory {
    /// Remembers what the latest response for `path` on `origin` stated (`statement`); a response
    /// that refuses nothing forgets the path.
    pub(crate) fn note(&self, origin: &str, path: &str, statement: Statement, now: Instant) {
        let key = key_of(origin, path);
        let refuses = [Purpose::Search, Purpose::AiInput, Purpose::AiTrain]
            .into_iter()
            .any(|p| statement.about(p).is_some_and(|said| !said.allowed));
        let mut paths = lock(&self.paths);
        if refuses {
            paths.put(key, (statement, now));
        } else {
            paths.pop(&key);
        }
    }

    /// The remembered refusal of `purpose` for `path` on `origin`, if any.
    pub(crate) fn refusal(
        &self,
        origin: &str,
        path: &str,
        purpose: Purpose,
        now: Instant,
    ) -> Option<Refused> {
        let key = key_of(origin, path);
        let mut paths = lock(&self.paths);
        let (statement, seen) = paths.get(&key)?;
        if now.duration_since(*seen) >= CACHE_FOR {
            paths.pop(&key);
            return None;
        }
        Refused::of(statement, purpose, Source::ResponseHeader)
    }
}

#[cfg(test)]
mod tests {
    use super::super::content_usage;
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn remembered_per_path_for_a_day() {
        let memory = HeaderMemory::default();
        let now = Instant::now();
        memory.note(
            "http://a.test:80",
            "/p?x=1",
            content_usage(b"train-ai=n"),
            now,
        );
        let refused = memory.refusal("http://a.test:80", "/p?y=2", Purpose::AiTrain, now);
        assert_eq!(
            refused.map(|r| r.details()).as_deref(),
            Some("train-ai=n in Content-Usage response header")
        );
        assert!(memory
            .refusal("http://a.test:80", "/p", Purpose::Search, now)
            .is_none());
        assert!(memory
            .refusal("http://a.test:80", "/q", Purpose::AiTrain, now)
            .is_none());
        let later = now + CACHE_FOR;
        assert!(memory
            .refusal("http://a.test:80", "/p", Purpose::AiTrain, later)
            .is_none());
        // A later response that refuses nothing forgets it.
        memory.note("http://a.test:80", "/p", content_usage(b"train-ai=n"), now);
        memory.note("http://a.test:80", "/p", content_usage(b"train-ai=y"), now);
        assert!(memory
            .refusal("http://a.test:80", "/p", Purpose::AiTrain, now)
            .is_none());
    }
}
