//! Web Bot Auth end to end (issue 37, docs/identity.md): every request courtesy forwards is
//! signed at send time, and the signatures are checked by an implementation courtesy does not
//! use (PyPI's `http-message-signatures` and `cryptography`, `tests/python/verify_web_bot_auth.py`)
//! against the JWKS that `courtesy keys directory` prints. The origins record each request with
//! the moment it arrived, so that a signature is judged valid at its arrival: plain HTTP, a
//! redirect hop, intercepted HTTPS, a job's own key, `sign = false`, `on_challenge`, a long
//! queue wait, and the signed directory on the admin listener.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::*;
use base64::Engine as _;
use http::{HeaderMap, Request, Response};
use serde_json::{json, Value};
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

/// An https origin on `ip` (its certificate from `setup`'s CA, which courtesy trusts) that
/// records every request: `/start` redirects to `/next`, `/guarded` refuses an unsigned request
/// with 403 and `Accept-Signature`, everything else is 200. Only requests that leave over TLS
/// are signed, so the signing tests speak https.
async fn recording_origin(setup: &Setup, ip: &str, seen: &Seen) -> Origin {
    let seen = seen.clone();
    let names = ["localhost", "127.0.0.1", "127.0.0.2", "127.0.0.3"];
    Origin::start_tls(ip, setup.ca.server_config(&names), move |req| {
        let seen = seen.clone();
        async move { answer(&seen, "https", req) }
    })
    .await
}

/// An origin on `ip` that records every request over plain http.
async fn plain_recording_origin(ip: &str, seen: &Seen) -> Origin {
    let seen = seen.clone();
    Origin::start(ip, move |req| {
        let seen = seen.clone();
        async move { answer(&seen, "http", req) }
    })
    .await
}

