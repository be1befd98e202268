//! How the store is reached, chosen once from `[shared] redis_url`:
//!
//! | URL | [`Connection`] |
//! |---|---|
//! | `redis://host:port/db`, `rediss://…` | `Single`: one server through a `ConnectionManager` |
//! | `redis+cluster://h1:p1,h2:p2,…`, `rediss+cluster://…` | `Cluster`: the crate's async cluster client |
//! | `redis+sentinel://s1:p1,…/<master>[/<db>]`, `rediss+sentinel://…` | `Sentinel`: the master the sentinels name |
//!
//! The rest of the store runs scripts, plain commands and the hints' subscription through this
//! file only. Three rules hold for every kind:
//! - a script call is sent once: nothing here (nor in the crate, see `retries(0)` below) sends it
//!   again after an error that could mean it ran (a reservation run twice spends twice); only a
//!   refusal the server gives *instead of* running it (`MOVED`, `ASK`, `TRYAGAIN`,
//!   `CLUSTERDOWN`) is sent again, within the caller's timeout;
//! - an error fails the call (the caller falls back for it); finding the store again is the
//!   heartbeat's job (`RedisStore::ready_to_rejoin`, each beat while in fallback), so that a call never
//!   waits on a Sentinel round trip;
//! - a plain `redis://` URL that reaches a cluster node is refused (at start, or at the rejoin if
//!   the store could not be reached at start): only `redis+cluster://` follows the slots.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, PubSub};
use redis::cluster_async::ClusterConnection;
use redis::{Client, ErrorKind, RedisError, RedisResult, ServerErrorKind, Value};
use tokio::sync::watch;

use super::RedisStore;
use crate::config::redis_url::{topology, SentinelTarget, Topology};
use crate::config::SharedSettings;
use crate::util::locks::lock;

/// How many times a script call refused before it ran (`MOVED`, `ASK`…) is sent again, at most:
/// in practice until the caller's `timeout_ms` ends it, since a slot can take longer than a few
/// tries to migrate on a busy machine (each try waits 5 ms more than the last, up to 25 ms).
const REFUSED_TRIES: u32 = 200;

/// The connection to the store, of the kind its URL says.
pub(crate) enum Connection {
    /// One server.
    Single(Single),
    /// A Redis Cluster.
    Cluster(Cluster),
    /// The master the sentinels name (boxed: it is the largest by far).
    Sentinel(Box<Sentinel>),
}

/// One server, and whether it was seen not to be a cluster node.
pub(crate) struct Single {
    client: Client,
    conn: ConnectionManager,
    /// Set once `INFO cluster` said `cluster_enabled:0` (or could not be asked).
    checked: AtomicBool,
    /// Set once the refusal of a cluster node was logged.
    refusal_logged: AtomicBool,
}

/// A Redis Cluster.
pub(crate) struct Cluster {
    conn: ClusterConnection,
    /// A client per seed node, for the hints' subscription.
    nodes: Vec<(String, Client)>,
    connect_timeout: Duration,
}

/// The master the sentinels name, replaced when they name another.
pub(crate) struct Sentinel {
    target: SentinelTarget,
    sentinels: Vec<(String, Client)>,
    certificates: Option<redis::TlsCertificates>,
    config: ConnectionManagerConfig,
    /// How long one sentinel may take to answer.
    ask_timeout: Duration,
    current: Mutex<Option<Master>>,
    /// Counts the master's moves, so that the hints subscribe again on the new one.
    moves: watch::Sender<u64>,
}

/// The master in use.
#[derive(Clone)]
struct Master {
    /// `host:port`.
    addr: String,
    client: Client,
    conn: ConnectionManager,
}

/// What the check of the store's kind found.
#[derive(Debug)]
pub(crate) enum Check {
    /// The store answers and is of the kind the URL says.
    Ready,
    /// The store (or every sentinel) did not answer.
    Unreachable(String),
    /// The store answers but is of another kind: the URL must change.
    Refused(String),
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Connection::Single(_) => f.write_str("Connection::Single"),
            Connection::Cluster(c) => write!(f, "Connection::Cluster({} seeds)", c.nodes.len()),
            Connection::Sentinel(s) => write!(f, "Connection::Sentinel({:?})", s.target.master),
        }
    }
}

