//! The card against draft-meunier-webbotauth-registry-04: every member it defines, where it sits
//! and what it holds, as a small schema and a hand-written checker; each agent's card checked.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::*;
use crate::wire::httpsig::SigningKey;

/// What one member of the card may hold, as draft-meunier-webbotauth-registry-04 says.
#[derive(Clone, Copy)]
enum Kind {
    Text,
    Texts,
    TextOrTexts,
    Bool,
    HttpsUrl,
    Url,
    Jwks,
    OneOf(&'static [&'static str]),
}

/// Where a member sits: among the client metadata parameters (RFC 7591, as CIMD uses
/// them) or in the `web_bot_auth` object.
#[derive(Clone, Copy, PartialEq)]
enum In {
    Top,
    Bot,
}

/// Every member draft-meunier-webbotauth-registry-04 defines, as JSON: where it sits, then
/// each member's kind (no JSON schema is published; this is the draft's text as data).
const SCHEMA: &str = r#"{
  "client metadata": {"client_id": "https-url", "client_name": "text",
    "client_uri": "url", "logo_uri": "url", "contacts": "texts",
    "jwks_uri": "https-url", "jwks": "jwks"},
  "web_bot_auth": {"expected-user-agent": "text-or-texts",
    "rfc9309-product-token": "text", "rfc9309-compliance": "bool",
    "trigger": "fetcher|crawler", "purpose": "text", "targeted-content": "text",
    "rate-control": "text", "rate-expectation": "text", "known-urls": "texts",
    "ips_uri": "https-url"}
}"#;

/// The kind of member `name` in `place`, per [`SCHEMA`].
fn kind_of(place: In, name: &str) -> Option<Kind> {
    let schema: Value = serde_json::from_str(SCHEMA).unwrap();
    let group = match place {
        In::Top => "client metadata",
        In::Bot => "web_bot_auth",
    };
    Some(match schema[group].get(name)?.as_str()? {
        "text" => Kind::Text,
        "texts" => Kind::Texts,
        "text-or-texts" => Kind::TextOrTexts,
        "bool" => Kind::Bool,
        "https-url" => Kind::HttpsUrl,
        "url" => Kind::Url,
        "jwks" => Kind::Jwks,
        "fetcher|crawler" => Kind::OneOf(&["fetcher", "crawler"]),
        other => panic!("a kind the schema does not define: {other}"),
    })
}

/// Whether `value` is of `kind`.
fn fits(value: &Value, kind: Kind) -> bool {
    let text = |v: &Value| v.as_str().is_some_and(|s| !s.is_empty());
    let texts = |v: &Value| {
        v.as_array()
            .is_some_and(|a| !a.is_empty() && a.iter().all(text))
    };
    match kind {
        Kind::Text => text(value),
        Kind::Texts => texts(value),
        Kind::TextOrTexts => text(value) || texts(value),
        Kind::Bool => value.is_boolean(),
        Kind::HttpsUrl => value.as_str().is_some_and(|s| s.starts_with("https://")),
        Kind::Url => value
            .as_str()
            .is_some_and(|s| s.parse::<http::Uri>().is_ok()),
        Kind::OneOf(words) => value.as_str().is_some_and(|s| words.contains(&s)),
        Kind::Jwks => value["keys"].as_array().is_some_and(|keys| {
            keys.iter().all(|k| {
                k["kty"] == "OKP"
                    && k["crv"] == "Ed25519"
                    && k["x"].is_string()
                    && k.get("d").is_none()
            })
        }),
    }
}

/// Every problem of `card` fetched from `url` against the draft: a member it does not
/// define (courtesy writes only defined ones), a member of the wrong type, `client_id` not
/// the URL it was fetched from, `jwks` with `jwks_uri`, no member at all.
fn problems(card: &Value, url: &str) -> Vec<String> {
    let mut out = Vec::new();
    let Some(top) = card.as_object() else {
        return vec!["not a JSON object".into()];
    };
    if top.is_empty() {
        out.push("no parameter set".into());
    }
    let mut check = |members: &serde_json::Map<String, Value>, place: In| {
        for (name, value) in members {
            match kind_of(place, name) {
                Some(kind) if fits(value, kind) => {}
                Some(_) => out.push(format!("{name}: wrong type: {value}")),
                None if name == "web_bot_auth" => {}
                None => out.push(format!("{name}: not a parameter of the draft")),
            }
        }
    };
    check(top, In::Top);
    match top.get("web_bot_auth").map(Value::as_object) {
        Some(Some(bot)) => check(bot, In::Bot),
        Some(None) => out.push("web_bot_auth: not an object".into()),
        None => {}
    }
    if top.get("client_id").and_then(Value::as_str) != Some(url) {
        out.push(format!("client_id is not {url}"));
    }
    if top.contains_key("jwks") && top.contains_key("jwks_uri") {
        out.push("both jwks and jwks_uri".into());
    }
    out
}

