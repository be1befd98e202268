//! The markers of challenge and block pages, and their matcher: a host that answers with a captcha
//! or a "just a moment..." page instead of content has blocked courtesy, whatever the status code
//! says. Built once at config time; holds no state.

use std::cell::RefCell;

use aho_corasick::{AhoCorasick, Match, MatchKind};

/// Block markers with one matcher built at config time: a single pass over a chunk finds any of
/// them, without regard to ASCII case (scanning is on the streaming path of every text response).
/// The chunk is folded to lower case a block at a time into a stack buffer and searched for the
/// lower-cased markers with a case-sensitive Aho-Corasick automaton (its SIMD prefilter works on
/// the markers as written): about 6.5 µs per 64 KiB of HTML, against 21–58 µs for one
/// case-insensitive regex (whose literal variants swamp its prefilter) and 95 µs for a
/// case-insensitive automaton (measured on this machine, real and random HTML).
#[derive(Debug, Clone)]
pub struct BlockMarkers {
    list: Vec<String>,
    matcher: Option<AhoCorasick>,
    longest: usize,
    /// The vendors' own block pages whose marker is in `list` (a redirect there is a block).
    vendors: Vec<&'static VendorBlockPath>,
}

/// The bytes folded to lower case at a time: a block plus the overlap with the previous one fits
/// a small stack buffer.
const FOLD_BLOCK: usize = 4096;

impl PartialEq for BlockMarkers {
    fn eq(&self, other: &Self) -> bool {
        self.list == other.list
    }
}

impl BlockMarkers {
    /// Markers from `list` (compared without regard to ASCII case).
    pub fn new(list: Vec<String>) -> Self {
        let lowered = list.iter().map(|m| m.to_ascii_lowercase());
        let matcher = (!list.is_empty())
            .then(|| {
                AhoCorasick::builder()
                    .match_kind(MatchKind::LeftmostFirst)
                    .build(lowered)
                    .ok()
            })
            .flatten();
        let longest = list.iter().map(String::len).max().unwrap_or(0);
        let vendors = VENDOR_BLOCK_PATHS
            .iter()
            .filter(|v| list.iter().any(|m| m.eq_ignore_ascii_case(v.marker)))
            .collect();
        BlockMarkers {
            list,
            matcher,
            longest,
            vendors,
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

    /// The markers that are paths (start with `/`): a redirect on its own host to a path that
    /// starts with one is a block.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.iter().filter(|m| m.starts_with('/'))
    }

    /// The vendors' own block pages that these markers name (Google's `/sorry/` while
    /// `/sorry/index` is a marker).
    pub fn vendors(&self) -> impl Iterator<Item = &'static VendorBlockPath> + '_ {
        self.vendors.iter().copied()
    }

    /// The length of the longest marker, in bytes.
    pub fn longest(&self) -> usize {
        self.longest
    }

    /// The first marker found in `haystack` (the leftmost; of those starting at the same byte,
    /// the first in the list), if any.
    pub fn find(&self, haystack: &[u8]) -> Option<&str> {
        let matcher = self.matcher.as_ref()?;
        let overlap = self.longest.saturating_sub(1);
        let found = if overlap >= FOLD_BLOCK / 2 {
            // Markers too long for the stack buffer's overlap: fold the whole chunk at once.
            matcher.find(haystack.to_ascii_lowercase().as_slice())
        } else {
            find_folded(matcher, haystack, overlap)
        };
        self.list
            .get(found?.pattern().as_usize())
            .map(String::as_str)
    }
}

/// Searches `haystack` folded to lower case, a block at a time; consecutive blocks share
/// `overlap` bytes (one less than the longest marker), so a marker across a block edge is found in
/// the later block, and the first block with a match holds the leftmost one.
fn find_folded(matcher: &AhoCorasick, haystack: &[u8], overlap: usize) -> Option<Match> {
    FOLDED.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => find_folded_in(&mut buf, matcher, haystack, overlap),
        Err(_) => find_folded_in(&mut [0; FOLD_BLOCK], matcher, haystack, overlap),
    })
}

