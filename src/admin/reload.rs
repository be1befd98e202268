//! Reloading the config (SIGHUP or `POST /reload`): the file courtesy was started with is read and
//! validated again; on success it replaces the config in force and every known host gets its new
//! policy, on any error the old config stays. Keys that only take effect at start-up are kept, and
//! the answer says so.

use std::sync::Arc;

use tracing::warn;

use crate::budget::limiter::Limiter;
use crate::config::Config;

/// Re-reads the config file courtesy was started with and applies it. Listen addresses, the state
/// directory, upstream TLS settings, `hosts_file`, `deny_destinations` and `allow_destinations`, `max_upstream_sockets`, the shared store (`[shared]`), traces (`[telemetry]`) and setting or lifting
/// `global_rate` (and `global_bytes_per_second`) need a restart; a change to them is reported and ignored.
/// On errors the old config stays.
pub(crate) fn reload(limiter: &Limiter) -> Result<String, Vec<String>> {
    let old = limiter.config();
    let path = std::path::Path::new(&old.source);
    if !path.is_file() {
        return Err(vec![format!(
            "courtesy was started without a config file ({}): nothing to reload",
            old.source
        )]);
    }
    let mut new = Config::load(path).map_err(|e| e.errors)?;
    let kept = keep_restart_only_keys(&mut new, &old);
    if !kept.is_empty() {
        warn!(keys = ?kept, "these keys change only at a restart; their old values stay");
    }
    let summary = format!(
        "{}: {} host rules{}",
        new.source,
        new.hosts.len(),
        if kept.is_empty() {
            String::new()
        } else {
            format!(" (kept until a restart: {})", kept.join(", "))
        }
    );
    limiter.reload(Arc::new(new));
    Ok(summary)
}

/// Puts back in `new` the keys that change only at a restart, with `old`'s values, and names
/// those the file changed, in the order the answer and the log line list them.
fn keep_restart_only_keys(new: &mut Config, old: &Config) -> Vec<&'static str> {
    let mut kept = Vec::new();
    if new.proxy.listen != old.proxy.listen {
        kept.push("listen");
    }
    if new.proxy.admin_listen != old.proxy.admin_listen {
        kept.push("admin_listen");
    }
    if new.proxy.state_dir != old.proxy.state_dir {
        kept.push("state_dir");
    }
    if new.proxy.upstream_ca != old.proxy.upstream_ca {
        kept.push("upstream_ca");
    }
    if new.proxy.hosts_file != old.proxy.hosts_file
        || new.proxy.static_hosts != old.proxy.static_hosts
    {
        kept.push("hosts_file");
    }
    if new.proxy.deny_destinations != old.proxy.deny_destinations
        || new.proxy.allow_destinations != old.proxy.allow_destinations
    {
        kept.push("deny_destinations / allow_destinations");
    }
    new.proxy.deny_destinations = old.proxy.deny_destinations.clone();
    new.proxy.allow_destinations = old.proxy.allow_destinations.clone();
    if new.proxy.max_upstream_sockets != old.proxy.max_upstream_sockets {
        // The share is a table made at start.
        kept.push("max_upstream_sockets");
        new.proxy.max_upstream_sockets = old.proxy.max_upstream_sockets;
    }
    if new.proxy.connect_timeout != old.proxy.connect_timeout {
        kept.push("connect_timeout_seconds");
    }
    if new.proxy.global_rate.is_some() != old.proxy.global_rate.is_some() {
        // Setting or lifting the ceiling needs a restart; changing it does not.
        kept.push("global_rate (set or unset)");
        new.proxy.global_rate = old.proxy.global_rate;
        new.proxy.global_burst = old.proxy.global_burst;
    }
    if new.proxy.global_bytes_per_second.is_some() != old.proxy.global_bytes_per_second.is_some() {
        kept.push("global_bytes_per_second (set or unset)");
        new.proxy.global_bytes_per_second = old.proxy.global_bytes_per_second;
    }
    if new.shared != old.shared {
        kept.push("[shared]");
    }
    new.shared = old.shared.clone();
    if new.telemetry != old.telemetry {
        kept.push("[telemetry]");
    }
    new.telemetry = old.telemetry.clone();
    new.proxy.listen = old.proxy.listen;
    new.proxy.admin_listen = old.proxy.admin_listen;
    new.proxy.state_dir = old.proxy.state_dir.clone();
    new.proxy.upstream_ca = old.proxy.upstream_ca.clone();
    new.proxy.connect_timeout = old.proxy.connect_timeout;
    new.proxy.hosts_file = old.proxy.hosts_file.clone();
    new.proxy.static_hosts = old.proxy.static_hosts.clone();
    kept
}
