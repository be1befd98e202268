//! The `courtesy` command: `run` (the default), `check`, `config`, `status`, `check-url`, `env`,
//! `ca`, `keys`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use courtesy::config::Config;
use courtesy::Listeners;

/// The default config path, used when it exists and no --config is given; without it, the
/// built-in config (`Config::built_in`).
const DEFAULT_CONFIG: &str = "config/courtesy.toml";

/// A local forward HTTP(S) proxy that makes any scraper polite.
#[derive(Debug, Parser)]
#[command(name = "courtesy", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the proxy (the default when no command is given).
    Run(RunArgs),
    /// Validate a config file and print the policy each host rule resolves to:
    /// `courtesy check FILE` or `courtesy check --config FILE`.
    Check {
        /// The config file to check [default: --config, else config/courtesy.toml if it exists,
        /// else the built-in config].
        file: Option<PathBuf>,
        /// Print which rule, from which file, governs this host (`sec.gov`, `shop.test:8080`;
        /// port 443 unless given) and the policy it gets.
        #[arg(long)]
        host: Option<String>,
    },
    /// Print the host table of a running courtesy (from its admin API).
    Status {
        #[command(flatten)]
        reach: AdminReach,
        /// Print the jobs (who waits, who was served, quotas) instead of the hosts.
        #[arg(long)]
        jobs: bool,
        /// Print one host (`shop.test:443`, or a name) and what it waits for, in words.
        host: Option<String>,
    },
    /// Ask a running courtesy what a GET of URL would get now (from its admin API: /v1/check).
    /// Exit 0 when allowed, 1 otherwise, 2 when courtesy cannot be reached.
    CheckUrl {
        /// The URL to ask about.
        url: String,
        /// Ask as this job [default: none, the anonymous job].
        #[arg(long)]
        job: Option<String>,
        /// The User-Agent the crawler sends (its product token picks the robots.txt group).
        #[arg(long)]
        user_agent: Option<String>,
        /// Decide on what courtesy knows: never fetch an unknown robots.txt.
        #[arg(long)]
        no_fetch: bool,
        #[command(flatten)]
        reach: AdminReach,
        /// Print the raw JSON answer instead of words.
        #[arg(long)]
        json: bool,
    },
    /// Print the shell lines that point a crawler's environment at courtesy:
    /// eval "$(courtesy env)".
    Env {
        /// Config file (for [proxy] listen and state_dir) [default: config/courtesy.toml if it exists].
        #[arg(long, short = 'c')]
        config: Option<PathBuf>,
    },
    /// Print the built-in config (every key at its default, with the presets it includes), to
    /// start a file of your own from: `courtesy config > courtesy.toml`.
    Config,
    /// Print where courtesy's local CA certificate is and how to trust it (creates it if needed).
    Ca {
        /// Config file (for [proxy] state_dir) [default: config/courtesy.toml if it exists].
        #[arg(long, short = 'c')]
        config: Option<PathBuf>,
        /// Replace the CA with a new one (clients must trust the new certificate).
        #[arg(long)]
        regenerate: bool,
    },
    /// Web Bot Auth keys: `keys new FILE` makes one, `keys directory` and `keys card` print what
    /// to publish.
    Keys {
        #[command(subcommand)]
        what: KeysCommand,
    },
}

#[derive(Debug, Subcommand)]
enum KeysCommand {
    /// Write a fresh Ed25519 private key (a JWK, mode 0600) to FILE; never over an existing file.
    New {
        /// Where to write the key.
        file: PathBuf,
    },
    /// Print one agent's key directory (a JWKS of the public keys that sign requests sent under
    /// that signature_agent) to publish at
    /// <signature_agent>/.well-known/http-message-signatures-directory; the config is read as
    /// `run` reads it (--config FILE).
    Directory {
        /// The signature_agent URL whose directory to print [default: the config's only one].
        #[arg(long)]
        agent: Option<String>,
    },
    /// Print one agent's Signature Agent Card (draft-meunier-webbotauth-registry: purpose,
    /// trigger, rate expectations, robots.txt product token, User-Agent, keys) to publish at
    /// <signature_agent>/.well-known/signature-agent-card.
    Card {
        /// The signature_agent URL whose card to print [default: the config's only one].
        #[arg(long)]
        agent: Option<String>,
    },
}

