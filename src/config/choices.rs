//! The keys that take one word from a closed set: `on_cooldown`, `https`, `cache` and the entries
//! of `skip_resources`, each as an enum.

/// What happens to requests for a host that is cooling down (`on_cooldown`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnCooldown {
    /// Answer at once with a local 429 and the time left as `Retry-After`.
    Reject,
    /// Hold them, in order, until the window ends (up to `max_wait_seconds`, then the local 429).
    Hold,
}

/// What courtesy does with a `CONNECT` tunnel (`https`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpsMode {
    /// Terminate TLS with the local CA and pace every request inside (the default).
    Intercept,
    /// Copy bytes blindly: one admission per tunnel, which paces connections, not requests.
    Tunnel,
}

/// What courtesy does with stored GET responses (`cache`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheMode {
    /// Nothing is stored.
    Off,
    /// Responses with an ETag or Last-Modified are stored; repeats are revalidated with
    /// If-None-Match / If-Modified-Since, and a 304 is answered from the store as the full 200.
    Revalidate,
    /// Development: repeated GETs are answered from the store without asking the origin.
    Dev,
}

/// Kinds of sub-resources a plain crawler rarely needs (`skip_resources`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

impl ResourceKind {
    /// The config word for this kind.
    pub fn name(self) -> &'static str {
        match self {
            ResourceKind::Image => "image",
            ResourceKind::Font => "font",
            ResourceKind::Script => "script",
            ResourceKind::Stylesheet => "stylesheet",
            ResourceKind::Media => "media",
        }
    }

    /// The kind the config word `word` names, if any.
    pub(super) fn parse(word: &str) -> Option<ResourceKind> {
        [
            ResourceKind::Image,
            ResourceKind::Font,
            ResourceKind::Script,
            ResourceKind::Stylesheet,
            ResourceKind::Media,
        ]
        .into_iter()
        .find(|k| k.name() == word)
    }
}
