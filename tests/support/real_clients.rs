//! Running real client programs (curl, Python, Node) against courtesy, with nothing from the
//! machine's own proxy settings leaking in.

/// A command for a real client program with the machine's proxy variables cleared (so neither
/// NO_PROXY nor an inherited HTTP_PROXY can bypass or redirect what the test sets), killed when
/// dropped.
pub fn client_command(program: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    for var in [
        "NO_PROXY",
        "no_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        cmd.env_remove(var);
    }
    cmd.kill_on_drop(true);
    cmd
}

/// Runs a client command (see [`client_command`]) to its end and returns its stdout; fails the
/// test, with both outputs, unless it exited successfully.
pub async fn run_to_success(cmd: &mut tokio::process::Command) -> String {
    let program = cmd.as_std().get_program().to_string_lossy().into_owned();
    let out = cmd.output().await.unwrap_or_else(|e| {
        panic!("cannot run {program} ({e}): `scripts/test` installs every client the tests use")
    });
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{program} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Runs a client command (see [`client_command`]) with `input` on its standard input, to its end
/// within `limit`, and returns its stdout; fails the test, with both outputs, unless it exited
/// successfully in time.
pub async fn run_with_input(
    cmd: &mut tokio::process::Command,
    input: &[u8],
    limit: std::time::Duration,
) -> String {
    use tokio::io::AsyncWriteExt as _;
    let program = cmd.as_std().get_program().to_string_lossy().into_owned();
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| {
        panic!("cannot run {program} ({e}): `scripts/test` installs every client the tests use")
    });
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input).await.unwrap();
    drop(stdin);
    let out = tokio::time::timeout(limit, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{program} ends within {limit:?}"))
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{program} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Fetches each of `urls` with Node's undici `ProxyAgent` (default options) through the proxy at
/// `proxy`, trusting `ca`; returns one line per URL: `<status> <body length>`.
pub async fn undici_through(
    proxy: std::net::SocketAddr,
    ca: &std::path::Path,
    urls: &[String],
) -> Vec<String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/node/undici_proxy.mjs");
    let stdout = run_to_success(
        client_command("node")
            .env("NODE_EXTRA_CA_CERTS", ca)
            .arg(script)
            .arg(format!("http://{proxy}"))
            .args(urls),
    )
    .await;
    stdout.lines().map(str::to_string).collect()
}

/// Makes a browser profile under `home` (its `$HOME`) trust courtesy's CA `ca`, with the NSS
/// commands `courtesy trust --print` gives users (`client_env::nss_trust_commands`).
pub async fn trust_in_nss_home(home: &std::path::Path, ca: &std::path::Path) {
    let commands = courtesy::client_env::nss_trust_commands(ca);
    run_to_success(
        client_command("sh")
            .env("HOME", home)
            .args(["-c", &format!("set -e\n{commands}")]),
    )
    .await;
}
