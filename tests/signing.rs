//! Web Bot Auth end to end (issue 37, docs/identity.md): every request courtesy forwards is
//! signed at send time, and the signatures are checked by an implementation courtesy does not
//! use (PyPI's `http-message-signatures` and `cryptography`, `tests/python/verify_web_bot_auth.py`)
//! against the JWKS that `courtesy keys directory` prints. The origins record each request with
//! the moment it arrived, so that a signature is judged valid at its arrival: plain HTTP, a
//! redirect hop, intercepted HTTPS, a job's own key, `sign = false`, `on_challenge`, a long
//! queue wait, and the signed directory on the admin listener.

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use http::{HeaderMap, Request, Response};
use serde_json::{json, Value};
use support::*;
use tokio::io::AsyncWriteExt as _;

/// What reached an origin: a message for the verifier, with its arrival time.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Value>>>);

impl Seen {
    fn record(&self, scheme: &str, method: &str, path: &str, headers: &HeaderMap) {
        let host = headers
            .get("host")
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        self.0.lock().unwrap().push(json!({
            "kind": "request",
            "method": method,
            "url": format!("{scheme}://{host}{path}"),
            "headers": pairs(headers),
            "at": unix_now(),
        }));
    }

    fn all(&self) -> Vec<Value> {
        self.0.lock().unwrap().clone()
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn pairs(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or_default().to_string()))
        .collect()
}

/// An origin on `ip` that records every request: `/start` redirects to `/next`, `/guarded`
/// refuses an unsigned request with 403 and `Accept-Signature`, everything else is 200.
async fn recording_origin(ip: &str, seen: &Seen) -> Origin {
    let seen = seen.clone();
    Origin::start(ip, move |req| {
        let seen = seen.clone();
        async move { answer(&seen, "http", req) }
    })
    .await
}

fn answer<B>(seen: &Seen, scheme: &str, req: Request<B>) -> Response<TestBody> {
    let path = req.uri().path().to_string();
    seen.record(scheme, req.method().as_str(), &path, req.headers());
    match path.as_str() {
        "/start" => Response::builder()
            .status(302)
            .header("location", "/next")
            .body(full(""))
            .unwrap(),
        "/guarded" if !req.headers().contains_key("signature-input") => Response::builder()
            .status(403)
            .header(
                "accept-signature",
                "sig1=(\"@authority\" \"signature-agent\";key=\"sig1\");tag=\"web-bot-auth\"",
            )
            .body(full("sign, please"))
            .unwrap(),
        _ => Response::new(full("ok")),
    }
}

/// `courtesy` (the built binary) with `args`: its stdout, after asserting it succeeded.
fn courtesy_cli(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_courtesy"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "courtesy {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A fresh key in `dir`, made by `courtesy keys new`.
fn new_key(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    courtesy_cli(&["keys", "new", path.to_str().unwrap()]);
    path
}

/// The thumbprint (`keyid`) of the first key of a directory, as the verifier script computes
/// thumbprints: asked of it, so that the test takes none of courtesy's word for it.
fn keyids(directory: &Value) -> Vec<String> {
    directory["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|jwk| {
            let canonical = format!(
                r#"{{"crv":"Ed25519","kty":"OKP","x":"{}"}}"#,
                jwk["x"].as_str().unwrap()
            );
            let digest = sha256_by_coreutils(canonical.as_bytes());
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest)
        })
        .collect()
}

/// SHA-256 by `sha256sum`, so that the thumbprint is not computed by the code under test.
fn sha256_by_coreutils(data: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut child = std::process::Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(data).unwrap();
    let out = child.wait_with_output().unwrap();
    let hex = String::from_utf8(out.stdout).unwrap();
    (0..32)
        .map(|i| u8::from_str_radix(&hex[i * 2..i * 2 + 2], 16).unwrap())
        .collect()
}

/// The verifier's verdict on each of `messages`, against `directory` (the JWKS).
async fn verify(directory: &Value, messages: &[Value]) -> Vec<Value> {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/verify_web_bot_auth.py"
    );
    let mut child = tokio::process::Command::new("python3")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (scripts/test installs http-message-signatures and cryptography)");
    let input = json!({ "jwks": directory, "messages": messages }).to_string();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).await.unwrap();
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("the verifier answers")
        .unwrap();
    assert!(
        out.status.success(),
        "the verifier failed (pip install http-message-signatures cryptography): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let verdicts: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(verdicts.len(), messages.len());
    verdicts
}

