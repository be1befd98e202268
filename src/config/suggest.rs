//! "Did you mean …?" for a key the config does not know: the nearest of the keys serde lists as
//! expected, when it is near enough to be a slip of the keyboard (`ratee`, `jiter`).

/// The message with a suggestion added, for serde's "unknown field `x`, expected one of `a`,
/// `b`, …" when one of the expected keys is near `x`; otherwise the message as it is.
pub(super) fn with_suggestion(message: &str) -> String {
    match suggestion(message) {
        Some(key) => format!("{message}; did you mean `{key}`?"),
        None => message.to_string(),
    }
}

fn suggestion(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("unknown field `")?;
    let (unknown, rest) = rest.split_once('`')?;
    let expected = rest.split_once("expected ")?.1;
    let best = expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|key| (distance(unknown, key), key))
        .min_by_key(|(d, _)| *d)?;
    // A slip: at most a third of the word (at least one edit) away.
    (best.0 <= (unknown.chars().count() / 3).max(1)).then_some(best.1)
}

/// The Levenshtein distance between `a` and `b` (insertions, deletions, substitutions).
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slip_of_the_keyboard_gets_the_nearest_key() {
        let m = "unknown field `jiter`, expected one of `rate`, `burst`, `jitter`, `key`";
        assert_eq!(with_suggestion(m), format!("{m}; did you mean `jitter`?"));
        let m = "unknown field `ratee`, expected one of `rate`, `burst`";
        assert!(with_suggestion(m).ends_with("did you mean `rate`?"));
    }

    #[test]
    fn a_key_far_from_every_known_one_gets_none() {
        let m = "unknown field `colour`, expected one of `rate`, `burst`";
        assert_eq!(with_suggestion(m), m);
        assert_eq!(
            with_suggestion("invalid type: string"),
            "invalid type: string"
        );
    }

    #[test]
    fn distances() {
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("rate", "rate"), 0);
    }
}
