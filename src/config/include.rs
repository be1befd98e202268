//! `include = ["presets/published.toml"]`: files whose `[[host]]` and `[[job]]` tables join the
//! config's, before its own (so that the config's own rules win a tie). A path is relative to the
//! including file. An included file holds nothing else, and includes nothing itself: what governs
//! a host stays one level deep to read.

use std::path::Path;
use std::sync::Arc;

use super::validate::Validator;
use super::{read, ConfigErrors, HostPolicy, HostRule, JobSettings, ProxySettings};

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
    proxy: &ProxySettings,
) -> Result<(Vec<HostRule>, Vec<Arc<JobSettings>>), Failed> {
    let path = dir.join(rel);
    let name = path.display().to_string();
    let text = std::fs::read_to_string(&path)
        .map_err(|e| Failed::Unread(format!("cannot read {name}: {e}")))?;
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
    let jobs = v.jobs(&file.job, proxy.client_auth);
    v.finish().map_err(Failed::Invalid)?;
    Ok((hosts, jobs))
}