/// A client for `url`, with the certificates if there are any.
fn client(url: &str, certificates: &Option<redis::TlsCertificates>) -> RedisResult<Client> {
    match certificates {
        None => Client::open(url),
        Some(c) => Client::build_with_tls(url, c.clone()),
    }
}

/// The host and port of a node URL, for logs (no userinfo).
fn node_addr(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    rest.split('/').next().unwrap_or(rest).to_string()
}

/// Whether the server refused `error`'s command instead of running it, so that sending it again
/// cannot run it twice.
fn refused_before_running(error: &RedisError) -> bool {
    matches!(
        error.kind(),
        ErrorKind::Server(
            ServerErrorKind::Moved
                | ServerErrorKind::Ask
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
        )
    )
}

/// `error` with what to grant when the store's ACL denied a command (a user without `+time`
/// meets it inside the scripts, where Redis does not name the command).
fn explain_denial(error: RedisError) -> RedisError {
    let text = error.to_string();
    if error.kind() == ErrorKind::Server(ServerErrorKind::NoPerm)
        || text.contains("can't run this command")
        || text.contains("NOPERM")
    {
        RedisError::from((
            ErrorKind::Server(ServerErrorKind::NoPerm),
            "NOPERM: the store's user may not run a command courtesy needs; grant the ACL of the \
             docs/several-instances.md: +evalsha +script|load +time (the scripts read the store's clock) \
             +hset +hget +hmget +hdel +pexpire +pttl +zadd +zrem +zrange +zcard \
             +zremrangebyscore +zrangebyscore +zcount +publish +subscribe +info, keys ~<prefix>:*, channel \
             &<prefix>:hints",
            text,
        ))
    } else {
        error
    }
}

/// The fix for a plain URL that reached a cluster node.
fn cluster_refusal(settings: &SharedSettings) -> String {
    format!(
        "[shared] redis_url {} reaches a Redis Cluster node (cluster_enabled:1): a plain \
         redis:// URL would send each host's keys to that one node; use \
         redis+cluster://host:port,host:port,… (rediss+cluster:// with TLS)",
        settings.redacted_url()
    )
}

