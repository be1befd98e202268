//! "Did you mean …?" for a key the config does not know: the nearest of the keys it does know,
//! when it is near enough to be a slip of the keyboard (`ratee`, `jiter`).

/// What `courtesy check` says of the key `unknown`, which is none of `known`: the nearest one
/// when it is a slip away, else every known key.
pub(super) fn unknown_key(unknown: &str, known: &[&str]) -> String {
    if let Some(key) = nearest(unknown, known) {
        return format!("unknown field `{unknown}`, did you mean `{key}`?");
    }
    let listed: Vec<String> = known.iter().map(|k| format!("`{k}`")).collect();
    format!(
        "unknown field `{unknown}`, expected one of {}",
        listed.join(", ")
    )
}

/// The key of `known` nearest to `unknown`, if it is a slip away: at most a third of the word
/// (at least one edit).
fn nearest<'k>(unknown: &str, known: &[&'k str]) -> Option<&'k str> {
    let (d, key) = known
        .iter()
        .map(|key| (distance(unknown, key), *key))
        .min_by_key(|(d, _)| *d)?;
    (d <= (unknown.chars().count() / 3).max(1)).then_some(key)
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
        let known = ["rate", "burst", "jitter", "key"];
        assert_eq!(
            unknown_key("jiter", &known),
            "unknown field `jiter`, did you mean `jitter`?"
        );
        assert!(unknown_key("ratee", &["rate", "burst"]).ends_with("did you mean `rate`?"));
    }

    #[test]
    fn a_key_far_from_every_known_one_gets_none() {
        let m = "unknown field `colour`, expected one of `rate`, `burst`";
        assert_eq!(unknown_key("colour", &["rate", "burst"]), m);
        assert_eq!(nearest("colour", &[]), None);
    }

    #[test]
    fn distances() {
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("rate", "rate"), 0);
    }
}