thread_local! {
    /// Each thread's fold buffer, so a scan does not clear 4 KiB of stack on every chunk.
    static FOLDED: RefCell<[u8; FOLD_BLOCK]> = const { RefCell::new([0; FOLD_BLOCK]) };
}

/// [`find_folded`] with the buffer to fold into.
fn find_folded_in(
    buf: &mut [u8; FOLD_BLOCK],
    matcher: &AhoCorasick,
    haystack: &[u8],
    overlap: usize,
) -> Option<Match> {
    let mut start = 0;
    loop {
        let end = (start + FOLD_BLOCK).min(haystack.len());
        let block = &mut buf[..end - start];
        for (folded, byte) in block.iter_mut().zip(&haystack[start..end]) {
            *folded = byte.to_ascii_lowercase();
        }
        if let Some(found) = matcher.find(&*block) {
            return Some(found);
        }
        if end == haystack.len() {
            return None;
        }
        start = end - overlap;
    }
}

/// The markers of challenge and block pages courtesy looks for by default: only the words of the
/// interstitials themselves, never a widget's name (`g-recaptcha`, `h-captcha`, `cf-turnstile`)
/// nor a script a vendor puts into ordinary pages (Cloudflare's `/cdn-cgi/challenge-platform/`,
/// Imperva's `_Incapsula_Resource`, DataDome's `tags.js`), which real contact, login and product
/// pages carry. Each names one vendor's interstitial (see tests/corpus/blocks/).
pub const DEFAULT_BLOCK_MARKERS: [&str; 12] = [
    // Google's /sorry/ page (its text, and the path a redirect to it names).
    "our systems have detected unusual traffic",
    "unusual traffic from your computer network",
    "/sorry/index",
    // Cloudflare's challenge (its title, and the options of its challenge script) and its
    // firewall's block page.
    "<title>just a moment...</title>",
    "window._cf_chl_opt",
    "<title>attention required! | cloudflare</title>",
    // Akamai's edge refusal.
    "<title>access denied</title>",
    // DataDome's captcha page (its frame comes from geo.captcha-delivery.com).
    "captcha-delivery.com",
    // PerimeterX / HUMAN's "Press & Hold" page (its title and the captcha's element).
    "<title>access to this page has been denied",
    "id=\"px-captcha\"",
    // Imperva / Incapsula's refusal.
    "incapsula incident id",
    // AWS WAF's captcha and challenge pages.
    "window.gokuprops",
];

/// A bot-management vendor's own block page: where the vendor sends a client it blocks, on its
/// own hosts. A redirect from one of the vendor's hosts to this path on one of them is a block
/// (an open redirect elsewhere that names the page is not: only the vendor blocks there).
#[derive(Debug)]
pub struct VendorBlockPath {
    /// The vendor, for the log line and the block's reason.
    pub vendor: &'static str,
    /// The `block_markers` entry that names this page: the vendor's rule holds while the marker
    /// is in a host's list (an operator's own list without it turns the rule off).
    pub marker: &'static str,
    /// The block page's path prefix on the vendor's hosts (compared without regard to case).
    pub path: &'static str,
    /// Whether a canonical host name (lower case, no final dot) is one of the vendor's.
    pub hosts: fn(&str) -> bool,
}

/// The vendors' own block pages courtesy knows: Google's `/sorry/` on Google's hosts.
static VENDOR_BLOCK_PATHS: [VendorBlockPath; 1] = [VendorBlockPath {
    vendor: "Google",
    marker: "/sorry/index",
    path: "/sorry/",
    hosts: is_google_host,
}];