/// A client that sends `https://` requests through courtesy (CONNECT, courtesy's CA trusted),
/// as `job` when given, following no redirect.
fn https_client(courtesy: &Courtesy, job: Option<&str>) -> reqwest::Client {
    let mut proxy = reqwest::Proxy::all(format!("http://{}", courtesy.addr)).unwrap();
    if let Some(job) = job {
        proxy = proxy.basic_auth(job, "");
    }
    reqwest::Client::builder()
        .proxy(proxy)
        .tls_backend_preconfigured(client_tls_trusting(&courtesy.ca_path()))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// The status of `GET url` by `client`.
async fn get_status(client: &reqwest::Client, url: &str) -> u16 {
    client.get(url).send().await.unwrap().status().as_u16()
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

/// A directory for a test: its key file(s) and config file, and the CA of its https origins.
struct Setup {
    dir: PathBuf,
    key: PathBuf,
    ca: TestCa,
}

impl Setup {
    fn new(tag: &str) -> Setup {
        let dir = temp_dir(tag);
        let key = new_key(&dir, "bot.jwk");
        Setup {
            dir,
            key,
            ca: TestCa::new(),
        }
    }

    /// `[proxy] upstream_ca` for the origins of [`recording_origin`], in `rest`'s own `[proxy]`
    /// table when it has one.
    fn trusting(&self, rest: &str) -> String {
        if rest.contains("upstream_ca") {
            return rest.to_string();
        }
        let ca = self.ca.write(&self.dir, "origin-ca.pem");
        let line = format!("upstream_ca = \"{}\"\n", ca.display());
        match rest.find("[proxy]\n") {
            Some(at) => {
                let (before, after) = rest.split_at(at + "[proxy]\n".len());
                format!("{before}{line}{after}")
            }
            None => format!("{rest}\n[proxy]\n{line}"),
        }
    }

    /// Writes `courtesy.toml` with `[signing]` (the key, `extra` lines) and `rest`.
    fn config(&self, signing: &str, rest: &str) -> PathBuf {
        let path = self.dir.join("courtesy.toml");
        std::fs::write(
            &path,
            format!(
                "[signing]\nkey_file = \"{}\"\nsignature_agent = \"https://bot.example\"\n\
                 {signing}\n[defaults]\nrate = 50\nburst = 10\n{}",
                self.key.display(),
                self.trusting(rest)
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

/// The usual cast of a signing test: a setup with the default config, its directory and the
/// keyid in it, a recording https origin on 127.0.0.1, courtesy, and an https client through it.
struct Cast {
    setup: Setup,
    directory: Value,
    keyid: String,
    seen: Seen,
    origin: Origin,
    _courtesy: Courtesy,
    client: reqwest::Client,
}

impl Cast {
    async fn start(tag: &str) -> Cast {
        Cast::configured(tag, "", "").await
    }

    /// [`Cast::start`] with `[signing]`'s `signing` lines and `rest` in the config.
    async fn configured(tag: &str, signing: &str, rest: &str) -> Cast {
        let setup = Setup::new(tag);
        let config = setup.config(signing, rest);
        let directory = setup.directory(&config);
        let keyid = keyids(&directory).remove(0);
        let seen = Seen::default();
        let origin = recording_origin(&setup, "127.0.0.1", &seen).await;
        let courtesy = setup.courtesy(&config).await;
        let client = https_client(&courtesy, None);
        Cast {
            setup,
            directory,
            keyid,
            seen,
            origin,
            _courtesy: courtesy,
            client,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_and_each_redirect_hop_are_signed_afresh_and_verify() {
    let cast = Cast::start("sign-hops").await;
    let (client, origin, seen) = (&cast.client, &cast.origin, &cast.seen);
    let (directory, keyid) = (&cast.directory, &cast.keyid);

    // A client's Signature-Agent that no signature of its own covers goes; courtesy's is sig1.
    let first = client
        .get(origin.https_url("/start"))
        .header("signature-agent", "sig1=\"https://forged.example\"")
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 302);
    // The client follows the redirect: a new request, its own signature.
    let location = first.headers()["location"].to_str().unwrap().to_string();
    assert_eq!(get_status(client, &origin.https_url(&location)).await, 200);

    let arrived = seen.all();
    assert_eq!(arrived.len(), 2);
    let verdicts = verify(directory, &arrived).await;
    for verdict in &verdicts {
        assert_signed(verdict, keyid, "https://bot.example");
    }
    let nonce = |v: &Value| v["signatures"][0]["nonce"].as_str().unwrap().to_string();
    assert_ne!(
        nonce(&verdicts[0]),
        nonce(&verdicts[1]),
        "a fresh nonce per hop"
    );

    // Tampering shows: the same signature under another authority does not verify.
    let mut moved = arrived[1].clone();
    moved["url"] = json!(origin.https_url("/next").replace("127.0.0.1", "localhost"));
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
    let tampered = verify(directory, &[moved]).await;
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

/// Issue 48: a signature cannot be borrowed. A request that leaves over plain http goes
/// unsigned (anyone on the path could lift the signature), `/hosts` says so, and TRACE and TRACK
/// are answered 405 locally, so no origin can reflect a signed request's headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_goes_unsigned_and_trace_is_never_forwarded() {
    let setup = Setup::new("sign-plain");
    let config = setup.config("", "");
    let seen = Seen::default();
    let origin = plain_recording_origin("127.0.0.1", &seen).await;
    let courtesy = setup.courtesy(&config).await;
    let client = courtesy.client();
    assert_eq!(client.get(&origin.url("/plain")).await.status, 200);
    assert_eq!(client.get(&origin.url("/again")).await.status, 200);
    let arrived = seen.all();
    assert_eq!(arrived.len(), 2);
    for message in &arrived {
        let headers = message["headers"].to_string();
        for name in [
            "\"signature\"",
            "\"signature-input\"",
            "\"signature-agent\"",
        ] {
            assert!(
                !headers.contains(name),
                "plain http is never signed: {headers}"
            );
        }
    }
    let (status, view) = courtesy
        .host_page(&format!("127.0.0.1:{}", origin.addr.port()))
        .await;
    assert_eq!(status, 200, "{view}");
    let view: Value = serde_json::from_str(&view).unwrap();
    assert!(
        view["signing"]
            .as_str()
            .is_some_and(|s| s.starts_with("unsigned over plain http")),
        "{view}"
    );
    for method in ["TRACE", "TRACK"] {
        let request = Request::builder()
            .method(method)
            .uri(origin.url("/echo"))
            .body(empty())
            .unwrap();
        let got = client.send(request).await;
        assert_eq!(got.status, 405, "{method}");
        assert!(
            got.header("proxy-status")
                .starts_with("courtesy; error=http_request_denied"),
            "{method}: {}",
            got.header("proxy-status")
        );
    }
    // Nor inside intercepted TLS.
    let tls_origin = recording_origin(&setup, "127.0.0.1", &seen).await;
    let traced = https_client(&courtesy, None)
        .request(
            reqwest::Method::from_bytes(b"TRACE").unwrap(),
            tls_origin.https_url("/echo"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(traced.status(), 405);
    assert_eq!(seen.all().len(), 2, "no TRACE reached an origin");
}

/// A client's own RFC 9421 signature over `components` of a GET of `path` on `authority`, made
/// with the private JWK at `key` (`courtesy keys new`), by hand (the signature base of RFC 9421
/// 2.5), tagged `client-own`: its `Signature-Input` and `Signature` fields, and its keyid.
fn client_signature(
    key: &Path,
    authority: &str,
    path: &str,
    components: &[(&str, &str)],
) -> (String, String) {
    let jwk: Value = serde_json::from_str(&std::fs::read_to_string(key).unwrap()).unwrap();
    let seed = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(jwk["d"].as_str().unwrap())
        .unwrap();
    let pair = ring::signature::Ed25519KeyPair::from_seed_unchecked(&seed).unwrap();
    let keyid = keyids(&json!({ "keys": [jwk] })).remove(0);
    let ids: Vec<String> = components
        .iter()
        .map(|(id, _)| format!("\"{id}\""))
        .collect();
    let created = unix_now() as u64;
    let params = format!(
        "({});created={created};expires={};keyid=\"{keyid}\";tag=\"client-own\"",
        ids.join(" "),
        created + 60
    );
    let mut base = String::new();
    for (id, value) in components {
        let value = match *id {
            "@method" => "GET",
            "@authority" => authority,
            "@path" => path,
            _ => value,
        };
        base.push_str(&format!("\"{id}\": {value}\n"));
    }
    base.push_str(&format!("\"@signature-params\": {params}"));
    let signature = base64::engine::general_purpose::STANDARD.encode(pair.sign(base.as_bytes()));
    (format!("client={params}"), format!("client=:{signature}:"))
}

/// Issue 48: several signatures travel together. A client's own signature over what courtesy
/// leaves alone reaches the origin untouched beside courtesy's, and both verify there; one over a
/// field courtesy changes (`via`, which courtesy adds) is removed, and courtesy's alone arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_own_signature_travels_beside_courtesys_when_courtesy_changes_nothing_it_covers()
{
    let cast = Cast::start("sign-several").await;
    let (directory, keyid, seen) = (&cast.directory, &cast.keyid, &cast.seen);
    let (origin, client) = (&cast.origin, &cast.client);
    let client_key = new_key(&cast.setup.dir, "client.jwk");
    let authority = format!("127.0.0.1:{}", origin.addr.port());

    // Signed by the client over its own field (a kept one, then Via, which courtesy changes).
    let covered = [
        ("@method", ""),
        ("@authority", ""),
        ("@path", ""),
        ("content-type", "text/plain"),
    ];
    for (path, field, value, covers) in [
        ("/kept", "content-type", "text/plain", &covered[..]),
        (
            "/removed",
            "via",
            "1.1 the-client",
            &[("via", "1.1 the-client")][..],
        ),
    ] {
        let (input, signature) = client_signature(&client_key, &authority, path, covers);
        let got = client
            .get(origin.https_url(path))
            .header(field, value)
            .header("signature-input", input.as_str())
            .header("signature", signature.as_str())
            .send()
            .await
            .unwrap();
        assert_eq!(got.status(), 200);
    }

    let arrived = seen.all();
    assert_eq!(arrived.len(), 2);
    for verdict in verify(directory, &arrived).await {
        assert_signed(&verdict, keyid, "https://bot.example");
    }
    let jwk: Value = serde_json::from_str(&std::fs::read_to_string(&client_key).unwrap()).unwrap();
    let client_jwks = json!({ "keys": [{ "kty": jwk["kty"], "crv": jwk["crv"], "x": jwk["x"] }] });
    let mut theirs = arrived[0].clone();
    theirs["tag"] = json!("client-own");
    theirs["required"] = json!(["\"@path\"", "\"content-type\""]);
    let verdict = &verify(&client_jwks, &[theirs]).await[0];
    assert_eq!(
        verdict["ok"], true,
        "the client's own signature verifies: {verdict}"
    );
    let inputs = |m: &Value| {
        m["headers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|pair| pair[0] == "signature-input")
            .map(|pair| pair[1].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    assert!(
        inputs(&arrived[0]).starts_with("client=("),
        "{}",
        inputs(&arrived[0])
    );
    assert!(
        inputs(&arrived[0]).contains(", sig1=("),
        "{}",
        inputs(&arrived[0])
    );
    assert!(
        !inputs(&arrived[1]).contains("client="),
        "a signature over Via, which courtesy changes, is removed: {}",
        inputs(&arrived[1])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_inside_intercepted_https_are_signed() {
    let setup = Setup::new("sign-https");
    let seen = Seen::default();
    let origin = recording_origin(&setup, "127.0.0.1", &seen).await;
    let config = setup.config("", "");
    let directory = setup.directory(&config);
    let courtesy = setup.courtesy(&config).await;
    let client = https_client(&courtesy, None);
    for _ in 0..2 {
        let url = format!("https://{}/inside", origin.addr);
        assert_eq!(get_status(&client, &url).await, 200);
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
    let origin = recording_origin(&setup, "127.0.0.1", &seen).await;
    let unsigned = recording_origin(&setup, "127.0.0.2", &seen).await;
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
    // One directory per agent, each with the one key that signs under it.
    let path = config.to_str().unwrap();
    let print = |agent: &str| -> Value {
        let text = courtesy_cli(&["keys", "directory", "--agent", agent, "--config", path]);
        serde_json::from_str(&text).unwrap()
    };
    let (main, b) = (print("https://bot.example"), print("https://b.example"));
    let (main_ids, b_ids) = (keyids(&main), keyids(&b));
    assert_eq!((main_ids.len(), b_ids.len()), (1, 1), "{main} {b}");
    assert_ne!(main_ids, b_ids);
    let courtesy = setup.courtesy(&config).await;
    // The job is named on the CONNECT, for every request inside.
    for (url, job) in [
        (origin.https_url("/a"), "crawl-a"),
        (origin.https_url("/b"), "crawl-b"),
        (unsigned.https_url("/c"), "crawl-b"),
    ] {
        assert_eq!(
            get_status(&https_client(&courtesy, Some(job)), &url).await,
            200
        );
    }

    let arrived = seen.all();
    assert_eq!(arrived.len(), 3);
    assert_signed(
        &verify(&main, &arrived[..1]).await[0],
        &main_ids[0],
        "https://bot.example",
    );
    assert_signed(
        &verify(&b, &arrived[1..2]).await[0],
        &b_ids[0],
        "https://b.example",
    );
    assert_eq!(
        verify(&main, &arrived[1..2]).await[0]["ok"],
        false,
        "crawl-b's key is not in [signing]'s agent's directory"
    );
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
    let cast = Cast::configured(
        "sign-challenge",
        "mode = \"on_challenge\"",
        "[[host]]\nmatch = \"127.0.0.3\"\nenforce = false\n",
    )
    .await;
    let (setup, origin, client, seen) = (&cast.setup, &cast.origin, &cast.client, &cast.seen);

    // Unsigned until asked: the refusal is answered by the signed resend's 200.
    assert_eq!(get_status(client, &origin.https_url("/guarded")).await, 200);
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
    assert_eq!(get_status(client, &origin.https_url("/guarded")).await, 200);
    assert_eq!(get_status(client, &origin.https_url("/other")).await, 200);
    let arrived = seen.all();
    assert_eq!(arrived.len(), 4);
    for verdict in verify(&cast.directory, &arrived[1..]).await {
        assert_signed(&verdict, &cast.keyid, "https://bot.example");
    }

    // A request with a body cannot be sent again: the refusal reaches the client as it is.
    let other = recording_origin(setup, "127.0.0.2", seen).await;
    let refused = client
        .post(other.https_url("/guarded"))
        .body("payload")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    assert_eq!(seen.all().len(), 5);
    // But the host is remembered: its next request goes signed.
    assert_eq!(get_status(client, &other.https_url("/guarded")).await, 200);
    assert_eq!(seen.all().len(), 6);

    // A report-only host gets no resend of courtesy's own: the client has the refusal, and the
    // host's next request goes signed.
    let watched = recording_origin(setup, "127.0.0.3", seen).await;
    assert_eq!(
        get_status(client, &watched.https_url("/guarded")).await,
        403
    );
    assert_eq!(seen.all().len(), 7);
    assert_eq!(
        get_status(client, &watched.https_url("/guarded")).await,
        200
    );
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
             max_wait_seconds = 60\n{}",
            setup.key.display(),
            setup.trusting("")
        ),
    )
    .unwrap();
    let directory = setup.directory(&path);
    let keyid = keyids(&directory).remove(0);
    let seen = Seen::default();
    let origin = recording_origin(&setup, "127.0.0.1", &seen).await;
    let courtesy = setup.courtesy(&path).await;
    let client = https_client(&courtesy, None);
    let started = unix_now();
    let waiting: Vec<_> = (0..3)
        .map(|i| {
            let (client, url) = (client.clone(), origin.https_url(&format!("/q{i}")));
            tokio::spawn(async move { get_status(&client, &url).await })
        })
        .collect();
    for task in waiting {
        assert_eq!(task.await.unwrap(), 200);
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

/// `GET` of `path` on the admin listener with `Host: host`: status, headers, body.
async fn admin_get(courtesy: &Courtesy, path: &str, host: &str) -> (u16, HeaderMap, String) {
    let request = Request::get(courtesy.admin_url(path))
        .header("host", host)
        .body(empty())
        .unwrap();
    let response = direct_client().request(request).await.unwrap();
    let (status, headers) = (response.status().as_u16(), response.headers().clone());
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    (status, headers, String::from_utf8(body.to_vec()).unwrap())
}

/// A directory (or card) answer for `host`, as the verifier reads it: the response, the
/// request's `Host`, the body.
fn served(path: &str, host: &str, headers: &HeaderMap, body: &str) -> Value {
    json!({
        "kind": "directory",
        "method": "GET",
        "url": format!("https://{host}{path}"),
        "headers": pairs(headers),
        "request_headers": [["host", host]],
        "body": body,
        "at": unix_now(),
    })
}

/// The keyids that signed a verdict.
fn signed_by(verdict: &Value) -> Vec<String> {
    verdict["signatures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["keyid"].as_str().unwrap().to_string())
        .collect()
}

const DIRECTORY: &str = "/.well-known/http-message-signatures-directory";
const CARD: &str = "/.well-known/signature-agent-card";

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
    let (status, headers, body) = admin_get(&courtesy, DIRECTORY, "bot.example").await;
    assert_eq!(status, 200);
    assert_eq!(
        headers["content-type"],
        "application/http-message-signatures-directory+json"
    );
    assert_eq!(body, printed);

    let message = served(DIRECTORY, "bot.example", &headers, &body);
    let verdict = &verify(&directory, &[message]).await[0];
    assert_eq!(verdict["ok"], true, "{verdict}");
    let components = verdict["signatures"][0]["components"].to_string();
    assert!(
        components.contains("content-digest"),
        "the proofs cover Content-Digest: {verdict}"
    );
    let signed_by = signed_by(verdict);
    let ids = keyids(&directory);
    assert_eq!(
        signed_by.len(),
        2,
        "one signature per key (crawl-b signs under [signing]'s agent): {verdict}"
    );
    assert!(ids.iter().all(|id| signed_by.contains(id)), "{verdict}");

    // A body that is not the one the digest was made of fails.
    let mut forged = served(DIRECTORY, "bot.example", &headers, &body);
    forged["body"] = json!(body.replace("OKP", "OKQ"));
    assert_eq!(verify(&directory, &[forged]).await[0]["ok"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_directory_and_the_card_answer_only_an_agents_host_with_its_own_keys() {
    let setup = Setup::new("sign-agents");
    let job_key = new_key(&setup.dir, "crawl-b.jwk");
    let config = setup.config(
        "",
        &format!(
            "purpose = \"search\"\nuser_agent = \"ExampleBot/1.0\"\nobey_robots = true\n\
             [[job]]\nname = \"crawl-b\"\nsigning_key_file = \"{}\"\n\
             signature_agent = \"https://crawl-b.example\"\npurpose = \"ai-train\"\n",
            job_key.display()
        ),
    );
    let path = config.to_str().unwrap();
    let print =
        |verb: &str, agent: &str| courtesy_cli(&["keys", verb, "--agent", agent, "--config", path]);
    let courtesy = setup.courtesy(&config).await;

    // Any other Host: a 404 with a JSON error, and no signature at all.
    let own = courtesy.admin.to_string();
    for host in ["attacker.example", own.as_str(), "bot.example.evil"] {
        for what in [DIRECTORY, CARD] {
            let (status, headers, body) = admin_get(&courtesy, what, host).await;
            assert_eq!(status, 404, "{host}{what}: {body}");
            assert_eq!(headers["content-type"], "application/json");
            assert!(serde_json::from_str::<Value>(&body).unwrap()["error"].is_string());
            for field in ["signature", "signature-input", "content-digest"] {
                assert!(!headers.contains_key(field), "{host}{what}: {field}");
            }
        }
    }

    // Each agent's Host: its own keys only, the printed set, each key's proof over that Host.
    for (agent, host) in [
        ("https://bot.example", "bot.example"),
        ("https://crawl-b.example", "crawl-b.example"),
    ] {
        let printed = print("directory", agent);
        let directory: Value = serde_json::from_str(&printed).unwrap();
        assert_eq!(directory["keys"].as_array().unwrap().len(), 1, "{printed}");
        let (status, headers, body) = admin_get(&courtesy, DIRECTORY, host).await;
        assert_eq!((status, body.as_str()), (200, printed.as_str()));
        let verdict = &verify(&directory, &[served(DIRECTORY, host, &headers, &body)]).await[0];
        assert_eq!(signed_by(verdict), keyids(&directory), "{verdict}");

        // The card: the printed one, signed the same way, with the same keys inline.
        let printed = print("card", agent);
        let card: Value = serde_json::from_str(&printed).unwrap();
        let (status, headers, body) = admin_get(&courtesy, CARD, host).await;
        assert_eq!((status, body.as_str()), (200, printed.as_str()));
        assert_eq!(card["client_id"], format!("{agent}{CARD}"));
        assert_eq!(card["jwks"], directory);
        let mut message = served(CARD, host, &headers, &body);
        message["kind"] = json!("card");
        let verdict = &verify(&directory, &[message]).await[0];
        assert_eq!(signed_by(verdict), keyids(&directory), "{verdict}");
    }
    let crawl_b: Value = serde_json::from_str(&print("card", "https://crawl-b.example")).unwrap();
    assert_eq!(crawl_b["web_bot_auth"]["purpose"], "ai-train");
    assert_eq!(
        crawl_b["web_bot_auth"]["rfc9309-product-token"],
        "ExampleBot"
    );
    assert_eq!(crawl_b["web_bot_auth"]["trigger"], "crawler");

    // `courtesy check` names each agent with its keys and the Host it answers.
    let checked = courtesy_cli(&["check", path]);
    let b_ids =
        keyids(&serde_json::from_str(&print("directory", "https://crawl-b.example")).unwrap());
    assert!(
        checked.contains(&format!(
            "[signing] agent https://crawl-b.example keyids={} (its directory and card answer \
             Host: crawl-b.example)",
            b_ids[0]
        )),
        "{checked}"
    );

    // Without --agent, a config with two agents says which there are.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_courtesy"))
        .args(["keys", "directory", "--config", path])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("https://bot.example, https://crawl-b.example") && said.contains("--agent"),
        "{said}"
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
    for file in [&not_ed25519, &garbled] {
        set_mode(file, 0o600);
    }
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
    let origin = recording_origin(&setup, "127.0.0.1", &seen).await;
    let courtesy = setup.courtesy(&config).await;
    let client = https_client(&courtesy, None);
    assert_eq!(get_status(&client, &origin.https_url("/before")).await, 200);
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
    assert_eq!(get_status(&client, &origin.https_url("/after")).await, 200);
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

/// Sets the permission bits of `path`.
fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// `courtesy` run on `config` until it exits (at most 20 s; then it is stopped, by its own
/// handle): whether it exited at all, and what it said on stderr.
fn run_until_refused(config: &Path) -> (bool, String) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_courtesy"))
        .args(["--config", config.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let exited = loop {
        if child.try_wait().unwrap().is_some() {
            break true;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().unwrap();
    (exited, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_key_file_others_can_read_or_another_user_owns_is_refused_at_check_and_at_start() {
    use std::os::unix::fs::MetadataExt as _;
    let setup = Setup::new("sign-key-mode");
    let job_key = new_key(&setup.dir, "crawl-b.jwk");
    let config = setup.config(
        "",
        &format!(
            "[proxy]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\nstate_dir = \"{}\"\n\
             [[job]]\nname = \"crawl-b\"\nsigning_key_file = \"{}\"\n",
            setup.dir.join("state").display(),
            job_key.display()
        ),
    );
    let (ok, said) = check(&config);
    assert!(ok, "0600 keys of courtesy's own user pass: {said}");

    // Readable by others: refused, naming the path, the mode and the owner.
    set_mode(&setup.key, 0o644);
    set_mode(&job_key, 0o640);
    let own = std::fs::metadata(&setup.key).unwrap().uid();
    let (ok, said) = check(&config);
    assert!(!ok, "{said}");
    for expected in [
        format!(
            "[signing] key_file: the key file {} is readable or writable by group or others \
             (mode 0644, owner uid {own}",
            setup.key.display()
        ),
        format!(
            "job 1 (crawl-b): signing_key_file: the key file {} is readable or writable by \
             group or others (mode 0640, owner uid {own}",
            job_key.display()
        ),
        format!("chmod 600 {}", setup.key.display()),
    ] {
        assert!(said.contains(&expected), "missing {expected:?} in:\n{said}");
    }
    let (exited, said) = run_until_refused(&config);
    assert!(exited, "courtesy refuses to start: {said}");
    assert!(said.contains("mode 0644"), "{said}");
    set_mode(&setup.key, 0o600);
    set_mode(&job_key, 0o600);

    // Owned by another user (root can give it away; others cannot, and skip this half).
    if own != 0 {
        return;
    }
    let status = std::process::Command::new("chown")
        .args(["65534", job_key.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(status.success());
    let (ok, said) = check(&config);
    assert!(!ok, "{said}");
    let expected = format!(
        "job 1 (crawl-b): signing_key_file: the key file {} (mode 0600) is owned by uid 65534",
        job_key.display()
    );
    assert!(said.contains(&expected), "missing {expected:?} in:\n{said}");
    assert!(said.contains("not by courtesy's user (uid 0"), "{said}");
    let (exited, said) = run_until_refused(&config);
    assert!(exited && said.contains("owned by uid 65534"), "{said}");
}

/// A message as Cloudflare's `web-bot-auth` crate reads it: its authority (the request's, for
/// `@authority` with or without `;req`) and its fields; a dictionary member (`;key=`) is the
/// member's serialized value, as RFC 9421 section 2.1.2 makes it.
struct Wire {
    authority: String,
    headers: Vec<(String, String)>,
}

impl Wire {
    /// A recorded message (a [`Seen`] entry, or [`served`]): the `Host` it was sent with.
    fn of(message: &Value) -> Wire {
        let pairs = |v: &Value| -> Vec<(String, String)> {
            serde_json::from_value(v.clone()).unwrap_or_default()
        };
        let headers = pairs(&message["headers"]);
        let host = pairs(&message["request_headers"])
            .into_iter()
            .chain(headers.clone())
            .find(|(n, _)| n.eq_ignore_ascii_case("host"))
            .map(|(_, v)| v.to_ascii_lowercase())
            .unwrap();
        Wire {
            authority: host,
            headers,
        }
    }
}

impl web_bot_auth::message_signatures::SignedMessage for Wire {
    fn lookup_component(&self, name: &web_bot_auth::components::CoveredComponent) -> Vec<String> {
        use web_bot_auth::components::{
            CoveredComponent, DerivedComponent, HTTPField, HTTPFieldParameters,
        };
        match name {
            CoveredComponent::Derived(DerivedComponent::Authority { .. }) => {
                vec![self.authority.clone()]
            }
            CoveredComponent::HTTP(HTTPField { name, parameters }) => {
                let values = self
                    .headers
                    .iter()
                    .filter(|(n, _)| n.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.clone());
                let key = parameters.0.iter().find_map(|p| match p {
                    HTTPFieldParameters::Key(key) => Some(format!("{key}=")),
                    _ => None,
                });
                match key {
                    None => values.collect(),
                    Some(key) => values
                        .flat_map(|v| {
                            v.split(',')
                                .filter_map(|m| m.trim().strip_prefix(&key).map(str::to_string))
                                .collect::<Vec<_>>()
                        })
                        .take(1)
                        .collect(),
                }
            }
            _ => vec![],
        }
    }
}

/// `directory` (a JWKS as courtesy prints it) as the crate's key ring, each key under its
/// thumbprint as the crate computes it.
fn key_ring(directory: &Value) -> web_bot_auth::keyring::KeyRing {
    let jwks: web_bot_auth::keyring::JSONWebKeySet =
        serde_json::from_value(directory.clone()).unwrap();
    let mut ring = web_bot_auth::keyring::KeyRing::default();
    assert!(ring.import_jwks(jwks).iter().all(Option::is_none));
    ring
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloudflares_web_bot_auth_crate_verifies_https_requests_and_the_directory() {
    use web_bot_auth::message_signatures::MessageVerifier;
    use web_bot_auth::{SignatureAgentLink, WebBotAuthVerifier};
    let setup = Setup::new("sign-interop");
    let seen = Seen::default();
    let origin = recording_origin(&setup, "127.0.0.1", &seen).await;
    let config = setup.config("", "");
    let directory = setup.directory(&config);
    let ring = key_ring(&directory);
    let courtesy = setup.courtesy(&config).await;

    // A request through intercepted TLS to a TLS origin: signed as it leaves, verified by the
    // crate (which reads the dictionary form of Signature-Agent and names the agent).
    let client = https_client(&courtesy, None);
    let url = format!("https://{}/interop", origin.addr);
    assert_eq!(get_status(&client, &url).await, 200);
    let arrived = seen.all();
    assert_eq!(arrived.len(), 1);
    let verifier = WebBotAuthVerifier::parse(&Wire::of(&arrived[0])).unwrap();
    assert_eq!(
        verifier.get_signature_agents(),
        &vec![SignatureAgentLink::External("https://bot.example".into())]
    );
    verifier.verify(&ring, None).unwrap();

    // Tampered: another authority fails.
    let mut moved = Wire::of(&arrived[0]);
    moved.authority = "elsewhere.example".into();
    let verifier = WebBotAuthVerifier::parse(&moved).unwrap();
    assert!(verifier.verify(&ring, None).is_err());

    // The directory: each key's proof verifies over the agent's Host and the Content-Digest,
    // which is the body's.
    let (status, headers, body) = admin_get(&courtesy, DIRECTORY, "bot.example").await;
    assert_eq!(status, 200);
    let wire = Wire::of(&served(DIRECTORY, "bot.example", &headers, &body));
    let digest =
        base64::engine::general_purpose::STANDARD.encode(sha256_by_coreutils(body.as_bytes()));
    assert_eq!(
        headers["content-digest"],
        format!("sha-256=:{digest}:").as_str()
    );
    let verifier = MessageVerifier::parse(&wire, |(_, inner)| {
        let covered: Vec<String> = inner
            .items
            .iter()
            .filter_map(|i| i.bare_item.as_string().map(|s| s.as_str().to_string()))
            .collect();
        inner
            .params
            .get("tag")
            .and_then(|t| t.as_string())
            .is_some_and(|t| t.as_str() == "http-message-signatures-directory")
            && covered.iter().any(|c| c == "content-digest")
    })
    .unwrap();
    verifier.verify(&ring, None).unwrap();
    let mut elsewhere = wire;
    elsewhere.authority = "attacker.example".into();
    let verifier = MessageVerifier::parse(&elsewhere, |_| true).unwrap();
    assert!(verifier.verify(&ring, None).is_err());
}
