//! The two vocabularies, read into a [`Statement`] about courtesy's three purposes.
//!
//! | purpose    | aipref (Content-Usage)                   | Content-Signal |
//! |------------|------------------------------------------|----------------|
//! | `search`   | `search`                                 | `search`       |
//! | `ai-input` | `ai-use`                                 | `ai-input`     |
//! | `ai-train` | `train-ai` (and the older `train-genai`) | `ai-train`     |
//!
//! A purpose's own label decides it; the older aipref drafts' general `bots` (automated
//! processing, which held every other category) decides a purpose only when the statement has
//! no label of that purpose. Two labels of one purpose (`train-ai` and `train-genai`) combine as
//! the vocabulary combines statements: a refusal wins.

use super::sf::{self, Value};
use super::{Said, Statement};
use crate::config::Purpose;

/// The purpose an aipref label names, or `None` for `bots` and unknown labels.
fn aipref_purpose(label: &str) -> Option<Purpose> {
    match label {
        "search" => Some(Purpose::Search),
        "ai-use" => Some(Purpose::AiInput),
        "train-ai" | "train-genai" => Some(Purpose::AiTrain),
        _ => None,
    }
}

/// The purpose a Content-Signal label names (lower-cased), if any.
fn signal_purpose(label: &str) -> Option<Purpose> {
    match label {
        "search" => Some(Purpose::Search),
        "ai-input" => Some(Purpose::AiInput),
        "ai-train" => Some(Purpose::AiTrain),
        _ => None,
    }
}

/// Records `said` for `purpose` unless the statement already refuses it (a refusal wins).
fn record(statement: &mut Statement, purpose: Purpose, said: Said) {
    match statement.about(purpose) {
        Some(old) if !old.allowed => {}
        _ => statement.set(purpose, said),
    }
}

/// An aipref usage preference (the value of the `Content-Usage` header, or of a robots.txt
/// `Content-Usage` rule after its path): a Structured Field Dictionary of labels and `y`/`n`
/// Tokens, read as bytes (case-sensitive). An invalid dictionary says nothing; so do other
/// values, other tokens and unknown labels.
pub(crate) fn content_usage(value: &[u8]) -> Statement {
    let mut statement = Statement::default();
    let Some(members) = sf::dictionary(value) else {
        return statement;
    };
    let mut general: Option<Said> = None;
    for (label, value) in members {
        let allowed = match &value {
            Value::Token(t) if t == "y" => true,
            Value::Token(t) if t == "n" => false,
            _ => continue,
        };
        let said = Said {
            allowed,
            words: format!("{label}={}", if allowed { "y" } else { "n" }),
        };
        if label == "bots" {
            general = Some(said);
        } else if let Some(purpose) = aipref_purpose(&label) {
            record(&mut statement, purpose, said);
        }
    }
    if let Some(general) = general {
        for purpose in [Purpose::Search, Purpose::AiInput, Purpose::AiTrain] {
            if statement.about(purpose).is_none() {
                statement.set(purpose, general.clone());
            }
        }
    }
    statement
}

/// The value of a `Content-Signal` line (after its optional path): `label=yes|no` pairs separated
/// by commas, spaces around them ignored, labels and values in any case. Unknown labels and
/// values other than yes and no are ignored.
pub(crate) fn content_signal(value: &str) -> Statement {
    let mut statement = Statement::default();
    for pair in value.split(',') {
        let Some((label, said)) = pair.split_once('=') else {
            continue;
        };
        let label = label.trim().to_ascii_lowercase();
        let said = said.trim().to_ascii_lowercase();
        let allowed = match said.as_str() {
            "yes" => true,
            "no" => false,
            _ => continue,
        };
        if let Some(purpose) = signal_purpose(&label) {
            let words = format!("{label}={said}");
            record(&mut statement, purpose, Said { allowed, words });
        }
    }
    statement
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refuses(s: &Statement, p: Purpose) -> Option<&str> {
        s.about(p)
            .filter(|said| !said.allowed)
            .map(|said| said.words.as_str())
    }

    #[test]
    fn aipref_labels_map_onto_the_purposes() {
        let s = content_usage(b"train-ai=n, search=y, ai-use=n");
        assert_eq!(refuses(&s, Purpose::AiTrain), Some("train-ai=n"));
        assert_eq!(refuses(&s, Purpose::AiInput), Some("ai-use=n"));
        assert_eq!(refuses(&s, Purpose::Search), None);
        assert!(s.about(Purpose::Search).is_some_and(|said| said.allowed));
    }

    #[test]
    fn aipref_is_case_sensitive_and_ignores_unknowns() {
        assert!(content_usage(b"Train-AI=n").is_empty());
        assert!(content_usage(b"train-ai=N").is_empty());
        assert!(content_usage(b"train-ai=\"n\"").is_empty());
        let s = content_usage(b"future-use=n, train-ai=n;why=\"x\"");
        assert_eq!(refuses(&s, Purpose::AiTrain), Some("train-ai=n"));
        assert!(s.about(Purpose::Search).is_none());
    }

    #[test]
    fn the_general_label_covers_only_purposes_without_their_own() {
        let s = content_usage(b"bots=n, search=y");
        assert_eq!(refuses(&s, Purpose::AiTrain), Some("bots=n"));
        assert_eq!(refuses(&s, Purpose::AiInput), Some("bots=n"));
        assert_eq!(refuses(&s, Purpose::Search), None);
        let s = content_usage(b"train-ai=y, train-genai=n");
        assert_eq!(refuses(&s, Purpose::AiTrain), Some("train-genai=n"));
    }

    #[test]
    fn content_signal_spellings() {
        let s = content_signal(" Search=YES ,ai-train = no, ai-input=maybe, other=no");
        assert_eq!(refuses(&s, Purpose::AiTrain), Some("ai-train=no"));
        assert!(s.about(Purpose::Search).is_some_and(|said| said.allowed));
        assert!(s.about(Purpose::AiInput).is_none());
        assert!(content_signal("garbage").is_empty());
    }
}
