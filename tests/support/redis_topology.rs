//! Redis topologies of the test's own on free loopback ports, for the shared budget's tests of
//! `redis+cluster://` and `redis+sentinel://`: a three-master Redis Cluster, and a master with a
//! replica watched by three `redis-sentinel` processes that fail over within seconds. Every
//! process is killed when the value is dropped. Without the binaries a test cannot run: with `CI`
//! set that fails it, otherwise it is skipped (`None`) with a note, as in `redis.rs`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::parent::free_port;
use super::temp::temp_dir;

/// `None` with a note, or a panic under `CI`, when `what` cannot be started.
fn skip_or_panic<T>(what: &str, e: impl std::fmt::Display) -> Option<T> {
    if std::env::var_os("CI").is_none() {
        eprintln!("skipped: {what} cannot be started ({e}); install redis-server, redis-tools and redis-sentinel");
        None
    } else {
        panic!("CI is set and {what} cannot be started: {e}");
    }
}

/// A port `p` free a moment ago with `p + 10000` (the cluster bus) free too.
fn free_cluster_port() -> u16 {
    let bindable = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
    loop {
        let p = 20_000 + (rand_u16() % 20_000);
        if bindable(p) && bindable(p + 10_000) {
            return p;
        }
    }
}

/// A pseudo-random number from the clock and the process id (no extra dependency).
fn rand_u16() -> u16 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    ((nanos / 1000) ^ std::process::id().wrapping_mul(2_654_435_761)) as u16
}

/// Waits until `port` accepts connections (3 s at most).
fn wait_listening(port: u16) -> std::io::Result<()> {
    for _ in 0..300 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(std::io::Error::other(format!(
        "nothing listened on {port} within 3 s"
    )))
}