#[derive(Debug, Clone, clap::Args)]
struct RunArgs {
    /// Config file [default: config/courtesy.toml if it exists, else built-in defaults].
    #[arg(long, short = 'c', global = true)]
    config: Option<PathBuf>,
    /// Override [proxy] listen.
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// Override [proxy] admin_listen.
    #[arg(long)]
    admin_listen: Option<std::net::SocketAddr>,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        // `--config` is global, so `check --config FILE` (as a unit's ExecStartPre= writes it)
        // lands in `cli.run.config`.
        Some(Command::Check { file, host }) => {
            load(file.or(cli.run.config).as_deref()).and_then(|config| match host {
                Some(host) => check_host(&config, &host),
                None => check(&config),
            })
        }
        Some(Command::Config) => emit(courtesy::config::BUILT_IN_CONFIG),
        Some(Command::Ca { config, regenerate }) => ca(config.as_deref(), regenerate),
        Some(Command::Keys {
            what: KeysCommand::New { file },
        }) => courtesy::keys::new_key(&file).and_then(|said| emit(&said)),
        Some(Command::Keys {
            what: KeysCommand::Directory { agent },
        }) => load(cli.run.config.as_deref())
            .and_then(|config| courtesy::keys::directory(&config, agent.as_deref()))
            .and_then(|text| emit(&text)),
        Some(Command::Keys {
            what: KeysCommand::Card { agent },
        }) => load(cli.run.config.as_deref())
            .and_then(|config| courtesy::keys::card(&config, agent.as_deref()))
            .and_then(|text| emit(&text)),
        Some(Command::Env { config }) => load(config.as_deref())
            .and_then(|config| courtesy::client_env::shell_lines(&config))
            .and_then(|lines| emit(&lines)),
        Some(Command::Status { reach, jobs, host }) => status(reach, jobs, host.as_deref()),
        Some(Command::CheckUrl {
            url,
            job,
            user_agent,
            no_fetch,
            reach,
            json,
        }) => {
            let question = courtesy::check_url::Question {
                url: &url,
                job: job.as_deref(),
                user_agent: user_agent.as_deref(),
                fetch: !no_fetch,
            };
            return check_url(reach, &question, json);
        }
        Some(Command::Run(args)) => run(args),
        None => run(cli.run),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("courtesy: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn load(path: Option<&Path>) -> anyhow::Result<Config> {
    match path {
        Some(p) => Ok(Config::load(p)?),
        None if Path::new(DEFAULT_CONFIG).exists() => Ok(Config::load(Path::new(DEFAULT_CONFIG))?),
        None => Ok(Config::built_in()?),
    }
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    // Keeps the log writer thread alive until the end of the run, so the last lines are written.
    let _log_guard = init_tracing(args.log_format)?;
    let mut config = load(args.config.as_deref())?;
    if let Some(listen) = args.listen {
        config.proxy.listen = listen;
    }
    if let Some(admin) = args.admin_listen {
        config.proxy.admin_listen = admin;
    }
    config
        .check_listen("--listen / [proxy] listen", config.proxy.listen)
        .map_err(anyhow::Error::msg)?;
    config
        .check_listen(
            "--admin-listen / [proxy] admin_listen",
            config.proxy.admin_listen,
        )
        .map_err(anyhow::Error::msg)?;
    config
        .check_admin_listen(
            "--admin-listen / [proxy] admin_listen",
            config.proxy.admin_listen,
        )
        .map_err(anyhow::Error::msg)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let listeners = Listeners::bind(&config).await?;
        courtesy::run(listeners, config, shutdown_signal()).await
    })
}