fn key_file(dir: &Path, name: &str) -> (PathBuf, SigningKey) {
    use std::os::unix::fs::PermissionsExt as _;
    let key = SigningKey::generate().unwrap();
    let path = dir.join(name);
    std::fs::write(&path, key.private_jwk()).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    (path, key)
}

#[test]
fn each_agent_gets_a_card_of_its_own_that_fits_the_registry_draft() {
    let dir = crate::util::scratch::dir("card");
    std::fs::create_dir_all(&dir).unwrap();
    let (main, main_key) = key_file(&dir, "main.jwk");
    let (news, news_key) = key_file(&dir, "news.jwk");
    let text = format!(
        "[signing]\nkey_file = {main:?}\nsignature_agent = \"https://bot.example\"\n\
         [defaults]\nrate = 0.5\nburst = 2\nconcurrency = 3\npurpose = \"search\"\n\
         user_agent = \"ExampleBot/1.0 (+https://bot.example)\"\nfrom = \"ops@bot.example\"\n\
         [[job]]\nname = \"news\"\nsigning_key_file = {news:?}\n\
         signature_agent = \"https://news.example\"\npurpose = \"ai-input\"\n\
         trigger = \"fetcher\"\nuser_agent = \"NewsFetcher/2\"\n"
    );
    let config = Config::parse(&text, "card.toml").unwrap();
    let agents = config.agents();
    assert_eq!(agents.len(), 2);
    let (bot, news_agent) = (&agents[0], &agents[1]);

    let card = card(&config, bot);
    let url = "https://bot.example/.well-known/signature-agent-card";
    assert_eq!(problems(&card, url), Vec::<String>::new(), "{card:#}");
    let wba = &card["web_bot_auth"];
    assert_eq!(wba["purpose"], "search");
    assert_eq!(wba["trigger"], "crawler");
    assert_eq!(
        wba["expected-user-agent"],
        "ExampleBot/1.0 (+https://bot.example)"
    );
    assert_eq!(wba["rfc9309-product-token"], "ExampleBot");
    assert_eq!(wba["rfc9309-compliance"], true);
    assert_eq!(
        wba["rate-expectation"],
        "avg=0.5rps;max=0.5rps;burst=2;concurrency=3 per host"
    );
    assert!(wba["rate-control"]
        .as_str()
        .unwrap()
        .contains("Crawl-delay in robots.txt"));
    assert_eq!(card["contacts"][0], "mailto:ops@bot.example");
    let keys = card["jwks"]["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 1, "only the key that signs under it");
    assert_eq!(keys[0], main_key.public_jwk());

    let card = super::card(&config, news_agent);
    let url = "https://news.example/.well-known/signature-agent-card";
    assert_eq!(problems(&card, url), Vec::<String>::new(), "{card:#}");
    let wba = &card["web_bot_auth"];
    assert_eq!(
        (wba["purpose"].as_str(), wba["trigger"].as_str()),
        (Some("ai-input"), Some("fetcher"))
    );
    assert_eq!(wba["rfc9309-product-token"], "NewsFetcher");
    assert_eq!(card["jwks"]["keys"].as_array().unwrap().len(), 1);
    assert_eq!(card["jwks"]["keys"][0], news_key.public_jwk());
}

#[test]
fn the_checker_refuses_what_the_draft_does_not_allow() {
    let url = "https://a.example/.well-known/signature-agent-card";
    let bad = serde_json::json!({
        "client_id": "https://other.example/card",
        "jwks": {"keys": []},
        "jwks_uri": "http://a.example/keys",
        "colour": "blue",
        "web_bot_auth": {"trigger": "sometimes", "rfc9309-compliance": "yes"}
    });
    let found = problems(&bad, url);
    for expected in [
        "client_id is not",
        "both jwks and jwks_uri",
        "jwks_uri: wrong type",
        "colour: not a parameter",
        "trigger: wrong type",
        "rfc9309-compliance: wrong type",
    ] {
        assert!(
            found.iter().any(|p| p.contains(expected)),
            "{expected}: {found:?}"
        );
    }
}
