//! `courtesy keys new FILE` (a fresh Ed25519 private key as a JWK, mode 0600, never over an
//! existing file), `courtesy keys directory [--agent URL]` (the JWKS of the keys that sign under
//! one agent, as sites fetch it from
//! `<signature_agent>/.well-known/http-message-signatures-directory`) and `courtesy keys card
//! [--agent URL]` (that agent's Signature Agent Card).

use std::io::Write as _;
use std::path::Path;

use anyhow::Context as _;

use crate::config::{Agent, Config};
use crate::wire::httpsig::SigningKey;

/// Writes a fresh private key to `path` (created, mode 0600; an existing file is refused) and
/// returns what to tell the user: the file and the key's id (its thumbprint), never the key.
pub fn new_key(path: &Path) -> anyhow::Result<String> {
    let key = SigningKey::generate().map_err(anyhow::Error::msg)?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options.open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            anyhow::anyhow!(
                "{} exists: courtesy never writes over a key",
                path.display()
            )
        } else {
            anyhow::Error::new(e).context(format!("cannot create {}", path.display()))
        }
    })?;
    file.write_all(key.private_jwk().as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(format!(
        "wrote a new Ed25519 key to {} (mode 0600), keyid {}\n\
         set [signing] key_file = {:?} and signature_agent, then publish `courtesy keys \
         directory` at <signature_agent>/.well-known/http-message-signatures-directory\n",
        path.display(),
        key.thumbprint(),
        path.display().to_string()
    ))
}

/// The key directory of the agent `agent` (its URL; unset: the config's one agent): the keys
/// that sign requests sent under it, and only those. An error when the config signs with no
/// key, names no such agent, or has several and `agent` is unset.
pub fn directory(config: &Config, agent: Option<&str>) -> anyhow::Result<String> {
    pick(config, agent).map(|agent| agent.directory())
}

/// The Signature Agent Card of the agent `agent` (its URL; unset: the config's one agent), as
/// the admin listener serves it at `<signature_agent>/.well-known/signature-agent-card`.
pub fn card(config: &Config, agent: Option<&str>) -> anyhow::Result<String> {
    pick(config, agent).map(|agent| crate::admin::card::text(config, &agent))
}

/// The agent named `wanted`, else the config's only one; the error lists the agents there are.
fn pick(config: &Config, wanted: Option<&str>) -> anyhow::Result<Agent> {
    let agents = config.agents();
    let names = || {
        agents
            .iter()
            .map(|a| a.url.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if agents.is_empty() {
        anyhow::bail!(
            "{} has no signing key: set [signing] key_file (or a job's signing_key_file) and \
             signature_agent",
            config.source
        );
    }
    match wanted {
        Some(url) => config.agent(url).ok_or_else(|| {
            anyhow::anyhow!(
                "{url} is no signature_agent of {}: its agents are {}",
                config.source,
                names()
            )
        }),
        None if agents.len() == 1 => Ok(agents[0].clone()),
        None => anyhow::bail!(
            "{} signs under several agents ({}): say which with --agent URL",
            config.source,
            names()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_key_is_private_to_its_owner_and_never_overwrites() {
        let dir = crate::util::scratch::dir("keys-new");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bot.jwk");
        let _ = std::fs::remove_file(&path);
        let said = new_key(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let key = SigningKey::from_jwk(&text).unwrap();
        assert!(said.contains(key.thumbprint()) && !said.contains("\"d\""));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let again = new_key(&path).unwrap_err().to_string();
        assert!(again.contains("exists"), "{again}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text, "untouched");
    }
}