/// Whether `host` (canonical) is Google's: `google.com` or a country domain of it (`google.de`,
/// `google.co.uk`, `google.com.au`), or a name under one of them (`www.google.de`,
/// `ipv4.google.com`). A name that merely contains the label (`google.example.com`) is not.
fn is_google_host(host: &str) -> bool {
    let country = |label: &str| label.len() == 2 && label.bytes().all(|b| b.is_ascii_lowercase());
    let mut labels = host.rsplit('.');
    match (labels.next(), labels.next(), labels.next()) {
        (Some("com"), Some("google"), _) => true,
        (Some(tld), Some("google"), _) => country(tld),
        (Some(tld), Some("co" | "com"), Some("google")) => country(tld),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn markers(list: &[&str]) -> BlockMarkers {
        BlockMarkers::new(list.iter().map(|m| m.to_string()).collect())
    }

    #[test]
    fn markers_match_without_regard_to_ascii_case_and_name_the_configured_marker() {
        let m = markers(&["G-reCAPTCHA", "<title>Just a moment...</title>"]);
        assert_eq!(m.find(b"<div class=\"g-recaptcha\">"), Some("G-reCAPTCHA"));
        assert_eq!(
            m.find(b"<TITLE>JUST A MOMENT...</TITLE>"),
            Some("<title>Just a moment...</title>")
        );
        assert_eq!(m.find(b"<title>just a minute</title>"), None);
        assert!(markers(&[]).find(b"anything").is_none());
        assert!(markers(&[]).is_empty());
    }

    #[test]
    fn the_leftmost_marker_wins_and_ties_go_to_the_first_listed() {
        let m = markers(&["captcha", "h-captcha", "cf-chl"]);
        assert_eq!(m.find(b"xx cf-chl then h-captcha"), Some("cf-chl"));
        assert_eq!(m.find(b"xx h-captcha"), Some("h-captcha"));
        let first = markers(&["abc", "ab"]);
        assert_eq!(first.find(b"zabcz"), Some("abc"));
    }

    #[test]
    fn a_marker_across_a_fold_block_edge_is_found_in_one_call() {
        let m = markers(&DEFAULT_BLOCK_MARKERS);
        let marker = b"INCAPSULA INCIDENT ID";
        for offset in FOLD_BLOCK - marker.len()..=FOLD_BLOCK {
            let mut page = vec![b'x'; 3 * FOLD_BLOCK];
            page[offset..offset + marker.len()].copy_from_slice(marker);
            assert_eq!(m.find(&page), Some("incapsula incident id"), "at {offset}");
        }
        let mut far = vec![b'y'; 20 * FOLD_BLOCK + 7];
        let at = far.len() - marker.len();
        far[at..].copy_from_slice(marker);
        assert_eq!(m.find(&far), Some("incapsula incident id"));
        assert_eq!(m.find(&vec![b'y'; 20 * FOLD_BLOCK]), None);
    }

    #[test]
    fn google_hosts_are_google_com_its_country_domains_and_names_under_them() {
        for host in [
            "google.com",
            "www.google.com",
            "ipv4.google.com",
            "google.de",
            "www.google.de",
            "google.co.uk",
            "www.google.co.jp",
            "google.com.au",
        ] {
            assert!(is_google_host(host), "{host}");
        }
        for host in [
            "google.example.com",
            "notgoogle.com",
            "google.com.evil.net",
            "google.co.evil",
            "google.evil",
            "sorry.example",
            "google",
            "",
        ] {
            assert!(!is_google_host(host), "{host}");
        }
        let defaults = markers(&DEFAULT_BLOCK_MARKERS);
        assert_eq!(
            defaults.vendors().map(|v| v.vendor).collect::<Vec<_>>(),
            ["Google"]
        );
        assert_eq!(defaults.paths().collect::<Vec<_>>(), ["/sorry/index"]);
        assert_eq!(markers(&["just a moment"]).vendors().count(), 0);
    }

    #[test]
    fn markers_longer_than_the_fold_overlap_are_still_found() {
        let long = "z".repeat(FOLD_BLOCK) + "END";
        let m = BlockMarkers::new(vec![long.clone()]);
        let mut page = b"head ".to_vec();
        page.extend_from_slice(long.to_ascii_uppercase().as_bytes());
        assert_eq!(m.find(&page), Some(long.as_str()));
    }
}