/// Asserts that `verdict` is a valid Web Bot Auth signature by `keyid` for agent `agent`: the
/// tag, alg, the window, the covered components.
fn assert_signed(verdict: &Value, keyid: &str, agent: &str) {
    assert_eq!(verdict["ok"], true, "{verdict}");
    let sigs = verdict["signatures"].as_array().unwrap();
    assert_eq!(sigs.len(), 1, "one signature: {verdict}");
    let sig = &sigs[0];
    assert_eq!(sig["keyid"], keyid, "{verdict}");
    assert_eq!(sig["tag"], "web-bot-auth");
    assert_eq!(sig["alg"], "ed25519");
    let components: Vec<&str> = sig["components"]
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_else(|| {
            sig["components"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_str)
                .collect()
        });
    assert!(components.contains(&"\"@authority\""), "{verdict}");
    assert!(
        components.contains(&"\"signature-agent\";key=\"sig1\""),
        "{verdict}"
    );
    assert!(sig["nonce"].as_str().is_some_and(|n| n.len() >= 16));
    assert_eq!(verdict["agent"], format!("sig1=\"{agent}\""));
}

/// A directory for a test: its key file(s) and config file.
struct Setup {
    dir: PathBuf,
    key: PathBuf,
}

impl Setup {
    fn new(tag: &str) -> Setup {
        let dir = temp_dir(tag);
        let key = new_key(&dir, "bot.jwk");
        Setup { dir, key }
    }

    /// Writes `courtesy.toml` with `[signing]` (the key, `extra` lines) and `rest`.
    fn config(&self, signing: &str, rest: &str) -> PathBuf {
        let path = self.dir.join("courtesy.toml");
        std::fs::write(
            &path,
            format!(
                "[signing]\nkey_file = \"{}\"\nsignature_agent = \"https://bot.example\"\n\
                 {signing}\n[defaults]\nrate = 50\nburst = 10\n{rest}",
                self.key.display()
            ),
        )
        .unwrap();
        path
    }

    /// The directory `courtesy keys directory --config` prints for `config`.
    fn directory(&self, config: &Path) -> Value {
        let text = courtesy_cli(&["keys", "directory", "--config", config.to_str().unwrap()]);
        serde_json::from_str(&text).unwrap()
    }

