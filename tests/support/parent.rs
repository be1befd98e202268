//! Real parent proxies of the test's own, each on a free loopback port with its files in a
//! temporary directory: Squid (an HTTP parent, optionally with basic authentication through its
//! `basic_ncsa_auth` helper and an MD5-crypt password file written with `openssl passwd`) and
//! microsocks (a SOCKS5 parent, optionally with a user name and password). Without the program
//! installed a test cannot run: with `CI` set that fails it, otherwise it is skipped (`None`)
//! with a note, as for redis-server.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::binary::Ports;
use super::temp::temp_dir;

const SQUID: &str = "/usr/sbin/squid";
const NCSA_AUTH: &str = "/usr/lib/squid/basic_ncsa_auth";

/// A parent proxy process this test started; killed (by its own PID) when dropped.
pub struct ParentProxy {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its temporary directory (config, logs).
    pub dir: PathBuf,
}

impl ParentProxy {
    /// Squid on a free loopback port, caching nothing; with `auth`, only that user and password
    /// may use it.
    pub fn squid(auth: Option<(&str, &str)>) -> Option<ParentProxy> {
        let dir = temp_dir("squid");
        let port = free_port();
        let launched = (|| -> std::io::Result<ParentProxy> {
            if !std::path::Path::new(SQUID).exists() {
                return Err(std::io::Error::other(format!("{SQUID} is not installed")));
            }
            // Squid started as root runs as its own user, which must write its logs here.
            set_mode(&dir, 0o777)?;
            let access = match auth {
                Some((user, password)) => {
                    let hash = Command::new("openssl")
                        .args(["passwd", "-1", password])
                        .output()?;
                    if !hash.status.success() {
                        return Err(std::io::Error::other("openssl passwd failed"));
                    }
                    let passwd = dir.join("passwd");
                    std::fs::write(
                        &passwd,
                        format!("{user}:{}", String::from_utf8_lossy(&hash.stdout).trim()),
                    )?;
                    set_mode(&passwd, 0o644)?;
                    format!(
                        "auth_param basic program {NCSA_AUTH} {}\n\
                         auth_param basic children 2\n\
                         acl authed proxy_auth REQUIRED\n\
                         http_access allow authed\n",
                        passwd.display()
                    )
                }
                None => "http_access allow localhost\n".to_string(),
            };
            let d = dir.display();
            let config = format!(
                "http_port 127.0.0.1:{port}\n\
                 pid_filename {d}/squid.pid\n\
                 cache_log {d}/cache.log\n\
                 access_log stdio:{d}/access.log\n\
                 coredump_dir {d}\n\
                 netdb_filename none\n\
                 pinger_enable off\n\
                 cache deny all\n\
                 cache_mem 1 MB\n\
                 shutdown_lifetime 0 seconds\n\
                 {access}http_access deny all\n"
            );
            let conf = dir.join("squid.conf");
            std::fs::write(&conf, config)?;
            let log = std::fs::File::create(dir.join("squid.out"))?;
            let child = Command::new(SQUID)
                .arg("-N")
                .arg("-f")
                .arg(&conf)
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()?;
            ParentProxy { child, port, dir }.listening("squid")
        })();
        launched_or_skipped("squid", launched)
    }

    /// microsocks on a free loopback port; with `auth`, only that user and password may use it.
    pub fn microsocks(auth: Option<(&str, &str)>) -> Option<ParentProxy> {
        let dir = temp_dir("microsocks");
        let port = free_port();
        let launched = (|| -> std::io::Result<ParentProxy> {
            let mut cmd = Command::new("microsocks");
            cmd.args(["-i", "127.0.0.1", "-p", &port.to_string()]);
            if let Some((user, password)) = auth {
                cmd.args(["-u", user, "-P", password]);
            }
            let child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn()?;
            ParentProxy { child, port, dir }.listening("microsocks")
        })();
        launched_or_skipped("microsocks", launched)
    }

    /// Waits up to 15 s for the port to accept connections.
    fn listening(mut self, what: &str) -> std::io::Result<ParentProxy> {
        for _ in 0..1500 {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(self);
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                let out = std::fs::read_to_string(self.dir.join("squid.out")).unwrap_or_default();
                return Err(std::io::Error::other(format!(
                    "{what} exited with {status}: {out}"
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(std::io::Error::other(format!(
            "{what} did not listen within 15 s"
        )))
    }

    /// Squid's access log so far ("" for microsocks, which keeps none).
    pub fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("access.log")).unwrap_or_default()
    }
}

fn launched_or_skipped(what: &str, launched: std::io::Result<ParentProxy>) -> Option<ParentProxy> {
    match launched {
        Ok(parent) => Some(parent),
        Err(e) if std::env::var_os("CI").is_none() => {
            eprintln!("skipped: {what} cannot be started ({e}); scripts/test installs it");
            None
        }
        Err(e) => panic!("CI is set and {what} cannot be started: {e}"),
    }
}

fn set_mode(path: &std::path::Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// A loopback port that was free a moment ago (the parent binds it itself).
pub fn free_port() -> u16 {
    Ports::free().proxy
}

impl Drop for ParentProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
