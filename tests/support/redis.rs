//! A real `redis-server` of the test's own on a free loopback port, for the shared budget's
//! tests (end to end, the scripts' unit tests in `src/store/tests.rs` and the benches include this
//! file too): started, killed (`SIGKILL`), stopped and continued (`SIGSTOP`/`SIGCONT`, a partition:
//! connections stay open and nothing answers) and restarted empty on the same port. The
//! shared-budget scenarios of `benches/scenarios` start theirs with this file too (`pid` is for
//! their CPU accounting).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A `redis-server` this test started; killed when dropped.
pub struct RedisServer {
    child: Option<Child>,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// With TLS: the certificate and key files it serves, and the CA that signed them.
    tls: Option<(PathBuf, PathBuf, PathBuf)>,
}

impl RedisServer {
    /// Starts one on a free port. Without `redis-server` installed the test cannot run: with `CI`
    /// set that fails it, otherwise it is skipped (`None`) with a note.
    pub fn start() -> Option<RedisServer> {
        RedisServer::launch(RedisServer {
            child: None,
            port: free_port(),
            tls: None,
        })
    }

    /// Like [`RedisServer::start`], speaking only TLS with `cert` and `key` (signed by `ca`).
    pub fn start_tls(cert: &Path, key: &Path, ca: &Path) -> Option<RedisServer> {
        RedisServer::launch(RedisServer {
            child: None,
            port: free_port(),
            tls: Some((cert.to_path_buf(), key.to_path_buf(), ca.to_path_buf())),
        })
    }

    fn launch(mut server: RedisServer) -> Option<RedisServer> {
        match server.spawn() {
            Ok(()) => Some(server),
            Err(e) if std::env::var_os("CI").is_none() => {
                eprintln!("skipped: redis-server cannot be started ({e}); install redis-server");
                None
            }
            Err(e) => panic!("CI is set and redis-server cannot be started: {e}"),
        }
    }

    fn spawn(&mut self) -> std::io::Result<()> {
        let mut cmd = Command::new("redis-server");
        match &self.tls {
            None => cmd.args(["--port", &self.port.to_string()]),
            Some((cert, key, ca)) => cmd
                .args(["--port", "0", "--tls-port", &self.port.to_string()])
                .arg("--tls-cert-file")
                .arg(cert)
                .arg("--tls-key-file")
                .arg(key)
                .arg("--tls-ca-cert-file")
                .arg(ca)
                .args(["--tls-auth-clients", "no"]),
        };
        let child = cmd
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        self.child = Some(child);
        for _ in 0..300 {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(std::io::Error::other(
            "redis-server did not listen within 3 s",
        ))
    }

    /// Its process id, while it runs (the scenarios bench reads its CPU time; no test does).
    #[allow(dead_code)]
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `redis://127.0.0.1:<port>/0` (`rediss://` with TLS).
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}/0", self.port)
    }

    /// The `[shared]` section for instances on this server.
    pub fn shared_section(&self, extra: &str) -> String {
        format!("[shared]\nredis_url = \"{}\"\n{extra}\n", self.url())
    }

    fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .args([signal, &child.id().to_string()])
                .status();
        }
    }

    /// `kill -9`: the store is gone, with everything it held.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `SIGSTOP`: connections stay open and nothing answers, as in a partition.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// `SIGCONT` after [`RedisServer::pause`].
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// Starts a new, empty server on the same port (after [`RedisServer::kill`]).
    pub fn restart_empty(&mut self) {
        self.kill();
        self.spawn().expect("redis-server restarts");
    }

    /// One command's reply as text, through `redis-cli`.
    pub fn cli(&self, args: &[&str]) -> String {
        let mut cmd = Command::new("redis-cli");
        if let Some((_, _, ca)) = &self.tls {
            cmd.arg("--tls").arg("--cacert").arg(ca);
        }
        let out = cmd
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

/// A loopback port that was free a moment ago (the server binds it itself).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.resume();
        self.kill();
    }
}
