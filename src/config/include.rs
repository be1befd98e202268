//! `include = ["presets/published.toml"]`: files whose `[[host]]` and `[[job]]` tables join the
//! config's, before its own (so that the config's own rules win a tie). A path is relative to the
//! including file. An included file holds nothing else, and includes nothing itself: what governs
//! a host stays one level deep to read. A preset courtesy carries built in (`built_in.rs`) that is
//! not on disk where the file says is read from the built-in copy.

use std::path::Path;
use std::sync::Arc;

use super::built_in;
use super::validate::Validator;
use super::{
    read, ConfigErrors, HostPolicy, HostRule, JobSettings, ProxySettings, SigningSettings,
};

/// Why an included file added nothing.
pub(super) enum Failed {
    /// It could not be read (the message says why, with its path).
    Unread(String),
    /// It was read, and these are its problems, each with its own file and line.
    Invalid(ConfigErrors),
}

/// The host rules (over `defaults`) and jobs of the file `rel` names, relative to `dir`.
pub(super) fn read(
    dir: &Path,
    rel: &str,
    defaults: &HostPolicy,
    (proxy, signing): (&ProxySettings, &SigningSettings),
) -> Result<(Vec<HostRule>, Vec<Arc<JobSettings>>), Failed> {
    let path = dir.join(rel);
    let (name, text) = match std::fs::read_to_string(&path) {
        Ok(text) => (path.display().to_string(), text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match built_in::preset(rel) {
            Some((name, text)) => (name, text.to_string()),
            None => {
                return Err(Failed::Unread(format!(
                    "cannot read {}: {e}",
                    path.display()
                )))
            }
        },
        Err(e) => {
            return Err(Failed::Unread(format!(
                "cannot read {}: {e}",
                path.display()
            )))
        }
    };
    let mut v = Validator::new(&name, &text);
    let mut file = read::read(&text, &name, &mut v).map_err(Failed::Invalid)?;
    for (table, at) in &file.tables {
        if table != "host" && table != "job" {
            v.error(
                *at,
                &format!("[{table}] cannot come from an included file (it holds [[host]] and [[job]] tables only): move it to the main config"),
            );
        }
    }
    if let Some((at, _)) = file.include.first() {
        v.error(*at, "an included file cannot include others");
    }
    let hosts = v.host_rules(&mut file.host, defaults, proxy.listen);
    let jobs = v.jobs(&file.job, proxy.client_auth, signing);
    v.finish().map_err(Failed::Invalid)?;
    Ok((hosts, jobs))
}
