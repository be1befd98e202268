//! The preference lines of robots.txt (`Content-Signal:` and `Content-Usage:`), its pacing lines
//! beyond `Crawl-delay` (`Request-rate:` and `Visit-time:`, read by `pacing/robots_pacing.rs`), and the
//! licences it names (RSL 1.0's `License:` lines, which apply to the whole site and are only
//! reported, never enforced), which
//! `texting_robots` drops, grouped as `texting_robots` groups its rules so that a client gets the
//! preferences of the very group whose Allow and Disallow it obeys: consecutive `User-agent`
//! lines open a group until an Allow, Disallow or Crawl-delay ends the run; the group naming the
//! agent (exactly, in any case) applies, else `*`; a file without `User-agent` lines is one
//! group. Other lines (Sitemap, unknown ones) change nothing.
//!
//! A rule applies to the paths its pattern matches (`*` any run of characters, a final `$` the
//! end), and of the rules of one kind matching a path, those with the longest pattern decide
//! (draft-ietf-aipref-attach 3.1; several with that length combine, a refusal winning).
//! `Content-Usage` requires its path (`Content-Usage: / train-ai=n`); a `Content-Signal` may
//! start with one (`Content-Signal: /blog/ ai-train=no`) and applies to `/` without.

use super::vocab::{content_signal, content_usage};
use super::{Refused, Source, Statement};
use crate::config::Purpose;
use crate::pacing::robots_pacing::RobotsPacing;

/// One preference rule: a path pattern and what it states.
#[derive(Debug, Clone)]
struct Rule {
    pattern: String,
    source: Source,
    statement: Statement,
}

/// One group: the agents it names (lower-cased), its preference rules and its pacing lines.
#[derive(Debug, Clone, Default)]
struct Group {
    agents: Vec<String>,
    rules: Vec<Rule>,
    pacing: RobotsPacing,
}

/// Every preference rule of one robots.txt, by group.
#[derive(Debug, Clone, Default)]
pub(crate) struct RobotsPreferences {
    /// The first holds the lines before any `User-agent` (they apply only in a file with no
    /// `User-agent` line at all).
    groups: Vec<Group>,
    has_agents: bool,
    /// The licence URLs of `License:` lines (RSL 1.0), in order: at most [`MAX_LICENSES`],
    /// each an `http(s)://` URL of at most [`MAX_LICENSE_LEN`] printable bytes.
    licenses: Vec<String>,
}

/// The most `License:` lines kept from one robots.txt.
const MAX_LICENSES: usize = 4;
/// The longest licence URL kept.
const MAX_LICENSE_LEN: usize = 2048;

impl RobotsPreferences {
    /// Reads the preference lines of `txt`.
    pub(crate) fn parse(txt: &[u8]) -> RobotsPreferences {
        let text = String::from_utf8_lossy(txt);
        let mut groups = vec![Group::default()];
        let mut has_agents = false;
        let mut rule_seen = true;
        let mut licenses = Vec::new();
        for line in text.split(['\n', '\r', '\0']) {
            let line = line.split('#').next().unwrap_or("");
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let key = key.trim().to_ascii_lowercase();
            let value = value.trim_matches([' ', '\t']);
            match key.as_str() {
                "user-agent" => {
                    if rule_seen || !has_agents {
                        groups.push(Group::default());
                    }
                    has_agents = true;
                    rule_seen = false;
                    if let Some(group) = groups.last_mut() {
                        group.agents.push(value.to_ascii_lowercase());
                    }
                }
                "allow" | "disallow" | "crawl-delay" => rule_seen = true,
                "request-rate" | "visit-time" => {
                    if let Some(group) = groups.last_mut() {
                        group.pacing.take(&key, value);
                    }
                }
                "license" => {
                    if let Some(url) = license_of(value).filter(|_| licenses.len() < MAX_LICENSES) {
                        licenses.push(url);
                    }
                }
                "content-signal" | "content-usage" => {
                    let Some(rule) = rule_of(&key, value) else {
                        continue;
                    };
                    if let Some(group) = groups.last_mut() {
                        group.rules.push(rule);
                    }
                }
                _ => {}
            }
        }
        RobotsPreferences {
            groups,
            has_agents,
            licenses,
        }
    }