/// One command's reply through `redis-cli -p port`.
pub fn cli_at(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A process of the topology: its port and child.
struct Node {
    port: u16,
    child: Option<Child>,
}

impl Node {
    fn spawn(program: &str, args: &[String]) -> std::io::Result<Node> {
        let port: u16 = args
            .iter()
            .position(|a| a == "--port")
            .and_then(|i| args.get(i + 1))
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        let child = Command::new(program)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let node = Node {
            port,
            child: Some(child),
        };
        wait_listening(port)?;
        Ok(node)
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The arguments of a `redis-server` on `port`, without persistence.
fn server_args(port: u16) -> Vec<String> {
    [
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A three-master Redis Cluster (no replicas) on free loopback ports.
pub struct RedisCluster {
    nodes: Vec<Node>,
    _dir: PathBuf,
}

impl RedisCluster {
    /// Starts three `redis-server --cluster-enabled yes`, joins them with `redis-cli --cluster
    /// create` and waits for `cluster_state:ok`.
    pub fn start() -> Option<RedisCluster> {
        match RedisCluster::spawn() {
            Ok(c) => Some(c),
            Err(e) => skip_or_panic("a Redis Cluster", e),
        }
    }

    fn spawn() -> std::io::Result<RedisCluster> {
        let dir = temp_dir("cluster");
        let mut nodes = Vec::new();
        for i in 0..3 {
            let port = free_cluster_port();
            let mut args = server_args(port);
            args.extend([
                "--cluster-enabled".to_string(),
                "yes".into(),
                "--cluster-config-file".into(),
                dir.join(format!("nodes-{i}.conf")).display().to_string(),
                "--cluster-node-timeout".into(),
                "2000".into(),
                "--dir".into(),
                dir.display().to_string(),
            ]);
            nodes.push(Node::spawn("redis-server", &args)?);
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let created = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        if !created.success() {
            return Err(std::io::Error::other("redis-cli --cluster create failed"));
        }
        let cluster = RedisCluster { nodes, _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if cluster
                .nodes
                .iter()
                .all(|n| cli_at(n.port, &["CLUSTER", "INFO"]).contains("cluster_state:ok"))
            {
                return Ok(cluster);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(std::io::Error::other("the cluster was not ok within 15 s"))
    }

    /// The nodes' ports.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// `redis+cluster://127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3`.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// The port of the node that holds `key`'s slot (from `CLUSTER NODES`).
    pub fn node_of(&self, key: &str) -> u16 {
        let port = self.nodes[0].port;
        let slot: u16 = cli_at(port, &["CLUSTER", "KEYSLOT", key])
            .parse()
            .expect("a slot");
        cli_at(port, &["CLUSTER", "NODES"])
            .lines()
            .find(|l| owns(l, slot))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|addr| addr.split('@').next())
            .and_then(|addr| addr.rsplit(':').next())
            .and_then(|p| p.parse().ok())
            .expect("a node owns the slot")
    }
}

impl RedisCluster {
    /// Moves `key`'s slot to another node as `redis-cli --cluster reshard` does (IMPORTING,
    /// MIGRATING, MIGRATE of each key, SETSLOT NODE on every node); returns the new node's port.
    pub fn move_slot_of(&self, key: &str) -> u16 {
        let from = self.node_of(key);
        let to = self
            .ports()
            .into_iter()
            .find(|p| *p != from)
            .expect("another node");
        let slot = cli_at(from, &["CLUSTER", "KEYSLOT", key]);
        let from_id = cli_at(from, &["CLUSTER", "MYID"]);
        let to_id = cli_at(to, &["CLUSTER", "MYID"]);
        assert_eq!(
            cli_at(to, &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]),
            "OK"
        );
        assert_eq!(
            cli_at(from, &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]),
            "OK"
        );
        loop {
            let keys = cli_at(from, &["CLUSTER", "GETKEYSINSLOT", &slot, "100"]);
            if keys.is_empty() {
                break;
            }
            let port = to.to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            args.extend(keys.lines());
            cli_at(from, &args);
        }
        for p in self.ports() {
            cli_at(p, &["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]);
        }
        to
    }
}

/// Whether the `CLUSTER NODES` line `line` lists `slot` among its ranges.
fn owns(line: &str, slot: u16) -> bool {
    line.split_whitespace().skip(8).any(|range| {
        match range.split_once('-') {
            Some((a, b)) => matches!((a.parse::<u16>(), b.parse::<u16>()), (Ok(a), Ok(b)) if a <= slot && slot <= b),
            None => range.parse::<u16>() == Ok(slot),
        }
    })
}

/// A master, one replica and three sentinels that fail over within seconds of losing the master
/// (`down-after-milliseconds` 1000, quorum 2).
pub struct RedisSentinels {
    /// The master (index 0) and the replica.
    servers: Vec<Node>,
    sentinels: Vec<Node>,
    /// The name the sentinels know the master by.
    pub master_name: String,
    _dir: PathBuf,
}

impl RedisSentinels {
    /// Starts the master, its replica (synced) and three sentinels that all see both.
    pub fn start() -> Option<RedisSentinels> {
        match RedisSentinels::spawn() {
            Ok(s) => Some(s),
            Err(e) => skip_or_panic("Redis Sentinel", e),
        }
    }

    fn spawn() -> std::io::Result<RedisSentinels> {
        let dir = temp_dir("sentinel");
        // Each server in the test's folder: a replica writes the master's snapshot to its `dir`.
        let in_dir = |port: u16| {
            let mut args = server_args(port);
            args.extend(["--dir".to_string(), dir.display().to_string()]);
            args.extend(["--dbfilename".to_string(), format!("dump-{port}.rdb")]);
            args
        };
        let master_port = free_port();
        let master = Node::spawn("redis-server", &in_dir(master_port))?;
        let replica_port = free_port();
        let mut args = in_dir(replica_port);
        args.extend([
            "--replicaof".to_string(),
            "127.0.0.1".into(),
            master_port.to_string(),
        ]);
        let replica = Node::spawn("redis-server", &args)?;
        let name = "courtesy-master".to_string();
        let mut sentinels = Vec::new();
        for i in 0..3 {
            let port = free_port();
            let conf = dir.join(format!("sentinel-{i}.conf"));
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {dir}\n\
                     sentinel monitor {name} 127.0.0.1 {master_port} 2\n\
                     sentinel down-after-milliseconds {name} 1000\n\
                     sentinel failover-timeout {name} 5000\n\
                     sentinel parallel-syncs {name} 1\n",
                    dir = dir.display()
                ),
            )?;
            let args = vec![
                conf.display().to_string(),
                "--port".into(),
                port.to_string(),
            ];
            sentinels.push(Node::spawn("redis-sentinel", &args)?);
        }
        let topology = RedisSentinels {
            servers: vec![master, replica],
            sentinels,
            master_name: name,
            _dir: dir,
        };
        // The replica is in sync, and every sentinel knows the replica and the other sentinels.
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let synced =
                cli_at(replica_port, &["INFO", "replication"]).contains("master_link_status:up");
            let known = topology.sentinels.iter().all(|s| {
                let master = cli_at(s.port, &["SENTINEL", "MASTER", &topology.master_name]);
                let numbers: Vec<&str> = master.lines().collect();
                let field = |name: &str| {
                    numbers
                        .iter()
                        .position(|l| *l == name)
                        .and_then(|i| numbers.get(i + 1))
                        .and_then(|v| v.parse::<u32>().ok())
                        .unwrap_or(0)
                };
                field("num-slaves") >= 1 && field("num-other-sentinels") >= 2
            });
            if synced && known {
                return Ok(topology);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(std::io::Error::other(
            "the replica and sentinels were not ready within 20 s",
        ))
    }

    /// `redis+sentinel://127.0.0.1:s1,127.0.0.1:s2,127.0.0.1:s3/<master_name>`.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .sentinels
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+sentinel://{}/{}", seeds.join(","), self.master_name)
    }

    /// The port the sentinels name as the master now (the first sentinel that answers).
    pub fn master_port(&self) -> Option<u16> {
        self.sentinels.iter().find_map(|s| {
            let reply = cli_at(
                s.port,
                &["SENTINEL", "get-master-addr-by-name", &self.master_name],
            );
            reply.lines().nth(1).and_then(|p| p.trim().parse().ok())
        })
    }

    /// `kill -9` of the server that is master now; returns its port.
    pub fn kill_master(&mut self) -> u16 {
        let port = self.master_port().expect("a master");
        for s in &mut self.servers {
            if s.port == port {
                s.kill();
            }
        }
        port
    }
}

/// A `redis-server` that speaks only TLS and asks every client for a certificate signed by its CA
/// (`--tls-auth-clients yes`).
pub struct TlsRedis {
    node: Node,
    /// The certificate and key it serves (also what `keys` shows itself with), and its CA.
    files: (PathBuf, PathBuf, PathBuf),
}

impl TlsRedis {
    /// Starts one on a free port with `cert` and `key` (signed by `ca`).
    pub fn start(
        cert: &std::path::Path,
        key: &std::path::Path,
        ca: &std::path::Path,
    ) -> Option<TlsRedis> {
        let port = free_port();
        let mut args = server_args(0);
        args.extend([
            "--tls-port".to_string(),
            port.to_string(),
            "--tls-cert-file".into(),
            cert.display().to_string(),
            "--tls-key-file".into(),
            key.display().to_string(),
            "--tls-ca-cert-file".into(),
            ca.display().to_string(),
            "--tls-auth-clients".into(),
            "yes".into(),
        ]);
        let spawned = Command::new("redis-server")
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .and_then(|child| {
                let node = Node {
                    port,
                    child: Some(child),
                };
                wait_listening(port).map(|()| node)
            });
        match spawned {
            Ok(node) => Some(TlsRedis {
                node,
                files: (cert.to_path_buf(), key.to_path_buf(), ca.to_path_buf()),
            }),
            Err(e) => skip_or_panic("redis-server with TLS", e),
        }
    }

    /// `rediss://127.0.0.1:<port>/0`.
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}/0", self.node.port)
    }

    /// `KEYS pattern`, through `redis-cli --tls` with the server's own certificate as the client's.
    pub fn keys(&self, pattern: &str) -> String {
        let (cert, key, ca) = &self.files;
        let out = Command::new("redis-cli")
            .arg("--tls")
            .arg("--cacert")
            .arg(ca)
            .arg("--cert")
            .arg(cert)
            .arg("--key")
            .arg(key)
            .args(["-p", &self.node.port.to_string(), "KEYS", pattern])
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}