/// Completes on SIGINT or SIGTERM.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("cannot watch SIGTERM: {e}");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// Sets up logging to stderr in batches (see `courtesy::log_writer`): a line per response must
/// not cost a system call or a thread wake-up per request. Lines are never dropped.
fn init_tracing(format: LogFormat) -> anyhow::Result<courtesy::FlushGuard> {
    use tracing_subscriber::EnvFilter;
    let (writer, guard) = courtesy::BatchedWriter::start(Box::new(std::io::stderr()))
        .context("cannot start the log writer thread")?;
    // A filter on spans (`[request]`) needs the real request span.
    let filters_spans = std::env::var("RUST_LOG").is_ok_and(|f| f.contains('['));
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(writer.clone());
    match format {
        // Without colours (a file, a pipe, a container's log), the same line written by
        // courtesy's own formatter, which costs a fraction of the default one per request.
        LogFormat::Text if !ansi => {
            builder
                .fmt_fields(courtesy::PlainFields)
                .event_format(courtesy::PlainLine)
                .init();
            if !filters_spans {
                courtesy::carry_requests_in_lines();
                courtesy::write_lines_directly(writer);
            }
        }
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
    Ok(guard)
}

/// How a verb reaches a running courtesy's admin API (`status`, `check-url`): the flags, with the
/// config file and `$COURTESY_ADMIN_TOKEN` behind them.
#[derive(clap::Args, Debug)]
struct AdminReach {
    /// Config file (for [proxy] admin_listen and [admin] token) [default: config/courtesy.toml if it exists].
    #[arg(long, short = 'c')]
    config: Option<PathBuf>,
    /// The admin listener's address [default: [proxy] admin_listen].
    #[arg(long)]
    admin: Option<std::net::SocketAddr>,
    /// Bearer token [default: $COURTESY_ADMIN_TOKEN, else [admin] token].
    #[arg(long)]
    token: Option<String>,
}

impl AdminReach {
    /// The admin listener's address and bearer token: each flag, else (the token) the
    /// environment, else the config file's.
    fn resolve(self) -> anyhow::Result<(std::net::SocketAddr, Option<String>)> {
        let config = load(self.config.as_deref())?;
        let admin = self.admin.unwrap_or(config.proxy.admin_listen);
        let token = self
            .token
            .or_else(|| std::env::var("COURTESY_ADMIN_TOKEN").ok())
            .or(config.admin.token);
        Ok((admin, token))
    }
}

fn status(reach: AdminReach, jobs: bool, host: Option<&str>) -> anyhow::Result<()> {
    use std::io::IsTerminal as _;
    let (admin, token) = reach.resolve()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    if jobs {
        let page = runtime.block_on(courtesy::status::fetch_jobs(admin, token.as_deref()))?;
        return emit(&courtesy::status::render_jobs(&page));
    }
    if let Some(host) = host {
        let view = runtime.block_on(courtesy::status::fetch_host(admin, token.as_deref(), host))?;
        return emit(&courtesy::status::render_host(&view));
    }
    let hosts = runtime.block_on(courtesy::status::fetch_hosts(admin, token.as_deref()))?;
    emit(&courtesy::status::render(
        &hosts,
        std::io::stdout().is_terminal(),
    ))
}

/// `courtesy check-url`: the answer printed (in words, or the JSON object with `json`), and the
/// exit code scripts branch on (0 allowed, 1 otherwise, 2 courtesy not reached).
fn check_url(
    reach: AdminReach,
    question: &courtesy::check_url::Question<'_>,
    json: bool,
) -> ExitCode {
    use courtesy::check_url::Outcome;
    let (admin, token) = match reach.resolve() {
        Ok(found) => found,
        Err(e) => {
            eprintln!("courtesy: {e:#}");
            return ExitCode::from(2);
        }
    };
    let outcome = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => {
            runtime.block_on(courtesy::check_url::ask(admin, token.as_deref(), question))
        }
        Err(e) => Outcome::Unreached(format!("cannot start the async runtime: {e}")),
    };
    let printed = match &outcome {
        Outcome::Answer(answer) if json => emit(&format!("{answer:#}\n")),
        Outcome::Answer(answer) => emit(&courtesy::check_url::render(answer)),
        Outcome::Refused(status, why) => {
            eprintln!("courtesy: the check was refused ({status}): {why}");
            Ok(())
        }
        Outcome::Unreached(why) => {
            eprintln!("courtesy: {why}");
            Ok(())
        }
    };
    if let Err(e) = printed {
        eprintln!("courtesy: {e:#}");
    }
    ExitCode::from(outcome.exit_code())
}

