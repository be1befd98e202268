//! courtesy run as its own process (the built binary), for the tests that measure its memory or
//! send it signals: free ports for it, its config's `[proxy]` lines, starting it, and waiting
//! until it listens.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::wait::eventually;

/// The next candidate of [`unused_port`] in this test process.
static NEXT_PORT: AtomicU32 = AtomicU32::new(0);

/// The first port of the kernel's ephemeral range (`ip_local_port_range`), 32768 if unreadable.
fn ephemeral_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

/// A loopback port below the ephemeral range that nothing listens on now: no `bind(0)` or
/// outgoing connection of another test can take it before the process under test binds it. The
/// start is spread by process id, so that two test binaries rarely try the same ports.
fn unused_port() -> u16 {
    let low = 10_000u32;
    let span = ephemeral_start().saturating_sub(low).max(1_000);
    let offset = std::process::id().wrapping_mul(7_919) % span;
    for _ in 0..span {
        let n = NEXT_PORT.fetch_add(1, Ordering::Relaxed);
        let port = low + (offset + n) % span;
        let Ok(port) = u16::try_from(port) else {
            continue;
        };
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port below the ephemeral range");
}

/// The ports of a courtesy process: its proxy listener and its admin listener on 127.0.0.1.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    /// The proxy port.
    pub proxy: u16,
    /// The admin port.
    pub admin: u16,
}

impl Ports {
    /// Two loopback ports that were free a moment ago (the process binds them itself), taken
    /// below the kernel's ephemeral range: a port from `bind(0)` is handed out again to the next
    /// socket of any test running beside this one, which then holds it when courtesy binds.
    pub fn free() -> Ports {
        Ports {
            proxy: unused_port(),
            admin: unused_port(),
        }
    }

    /// The `[proxy]` section that puts the process on these ports with its state in `state_dir`.
    pub fn proxy_section(&self, state_dir: &Path) -> String {
        format!(
            "[proxy]\nlisten = \"127.0.0.1:{}\"\nadmin_listen = \"127.0.0.1:{}\"\nstate_dir = \"{}\"\n",
            self.proxy,
            self.admin,
            state_dir.display()
        )
    }

    /// Writes the config file `file`: the `[proxy]` section of these ports with the state in
    /// `state_dir`, then `rest` (more `[proxy]` keys, then the other sections). The tests that run
    /// courtesy as its own process all start from such a file.
    pub fn write_config(&self, file: &Path, state_dir: &Path, rest: &str) {
        std::fs::write(file, format!("{}{rest}", self.proxy_section(state_dir)))
            .expect("write the test config");
    }

    /// [`Ports::write_config`] the way most tests lay it out: `dir/courtesy.toml`, with the state
    /// in `dir/state`. Returns the file's path, for `courtesy run --config`.
    pub fn config_in(&self, dir: &Path, rest: &str) -> PathBuf {
        let file = dir.join("courtesy.toml");
        self.write_config(&file, &dir.join("state"), rest);
        file
    }

    /// The proxy listener's address.
    pub fn proxy_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.proxy))
    }
}

/// Starts `courtesy run --config config` with warnings-only logging and its output discarded;
/// the process is killed if the test drops it.
pub fn spawn_courtesy_process(config: &Path) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_courtesy"))
        .args(["run", "--config"])
        .arg(config)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Starts `courtesy run --config config` with its log on a pipe (`RUST_LOG` as given, or unset:
/// courtesy's default level), for [`stop_for_log`] to read; killed if the test drops it.
pub fn spawn_courtesy_logging(config: &Path, rust_log: Option<&str>) -> tokio::process::Child {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_courtesy"));
    command.args(["run", "--config"]).arg(config);
    match rust_log {
        Some(level) => command.env("RUST_LOG", level),
        None => command.env_remove("RUST_LOG"),
    };
    command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Stops a courtesy started by [`spawn_courtesy_logging`] with SIGTERM (a clean stop writes out
/// every log line) and returns what it logged; fails the test if it takes over 20 s.
pub async fn stop_for_log(child: tokio::process::Child) -> String {
    let pid = child.id().unwrap().to_string();
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status();
    let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Waits up to 10 s until something accepts connections on `addr`: a started process is ready.
pub async fn listening(addr: SocketAddr) -> bool {
    eventually(Duration::from_secs(10), || {
        std::net::TcpStream::connect(addr).is_ok()
    })
    .await
}

/// The RSS high-water mark of a process, in KiB, from /proc.
pub fn vm_hwm_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