    /// The licences the file names (`License:` lines, RSL 1.0), in order.
    pub(crate) fn licenses(&self) -> &[String] {
        &self.licenses
    }

    /// The `Request-rate` and `Visit-time` lines of the groups `agent` falls in.
    pub(crate) fn pacing(&self, agent: &str) -> RobotsPacing {
        let agent = agent.to_ascii_lowercase();
        self.groups_for(&agent)
            .iter()
            .fold(RobotsPacing::default(), |joined, g| joined.join(&g.pacing))
    }

    /// The groups that apply to `agent` (lower-cased): those naming it, else those naming `*`.
    fn groups_for(&self, agent: &str) -> Vec<&Group> {
        if !self.has_agents {
            return self.groups.iter().take(1).collect();
        }
        let naming = |name: &str| -> Vec<&Group> {
            self.groups
                .iter()
                .filter(|g| g.agents.iter().any(|a| a == name))
                .collect()
        };
        let own = naming(agent);
        if own.is_empty() {
            naming("*")
        } else {
            own
        }
    }

    /// The refusal of `purpose` for `path` (path and query) by the group of `agent`, if any:
    /// Content-Signal's first, then Content-Usage's.
    pub(crate) fn refusal(&self, agent: &str, purpose: Purpose, path: &str) -> Option<Refused> {
        let agent = agent.to_ascii_lowercase();
        let groups = self.groups_for(&agent);
        for source in [Source::RobotsContentSignal, Source::RobotsContentUsage] {
            let matching: Vec<&Rule> = groups
                .iter()
                .flat_map(|g| g.rules.iter())
                .filter(|r| r.source == source && matches(&r.pattern, path))
                .collect();
            let Some(longest) = matching.iter().map(|r| r.pattern.len()).max() else {
                continue;
            };
            let refused = matching
                .iter()
                .filter(|r| r.pattern.len() == longest)
                .find_map(|r| Refused::of(&r.statement, purpose, source));
            if refused.is_some() {
                return refused;
            }
        }
        None
    }

    /// Whether the file has no preference line at all.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.groups.iter().all(|g| g.rules.is_empty())
    }
}

/// The licence URL of a `License:` line's `value`, if it is one: an `http(s)://` URL of
/// printable ASCII, at most [`MAX_LICENSE_LEN`] bytes (one that is not is ignored, as an
/// unknown line is).
fn license_of(value: &str) -> Option<String> {
    let url = value.trim();
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    let absolute = lower.starts_with("https://") || lower.starts_with("http://");
    let printable = url.bytes().all(|b| b.is_ascii_graphic());
    (absolute && printable && url.len() <= MAX_LICENSE_LEN).then(|| url.to_string())
}

/// The rule of a `content-signal` or `content-usage` line with `value`, if it is one.
fn rule_of(key: &str, value: &str) -> Option<Rule> {
    let (path, rest) = if value.starts_with('/') {
        let end = value.find([' ', '\t']).unwrap_or(value.len());
        (&value[..end], value[end..].trim_matches([' ', '\t']))
    } else {
        ("/", value)
    };
    let (source, statement) = if key == "content-usage" {
        if !value.starts_with('/') {
            // The aipref rule always starts with its path.
            return None;
        }
        (Source::RobotsContentUsage, content_usage(rest.as_bytes()))
    } else {
        (Source::RobotsContentSignal, content_signal(rest))
    };
    Some(Rule {
        pattern: path.to_string(),
        source,
        statement,
    })
}

