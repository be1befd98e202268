//! The signatures a message already carries (RFC 9421 section 4.3: several may travel on one
//! message, each under its own label): each label's `Signature-Input` and `Signature` members as
//! the signer wrote them, and the components it covers, so that an outer signer can tell which
//! it leaves intact and keep those beside its own.

use sfv::{BareItem, Dictionary, FieldType as _, ListEntry, Parser};

/// One carried signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Carried {
    /// Its label.
    pub(crate) label: String,
    /// Its `Signature-Input` member, serialized (`label=(...);created=...`).
    pub(crate) input: String,
    /// Its `Signature` member, serialized (`label=:...:`).
    pub(crate) signature: String,
    /// The components it covers.
    pub(crate) covered: Vec<Covered>,
}

/// One covered component: a derived one (`@authority`) or a field (lowercase name), and for a
/// dictionary field's member its key (`;key=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Covered {
    /// `@method`, `@authority`, ... or a field name.
    pub(crate) name: String,
    /// The dictionary member covered (`;key="..."`), if one is.
    pub(crate) key: Option<String>,
}

impl Covered {
    /// Whether it is a derived component (`@...`) rather than a field.
    pub(crate) fn is_derived(&self) -> bool {
        self.name.starts_with('@')
    }
}

/// The signatures carried by fields with these values (`Signature-Input`, `Signature`, each
/// several lines joined by `, `): every label with both an input and a signature, in the input's
/// order. `Err` when either field is not a valid dictionary: then nothing can be kept.
pub(crate) fn carried(input: &[u8], signature: &[u8]) -> Result<Vec<Carried>, String> {
    let inputs: Dictionary = Parser::new(input)
        .parse()
        .map_err(|e| format!("Signature-Input: {e}"))?;
    let signatures: Dictionary = Parser::new(signature)
        .parse()
        .map_err(|e| format!("Signature: {e}"))?;
    let mut out = Vec::new();
    for (label, entry) in &inputs {
        let ListEntry::InnerList(list) = entry else {
            return Err(format!(
                "Signature-Input: {} is not an inner list",
                label.as_str()
            ));
        };
        let Some(signed) = signatures.get(label) else {
            continue;
        };
        let mut covered = Vec::with_capacity(list.items.len());
        for item in &list.items {
            let Some(name) = item.bare_item.as_string() else {
                return Err(format!(
                    "Signature-Input: {} covers a component that is not a string",
                    label.as_str()
                ));
            };
            let key = item
                .params
                .get("key")
                .and_then(BareItem::as_string)
                .map(|k| k.as_str().to_string());
            covered.push(Covered {
                name: name.as_str().to_ascii_lowercase(),
                key,
            });
        }
        out.push(Carried {
            label: label.as_str().to_string(),
            input: member(label, entry)?,
            signature: member(label, signed)?,
            covered,
        });
    }
    Ok(out)
}

/// The member `label` = `entry` of a dictionary, serialized.
fn member(label: &sfv::Key, entry: &ListEntry) -> Result<String, String> {
    let mut one = Dictionary::new();
    one.insert(label.clone(), entry.clone());
    one.serialize()
        .ok_or_else(|| format!("{} cannot be written back", label.as_str()))
}

/// The members of the dictionary field `value` (`Signature-Agent`), serialized one by one, with
/// their keys; `None` when it is not a valid dictionary.
pub(crate) fn members(value: &[u8]) -> Option<Vec<(String, String)>> {
    let parsed: Dictionary = Parser::new(value).parse().ok()?;
    parsed
        .iter()
        .map(|(key, entry)| Some((key.as_str().to_string(), member(key, entry).ok()?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_label_with_its_members_and_what_it_covers() {
        let input = br#"sig-b=("@method" "@authority" "signature-agent";key="sig-b" "content-type");created=1;keyid="k", other=("@path");created=2"#;
        let signature = b"sig-b=:AAAA:, unrelated=:BBBB:, other=:CCCC:";
        let found = carried(input, signature).unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].label, "sig-b");
        assert_eq!(
            found[0].input,
            r#"sig-b=("@method" "@authority" "signature-agent";key="sig-b" "content-type");created=1;keyid="k""#
        );
        assert_eq!(found[0].signature, "sig-b=:AAAA:");
        let names: Vec<_> = found[0].covered.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            ["@method", "@authority", "signature-agent", "content-type"]
        );
        assert_eq!(found[0].covered[2].key.as_deref(), Some("sig-b"));
        assert!(found[0].covered[0].is_derived() && !found[0].covered[3].is_derived());
        assert_eq!(found[1].signature, "other=:CCCC:");
    }

    #[test]
    fn a_label_without_a_signature_is_dropped_and_garbage_is_an_error() {
        assert!(carried(b"a=(\"@path\")", b"b=:AAAA:").unwrap().is_empty());
        assert!(carried(b"a=(", b"a=:AAAA:").is_err());
        assert!(carried(b"a=1", b"a=:AAAA:").is_err());
        assert!(carried(b"a=(1)", b"a=:AAAA:").is_err());
    }

    #[test]
    fn dictionary_members_one_by_one() {
        assert_eq!(
            members(b"sig-b=\"https://a.example\", x=\"https://b.example\"").unwrap(),
            vec![
                (
                    "sig-b".to_string(),
                    "sig-b=\"https://a.example\"".to_string()
                ),
                ("x".to_string(), "x=\"https://b.example\"".to_string())
            ]
        );
        assert!(members(b"\"https://a.example\"").is_none());
    }
}
