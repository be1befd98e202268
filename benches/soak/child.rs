//! courtesy under test as a child process: the release binary with a config of the soak's making,
//! its own state_dir in a temp dir and its log in a file, stopped with SIGTERM (`kill -TERM <pid>`)
//! or SIGKILL (tokio's `Child::start_kill`) and started again at once on the same ports and
//! state_dir. Each restart's window (from the signal until the new process accepts connections)
//! is kept, because failures inside it are expected and judged apart.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use tokio::net::TcpStream;

use crate::common::client::Client;
use crate::common::ports::free_port;

/// How courtesy reacts to a cooldown in this run (`on_cooldown`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A local 429 at once.
    Reject,
    /// Held until the window ends.
    Hold,
}

impl Mode {
    /// The config word.
    pub fn word(self) -> &'static str {
        match self {
            Mode::Reject => "reject",
            Mode::Hold => "hold",
        }
    }
}

/// How a restart was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Graceful: queued requests get 503, in-flight ones the grace.
    Term,
    /// A crash: nothing is finished, only what was saved survives.
    Kill,
}

impl Signal {
    /// The signal's name.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Term => "SIGTERM",
            Signal::Kill => "SIGKILL",
        }
    }
}

/// One restart: the signal, when the old process was gone, when the new one accepted.
#[derive(Debug, Clone)]
pub struct Restart {
    /// Which signal.
    pub signal: Signal,
    /// When it was sent.
    pub sent: Instant,
    /// When the old process had exited.
    pub exited: Instant,
    /// When the new process accepted connections.
    pub ready: Instant,
    /// The old process's exit status, as printed.
    pub exit_status: String,
}

/// How long past `ready` a restart window lasts (clients reconnecting, pools refilling).
pub const WINDOW_TAIL: Duration = Duration::from_secs(1);

impl Restart {
    /// Whether `at` falls inside this restart's window (signal .. ready + [`WINDOW_TAIL`]).
    pub fn covers(&self, at: Instant) -> bool {
        at >= self.sent && at <= self.ready + WINDOW_TAIL
    }
}

/// The `[proxy]` and `[defaults]` the soak runs courtesy with (the report prints them). Faults
/// come every few seconds per host, and each cooldown resumes at half the rate: with the default
/// `increase_step` (0.05 per healthy answer) the hosts would sink to `min_rate` and the soak would
/// measure waiting, so the rate climbs back by 1/s per healthy answer, from at least 1/s.
///
/// `SOAK_EXTRA_CONFIG` is appended as it is: a `[shared]` section soaks the shared budget.
/// `SOAK_PROXY_CONFIG` is added to `[proxy]`: `max_upstream_connections = 8` soaks a full upstream
/// table, its idle connections closed for new ones.
/// `SOAK_PACING` replaces the pacing keys (`rate = 20.0`, `burst = 5`, `concurrency = 4`): a deep
/// burst and a wide cap soak a shared budget's allowances (turns leased ahead).
pub fn config_text(proxy: SocketAddr, admin: SocketAddr, state_dir: &Path, mode: Mode) -> String {
    let extra = std::env::var("SOAK_EXTRA_CONFIG").unwrap_or_default();
    let proxy_extra = std::env::var("SOAK_PROXY_CONFIG")
        .map(|lines| format!("{}\n", lines.trim_end()))
        .unwrap_or_default();
    let pacing = std::env::var("SOAK_PACING")
        .unwrap_or_else(|_| "rate = 20.0\nburst = 5\nconcurrency = 4".to_string());
    format!(
        "[proxy]\nlisten = \"{proxy}\"\nadmin_listen = \"{admin}\"\nstate_dir = \"{}\"\n\
         connect_timeout_seconds = 3\nresponse_timeout_seconds = 3\nshutdown_grace_seconds = 5\n\
         {proxy_extra}\n[defaults]\n{pacing}\nmax_wait_seconds = 30\n\
         backoff_max_seconds = 10\nmin_rate = 1.0\nincrease_step = 1.0\nobey_robots = false\n\
         on_cooldown = \"{}\"\n{extra}",
        state_dir.display(),
        mode.word()
    )
}