fn ca(config: Option<&Path>, regenerate: bool) -> anyhow::Result<()> {
    let config = load(config)?;
    let dir = &config.proxy.state_dir;
    let ca = if regenerate {
        courtesy::LocalCa::regenerate(dir)?
    } else {
        courtesy::LocalCa::load_or_create(dir)?
    };
    let path = ca.cert_path();
    let p = path.display();
    let admin = config.proxy.admin_listen;
    println!("courtesy's CA certificate: {p}");
    println!(
        "(also served by a running courtesy at http://{admin}/ca.pem; the key never leaves {})",
        dir.display()
    );
    if regenerate {
        println!(
            "A new CA was created: clients that trusted the old one must trust this one instead."
        );
    }
    println!(
        r#"
courtesy decrypts https traffic to pace each request, so clients must trust this CA.
Trust it in the crawler's environment rather than system-wide where you can.
`eval "$(courtesy env)"` sets the proxy and CA variables for curl, requests, httpx and Node at once;
one by one:

  curl              curl --cacert {p} -x http://{proxy} https://example.com/
                    (or: export CURL_CA_BUNDLE={p})
  Python requests   export REQUESTS_CA_BUNDLE={p}
  httpx             export SSL_CERT_FILE={p}        (or httpx.Client(verify="{p}"))
  aiohttp           ctx = ssl.create_default_context(cafile="{p}")
                    aiohttp.TCPConnector(ssl=ctx); session.get(url, proxy="http://{proxy}")
  Scrapy            verifies no certificates by default: set HTTPS_PROXY and nothing else
  Node.js           export NODE_EXTRA_CA_CERTS={p}
  Playwright/Chromium (Debian: apt-get install libnss3-tools for certutil)
{nss}
                    then launch with --proxy-server=http://{proxy}
                    (Playwright: proxy: {{ server: "http://{proxy}" }})
  System store (Debian/Ubuntu)
                    sudo cp {p} /usr/local/share/ca-certificates/courtesy.crt
                    sudo update-ca-certificates

REQUESTS_CA_BUNDLE and SSL_CERT_FILE replace the default roots. That is enough while every https
host is intercepted; if some use https = "tunnel", trust both:
  cat "$(python3 -m certifi)" {p} > courtesy-bundle.pem"#,
        proxy = config.proxy.listen,
        nss = courtesy::client_env::nss_trust_commands(&path)
            .lines()
            .map(|l| format!("                    {l}"))
            .collect::<Vec<_>>()
            .join("\n"),
    );
    Ok(())
}

/// `courtesy check FILE`: the file is valid; its warnings, then what it sets, section by
/// section (never a password, a token or a key: only their public parts).
fn check(config: &Config) -> anyhow::Result<()> {
    let mut out = String::new();
    outln!(out, "{}: ok", config.source);
    for warning in config.warnings() {
        outln!(out, "warning: {warning}");
    }
    check_proxy_and_shared(&mut out, config);
    outln!(out, "{:<32} {}", "[defaults]", describe(&config.defaults));
    for rule in &config.hosts {
        outln!(
            out,
            "{:<32} {}",
            rule_label(config, rule),
            describe(&rule.policy)
        );
    }
    if !config.jobs.is_empty() {
        use courtesy::config::ConfigWord as _;
        outln!(
            out,
            "[proxy] client_auth={}",
            config.proxy.client_auth.word()
        );
    }
    check_signing(&mut out, config);
    for job in &config.jobs {
        outln!(out, "{:<32} {}", format!("job {}", job.name), job_line(job));
    }
    emit(&out)
}

