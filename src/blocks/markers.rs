//! The markers of challenge and block pages, and their matcher: a host that answers with a captcha
//! or a "just a moment..." page instead of content has blocked courtesy, whatever the status code
//! says. Built once at config time; holds no state.

/// Block markers with one matcher built at config time: a single case-insensitive pass over a
/// chunk finds any of them (scanning is on the streaming path of every text response). The regex
/// crate's literal search is about 5× faster here than a case-insensitive Aho-Corasick automaton
/// (18 µs against 92 µs per 64 KiB of HTML, measured).
#[derive(Debug, Clone)]
pub struct BlockMarkers {
    list: Vec<String>,
    matcher: Option<regex::bytes::Regex>,
    longest: usize,
}

impl PartialEq for BlockMarkers {
    fn eq(&self, other: &Self) -> bool {
        self.list == other.list
    }
}

impl BlockMarkers {
    /// Markers from `list` (compared without regard to ASCII case).
    pub fn new(list: Vec<String>) -> Self {
        let pattern = list
            .iter()
            .map(|m| regex::escape(m))
            .collect::<Vec<_>>()
            .join("|");
        let matcher = (!list.is_empty())
            .then(|| {
                regex::bytes::RegexBuilder::new(&pattern)
                    .case_insensitive(true)
                    .unicode(false)
                    .build()
                    .ok()
            })
            .flatten();
        let longest = list.iter().map(String::len).max().unwrap_or(0);
        BlockMarkers {
            list,
            matcher,
            longest,
        }
    }

    /// Whether there is nothing to look for.
    pub fn is_empty(&self) -> bool {
        self.matcher.is_none()
    }

    /// The markers.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.list.iter().map(String::as_str)
    }

    /// The length of the longest marker, in bytes.
    pub fn longest(&self) -> usize {
        self.longest
    }

    /// The first marker found in `haystack`, if any.
    pub fn find(&self, haystack: &[u8]) -> Option<&str> {
        let found = self.matcher.as_ref()?.find(haystack)?;
        let text = found.as_bytes();
        self.list
            .iter()
            .find(|m| m.as_bytes().eq_ignore_ascii_case(text))
            .map(String::as_str)
    }
}

/// The markers of challenge and block pages courtesy looks for by default.
pub const DEFAULT_BLOCK_MARKERS: [&str; 11] = [
    "unusual traffic from your computer network",
    "our systems have detected unusual traffic",
    "/sorry/index",
    "cf-challenge",
    "challenge-platform",
    "cf_chl_opt",
    "<title>just a moment...</title>",
    "g-recaptcha",
    "h-captcha",
    "px-captcha",
    "_incapsula_resource",
];
