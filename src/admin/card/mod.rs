//! `GET /.well-known/signature-agent-card`: one agent's Signature Agent Card
//! (draft-meunier-webbotauth-registry-04), made from the config: who the agent is, what its
//! requests are for, how fast they come and which keys sign them, as `courtesy keys card
//! --agent URL` prints it. Answered under the same rule as the key directory (only for the
//! `Host` of a configured `signature_agent`, else a 404) and signed the same way, since the card
//! carries its keys inline (`jwks`) and the draft asks for a signature covering
//! `Content-Digest` then. docs/identity.md says which field comes from which key.

use http::Response;
use serde_json::{json, Map, Value};

use crate::config::{Agent, Config, HostPolicy, JobSettings};
use crate::pacing::robots::agent_for;
use crate::proxy::answer::body::ProxyBody;

/// The path the card is served at (the well-known path of the draft's own example).
pub(crate) const PATH: &str = "/.well-known/signature-agent-card";
/// The `tag` of the card's signatures (the draft names none; this says what is signed).
const TAG: &str = "signature-agent-card";

/// The signed card of the agent whose authority is `host`; a 404 for any other `Host`.
pub(crate) fn answer(config: &Config, host: Option<&str>) -> Response<ProxyBody> {
    match super::directory::agent_of(config, host) {
        Some((agent, authority)) => super::directory::signed(
            text(config, &agent),
            "application/json",
            &agent.keys,
            &authority,
            TAG,
            config.signing.expires_seconds,
        ),
        None => super::directory::not_an_agent("Signature Agent Card"),
    }
}

/// The card of `agent` as printed and served: pretty JSON and a newline.
pub(crate) fn text(config: &Config, agent: &Agent) -> String {
    format!("{:#}\n", card(config, agent))
}

/// The card of `agent`: the client metadata of the draft (`client_id`, `client_name`,
/// `client_uri`, `contacts`, `jwks`) and its `web_bot_auth` object.
pub(crate) fn card(config: &Config, agent: &Agent) -> Value {
    let defaults = &config.defaults;
    let jobs: Vec<&JobSettings> = agent.jobs.iter().map(|j| j.as_ref()).collect();
    let user_agents = distinct(
        jobs.iter()
            .map(|j| {
                j.user_agent
                    .clone()
                    .or(defaults.identity.user_agent.clone())
            })
            .chain(agent.jobless.then(|| defaults.identity.user_agent.clone())),
    );
    let tokens = distinct(user_agents.iter().map(|ua| {
        Some(agent_for(defaults.robots.user_agent.as_deref(), Some(ua.as_str())).to_string())
    }));
    let tokens = if tokens.is_empty() {
        distinct([defaults.robots.user_agent.clone()])
    } else {
        tokens
    };
    let purposes = distinct(
        jobs.iter()
            .map(|j| j.purpose.or(defaults.preferences.purpose))
            .chain(agent.jobless.then_some(defaults.preferences.purpose))
            .map(|p| p.map(|p| p.to_string())),
    );
    let triggers = distinct(
        jobs.iter()
            .map(|j| Some(j.trigger.unwrap_or(config.signing.trigger).to_string()))
            .chain(
                agent
                    .jobless
                    .then(|| Some(config.signing.trigger.to_string())),
            ),
    );
    let contacts = distinct(
        jobs.iter()
            .map(|j| j.from.clone().or(defaults.identity.from.clone()))
            .chain(agent.jobless.then(|| defaults.identity.from.clone())),
    );

    let mut bot = Map::new();
    if let Some(ua) = one_or_many(&user_agents) {
        bot.insert("expected-user-agent".into(), ua);
    }
    if let Some(token) = tokens.first() {
        bot.insert("rfc9309-product-token".into(), json!(token));
    }
    bot.insert("rfc9309-compliance".into(), json!(defaults.robots.obey));
    if let Some(trigger) = triggers.first() {
        bot.insert("trigger".into(), json!(trigger));
    }
    if !purposes.is_empty() {
        bot.insert("purpose".into(), json!(purposes.join(", ")));
    }
    bot.insert("rate-control".into(), json!(rate_control(defaults)));
    bot.insert("rate-expectation".into(), json!(rate_expectation(defaults)));

    let mut out = Map::new();
    out.insert("client_id".into(), json!(format!("{}{PATH}", agent.url)));
    let name = tokens.first().cloned().unwrap_or_else(|| agent.authority());
    out.insert("client_name".into(), json!(name));
    out.insert("client_uri".into(), json!(agent.url));
    let contacts: Vec<String> = contacts
        .iter()
        .filter(|c| c.contains('@'))
        .map(|c| format!("mailto:{c}"))
        .collect();
    if !contacts.is_empty() {
        out.insert("contacts".into(), json!(contacts));
    }
    out.insert("jwks".into(), agent.jwks());
    out.insert("web_bot_auth".into(), Value::Object(bot));
    Value::Object(out)
}

/// How a site can slow the agent down: what courtesy obeys on every host.
fn rate_control(defaults: &HostPolicy) -> String {
    let mut ways = vec!["429 and 503 with Retry-After", "RateLimit headers"];
    if defaults.robots.obey {
        ways.push("Crawl-delay in robots.txt");
    }
    ways.join("; ")
}

/// What a site can expect: the `[defaults]` pace per host (the adaptive ceiling where the rate
/// adapts), in the draft's suggested `avg=..;max=..` form, and the concurrency.
fn rate_expectation(defaults: &HostPolicy) -> String {
    let rate = defaults.pacing.rate;
    let max = if defaults.adaptive.enabled {
        defaults.adaptive.max_rate.max(rate)
    } else {
        rate
    };
    format!(
        "avg={}rps;max={}rps;burst={};concurrency={} per host",
        number(rate),
        number(max),
        defaults.pacing.burst,
        defaults.pacing.concurrency
    )
}

/// A rate as a short decimal (`1`, `0.5`, `0.333`).
fn number(x: f64) -> String {
    let text = format!("{x:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The values that are set, each once, in their first order.
fn distinct(values: impl IntoIterator<Item = Option<String>>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for value in values.into_iter().flatten() {
        if !out.contains(&value) {
            out.push(value);
        }
    }
    out
}

/// One value as a string, several as an array, none as nothing.
fn one_or_many(values: &[String]) -> Option<Value> {
    match values {
        [] => None,
        [one] => Some(json!(one)),
        many => Some(json!(many)),
    }
}

#[cfg(test)]
mod tests;