    async fn courtesy(&self, config: &Path) -> Courtesy {
        Courtesy::start_file(config, &self.dir.join("state")).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_requests_and_each_redirect_hop_are_signed_afresh_and_verify() {
    let setup = Setup::new("sign-plain");
    let config = setup.config("", "");
    let directory = setup.directory(&config);
    let keyid = keyids(&directory).remove(0);
    let seen = Seen::default();
    let origin = recording_origin("127.0.0.1", &seen).await;
    let courtesy = setup.courtesy(&config).await;
    let client = courtesy.client();

    // A client's own signature fields are replaced by courtesy's.
    let forged = Request::get(origin.url("/start"))
        .header("signature", "sig1=:AAAA:")
        .header(
            "signature-input",
            "sig1=(\"@authority\");created=1;keyid=\"x\"",
        )
        .header("signature-agent", "sig1=\"https://forged.example\"")
        .body(empty())
        .unwrap();
    let first = client.send(forged).await;
    assert_eq!(first.status, 302);
    // The client follows the redirect: a new request, its own signature.
    let second = client.get(&origin.url(&first.header("location"))).await;
    assert_eq!(second.status, 200);

    let arrived = seen.all();
    assert_eq!(arrived.len(), 2);
    let verdicts = verify(&directory, &arrived).await;
    for verdict in &verdicts {
        assert_signed(verdict, &keyid, "https://bot.example");
    }
    let nonce = |v: &Value| v["signatures"][0]["nonce"].as_str().unwrap().to_string();
    assert_ne!(
        nonce(&verdicts[0]),
        nonce(&verdicts[1]),
        "a fresh nonce per hop"
    );

    // Tampering shows: the same signature under another authority does not verify.
    let mut moved = arrived[1].clone();
    moved["url"] = json!(origin.url("/next").replace("127.0.0.1", "localhost"));
    moved["headers"] = json!(arrived[1]["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|pair| {
            if pair[0] == "host" {
                json!(["host", format!("localhost:{}", origin.addr.port())])
            } else {
                pair.clone()
            }
        })
        .collect::<Vec<_>>());
    let tampered = verify(&directory, &[moved]).await;
    assert_eq!(tampered[0]["ok"], false, "{}", tampered[0]);
    assert!(
        tampered[0]["error"]
            .as_str()
            .unwrap()
            .starts_with("InvalidSignature"),
        "{}",
        tampered[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_inside_intercepted_https_are_signed() {
    let setup = Setup::new("sign-https");
    let test_ca = TestCa::new();
    let seen = Seen::default();
    let recorded = seen.clone();
    let origin = Origin::start_tls(
        "127.0.0.1",
        test_ca.server_config(&["localhost", "127.0.0.1"]),
        move |req| {
            let seen = recorded.clone();
            async move { answer(&seen, "https", req) }
        },
    )
    .await;
    let ca = test_ca.write(&setup.dir, "origin-ca.pem");
    let config = setup.config(
        "",
        &format!(
            "[proxy]\nupstream_ca = \"{}\"\nconnect_ports = [{}]\n",
            ca.display(),
            origin.addr.port()
        ),
    );
    let directory = setup.directory(&config);
    let courtesy = setup.courtesy(&config).await;
    let client = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(format!("http://{}", courtesy.addr)).unwrap())
        .tls_backend_preconfigured(client_tls_trusting(&courtesy.ca_path()))
        .build()
        .unwrap();
    for _ in 0..2 {
        let url = format!("https://{}/inside", origin.addr);
        let got = client.get(url).send().await.unwrap();
        assert_eq!(got.status(), 200);
    }
    let arrived = seen.all();
    assert_eq!(arrived.len(), 2);
    assert!(arrived[0]["url"].as_str().unwrap().starts_with("https://"));
    let keyid = keyids(&directory).remove(0);
    for verdict in verify(&directory, &arrived).await {
        assert_signed(&verdict, &keyid, "https://bot.example");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_signs_with_its_own_key_and_a_sign_false_host_gets_no_signature() {
    let setup = Setup::new("sign-jobs");
    let job_key = new_key(&setup.dir, "crawl-b.jwk");
    let seen = Seen::default();
    let origin = recording_origin("127.0.0.1", &seen).await;
    let unsigned = recording_origin("127.0.0.2", &seen).await;
    let config = setup.config(
        "",
        &format!(
            "[[host]]\nmatch = \"127.0.0.2\"\nsign = false\n\
             [[job]]\nname = \"crawl-a\"\n\
             [[job]]\nname = \"crawl-b\"\nsigning_key_file = \"{}\"\n\
             signature_agent = \"https://b.example\"\n",
            job_key.display()
        ),
    );
    let directory = setup.directory(&config);
    let ids = keyids(&directory);
    assert_eq!(ids.len(), 2, "[signing]'s key and crawl-b's: {directory}");
    let courtesy = setup.courtesy(&config).await;
    let client = courtesy.client();
    let as_job = |url: String, job: &str| {
        let pair = base64::engine::general_purpose::STANDARD.encode(format!("{job}:"));
        Request::get(url)
            .header("proxy-authorization", format!("Basic {pair}"))
            .body(empty())
            .unwrap()
    };
    for (url, job) in [
        (origin.url("/a"), "crawl-a"),
        (origin.url("/b"), "crawl-b"),
        (unsigned.url("/c"), "crawl-b"),
    ] {
        assert_eq!(client.send(as_job(url, job)).await.status, 200);
    }

    let arrived = seen.all();
    assert_eq!(arrived.len(), 3);
    let verdicts = verify(&directory, &arrived[..2]).await;
    assert_signed(&verdicts[0], &ids[0], "https://bot.example");
    assert_signed(&verdicts[1], &ids[1], "https://b.example");
    let headers = arrived[2]["headers"].to_string();
    for name in [
        "\"signature\"",
        "\"signature-input\"",
        "\"signature-agent\"",
    ] {
        assert!(!headers.contains(name), "sign = false: {headers}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_challenge_signs_after_a_403_with_accept_signature_and_resends_once() {
    let setup = Setup::new("sign-challenge");
    let config = setup.config(
        "mode = \"on_challenge\"",
        "[[host]]\nmatch = \"127.0.0.3\"\nenforce = false\n",
    );
    let directory = setup.directory(&config);
    let keyid = keyids(&directory).remove(0);
    let seen = Seen::default();
    let origin = recording_origin("127.0.0.1", &seen).await;
    let courtesy = setup.courtesy(&config).await;
    let client = courtesy.client();

    // Unsigned until asked: the refusal is answered by the signed resend's 200.
    let got = client.get(&origin.url("/guarded")).await;
    assert_eq!(got.status, 200, "{:?}", got.body);
    let arrived = seen.all();
    assert_eq!(
        arrived.len(),
        2,
        "the refused request, then its signed resend"
    );
    assert!(!arrived[0]["headers"]
        .to_string()
        .contains("signature-input"));
    // From then on, the host's requests are signed from the first send.
    assert_eq!(client.get(&origin.url("/guarded")).await.status, 200);
    assert_eq!(client.get(&origin.url("/other")).await.status, 200);
    let arrived = seen.all();
    assert_eq!(arrived.len(), 4);
    for verdict in verify(&directory, &arrived[1..]).await {
        assert_signed(&verdict, &keyid, "https://bot.example");
    }

    // A request with a body cannot be sent again: the refusal reaches the client as it is.
    let other = recording_origin("127.0.0.2", &seen).await;
    let post = Request::post(other.url("/guarded"))
        .body(full("payload"))
        .unwrap();
    let refused = client.send(post).await;
    assert_eq!(refused.status, 403);
    assert_eq!(seen.all().len(), 5);
    // But the host is remembered: its next request goes signed.
    assert_eq!(client.get(&other.url("/guarded")).await.status, 200);
    assert_eq!(seen.all().len(), 6);

    // A report-only host gets no resend of courtesy's own: the client has the refusal, and the
    // host's next request goes signed.
    let watched = recording_origin("127.0.0.3", &seen).await;
    assert_eq!(client.get(&watched.url("/guarded")).await.status, 403);
    assert_eq!(seen.all().len(), 7);
    assert_eq!(client.get(&watched.url("/guarded")).await.status, 200);
    assert_eq!(seen.all().len(), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_held_longer_than_a_signature_lasts_arrives_with_a_fresh_one() {
    let setup = Setup::new("sign-queue");
    let path = setup.dir.join("courtesy.toml");
    std::fs::write(
        &path,
        format!(
            "[signing]\nkey_file = \"{}\"\nsignature_agent = \"https://bot.example\"\n\
             expires_seconds = 1\n[defaults]\nrate = 0.4\nburst = 1\nconcurrency = 1\n\
             max_wait_seconds = 60\n",
            setup.key.display()
        ),
    )
    .unwrap();
    let directory = setup.directory(&path);
    let keyid = keyids(&directory).remove(0);
    let seen = Seen::default();
    let origin = recording_origin("127.0.0.1", &seen).await;
    let courtesy = setup.courtesy(&path).await;
    let client = courtesy.client();
    let started = unix_now();
    let waiting = client.spawn_gets((0..3).map(|i| origin.url(&format!("/q{i}"))));
    for task in waiting {
        assert_eq!(task.await.unwrap().status, 200);
    }
    let arrived = seen.all();
    assert_eq!(arrived.len(), 3);
    let last = arrived
        .iter()
        .map(|m| m["at"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert!(
        last - started >= 4.0,
        "the last one waited its turn: {}",
        last - started
    );
    // Each is valid at its arrival, though it waited far longer than a second: signed as it
    // left, not as it came in.
    for verdict in verify(&directory, &arrived).await {
        assert_signed(&verdict, &keyid, "https://bot.example");
        let sig = &verdict["signatures"][0];
        assert_eq!(
            sig["expires"].as_u64().unwrap(),
            sig["created"].as_u64().unwrap() + 1
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_directory_is_the_printed_one_signed_by_each_key() {
    let setup = Setup::new("sign-directory");
    let job_key = new_key(&setup.dir, "crawl-b.jwk");
    let config = setup.config(
        "",
        &format!(
            "[[job]]\nname = \"crawl-b\"\nsigning_key_file = \"{}\"\n",
            job_key.display()
        ),
    );
    let printed = courtesy_cli(&["keys", "directory", "--config", config.to_str().unwrap()]);
    let directory: Value = serde_json::from_str(&printed).unwrap();
    assert!(!printed.contains("\"d\""), "public keys only: {printed}");
    let courtesy = setup.courtesy(&config).await;
    let url = courtesy.admin_url("/.well-known/http-message-signatures-directory");
    let response = direct_client()
        .request(Request::get(&url).body(empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    assert_eq!(
        headers["content-type"],
        "application/http-message-signatures-directory+json"
    );
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    assert_eq!(String::from_utf8_lossy(&body), printed);

    let message = json!({
        "kind": "directory",
        "method": "GET",
        "url": url,
        "headers": pairs(&headers),
        "request_headers": [["host", courtesy.admin.to_string()]],
        "at": unix_now(),
    });
    let verdict = &verify(&directory, &[message]).await[0];
    assert_eq!(verdict["ok"], true, "{verdict}");
    let signed_by: Vec<&str> = verdict["signatures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["keyid"].as_str().unwrap())
        .collect();
    let ids = keyids(&directory);
    assert_eq!(signed_by.len(), 2, "one signature per key: {verdict}");
    assert!(
        ids.iter().all(|id| signed_by.contains(&id.as_str())),
        "{verdict}"
    );
}

#[test]
fn check_says_a_tunnelled_host_cannot_be_signed() {
    let setup = Setup::new("sign-check");
    let config = setup.config(
        "",
        "[[host]]\nmatch = \"*.tunnelled.test\"\nhttps = \"tunnel\"\n\
         [[host]]\nmatch = \"quiet.test\"\nhttps = \"tunnel\"\nsign = false\n",
    );
    let path = config.to_str().unwrap();
    let out = courtesy_cli(&["check", path]);
    assert!(
        out.contains("host rule 1 (*.tunnelled.test): https = \"tunnel\": requests inside a blind tunnel cannot be signed"),
        "{out}"
    );
    assert!(!out.contains("host rule 2 (quiet.test): https"), "{out}");
    let key = std::fs::read_to_string(&setup.key).unwrap();
    let d: Value = serde_json::from_str(&key).unwrap();
    assert!(
        !out.contains(d["d"].as_str().unwrap()),
        "the key never shows"
    );
    let host = courtesy_cli(&["check", path, "--host", "a.tunnelled.test"]);
    assert!(host.contains("cannot be signed"), "{host}");
    let quiet = courtesy_cli(&["check", path, "--host", "quiet.test"]);
    assert!(
        !quiet.contains("cannot be signed") && quiet.contains("sign=false"),
        "{quiet}"
    );
}

/// `courtesy check` on a config: its exit status and what it said (stdout, then stderr).
fn check(path: &Path) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_courtesy"))
        .args(["check", path.to_str().unwrap()])
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

#[test]
fn bad_signing_settings_fail_with_file_line_and_key_and_never_the_key() {
    let dir = temp_dir("sign-bad-config");
    let not_ed25519 = dir.join("rsa.jwk");
    std::fs::write(&not_ed25519, r#"{"kty":"RSA","d":"TOP-SECRET-PART"}"#).unwrap();
    let garbled = dir.join("garbled.jwk");
    std::fs::write(&garbled, "TOP-SECRET-PART and more").unwrap();
    let path = dir.join("courtesy.toml");
    let name = path.display().to_string();
    std::fs::write(
        &path,
        format!(
            "[signing]\nkey_file = \"{}\"\nsignature_agent = \"http://plain.example\"\n\
             mode = \"sometimes\"\nexpires_seconds = 0\n\
             [[job]]\nname = \"crawl-a\"\nsigning_key_file = \"{}\"\n\
             [[job]]\nname = \"crawl-b\"\nsigning_key_file = \"{}\"\n",
            not_ed25519.display(),
            garbled.display(),
            dir.join("missing.jwk").display()
        ),
    )
    .unwrap();
    let (ok, said) = check(&path);
    assert!(!ok, "{said}");
    for expected in [
        format!("{name}:2: [signing] key_file: {}: not an Ed25519 key", not_ed25519.display()),
        format!("{name}:3: [signing] signature_agent must be an https:// URL"),
        format!("{name}:4: [signing]: mode must be one of \"always\", \"on_challenge\", \"off\", got \"sometimes\""),
        format!("{name}:5: [signing]: expires_seconds must be between 1 and 300, got 0"),
        format!("{name}:8: job 1 (crawl-a): signing_key_file: {}: not a JSON Web Key", garbled.display()),
        format!("{name}:11: job 2 (crawl-b): signing_key_file: cannot read {}", dir.join("missing.jwk").display()),
    ] {
        assert!(said.contains(&expected), "missing {expected:?} in:\n{said}");
    }
    assert!(
        !said.contains("TOP-SECRET"),
        "a key file's content is never shown:\n{said}"
    );

    // A key without the URL of its directory cannot sign.
    std::fs::write(
        &path,
        format!(
            "[signing]\nkey_file = \"{}\"\n",
            new_key(&dir, "k.jwk").display()
        ),
    )
    .unwrap();
    let (ok, said) = check(&path);
    assert!(
        !ok && said.contains(&format!(
            "{name}:2: [signing] key_file needs signature_agent"
        )),
        "{said}"
    );
}

#[test]
fn keys_new_writes_a_private_file_and_never_overwrites_one() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = temp_dir("sign-keys-new");
    let path = new_key(&dir, "bot.jwk");
    let written = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let jwk: Value = serde_json::from_str(&written).unwrap();
    assert_eq!(
        (jwk["kty"].as_str(), jwk["crv"].as_str()),
        (Some("OKP"), Some("Ed25519"))
    );
    assert!(jwk["d"].as_str().is_some_and(|d| d.len() == 43) && jwk["x"].is_string());
    let again = std::process::Command::new(env!("CARGO_BIN_EXE_courtesy"))
        .args(["keys", "new", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("exists"));
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        written,
        "untouched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_signs_with_the_new_key_and_robots_txt_is_signed_too() {
    let setup = Setup::new("sign-reload");
    let config = setup.config("", "obey_robots = true\n");
    let old = setup.directory(&config);
    let seen = Seen::default();
    let origin = recording_origin("127.0.0.1", &seen).await;
    let courtesy = setup.courtesy(&config).await;
    let client = courtesy.client();
    assert_eq!(client.get(&origin.url("/before")).await.status, 200);
    let arrived = seen.all();
    let paths: Vec<&str> = arrived.iter().map(|m| m["url"].as_str().unwrap()).collect();
    assert!(
        paths[0].ends_with("/robots.txt") && paths[1].ends_with("/before"),
        "{paths:?}"
    );
    let old_id = keyids(&old).remove(0);
    for verdict in verify(&old, &arrived).await {
        assert_signed(&verdict, &old_id, "https://bot.example");
    }

    // The file now names another key: a reload reads it, and every request after is signed
    // with it (and verifies against the new directory only).
    let next_key = new_key(&setup.dir, "next.jwk");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        &setup.key.display().to_string(),
        &next_key.display().to_string(),
    );
    std::fs::write(&config, text).unwrap();
    let (status, said) = admin_call("POST", &courtesy.admin_url("/reload"), None, "").await;
    assert_eq!(status, 200, "{said}");
    let new = setup.directory(&config);
    let new_id = keyids(&new).remove(0);
    assert_ne!(new_id, old_id);
    assert_eq!(client.get(&origin.url("/after")).await.status, 200);
    let after = seen.all().split_off(2);
    assert_eq!(after.len(), 1);
    assert_signed(
        &verify(&new, &after).await[0],
        &new_id,
        "https://bot.example",
    );
    assert_eq!(
        verify(&old, &after).await[0]["ok"],
        false,
        "the old key is gone"
    );
}