impl Connection {
    /// The connection for `settings`; nothing is connected yet.
    pub(crate) fn open(settings: &SharedSettings) -> Result<Connection, String> {
        let certificates = settings.tls_certificates()?;
        let url_error = |e: RedisError| format!("[shared] redis_url: {e}");
        let connect_timeout = settings.timeout.max(Duration::from_millis(100));
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(Some(settings.timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_secs(1));
        let topology = topology(&settings.url_with_password()?)
            .map_err(|e| format!("[shared] redis_url {}: {e}", settings.redacted_url()))?;
        Ok(match topology {
            Topology::Single(url) => {
                let client = client(&url, &certificates).map_err(url_error)?;
                let conn = ConnectionManager::new_lazy_with_config(client.clone(), config)
                    .map_err(url_error)?;
                Connection::Single(Single {
                    client,
                    conn,
                    checked: AtomicBool::new(false),
                    refusal_logged: AtomicBool::new(false),
                })
            }
            Topology::Cluster(nodes) => {
                // No retries by the crate: it would send a script again after a dropped
                // connection, when it may have run. `script` sends again only what the server
                // refused before running it (MOVED, ASK, TRYAGAIN, CLUSTERDOWN); the crate still
                // refreshes its slot map on MOVED.
                let mut builder = redis::cluster::ClusterClientBuilder::new(nodes.clone())
                    .retries(0)
                    .connection_timeout(connect_timeout)
                    .response_timeout(settings.timeout);
                if let Some(c) = &certificates {
                    builder = builder.certs(c.clone());
                }
                let cluster = builder.build().map_err(url_error)?;
                let conn = cluster.get_pending_async_connection_with_config(
                    redis::cluster::ClusterConfig::new()
                        .set_connection_timeout(connect_timeout)
                        .set_response_timeout(settings.timeout),
                );
                let mut clients = Vec::new();
                for node in &nodes {
                    clients.push((
                        node_addr(node),
                        client(node, &certificates).map_err(url_error)?,
                    ));
                }
                Connection::Cluster(Cluster {
                    conn,
                    nodes: clients,
                    connect_timeout,
                })
            }
            Topology::Sentinel(target) => {
                let mut sentinels = Vec::new();
                for s in &target.sentinels {
                    sentinels.push((node_addr(s), client(s, &certificates).map_err(url_error)?));
                }
                Connection::Sentinel(Box::new(Sentinel {
                    target,
                    sentinels,
                    certificates,
                    config,
                    ask_timeout: settings.timeout.max(Duration::from_millis(250)),
                    current: Mutex::new(None),
                    moves: watch::channel(0).0,
                }))
            }
        })
    }

    /// Runs one script call (the caller bounds it with its timeout); see the module's rules.
    pub(crate) async fn script(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> RedisResult<Value> {
        self.script_once(invocation).await.map_err(explain_denial)
    }

    /// See `script`.
    async fn script_once(&self, invocation: &redis::ScriptInvocation<'_>) -> RedisResult<Value> {
        match self {
            Connection::Single(s) => {
                let mut conn = s.conn.clone();
                invocation.invoke_async(&mut conn).await.map_err(|e| {
                    if e.kind() == ErrorKind::Server(ServerErrorKind::Moved) {
                        RedisError::from((
                            ErrorKind::InvalidClientConfig,
                            "the store is a Redis Cluster node: use a redis+cluster:// URL",
                            e.to_string(),
                        ))
                    } else {
                        e
                    }
                })
            }
            Connection::Cluster(c) => {
                // Each script's keys share the host's hash tag, so the crate routes it (EVALSHA
                // by its first key) to the one node that holds the slot; on NOSCRIPT (a new
                // primary after a reshard or failover), `invoke_async` loads it (SCRIPT LOAD
                // goes to every node) and sends EVALSHA again: it had not run.
                let mut conn = c.conn.clone();
                let mut tries = 0;
                loop {
                    match invocation.invoke_async(&mut conn).await {
                        Err(e) if tries < REFUSED_TRIES && refused_before_running(&e) => {
                            tries += 1;
                            // The crate refreshes its slot map on MOVED; an ASK or TRYAGAIN
                            // lasts while the slot migrates.
                            let pause = 5 * u64::from(tries.min(5));
                            tokio::time::sleep(Duration::from_millis(pause)).await;
                        }
                        other => return other,
                    }
                }
            }
            Connection::Sentinel(s) => {
                let Some(mut master) = s.master() else {
                    return Err(RedisError::from((
                        ErrorKind::Io,
                        "no master known: the sentinels were not reached yet",
                    )));
                };
                invocation.invoke_async(&mut master.conn).await
            }
        }
    }

    /// Runs one plain command (`ZREM` of the live set, `SCRIPT LOAD`); the caller bounds it.
    pub(crate) async fn command(&self, cmd: &redis::Cmd) -> RedisResult<Value> {
        match self {
            Connection::Single(s) => cmd.query_async(&mut s.conn.clone()).await,
            Connection::Cluster(c) => cmd.query_async(&mut c.conn.clone()).await,
            Connection::Sentinel(s) => match s.master() {
                Some(mut m) => cmd.query_async(&mut m.conn).await,
                None => Err(RedisError::from((ErrorKind::Io, "no master known"))),
            },
        }
    }

    /// Loads `script` into the store (every node of a cluster); the caller bounds it.
    pub(crate) async fn load_script(&self, script: &redis::Script) -> RedisResult<String> {
        match self {
            Connection::Single(s) => script.load_async(&mut s.conn.clone()).await,
            Connection::Cluster(c) => script.load_async(&mut c.conn.clone()).await,
            Connection::Sentinel(s) => match s.master() {
                Some(mut m) => script.load_async(&mut m.conn).await,
                None => Err(RedisError::from((ErrorKind::Io, "no master known"))),
            },
        }
    }

    /// A pub/sub connection for the hints, not yet subscribed.
    pub(crate) async fn pubsub(&self) -> RedisResult<PubSub> {
        match self {
            Connection::Single(s) => s.client.get_async_pubsub().await,
            Connection::Cluster(c) => {
                // A classic PUBLISH (what the scripts send) is forwarded to every node of a
                // cluster over its bus, so one subscription through any one node hears the hints
                // of every host, whichever node holds its slot.
                let mut last = RedisError::from((ErrorKind::Io, "no seed node"));
                for (addr, client) in &c.nodes {
                    match tokio::time::timeout(c.connect_timeout, client.get_async_pubsub()).await {
                        Ok(Ok(pubsub)) => return Ok(pubsub),
                        Ok(Err(e)) => last = e,
                        Err(_) => {
                            tracing::debug!(node = %addr, "hints: no answer from this seed node");
                        }
                    }
                }
                Err(last)
            }
            Connection::Sentinel(s) => match s.master() {
                // The scripts publish on the master.
                Some(m) => m.client.get_async_pubsub().await,
                None => Err(RedisError::from((ErrorKind::Io, "no master known"))),
            },
        }
    }

    /// Counts the times the store moved (a new Sentinel master): a subscription made before a
    /// change listens to the old one and must be made again.
    pub(crate) fn moves(&self) -> Option<watch::Receiver<u64>> {
        match self {
            Connection::Sentinel(s) => Some(s.moves.subscribe()),
            _ => None,
        }
    }

    /// Checks that the store is of the kind the URL says, and (Sentinel) finds the master again.
    pub(crate) async fn check(&self, settings: &SharedSettings) -> Check {
        let limit = settings.timeout.max(Duration::from_secs(1));
        match self {
            Connection::Single(s) => {
                if s.checked.load(Ordering::Acquire) {
                    return Check::Ready;
                }
                let mut conn = s.conn.clone();
                let info = redis::cmd("INFO").arg("cluster").clone();
                match tokio::time::timeout(limit, info.query_async::<String>(&mut conn)).await {
                    Ok(Ok(text)) if text.lines().any(|l| l.trim() == "cluster_enabled:1") => {
                        Check::Refused(cluster_refusal(settings))
                    }
                    Ok(Ok(_)) => {
                        s.checked.store(true, Ordering::Release);
                        Check::Ready
                    }
                    Ok(Err(e)) if matches!(e.kind(), ErrorKind::Server(_)) => {
                        // NOPERM (a user without +info) or an older server: a cluster node still
                        // shows itself by MOVED on the first script whose host it does not hold.
                        tracing::warn!(
                            "[shared] could not ask the store whether it is a cluster node \
                             ({e}); grant +info to check at start"
                        );
                        s.checked.store(true, Ordering::Release);
                        Check::Ready
                    }
                    Ok(Err(e)) => Check::Unreachable(e.to_string()),
                    Err(_) => {
                        Check::Unreachable(format!("no answer within {} ms", limit.as_millis()))
                    }
                }
            }
            Connection::Cluster(c) => {
                let mut conn = c.conn.clone();
                let ping = redis::cmd("PING").clone();
                match tokio::time::timeout(limit, ping.query_async::<Value>(&mut conn)).await {
                    Ok(Ok(_)) => Check::Ready,
                    Ok(Err(e)) if e.to_string().contains("cluster support disabled") => {
                        Check::Refused(format!(
                            "[shared] redis_url {} names servers that are not a Redis Cluster \
                             (cluster support disabled): use redis://host:port for one server",
                            settings.redacted_url()
                        ))
                    }
                    Ok(Err(e)) => Check::Unreachable(e.to_string()),
                    Err(_) => {
                        Check::Unreachable(format!("no answer within {} ms", limit.as_millis()))
                    }
                }
            }
            Connection::Sentinel(s) => match s.resolve().await {
                Ok(()) => Check::Ready,
                Err(e) => Check::Unreachable(e),
            },
        }
    }

    /// Logs the refusal of a cluster node at `error`, once.
    fn log_refusal(&self, why: &str) {
        if let Connection::Single(s) = self {
            if !s.refusal_logged.swap(true, Ordering::AcqRel) {
                tracing::error!("{why}; this instance stays on its share of each budget");
            }
        } else {
            tracing::error!("{why}; this instance stays on its share of each budget");
        }
    }

    /// What the store is now, for the rejoin's log (no password).
    pub(crate) fn describe(&self, settings: &SharedSettings) -> String {
        match self {
            Connection::Sentinel(s) => match s.master() {
                Some(m) => format!("master {} of {:?}", m.addr, s.target.master),
                None => format!("no master of {:?} known", s.target.master),
            },
            _ => settings.redacted_url(),
        }
    }
}

impl Sentinel {
    /// The master in use, if one was found.
    fn master(&self) -> Option<Master> {
        lock(&self.current).clone()
    }

    /// Asks the sentinels, in order, which address the master has now.
    async fn ask(&self) -> Result<(String, u16), String> {
        let mut last = String::from("no sentinel");
        for (addr, client) in &self.sentinels {
            let query = async {
                let mut conn = client.get_multiplexed_async_connection().await?;
                redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(&self.target.master)
                    .query_async::<Option<(String, String)>>(&mut conn)
                    .await
            };
            match tokio::time::timeout(self.ask_timeout, query).await {
                Ok(Ok(Some((host, port)))) => match port.parse::<u16>() {
                    Ok(port) => return Ok((host, port)),
                    Err(_) => last = format!("sentinel {addr} answered the port {port:?}"),
                },
                Ok(Ok(None)) => {
                    last = format!(
                        "sentinel {addr} knows no master named {:?}",
                        self.target.master
                    )
                }
                Ok(Err(e)) => last = format!("sentinel {addr}: {e}"),
                Err(_) => {
                    last = format!(
                        "sentinel {addr}: no answer within {} ms",
                        self.ask_timeout.as_millis()
                    )
                }
            }
        }
        Err(last)
    }

    /// Finds the master through the sentinels and, if it moved, connects to the new one (logged
    /// with the old and new addresses).
    async fn resolve(&self) -> Result<(), String> {
        let (host, port) = self.ask().await?;
        let addr = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let old = self.master().map(|m| m.addr);
        if old.as_deref() == Some(addr.as_str()) {
            return Ok(());
        }
        let url = self.target.master_url(&host, port);
        let client = client(&url, &self.certificates).map_err(|e| e.to_string())?;
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), self.config.clone())
            .map_err(|e| e.to_string())?;
        *lock(&self.current) = Some(Master {
            addr: addr.clone(),
            client,
            conn,
        });
        self.moves.send_modify(|n| *n += 1);
        match old {
            Some(old) => tracing::warn!(
                master = %self.target.master,
                old = %old,
                new = %addr,
                "Sentinel names a new master: the store's calls go to it"
            ),
            None => {
                tracing::info!(master = %self.target.master, addr = %addr, "Sentinel names the master")
            }
        }
        Ok(())
    }
}

impl RedisStore {
    /// The start-up check of `courtesy run`: a store of another kind than the URL says (a cluster
    /// node on `redis://`) is an error; a store that cannot be reached starts this instance in
    /// fallback, as a store that goes away later would.
    pub(crate) async fn check_at_start(&self) -> Result<(), String> {
        match self.conn.check(&self.settings).await {
            Check::Ready => Ok(()),
            Check::Refused(why) => Err(why),
            Check::Unreachable(why) => {
                self.fall_back(&format!("at start: {why}"));
                Ok(())
            }
        }
    }

    /// While in fallback, before each beat: finds the store again (a Sentinel master that moved)
    /// and checks its kind if that could not be done at start; `false` keeps the instance in
    /// fallback (a cluster node on `redis://`, logged at `error` once).
    pub(crate) async fn ready_to_rejoin(&self) -> bool {
        match self.conn.check(&self.settings).await {
            Check::Ready | Check::Unreachable(_) => true,
            Check::Refused(why) => {
                self.conn.log_refusal(&why);
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_addresses_carry_no_password() {
        assert_eq!(node_addr("redis://u:secret@h1:7000/0"), "h1:7000");
    }
}