/// `check`'s `[proxy]` and `[shared]` lines.
fn check_proxy_and_shared(out: &mut String, config: &Config) {
    let p = &config.proxy;
    outln!(out,
        "[proxy] listen={} admin_listen={} max_in_flight={} connect_timeout={}s response_timeout={}s",
        p.listen,
        p.admin_listen,
        p.max_in_flight,
        p.connect_timeout.as_secs_f64(),
        p.response_timeout.as_secs_f64()
    );
    // Parents are shown without their passwords (`user:***`).
    outln!(out, "[proxy] upstream_proxy={}", p.upstream_proxy);
    if let Some(s) = &config.shared {
        outln!(
            out,
            "[shared] redis_url={} key_prefix={} instances={} timeout={}ms lease={}s",
            s.redacted_url(),
            s.key_prefix,
            s.instances
                .map_or("most seen".to_string(), |n| n.to_string()),
            s.timeout.as_millis(),
            s.lease.as_secs_f64()
        );
    }
}

/// How `check` names a host rule: its number and pattern, and the file it comes from when that
/// is not the checked file (a built-in preset whole, another file by its name).
fn rule_label(config: &Config, rule: &courtesy::config::HostRule) -> String {
    if *rule.source == *config.source {
        format!("host rule {} ({})", rule.number, rule.pattern)
    } else if rule.source.starts_with('<') {
        // A built-in preset: `<built-in presets/published.toml>` whole.
        format!(
            "host rule {} of {} ({})",
            rule.number, rule.source, rule.pattern
        )
    } else {
        let file = std::path::Path::new(&*rule.source)
            .file_name()
            .map_or(rule.source.to_string(), |f| {
                f.to_string_lossy().into_owned()
            });
        format!("host rule {} of {file} ({})", rule.number, rule.pattern)
    }
}

/// `check`'s `[signing]` lines: the key's id, the mode, and each agent with its keys.
fn check_signing(out: &mut String, config: &Config) {
    let signing = &config.signing;
    if let (Some(path), Some(key)) = (&signing.key_file, &signing.key) {
        // The key's id (its thumbprint) is public: the directory lists it; the key never shows.
        outln!(
            out,
            "[signing] key_file={} keyid={}",
            path.display(),
            key.thumbprint()
        );
    }
    if !config.signing_keys().is_empty() {
        outln!(
            out,
            "[signing] mode={} signature_agent={} expires_seconds={}",
            courtesy::config::ConfigWord::word(signing.mode_in_force()),
            signing
                .signature_agent
                .as_deref()
                .unwrap_or("(the jobs' own)"),
            signing.expires_seconds
        );
    }
    for agent in config.agents() {
        // One directory and one card per agent, each with only the keys that sign under it.
        let ids: Vec<&str> = agent.keys.iter().map(|k| k.thumbprint()).collect();
        outln!(
            out,
            "[signing] agent {} keyids={} (its directory and card answer Host: {})",
            agent.url,
            ids.join(","),
            agent.authority()
        );
    }
}

