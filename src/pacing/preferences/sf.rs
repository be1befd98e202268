//! The Structured Field Dictionary (RFC 9651, section 4.2.2) that an aipref usage preference is
//! written in, parsed strictly by the `sfv` crate (as the RateLimit fields are), keeping of each
//! member only whether its value is a Token and which (parameters and other kinds of value are
//! dropped, as the vocabulary's processing ignores them). A parse failure is `None`: every
//! preference unknown.

use sfv::{BareItem, Dictionary, ListEntry, Parser};

/// A member's value as the vocabulary reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Value {
    /// A Token (`y`, `n`, or another).
    Token(String),
    /// Anything else: a string, a number, a boolean, a byte sequence, a date, an inner list.
    Other,
}

/// The members of the dictionary in `input` (a repeated key keeps its last value), or `None`
/// when it is not a valid dictionary.
pub(super) fn dictionary(input: &[u8]) -> Option<Vec<(String, Value)>> {
    let parsed: Dictionary = Parser::new(input).parse().ok()?;
    Some(
        parsed
            .into_iter()
            .map(|(key, entry)| {
                let value = match entry {
                    ListEntry::Item(item) => match item.bare_item {
                        BareItem::Token(t) => Value::Token(t.as_str().to_string()),
                        _ => Value::Other,
                    },
                    ListEntry::InnerList(_) => Value::Other,
                };
                (key.as_str().to_string(), value)
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(s: &str) -> Value {
        Value::Token(s.into())
    }

    #[test]
    fn tokens_and_other_values() {
        assert_eq!(
            dictionary(b"train-ai=n, search=y").unwrap(),
            vec![
                ("train-ai".into(), token("n")),
                ("search".into(), token("y"))
            ]
        );
        assert_eq!(
            dictionary(b"train-ai=y, train-ai, search=n, search=\"n\"").unwrap(),
            vec![
                ("train-ai".into(), Value::Other),
                ("search".into(), Value::Other)
            ]
        );
        assert_eq!(
            dictionary(b"train-ai;allow=n, train-ai=y").unwrap(),
            vec![("train-ai".into(), token("y"))]
        );
        assert_eq!(
            dictionary(b"a=(1 2);x, b=?1, c=:aGk=:, d=1.5, e=@12")
                .unwrap()
                .len(),
            5
        );
        assert_eq!(dictionary(b"").unwrap(), vec![]);
    }

    #[test]
    fn invalid_dictionaries_are_none() {
        for bad in [
            &b"Train-AI=n"[..],
            b"train-ai=n,",
            b"train-ai=n search=y",
            b"=n",
            b"train-ai=\"n",
            b"train-ai=?2",
        ] {
            assert_eq!(dictionary(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
