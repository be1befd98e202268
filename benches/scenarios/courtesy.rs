//! courtesy under test as a child process (the release binary with a config of the scenario's
//! making) and the admin calls the scenarios make to it, so that the figures are those of the
//! real program, not of an in-process copy.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use bytes::Bytes;

use crate::common::client::Client;
use crate::common::ports::free_port;
use crate::common::proc_stat::cpu_ticks;
use crate::measure::{cpu_ns, rss_kib};

/// courtesy running as its own process (the release binary).
pub struct Courtesy {
    child: tokio::process::Child,
    pid: String,
    /// Where its proxy listens.
    pub proxy: SocketAddr,
    /// Where its admin listener (`/hosts`, `/metrics`, `/healthz`) listens.
    pub admin: SocketAddr,
    /// Its config, state and stderr log, removed when it is stopped.
    dir: PathBuf,
}

/// GET `path` on the admin listener: status and body.
pub async fn admin_get(admin: SocketAddr, path: &str) -> anyhow::Result<(u16, Bytes)> {
    let mut client = Client::connect(admin).await?;
    client.get(path, &admin.to_string()).await
}

impl Courtesy {
    /// Starts courtesy with `defaults` as its `[defaults]` (plus `max_queue = 100000`,
    /// `max_wait_seconds = 600`, `obey_robots = false`) and waits until its admin answers. The
    /// client connection caps are lifted: every client here is this bench, on one address, and
    /// scenario 3 alone holds 10,000 connections (the default is 256 per client address).
    pub async fn start(
        bin: &Path,
        name: &str,
        defaults: &str,
        idle_host_seconds: u64,
    ) -> anyhow::Result<Courtesy> {
        Courtesy::start_with(bin, name, defaults, idle_host_seconds, "").await
    }

    /// Like [`Courtesy::start`], with `sections` (such as a `[shared]` section) after the
    /// `[defaults]`.
    pub async fn start_with(
        bin: &Path,
        name: &str,
        defaults: &str,
        idle_host_seconds: u64,
        sections: &str,
    ) -> anyhow::Result<Courtesy> {
        let mut last = anyhow!("not started");
        for attempt in 0..3 {
            let dir = std::env::temp_dir().join(format!(
                "courtesy-scenarios-{}-{name}-{attempt}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("state"))?;
            let proxy = SocketAddr::from(([127, 0, 0, 1], free_port()?));
            let admin = SocketAddr::from(([127, 0, 0, 1], free_port()?));
            let config = format!(
                "[proxy]\nlisten = \"{proxy}\"\nadmin_listen = \"{admin}\"\nstate_dir = \"{}\"\n\
                 max_in_flight = 100000\nidle_host_seconds = {idle_host_seconds}\n\
                 max_connections = 100000\nmax_connections_per_client = 100000\n\n\
                 [defaults]\n{defaults}\nmax_queue = 100000\nmax_wait_seconds = 600\n\
                 obey_robots = false\n\n{sections}\n",
                dir.join("state").display()
            );
            let config_path = dir.join("courtesy.toml");
            std::fs::write(&config_path, config)?;
            let stderr = std::fs::File::create(dir.join("stderr.log"))?;
            let mut child = tokio::process::Command::new(bin)
                .arg("run")
                .arg("--config")
                .arg(&config_path)
                .env("RUST_LOG", "warn")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(stderr)
                .kill_on_drop(true)
                .spawn()
                .with_context(|| format!("starting {}", bin.display()))?;
            let pid = child.id().context("courtesy has no pid")?.to_string();
            let ready_by = Instant::now() + Duration::from_secs(15);
            let mut exited = false;
            while Instant::now() < ready_by {
                if child.try_wait()?.is_some() {
                    exited = true;
                    break;
                }
                if let Ok(Ok((200, _))) =
                    tokio::time::timeout(Duration::from_secs(1), admin_get(admin, "/healthz")).await
                {
                    return Ok(Courtesy {
                        child,
                        pid,
                        proxy,
                        admin,
                        dir,
                    });
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let log = std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default();
            let _ = child.kill().await;
            last = anyhow!(
                "courtesy did not come up (exited: {exited}); stderr:\n{}",
                log.chars().take(2000).collect::<String>()
            );
        }
        Err(last)
    }

    /// Its RSS in KiB (0 once it is gone).
    pub fn rss_kib(&self) -> u64 {
        rss_kib(&self.pid).unwrap_or(0)
    }

    /// Its CPU time in clock ticks (0 once it is gone).
    pub fn cpu_ticks(&self) -> u64 {
        cpu_ticks(&self.pid).unwrap_or(0)
    }

    /// Its live threads' CPU time in ns (0 once it is gone).
    pub fn cpu_ns(&self) -> u64 {
        cpu_ns(&self.pid).unwrap_or(0)
    }

    /// `GET /hosts`: the `hosts` array.
    pub async fn hosts(&self) -> anyhow::Result<Vec<serde_json::Value>> {
        let (status, body) =
            tokio::time::timeout(Duration::from_secs(30), admin_get(self.admin, "/hosts"))
                .await
                .context("GET /hosts timed out")??;
        if status != 200 {
            bail!("GET /hosts answered {status}");
        }
        let value: serde_json::Value = serde_json::from_slice(&body)?;
        Ok(value["hosts"].as_array().cloned().unwrap_or_default())
    }

    /// `GET /hosts`: its `total` counts over every known host (`queued`, `in_flight`, ...),
    /// whatever the page lists.
    pub async fn totals(&self) -> anyhow::Result<serde_json::Value> {
        let (status, body) = tokio::time::timeout(
            Duration::from_secs(30),
            admin_get(self.admin, "/hosts?limit=0"),
        )
        .await
        .context("GET /hosts timed out")??;
        if status != 200 {
            bail!("GET /hosts answered {status}");
        }
        let value: serde_json::Value = serde_json::from_slice(&body)?;
        Ok(value["total"].clone())
    }

    /// `GET /metrics`: the sum of every sample of each metric in `names` (all label sets), in
    /// that order; a metric that is not there is 0.
    pub async fn metric_sums(&self, names: &[&str]) -> anyhow::Result<Vec<f64>> {
        let (status, body) =
            tokio::time::timeout(Duration::from_secs(30), admin_get(self.admin, "/metrics"))
                .await
                .context("GET /metrics timed out")??;
        if status != 200 {
            bail!("GET /metrics answered {status}");
        }
        let text = String::from_utf8_lossy(&body);
        let mut sums = vec![0.0; names.len()];
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let name = series.split('{').next().unwrap_or(series);
            if let Some(i) = names.iter().position(|n| *n == name) {
                sums[i] += value.parse::<f64>().unwrap_or(0.0);
            }
        }
        Ok(sums)
    }

    /// Stops this courtesy (SIGKILL to its PID) and removes its temp dir.
    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