/// What `check` says of a job: weight, priority, how its token is kept (never the token), its
/// quota, User-Agent and signing.
fn job_line(job: &courtesy::config::JobSettings) -> String {
    let token = match (&job.token, &job.token_sha256) {
        (Some(_), _) => "token",
        (None, Some(_)) => "token_sha256",
        (None, None) => "no token",
    };
    let mut line = format!(
        "weight={} priority={} {token}",
        job.weight,
        courtesy::config::ConfigWord::word(job.priority)
    );
    if let Some(max) = job.max_requests {
        line.push_str(&format!(" quota={max}/{}s", job.per_seconds.as_secs_f64()));
    }
    if let Some(agent) = &job.user_agent {
        line.push_str(&format!(" user_agent={agent:?}"));
    }
    if let Some(key) = &job.signing_key {
        line.push_str(&format!(" keyid={}", key.thumbprint()));
    }
    if let Some(agent) = &job.signature_agent {
        line.push_str(&format!(" signature_agent={agent}"));
    }
    line
}

/// `courtesy check FILE --host NAME[:PORT]`: the rule that governs the host, its file, and the
/// policy it gets.
fn check_host(config: &Config, host: &str) -> anyhow::Result<()> {
    // The name a request's target is matched by is canonical: so is the one checked here, so
    // that `Slow.Test.:8080` meets the rule `slow.test:8080` as the proxy's requests do.
    let (name, port) = courtesy::host_name::split(host)?;
    let port = port.unwrap_or(443);
    let shown = courtesy::host_key(&name, port);
    let mut out = String::new();
    match config.rule_for(&name, port) {
        Some(rule) => outln!(
            out,
            "{shown}: host rule {} ({}) of {}",
            rule.number,
            rule.pattern,
            rule.source
        ),
        None => outln!(
            out,
            "{shown}: [defaults] of {} (no rule matches)",
            config.source
        ),
    }
    let policy = config.policy_for(&name, port);
    outln!(out, "{}", describe(&policy));
    if let Some(why) = config.unsigned_tunnel(&policy) {
        outln!(out, "warning: {why}");
    }
    emit(&out)
}

fn describe(p: &courtesy::config::HostPolicy) -> String {
    let mut out = format!(
        "rate={}/s burst={} concurrency={} jitter={} max_queue={} max_wait={}s on_cooldown={}",
        p.pacing.rate,
        p.pacing.burst,
        p.pacing.concurrency,
        p.pacing.jitter,
        p.pacing.max_queue,
        p.pacing.max_wait.as_secs_f64(),
        p.cooldown.on_cooldown
    );
    if p.adaptive.enabled {
        out.push_str(&format!(
            " adaptive=[{}..{}]/s controller={} (-x{} +{} slow>{}ms x{})",
            p.adaptive.min_rate,
            p.adaptive.max_rate,
            p.adaptive.controller,
            p.adaptive.decrease_factor,
            p.adaptive.increase_step,
            p.adaptive.slow_response.as_millis(),
            p.adaptive.slow_factor
        ));
    }
    if p.cooldown.retry_idempotent > 0 {
        out.push_str(&format!(
            " retry_idempotent={}",
            p.cooldown.retry_idempotent
        ));
    }
    if p.scope.key != courtesy::config::KeyMode::Host {
        out.push_str(&format!(" key={}", p.scope.key));
    }
    if !p.scope.enforce {
        out.push_str(" enforce=false (report-only)");
    }
    if let Some(agent) = &p.identity.user_agent {
        out.push_str(&format!(" user_agent={agent:?}"));
    }
    if let Some(from) = &p.identity.from {
        out.push_str(&format!(" from={from:?}"));
    }
    if !p.identity.sign {
        out.push_str(" sign=false");
    }
    if p.forward.upstream != courtesy::config::Route::Direct {
        out.push_str(&format!(" upstream_proxy={}", p.forward.upstream));
    }
    out
}

/// Appends a line to a `String` (what `check` prints, written at once by [`emit`]).
macro_rules! outln {
    ($out:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($out, $($arg)*);
    }};
}
use outln;

/// Writes `text` to stdout; a reader that went away (`courtesy check F | head`) is not an
/// error, and never a panic.
fn emit(text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow::Error::new(e).context("cannot write to stdout"))
        }
        _ => Ok(()),
    }
}
