//! The Signature-Agents of a config (docs/identity.md): each URL requests are signed under
//! (`[signing] signature_agent`, each `[[job]] signature_agent`), with the keys that sign under
//! it and the jobs whose requests carry it. A directory and a card are published per agent, and
//! hold only that agent's keys: a site that fetched one agent's directory learns nothing of the
//! others, and no key shows under an agent it never signs for.

use std::sync::Arc;

use super::{Config, JobSettings};
use crate::wire::httpsig::SigningKey;

/// One Signature-Agent: its URL, the keys that sign under it and who sends under it.
#[derive(Debug, Clone)]
pub struct Agent {
    /// The `signature_agent` URL, as configured (no final slash).
    pub url: String,
    /// Every key that signs requests sent under this agent, each once (by thumbprint).
    pub keys: Vec<Arc<SigningKey>>,
    /// The jobs whose requests are signed under this agent.
    pub jobs: Vec<Arc<JobSettings>>,
    /// Whether requests of no job's own (`[signing]`'s key and agent: a client without a job,
    /// courtesy's own robots.txt fetches) are signed under it.
    pub jobless: bool,
}

impl Agent {
    /// The agent's authority (`host[:port]`, lowercase, without `:443`): the `Host` its
    /// directory and card are answered for.
    pub fn authority(&self) -> String {
        authority_of(&self.url)
    }

    /// The key directory of this agent (draft-meunier-http-message-signatures-directory): a
    /// JWKS of the public halves of its keys, as `courtesy keys directory` prints it and the
    /// admin listener serves it.
    pub fn directory(&self) -> String {
        format!("{:#}\n", self.jwks())
    }

    /// The agent's keys as a JWK Set (`{"keys": [...]}`), public halves only.
    pub fn jwks(&self) -> serde_json::Value {
        let keys: Vec<serde_json::Value> = self.keys.iter().map(|k| k.public_jwk()).collect();
        serde_json::json!({ "keys": keys })
    }

    fn add_key(&mut self, key: &Arc<SigningKey>) {
        if !self.keys.iter().any(|k| k.thumbprint() == key.thumbprint()) {
            self.keys.push(key.clone());
        }
    }
}

/// The authority of an `https://` URL as a `Host` would say it: lowercase, `:443` dropped.
pub fn authority_of(url: &str) -> String {
    let authority = url
        .parse::<http::Uri>()
        .ok()
        .and_then(|u| u.authority().map(|a| a.as_str().to_ascii_lowercase()))
        .unwrap_or_default();
    let authority = authority.rsplit('@').next().unwrap_or_default();
    authority
        .strip_suffix(":443")
        .unwrap_or(authority)
        .to_string()
}

impl Config {
    /// Every Signature-Agent requests are signed under, in the order they first appear
    /// (`[signing]`'s, then the jobs'), each with its keys (a job's own key, else
    /// `[signing]`'s, exactly as a request of that job is signed).
    pub fn agents(&self) -> Vec<Agent> {
        let mut agents: Vec<Agent> = Vec::new();
        let mut place = |url: &str, key: &Arc<SigningKey>| -> usize {
            let at = agents.iter().position(|a| a.url == url).unwrap_or_else(|| {
                agents.push(Agent {
                    url: url.to_string(),
                    keys: Vec::new(),
                    jobs: Vec::new(),
                    jobless: false,
                });
                agents.len() - 1
            });
            agents[at].add_key(key);
            at
        };
        let own = self
            .signing
            .key
            .as_ref()
            .zip(self.signing.signature_agent.as_deref());
        let jobless = own.map(|(key, url)| place(url, key));
        let mut jobs_of = Vec::new();
        for job in &self.jobs {
            let key = job.signing_key.as_ref().or(self.signing.key.as_ref());
            let url = job
                .signature_agent
                .as_deref()
                .or(self.signing.signature_agent.as_deref());
            if let Some((key, url)) = key.zip(url) {
                jobs_of.push((place(url, key), job.clone()));
            }
        }
        if let Some(at) = jobless {
            agents[at].jobless = true;
        }
        for (at, job) in jobs_of {
            agents[at].jobs.push(job);
        }
        agents
    }

    /// The agent whose URL is `url` (a final slash ignored), if requests are signed under it.
    pub fn agent(&self, url: &str) -> Option<Agent> {
        let url = url.trim_end_matches('/');
        self.agents().into_iter().find(|a| a.url == url)
    }

    /// The agent whose authority is `host` (a request's `Host`, any case, `:443` ignored):
    /// the one whose directory and card a request for that host may get.
    pub fn agent_for_host(&self, host: &str) -> Option<Agent> {
        let host = host.trim().to_ascii_lowercase();
        let host = host.strip_suffix(":443").unwrap_or(&host);
        self.agents().into_iter().find(|a| a.authority() == host)
    }
}

#[cfg(test)]
mod tests {
    use super::authority_of;

    #[test]
    fn an_agents_authority_is_its_host_as_a_host_header_says_it() {
        for (url, authority) in [
            ("https://Bot.Example", "bot.example"),
            ("https://bot.example:443/x", "bot.example"),
            ("https://bot.example:8443", "bot.example:8443"),
        ] {
            assert_eq!(authority_of(url), authority, "{url}");
        }
    }
}
