//! courtesy started inside the test process on `127.0.0.1:0`, from a config text or file, with
//! its state in a temporary directory: the proxy under test, stopped when the test lets it go.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::direct::admin_call;
use super::proxy_client::ProxyClient;
use super::temp::temp_dir;

/// Turns robots.txt off in a test config that does not mention `obey_robots`, and coalescing in
/// one that does not mention `coalesce`: most tests count what reaches their origin exactly, a
/// robots.txt fetch would be one more request, and the tests of pacing send identical requests
/// at once to see them paced, which coalescing would make one. The tests of robots.txt say
/// `obey_robots = true`, those of coalescing `coalesce = true`, and so do the tests of real
/// clients on their defaults and ours (`defaults`, `crawlee`), so that they run on every default.
fn robots_off_unless_asked(
    mut config: courtesy::config::Config,
    text: &str,
) -> courtesy::config::Config {
    let (robots, coalesce) = (text.contains("obey_robots"), text.contains("coalesce"));
    if robots && coalesce {
        return config;
    }
    let off = |p: &Arc<courtesy::config::HostPolicy>| {
        Arc::new({
            let mut p = p.as_ref().clone();
            p.robots.obey &= robots;
            p.forward.coalesce &= coalesce;
            p
        })
    };
    config.defaults = off(&config.defaults);
    for rule in &mut config.hosts {
        rule.policy = off(&rule.policy);
    }
    config
}

/// courtesy running in this test process.
pub struct Courtesy {
    /// The proxy port.
    pub addr: SocketAddr,
    /// The admin port.
    pub admin: SocketAddr,
    /// Where its CA lives.
    pub state_dir: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<anyhow::Result<()>>>,
}

impl Courtesy {
    /// Starts courtesy with `toml` as its config file (listen addresses are replaced by
    /// `127.0.0.1:0`; `state_dir` is a fresh temporary directory).
    pub async fn start(toml: &str) -> Courtesy {
        Courtesy::start_in(toml, &temp_dir("state")).await
    }

    /// Like [`Courtesy::start`], with state (the local CA) kept in `state_dir`.
    pub async fn start_in(toml: &str, state_dir: &Path) -> Courtesy {
        let config = courtesy::config::Config::parse(toml, "test.toml").expect("test config");
        Courtesy::start_with(robots_off_unless_asked(config, toml), state_dir).await
    }

    /// Starts courtesy from a config file (so that it can be reloaded), state in `state_dir`.
    pub async fn start_file(path: &Path, state_dir: &Path) -> Courtesy {
        let config = courtesy::config::Config::load(path).expect("test config file");
        let text = std::fs::read_to_string(path).unwrap();
        Courtesy::start_with(robots_off_unless_asked(config, &text), state_dir).await
    }

    async fn start_with(mut config: courtesy::config::Config, state_dir: &Path) -> Courtesy {
        config.proxy.state_dir = state_dir.to_path_buf();
        // Make the CA before returning, so tests can read ca.pem at once (run() then loads it).
        courtesy::LocalCa::load_or_create(state_dir).expect("local CA");
        let proxy = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (addr, admin_addr) = (proxy.local_addr().unwrap(), admin.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(courtesy::run(
            courtesy::Listeners { proxy, admin },
            config,
            async move {
                let _ = stopped.await;
            },
        ));
        Courtesy {
            addr,
            admin: admin_addr,
            state_dir: state_dir.to_path_buf(),
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// The path of courtesy's CA certificate (what `courtesy ca` prints).
    pub fn ca_path(&self) -> PathBuf {
        self.state_dir.join("ca.pem")
    }

    /// `http://` + the admin listener + `path`: where the host API, metrics and dashboard are.
    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{}", self.admin, path)
    }

    /// `GET /hosts/{key}` of the admin listener, without a token: its status and body (the host's
    /// JSON view, or why there is none). The tests look a host up this way more than any other.
    pub async fn host_page(&self, key: &str) -> (http::StatusCode, String) {
        admin_call("GET", &self.admin_url(&format!("/hosts/{key}")), None, "").await
    }

    /// Signals shutdown and returns the run's result.
    pub async fn shutdown(mut self) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => task.await.expect("courtesy task"),
            None => Ok(()),
        }
    }

    /// Signals shutdown without waiting; returns the task to await.
    pub fn begin_shutdown(mut self) -> JoinHandle<anyhow::Result<()>> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.take().expect("not yet shut down")
    }

    /// A client that sends its requests through this courtesy.
    pub fn client(&self) -> ProxyClient {
        ProxyClient { proxy: self.addr }
    }

    /// A reqwest client that sends everything through this courtesy and trusts its CA, so that
    /// `https://` requests are intercepted as a crawler's are.
    pub fn intercepted_client(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .proxy(reqwest::Proxy::all(format!("http://{}", self.addr)).expect("proxy URL"))
            .tls_backend_preconfigured(super::tls::client_tls_trusting(&self.ca_path()))
            .build()
            .expect("reqwest client")
    }
}

impl Drop for Courtesy {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}