/// courtesy as a child process, restartable on the same ports and state_dir.
pub struct Courtesy {
    bin: PathBuf,
    config: PathBuf,
    /// Where courtesy's stderr goes (every start appends, after a marker line).
    pub log: PathBuf,
    /// The proxy port clients use.
    pub proxy: SocketAddr,
    admin: SocketAddr,
    process: Option<tokio::process::Child>,
    /// Processes started so far.
    pub starts: u32,
}

/// How long a start may take before the soak gives up.
const READY_WITHIN: Duration = Duration::from_secs(20);

/// How long a SIGTERM'd courtesy may take to exit (grace 5 s, plus the last state save).
const EXIT_WITHIN: Duration = Duration::from_secs(20);

impl Courtesy {
    /// Writes the config into `dir` and starts courtesy in `mode`.
    pub async fn start(bin: &Path, dir: &Path, mode: Mode) -> anyhow::Result<Courtesy> {
        std::fs::create_dir_all(dir.join("state"))?;
        let proxy = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let admin = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let config = dir.join("courtesy.toml");
        std::fs::write(&config, config_text(proxy, admin, &dir.join("state"), mode))?;
        let mut courtesy = Courtesy {
            bin: bin.to_path_buf(),
            config,
            log: dir.join("courtesy.log"),
            proxy,
            admin,
            process: None,
            starts: 0,
        };
        courtesy.spawn().await?;
        Ok(courtesy)
    }

    /// Starts the process and waits until both its ports answer; returns when it was ready.
    async fn spawn(&mut self) -> anyhow::Result<Instant> {
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        writeln!(
            log,
            "==== soak: start {} of courtesy at {} ====",
            self.starts + 1,
            jiff::Timestamp::now()
        )?;
        let mut child = tokio::process::Command::new(&self.bin)
            .arg("run")
            .arg("--config")
            .arg(&self.config)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", self.bin.display()))?;
        self.starts += 1;
        let deadline = Instant::now() + READY_WITHIN;
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait()? {
                bail!(
                    "courtesy exited at start ({status}); see {}",
                    self.log.display()
                );
            }
            if self.answers().await {
                self.process = Some(child);
                return Ok(Instant::now());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = child.start_kill();
        bail!(
            "courtesy did not accept within {READY_WITHIN:?}; see {}",
            self.log.display()
        )
    }

    /// Whether the proxy port accepts and the admin listener answers `/healthz`.
    async fn answers(&self) -> bool {
        let within = Duration::from_millis(500);
        let proxy_up = matches!(
            tokio::time::timeout(within, TcpStream::connect(self.proxy)).await,
            Ok(Ok(_))
        );
        if !proxy_up {
            return false;
        }
        let health = async {
            let mut client = Client::connect(self.admin).await?;
            client.get("/healthz", &self.admin.to_string()).await
        };
        matches!(tokio::time::timeout(within, health).await, Ok(Ok((200, _))))
    }

    /// Sends `signal`, waits for the process to exit, and starts a new one at once.
    pub async fn restart(&mut self, signal: Signal) -> anyhow::Result<Restart> {
        let sent = Instant::now();
        let exit_status = self.stop(signal).await?;
        let exited = Instant::now();
        let ready = self.spawn().await?;
        Ok(Restart {
            signal,
            sent,
            exited,
            ready,
            exit_status,
        })
    }

    /// Stops the process with `signal` (its own PID only) and waits for it to exit; a process that
    /// outlives [`EXIT_WITHIN`] after SIGTERM is killed.
    pub async fn stop(&mut self, signal: Signal) -> anyhow::Result<String> {
        let Some(mut child) = self.process.take() else {
            bail!("courtesy is not running");
        };
        match signal {
            Signal::Term => {
                let pid = child.id().context("courtesy has no pid")?;
                let status = std::process::Command::new("kill")
                    .arg("-TERM")
                    .arg(pid.to_string())
                    .status()
                    .context("running kill -TERM")?;
                if !status.success() {
                    bail!("kill -TERM {pid} failed: {status}");
                }
            }
            Signal::Kill => child.start_kill()?,
        }
        match tokio::time::timeout(EXIT_WITHIN, child.wait()).await {
            Ok(status) => Ok(status?.to_string()),
            Err(_) => {
                child.start_kill()?;
                let status = child.wait().await?;
                Ok(format!(
                    "did not exit within {EXIT_WITHIN:?}, killed ({status})"
                ))
            }
        }
    }
}