/// Whether the robots.txt path `pattern` matches `path`: a prefix match, where `*` stands for any
/// run of characters and a final `$` for the end of the path.
fn matches(pattern: &str, path: &str) -> bool {
    let (pattern, anchored) = match pattern.strip_suffix('$') {
        Some(p) => (p, true),
        None => (pattern, false),
    };
    let pieces: Vec<&str> = pattern.split('*').collect();
    let mut rest = path;
    for (i, piece) in pieces.iter().enumerate() {
        let last = i + 1 == pieces.len();
        if i == 0 {
            let Some(after) = rest.strip_prefix(piece) else {
                return false;
            };
            rest = after;
            if last {
                return !anchored || rest.is_empty();
            }
            continue;
        }
        if last && anchored {
            return rest.ends_with(piece);
        }
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(txt: &str, agent: &str, purpose: Purpose, path: &str) -> Option<String> {
        RobotsPreferences::parse(txt.as_bytes())
            .refusal(agent, purpose, path)
            .map(|r| r.details())
    }

    #[test]
    fn license_lines_are_read_in_any_group_and_spelling_and_bounded() {
        let txt = "User-agent: *\nDisallow: /private\nLICENSE : https://example.com/license.xml\n\
                   User-agent: bot\nlicense:http://example.com/other.xml\n\
                   License: /relative.xml\nLicense: https://a.example/x y\n\
                   License: https://example.com/3\nLicense: https://example.com/4\n\
                   License: https://example.com/5\n";
        let parsed = RobotsPreferences::parse(txt.as_bytes());
        assert_eq!(
            parsed.licenses(),
            [
                "https://example.com/license.xml",
                "http://example.com/other.xml",
                "https://example.com/3",
                "https://example.com/4"
            ]
        );
        let long = format!("License: https://example.com/{}\n", "a".repeat(3000));
        assert!(RobotsPreferences::parse(long.as_bytes())
            .licenses()
            .is_empty());
        assert!(RobotsPreferences::parse(b"User-agent: *\nAllow: /\n")
            .licenses()
            .is_empty());
    }

    #[test]
    fn content_signal_in_the_star_group() {
        let txt = "User-agent: *\nContent-Signal: search=yes, ai-train=no\nAllow: /\n";
        assert_eq!(
            refused(txt, "bot", Purpose::AiTrain, "/a").as_deref(),
            Some("ai-train=no in robots.txt Content-Signal")
        );
        assert_eq!(refused(txt, "bot", Purpose::Search, "/a"), None);
        assert_eq!(refused(txt, "bot", Purpose::AiInput, "/a"), None);
    }

    #[test]
    fn spellings_case_whitespace_and_comments() {
        let txt = "USER-AGENT : *\r\n  content-signal\t:  AI-Train = No  # no training\r\n\
                   CONTENT-USAGE: /  search=n # comment\r\n";
        assert_eq!(
            refused(txt, "Bot", Purpose::AiTrain, "/").as_deref(),
            Some("ai-train=no in robots.txt Content-Signal")
        );
        assert_eq!(
            refused(txt, "bot", Purpose::Search, "/x").as_deref(),
            Some("search=n in robots.txt Content-Usage")
        );
        // A comment that swallows the value, a line without a colon, an unknown key.
        let txt = "User-agent: *\n# Content-Signal: ai-train=no\nContent-Signal ai-train=no\n\
                   Content-Sgnal: ai-train=no\nContent-Usage: train-ai=n\n";
        assert!(RobotsPreferences::parse(txt.as_bytes()).is_empty());
    }

    #[test]
    fn the_group_of_the_agent_or_star() {
        let txt = "User-agent: *\nAllow: /\nContent-Usage: / train-ai=n\n\n\
                   User-agent: ExampleBot\nUser-agent: other\nAllow: /\nContent-Usage: / train-ai=y\n\n\
                   User-agent: examplebot\nContent-Signal: ai-input=no\n";
        assert!(refused(txt, "crawler", Purpose::AiTrain, "/t").is_some());
        assert_eq!(refused(txt, "examplebot", Purpose::AiTrain, "/t"), None);
        assert_eq!(refused(txt, "OTHER", Purpose::AiTrain, "/t"), None);
        // Both groups naming the agent apply.
        assert!(refused(txt, "ExampleBot", Purpose::AiInput, "/t").is_some());
        assert_eq!(refused(txt, "other", Purpose::AiInput, "/t"), None);
    }

    #[test]
    fn preference_lines_do_not_split_a_run_of_agents() {
        let txt = "User-agent: a\nContent-Signal: ai-train=no\nUser-agent: b\nDisallow: /x\n";
        assert!(refused(txt, "b", Purpose::AiTrain, "/").is_some());
        assert!(refused(txt, "a", Purpose::AiTrain, "/").is_some());
        assert_eq!(refused(txt, "c", Purpose::AiTrain, "/"), None);
    }

    #[test]
    fn a_file_without_agents_is_one_group() {
        let txt = "Content-Signal: ai-train=no\n";
        assert!(refused(txt, "any", Purpose::AiTrain, "/").is_some());
        // Lines before the first agent do not count in a file with agents.
        let txt = "Content-Signal: ai-train=no\nUser-agent: *\nAllow: /\n";
        assert_eq!(refused(txt, "any", Purpose::AiTrain, "/"), None);
    }

    #[test]
    fn the_longest_path_decides() {
        let txt = "User-agent: *\nAllow: /\nDisallow: /never/\nContent-Usage: / train-ai=n\n\
                   Content-Usage: /ai-ok/ train-ai=y\nContent-Signal: /blog/ ai-input=no\n\
                   Content-Usage: /*.pdf$ search=n\n";
        assert!(refused(txt, "b", Purpose::AiTrain, "/test").is_some());
        assert_eq!(refused(txt, "b", Purpose::AiTrain, "/ai-ok/test"), None);
        assert!(refused(txt, "b", Purpose::AiInput, "/blog/post").is_some());
        assert_eq!(refused(txt, "b", Purpose::AiInput, "/news"), None);
        assert!(refused(txt, "b", Purpose::Search, "/doc/a.pdf").is_some());
        assert_eq!(refused(txt, "b", Purpose::Search, "/doc/a.pdf?x"), None);
        // Two rules with the same path: a refusal wins.
        let txt = "User-agent: *\nContent-Usage: / train-ai=y\nContent-Usage: / train-ai=n\n";
        assert!(refused(txt, "b", Purpose::AiTrain, "/").is_some());
    }

    #[test]
    fn unknown_tokens_are_ignored() {
        let txt = "User-agent: *\nContent-Signal: ai-train=perhaps, frobnicate=no\n\
                   Content-Usage: / train-ai=maybe, new-use=n\n";
        for purpose in [Purpose::Search, Purpose::AiInput, Purpose::AiTrain] {
            assert_eq!(refused(txt, "b", purpose, "/"), None);
        }
    }

    #[test]
    fn pacing_lines_belong_to_the_group_the_agent_obeys() {
        let txt = "User-agent: *\nRequest-rate: 1/10\nVisit-time: 0100-0500\nDisallow: /x\n\n\
                   User-agent: fastbot\nUser-agent: otherbot\nREQUEST-RATE : 1/2s\nAllow: /\n";
        let parsed = RobotsPreferences::parse(txt.as_bytes());
        let star = parsed.pacing("anybot");
        assert_eq!(star.request_interval, Some(10.0));
        assert_eq!(
            star.visit.map(|v| v.text()).as_deref(),
            Some("0100-0500 UTC")
        );
        let own = parsed.pacing("OtherBot");
        assert_eq!(own.request_interval, Some(2.0));
        assert_eq!(own.visit, None);
        let none = RobotsPreferences::parse(b"User-agent: *\nDisallow:\n");
        assert_eq!(none.pacing("a"), RobotsPacing::default());
    }

    #[test]
    fn patterns() {
        assert!(matches("/", "/anything"));
        assert!(matches("/a*c", "/abbbc/d"));
        assert!(matches("/a*c$", "/abbbc"));
        assert!(!matches("/a*c$", "/abbbcd"));
        assert!(matches("/x$", "/x"));
        assert!(!matches("/x$", "/xy"));
        assert!(!matches("/b", "/a"));
    }
}
