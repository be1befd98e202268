//! RFC 9421's signature base and the two fields that carry a signature: the covered components
//! (each an identifier as `Signature-Input` writes it, and its value), the signature parameters
//! as a serialized inner list, the base those make (section 2.5), and the `Signature-Input` and
//! `Signature` members. Only what courtesy signs with is here: derived components and fields
//! given by value, integer and string parameters.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use super::SigningKey;

/// One covered component: its identifier as serialized (`"@authority"`,
/// `"signature-agent";key="sig1"`) and its value as the base writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Component {
    /// The component identifier, serialized.
    pub(crate) id: String,
    /// Its canonical value.
    pub(crate) value: String,
}

impl Component {
    /// A derived component (`@authority`) or a whole field (lowercase name) with its value.
    pub(crate) fn named(name: &str, value: &str) -> Component {
        Component {
            id: sf_string(name),
            value: value.to_string(),
        }
    }

    /// A component of the request a response answers (`"@authority";req`).
    pub(crate) fn of_request(name: &str, value: &str) -> Component {
        Component {
            id: format!("{};req", sf_string(name)),
            value: value.to_string(),
        }
    }

    /// The member `key` of the dictionary field `name`, whose member value is `value` already
    /// serialized (`"https://agent.example"` for a string).
    pub(crate) fn member(name: &str, key: &str, value: &str) -> Component {
        Component {
            id: format!("{};key={}", sf_string(name), sf_string(key)),
            value: value.to_string(),
        }
    }
}

/// A signature parameter's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Param {
    /// An sf-integer (`created`, `expires`).
    Integer(u64),
    /// An sf-string (`keyid`, `alg`, `nonce`, `tag`).
    Text(String),
}

/// The signature parameters, in the order they are written.
pub(super) type Params = Vec<(&'static str, Param)>;

/// The `@signature-params` value: the covered identifiers as an inner list, then the parameters.
pub(super) fn signature_params(components: &[Component], params: &Params) -> String {
    let ids: Vec<&str> = components.iter().map(|c| c.id.as_str()).collect();
    let mut out = format!("({})", ids.join(" "));
    for (name, value) in params {
        match value {
            Param::Integer(n) => out.push_str(&format!(";{name}={n}")),
            Param::Text(text) => out.push_str(&format!(";{name}={}", sf_string(text))),
        }
    }
    out
}

/// The signature base (RFC 9421 section 2.5): a line per component, then `@signature-params`.
pub(super) fn signature_base(components: &[Component], signature_params: &str) -> String {
    let mut out = String::new();
    for component in components {
        out.push_str(&format!("{}: {}\n", component.id, component.value));
    }
    out.push_str(&format!("\"@signature-params\": {signature_params}"));
    out
}

/// One signature, ready for its fields: the `Signature-Input` member and the `Signature` member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Signed {
    /// `label=(…);params`.
    pub(crate) input: String,
    /// `label=:base64:`.
    pub(crate) signature: String,
}

/// Signs `components` with `key` under `label` and the parameters `params`.
pub(crate) fn sign(
    key: &SigningKey,
    label: &str,
    components: &[Component],
    params: &Params,
) -> Signed {
    let params = signature_params(components, params);
    let base = signature_base(components, &params);
    let signature = STANDARD.encode(key.sign(base.as_bytes()));
    Signed {
        input: format!("{label}={params}"),
        signature: format!("{label}=:{signature}:"),
    }
}

/// `text` as an sf-string (RFC 8941 section 3.3.3): quoted, `\` and `"` escaped. The values
/// courtesy writes are printable ASCII (checked where they are configured).
pub(crate) fn sf_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 9421 appendix B.1.4's test-key-ed25519 (its PKCS #8 document; the seed is the last 32
    /// bytes).
    const TEST_KEY_ED25519: &str =
        "MC4CAQAwBQYDK2VwBCIEIJ+DYvh6SEqVTm50DFtMDoQikTmiCqirVv9mWG9qfSnF";

    fn test_key() -> SigningKey {
        let der = STANDARD.decode(TEST_KEY_ED25519).unwrap();
        let seed: [u8; 32] = der[der.len() - 32..].try_into().unwrap();
        SigningKey::from_seed(seed).unwrap()
    }

    #[test]
    fn rfc_9421_b_2_6_signs_to_its_published_base_and_signature() {
        let components = [
            Component::named("date", "Tue, 20 Apr 2021 02:07:55 GMT"),
            Component::named("@method", "POST"),
            Component::named("@path", "/foo"),
            Component::named("@authority", "example.com"),
            Component::named("content-type", "application/json"),
            Component::named("content-length", "18"),
        ];
        let params: Params = vec![
            ("created", Param::Integer(1618884473)),
            ("keyid", Param::Text("test-key-ed25519".into())),
        ];
        let made = signature_params(&components, &params);
        assert_eq!(
            signature_base(&components, &made),
            "\"date\": Tue, 20 Apr 2021 02:07:55 GMT\n\"@method\": POST\n\"@path\": /foo\n\
             \"@authority\": example.com\n\"content-type\": application/json\n\
             \"content-length\": 18\n\"@signature-params\": (\"date\" \"@method\" \"@path\" \
             \"@authority\" \"content-type\" \"content-length\");created=1618884473;\
             keyid=\"test-key-ed25519\""
        );
        let signed = sign(&test_key(), "sig-b26", &components, &params);
        assert_eq!(
            signed.input,
            "sig-b26=(\"date\" \"@method\" \"@path\" \"@authority\" \"content-type\" \
             \"content-length\");created=1618884473;keyid=\"test-key-ed25519\""
        );
        assert_eq!(
            signed.signature,
            "sig-b26=:wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw==:"
        );
    }

    #[test]
    fn a_dictionary_member_is_covered_with_its_key_parameter() {
        let components = [
            Component::named("@authority", "a.test:8080"),
            Component::member("signature-agent", "sig1", "\"https://bot.example\""),
        ];
        let params: Params = vec![
            ("created", Param::Integer(10)),
            ("tag", Param::Text("web-bot-auth".into())),
        ];
        let made = signature_params(&components, &params);
        assert_eq!(
            made,
            "(\"@authority\" \"signature-agent\";key=\"sig1\");created=10;tag=\"web-bot-auth\""
        );
        assert_eq!(
            signature_base(&components, &made),
            format!(
                "\"@authority\": a.test:8080\n\"signature-agent\";key=\"sig1\": \
                 \"https://bot.example\"\n\"@signature-params\": {made}"
            )
        );
        assert_eq!(sf_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
    }
}
