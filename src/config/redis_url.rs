//! What `[shared] redis_url` says: one server, a Redis Cluster's seeds, or the Sentinels of a
//! master. Read here, at validation, so that a wrong URL fails at start-up with its file, line
//! and key; the store (`crate::store`) connects to what it says.

/// Where the store is, as `[shared] redis_url` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Topology {
    /// One server: the URL as given.
    Single(String),
    /// A Redis Cluster: one `redis://` (or `rediss://`) URL per seed node, each with the
    /// userinfo and database of the URL.
    Cluster(Vec<String>),
    /// A master found through Redis Sentinel.
    Sentinel(SentinelTarget),
}

/// A `redis+sentinel://` URL, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SentinelTarget {
    /// One URL per sentinel (no password: the userinfo is the master's).
    pub(crate) sentinels: Vec<String>,
    /// The name the sentinels know the master by.
    pub(crate) master: String,
    /// `redis` or `rediss`.
    scheme: &'static str,
    /// `user:password@` of the master, or empty.
    userinfo: String,
    /// The master's database.
    db: i64,
}

impl SentinelTarget {
    /// The URL of the master at `host:port`.
    pub(crate) fn master_url(&self, host: &str, port: u16) -> String {
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        format!(
            "{}://{}{host}:{port}/{}",
            self.scheme, self.userinfo, self.db
        )
    }
}

/// Reads `url` into a [`Topology`]; the error says what is wrong without the password.
pub(crate) fn topology(url: &str) -> Result<Topology, String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| "no scheme".to_string())?;
    let (base, kind) = match scheme {
        "redis" | "rediss" => {
            redis::Client::open(url).map_err(|e| e.to_string())?;
            return Ok(Topology::Single(url.to_string()));
        }
        "redis+cluster" => ("redis", "cluster"),
        "rediss+cluster" => ("rediss", "cluster"),
        "redis+sentinel" => ("redis", "sentinel"),
        "rediss+sentinel" => ("rediss", "sentinel"),
        other => return Err(format!("unknown scheme {other}://")),
    };
    // The userinfo ends at the last '@' (a password may hold one, percent-encoded or not).
    let (userinfo, after) = match rest.rfind('@') {
        Some(i) => (&rest[..=i], &rest[i + 1..]),
        None => ("", rest),
    };
    let (hosts, path) = after.split_once('/').unwrap_or((after, ""));
    let hosts: Vec<&str> = hosts.split(',').map(str::trim).collect();
    if hosts.iter().any(|h| h.is_empty()) {
        return Err(format!("{scheme}:// needs host:port[,host:port…]"));
    }
    let servers = Servers {
        base,
        userinfo,
        hosts: &hosts,
    };
    if kind == "cluster" {
        cluster(&servers, path)
    } else {
        sentinel(scheme, &servers, path)
    }
}

/// The servers a Cluster's or Sentinels' URL names: its plain scheme (`redis` or `rediss`), its
/// userinfo (with its `@`, or empty), and its `host[:port]` list.
struct Servers<'a> {
    base: &'a str,
    userinfo: &'a str,
    hosts: &'a [&'a str],
}

/// `h` with `default_port` unless it names a port.
fn with_port(h: &str, default_port: u16) -> String {
    let has_port = h.rsplit_once(':').is_some_and(|(_, p)| !p.contains(']'));
    if has_port {
        h.to_string()
    } else {
        format!("{h}:{default_port}")
    }
}

/// Whether the redis client takes `u` as a server's URL (its error, if not).
fn check(u: &str) -> Result<(), String> {
    redis::Client::open(u)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// A Redis Cluster's seeds: one URL per node with the userinfo (database 0 only).
fn cluster(servers: &Servers<'_>, path: &str) -> Result<Topology, String> {
    let path = path.trim_end_matches('/');
    if !path.is_empty() && path != "0" {
        return Err("a Redis Cluster has database 0 only".into());
    }
    let nodes: Vec<String> = servers
        .hosts
        .iter()
        .map(|h| {
            format!(
                "{}://{}{}",
                servers.base,
                servers.userinfo,
                with_port(h, 6379)
            )
        })
        .collect();
    for node in &nodes {
        check(node)?;
    }
    Ok(Topology::Cluster(nodes))
}

/// The Sentinels of a master, from `path` (`<master_name>[/<db>]`): the Sentinels' URLs carry
/// no userinfo; the master's does.
fn sentinel(scheme: &str, servers: &Servers<'_>, path: &str) -> Result<Topology, String> {
    let mut parts = path.split('/');
    let master = parts.next().unwrap_or("").to_string();
    if master.is_empty() {
        return Err(format!(
            "{scheme}:// needs the master's name: …/<master_name>[/<db>]"
        ));
    }
    let db = match parts.next() {
        None | Some("") => 0,
        Some(d) => d
            .parse::<i64>()
            .ok()
            .filter(|d| *d >= 0)
            .ok_or_else(|| format!("the database must be a number, got {d:?}"))?,
    };
    let sentinels: Vec<String> = servers
        .hosts
        .iter()
        .map(|h| format!("{}://{}", servers.base, with_port(h, 26379)))
        .collect();
    for s in &sentinels {
        check(s)?;
    }
    let target = SentinelTarget {
        sentinels,
        master,
        scheme: if servers.base == "rediss" {
            "rediss"
        } else {
            "redis"
        },
        userinfo: servers.userinfo.to_string(),
        db,
    };
    check(&target.master_url("127.0.0.1", 6379))?;
    Ok(Topology::Sentinel(target))
}

/// Whether `url` speaks TLS (`rediss://`, `rediss+cluster://`, `rediss+sentinel://`).
pub(crate) fn is_tls_url(url: &str) -> bool {
    url.starts_with("rediss://") || url.starts_with("rediss+")
}

/// `url` with its userinfo (a password, a user) shown as `***`, for messages and `/readyz`.
pub(crate) fn redacted(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((_, host)) => format!("{scheme}://***@{host}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_urls_stay_as_given() {
        assert_eq!(
            topology("redis://:pw@127.0.0.1:6379/2"),
            Ok(Topology::Single("redis://:pw@127.0.0.1:6379/2".into()))
        );
        assert!(topology("http://127.0.0.1").is_err());
    }

    #[test]
    fn a_cluster_url_gives_one_url_per_seed_with_the_userinfo() {
        assert_eq!(
            topology("rediss+cluster://u:p@h1:7000,h2:7001,h3"),
            Ok(Topology::Cluster(vec![
                "rediss://u:p@h1:7000".into(),
                "rediss://u:p@h2:7001".into(),
                "rediss://u:p@h3:6379".into(),
            ]))
        );
        assert!(topology("redis+cluster://h1:7000,,h2:7001").is_err());
        assert!(topology("redis+cluster://h1:7000/3").is_err());
    }

    #[test]
    fn a_sentinel_url_names_the_master_and_its_database() {
        let Ok(Topology::Sentinel(t)) = topology("redis+sentinel://:pw@s1:1,s2/mymaster/4") else {
            panic!("a sentinel URL");
        };
        assert_eq!(t.sentinels, vec!["redis://s1:1", "redis://s2:26379"]);
        assert_eq!(t.master, "mymaster");
        assert_eq!(
            t.master_url("10.0.0.1", 6380),
            "redis://:pw@10.0.0.1:6380/4"
        );
        assert!(topology("redis+sentinel://s1:1").is_err());
        assert!(topology("redis+sentinel://s1:1/m/x").is_err());
    }
}
