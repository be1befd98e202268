//! Teams with real clients: curl, Python requests, Scrapy, Node undici and Chromium, each given a
//! job's credentials the way its users give them (in the proxy URL, or Playwright's `proxy`
//! option), through courtesy with `client_auth = "required"`. The right credentials name the job
//! (courtesy stamps the job's User-Agent, so the origin seeing it proves the job was known), over
//! plain http and, for the clients that use CONNECT, over https through interception; they never
//! reach the origin; a wrong token is a 407 the client surfaces. Every client is installed by
//! `scripts/test`: a missing one fails the test, it is never skipped.

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use crate::support::*;
use http::Response;

const TOKEN_A: &str = "token-of-crawl-a-0123456789";
const TOKEN_B: &str = "token-of-crawl-b-0123456789";
const WRONG: &str = "not-the-token-of-crawl-a-42";

/// How long any one client program may run.
const CLIENT_LIMIT: Duration = Duration::from_secs(90);

/// A plain origin, an https origin (its certificate from a test CA courtesy trusts through
/// `upstream_ca`), and courtesy requiring credentials with two jobs: `crawl-a` stamped
/// `job-<client>/1`, `crawl-b` stamped `other-job/1`.
struct Bench {
    plain: Origin,
    tls: Origin,
    courtesy: Courtesy,
    client: &'static str,
    dir: PathBuf,
}

async fn bench(client: &'static str) -> Bench {
    let test_ca = TestCa::new();
    let tls = Origin::start_tls(
        "127.0.0.1",
        test_ca.server_config(&["127.0.0.1", "localhost"]),
        |req| async move {
            Response::builder()
                .header("content-type", "text/html")
                .body(full(format!(
                    "<html><body>secure {}</body></html>",
                    req.uri().path()
                )))
                .unwrap()
        },
    )
    .await;
    let plain = Origin::start("127.0.0.1", |req| async move {
        Response::builder()
            .header("content-type", "text/html")
            .body(full(format!(
                "<html><body>plain {}</body></html>",
                req.uri().path()
            )))
            .unwrap()
    })
    .await;
    let dir = temp_dir("teams-clients");
    let courtesy = Courtesy::start(&format!(
        "[proxy]\nclient_auth = \"required\"\nupstream_ca = \"{}\"\nconnect_ports = [{}, {}]\n\
         [defaults]\nrate = 50.0\nburst = 10\n\
         [[job]]\nname = \"crawl-a\"\ntoken = \"{TOKEN_A}\"\nuser_agent = \"job-{client}/1\"\n\
         [[job]]\nname = \"crawl-b\"\ntoken = \"{TOKEN_B}\"\nuser_agent = \"other-job/1\"\n",
        test_ca.write(&dir, "origin-ca.pem").display(),
        tls.addr.port(),
        plain.addr.port(),
    ))
    .await;
    Bench {
        plain,
        tls,
        courtesy,
        client,
        dir,
    }
}

impl Bench {
    /// The proxy URL a client is given: `http://user:token@127.0.0.1:port`.
    fn proxy_url(&self, user: &str, token: &str) -> String {
        format!("http://{user}:{token}@{}", self.courtesy.addr)
    }

    fn http_url(&self, path: &str) -> String {
        self.plain.url(path)
    }

    fn https_url(&self, path: &str) -> String {
        format!("https://{}{}", self.tls.addr, path)
    }

    /// `path` reached `origin` (at least once), every time stamped with job crawl-a's
    /// User-Agent; and nothing that reached either origin carried `Proxy-Authorization`.
    fn assert_seen_as_job_a(&self, origin: &Origin, path: &str) {
        let arrivals: Vec<Arrival> = origin
            .arrivals()
            .into_iter()
            .filter(|a| a.path == path)
            .collect();
        assert!(!arrivals.is_empty(), "{path} never reached the origin");
        let want = format!("job-{}/1", self.client);
        for a in &arrivals {
            let ua = a
                .headers
                .get("user-agent")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            assert_eq!(ua, want, "{path}: the job's stamp proves courtesy knew it");
        }
        self.assert_no_credentials_upstream();
    }

    fn assert_no_credentials_upstream(&self) {
        for a in self
            .plain
            .arrivals()
            .iter()
            .chain(self.tls.arrivals().iter())
        {
            assert!(
                !a.headers.contains_key("proxy-authorization"),
                "{} reached the origin with Proxy-Authorization",
                a.path
            );
        }
    }

    /// Nothing asked for with a `/wrong` path reached either origin.
    fn assert_nothing_wrong_upstream(&self) {
        for a in self
            .plain
            .arrivals()
            .iter()
            .chain(self.tls.arrivals().iter())
        {
            assert!(
                !a.path.starts_with("/wrong"),
                "{} was refused yet reached the origin",
                a.path
            );
        }
    }
}

/// Runs a client command to its end within [`CLIENT_LIMIT`] (killed past it); fails the test
/// when the program cannot be started.
async fn run_bounded(cmd: &mut tokio::process::Command) -> Output {
    let program = cmd.as_std().get_program().to_string_lossy().into_owned();
    tokio::time::timeout(CLIENT_LIMIT, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("{program} did not finish within {CLIENT_LIMIT:?}"))
        .unwrap_or_else(|e| {
            panic!("cannot run {program} ({e}): `scripts/test` installs every client the tests use")
        })
}

fn stdout_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn both_outputs(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

// ---- curl ---------------------------------------------------------------------------------

/// What curl made of one GET of `url` through `proxy`: its exit code, `%{http_code}`,
/// `%{http_connect}` and the body.
struct Curled {
    exit: Option<i32>,
    http_code: String,
    http_connect: String,
    body: String,
    all: String,
}

async fn curl(bench: &Bench, proxy: &str, url: &str) -> Curled {
    let out = run_bounded(
        client_command("curl")
            .args(["-sS", "--max-time", "30", "--cacert"])
            .arg(bench.courtesy.ca_path())
            .args(["-x", proxy])
            .args(["-w", "\n%{http_code} %{http_connect}", url]),
    )
    .await;
    let text = stdout_of(&out);
    let (body, codes) = text.rsplit_once('\n').unwrap_or(("", &text));
    let mut codes = codes.split_whitespace();
    Curled {
        exit: out.status.code(),
        http_code: codes.next().unwrap_or("").to_string(),
        http_connect: codes.next().unwrap_or("").to_string(),
        body: body.to_string(),
        all: both_outputs(&out),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_with_credentials_in_the_proxy_url_is_its_job_and_a_wrong_token_is_a_407() {
    let bench = bench("curl").await;
    let proxy = bench.proxy_url("crawl-a", TOKEN_A);

    let got = curl(&bench, &proxy, &bench.http_url("/curl/plain")).await;
    assert_eq!(
        (got.exit, got.http_code.as_str()),
        (Some(0), "200"),
        "{}",
        got.all
    );
    assert!(got.body.contains("plain /curl/plain"), "{}", got.all);
    bench.assert_seen_as_job_a(&bench.plain, "/curl/plain");

    let got = curl(&bench, &proxy, &bench.https_url("/curl/secure")).await;
    assert_eq!(
        (got.exit, got.http_code.as_str()),
        (Some(0), "200"),
        "{}",
        got.all
    );
    assert_eq!(got.http_connect, "200", "the tunnel opened: {}", got.all);
    assert!(got.body.contains("secure /curl/secure"), "{}", got.all);
    bench.assert_seen_as_job_a(&bench.tls, "/curl/secure");

    let wrong = bench.proxy_url("crawl-a", WRONG);
    let got = curl(&bench, &wrong, &bench.http_url("/wrong/plain")).await;
    assert_eq!(
        (got.exit, got.http_code.as_str()),
        (Some(0), "407"),
        "{}",
        got.all
    );
    // A 407 to its CONNECT: curl gives up (exit 56, "CONNECT tunnel failed, response 407").
    let got = curl(&bench, &wrong, &bench.https_url("/wrong/secure")).await;
    assert_eq!(got.exit, Some(56), "{}", got.all);
    assert_eq!(got.http_connect, "407", "{}", got.all);
    bench.assert_nothing_wrong_upstream();
}

// ---- Python requests ------------------------------------------------------------------------

/// GETs each URL with requests, the proxy URL (with credentials) given for http and https and
/// courtesy's CA as `verify`; one line per URL: `<status> <body>` or `error <type> <message>`.
const REQUESTS_SCRIPT: &str = r#"
import sys, requests
proxy, ca = sys.argv[1], sys.argv[2]
for url in sys.argv[3:]:
    try:
        r = requests.get(url, proxies={"http": proxy, "https": proxy}, verify=ca, timeout=20)
        print(r.status_code, r.text.replace("\n", " "))
    except Exception as e:
        print("error", type(e).__name__, str(e).replace("\n", " ")[:400])
"#;

async fn python_requests(bench: &Bench, proxy: &str, urls: &[String]) -> Vec<String> {
    let out = run_bounded(
        client_command("python3")
            .args(["-c", REQUESTS_SCRIPT, proxy])
            .arg(bench.courtesy.ca_path())
            .args(urls),
    )
    .await;
    assert!(out.status.success(), "{}", both_outputs(&out));
    stdout_of(&out).lines().map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_requests_with_credentials_in_the_proxy_url_is_its_job_and_a_wrong_token_is_a_407() {
    let bench = bench("requests").await;
    let lines = python_requests(
        &bench,
        &bench.proxy_url("crawl-a", TOKEN_A),
        &[
            bench.http_url("/requests/plain"),
            bench.https_url("/requests/secure"),
        ],
    )
    .await;
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0].starts_with("200 ") && lines[0].contains("plain /requests/plain"),
        "{lines:?}"
    );
    assert!(
        lines[1].starts_with("200 ") && lines[1].contains("secure /requests/secure"),
        "{lines:?}"
    );
    bench.assert_seen_as_job_a(&bench.plain, "/requests/plain");
    bench.assert_seen_as_job_a(&bench.tls, "/requests/secure");

    let lines = python_requests(
        &bench,
        &bench.proxy_url("crawl-a", WRONG),
        &[
            bench.http_url("/wrong/plain"),
            bench.https_url("/wrong/secure"),
        ],
    )
    .await;
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].starts_with("407 "), "plain http: {lines:?}");
    // A 407 to the CONNECT: requests raises ProxyError ("Tunnel connection failed: 407 ...").
    assert!(
        lines[1].starts_with("error ProxyError") && lines[1].contains("407"),
        "https: {lines:?}"
    );
    bench.assert_nothing_wrong_upstream();
}

// ---- Scrapy ---------------------------------------------------------------------------------

/// A Scrapy crawl of the URLs given, one at a time, through the proxy of `http_proxy` (Scrapy's
/// HttpProxyMiddleware turns the URL's credentials into `Proxy-Authorization`); every status is
/// handed to the spider. Prints `<status> <path>` per page.
const SCRAPY_SCRIPT: &str = r#"
import sys
from urllib.parse import urlparse
import scrapy
from scrapy.crawler import CrawlerProcess

class Pages(scrapy.Spider):
    name = "pages"
    start_urls = sys.argv[1:]
    custom_settings = {
        "CONCURRENT_REQUESTS": 1,
        "DOWNLOAD_TIMEOUT": 20,
        "HTTPERROR_ALLOW_ALL": True,
        "RETRY_ENABLED": False,
        "LOG_LEVEL": "ERROR",
        "ROBOTSTXT_OBEY": False,
        "TELNETCONSOLE_ENABLED": False,
    }

    def parse(self, response):
        print(response.status, urlparse(response.url).path, flush=True)

process = CrawlerProcess()
process.crawl(Pages)
process.start()
"#;

async fn scrapy(proxy: &str, urls: &[String]) -> Vec<String> {
    let out = run_bounded(
        client_command("python3")
            .env("http_proxy", proxy)
            .env("HTTP_PROXY", proxy)
            .args(["-c", SCRAPY_SCRIPT])
            .args(urls),
    )
    .await;
    assert!(out.status.success(), "{}", both_outputs(&out));
    let mut lines: Vec<String> = stdout_of(&out).lines().map(str::to_string).collect();
    lines.sort();
    lines
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrapy_with_credentials_in_http_proxy_is_its_job_and_a_wrong_token_is_a_407() {
    let bench = bench("scrapy").await;
    let lines = scrapy(
        &bench.proxy_url("crawl-a", TOKEN_A),
        &[bench.http_url("/scrapy/0"), bench.http_url("/scrapy/1")],
    )
    .await;
    assert_eq!(lines, vec!["200 /scrapy/0", "200 /scrapy/1"]);
    bench.assert_seen_as_job_a(&bench.plain, "/scrapy/0");
    bench.assert_seen_as_job_a(&bench.plain, "/scrapy/1");

    let lines = scrapy(
        &bench.proxy_url("crawl-a", WRONG),
        &[bench.http_url("/wrong/0")],
    )
    .await;
    assert_eq!(lines, vec!["407 /wrong/0"]);
    bench.assert_nothing_wrong_upstream();
}

// ---- Node undici ----------------------------------------------------------------------------

async fn undici(bench: &Bench, proxy: &str, urls: &[String]) -> Vec<String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/node/teams_undici.mjs");
    let out = run_bounded(
        client_command("node")
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/node"))
            .env("NODE_EXTRA_CA_CERTS", bench.courtesy.ca_path())
            .arg(script)
            .arg(proxy)
            .args(urls),
    )
    .await;
    assert!(out.status.success(), "{}", both_outputs(&out));
    stdout_of(&out).lines().map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undici_proxy_agent_with_credentials_in_its_uri_is_its_job_and_a_wrong_token_is_a_407() {
    let bench = bench("undici").await;
    // undici's ProxyAgent tunnels http:// through CONNECT too: both go through a tunnel whose
    // CONNECT carried the credentials.
    let lines = undici(
        &bench,
        &bench.proxy_url("crawl-a", TOKEN_A),
        &[
            bench.http_url("/undici/plain"),
            bench.https_url("/undici/secure"),
        ],
    )
    .await;
    assert_eq!(
        lines,
        vec![
            "200 <html><body>plain /undici/plain</body></html>",
            "200 <html><body>secure /undici/secure</body></html>",
        ]
    );
    bench.assert_seen_as_job_a(&bench.plain, "/undici/plain");
    bench.assert_seen_as_job_a(&bench.tls, "/undici/secure");

    let lines = undici(
        &bench,
        &bench.proxy_url("crawl-a", WRONG),
        &[
            bench.http_url("/wrong/plain"),
            bench.https_url("/wrong/secure"),
        ],
    )
    .await;
    assert_eq!(lines.len(), 2, "{lines:?}");
    for line in &lines {
        // undici turns a 407 to its CONNECT into "Proxy Authentication Required (407)".
        assert!(
            line.starts_with("error ") && line.contains("407"),
            "{lines:?}"
        );
    }
    bench.assert_nothing_wrong_upstream();
}

// ---- Chromium -------------------------------------------------------------------------------

/// Runs `node tests/node/teams_chromium.mjs` with `home` as `$HOME` (its NSS database trusts
/// courtesy's CA); returns one line per URL.
async fn chromium(
    bench: &Bench,
    home: &std::path::Path,
    password: &str,
    urls: &[String],
) -> Vec<String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/node/teams_chromium.mjs");
    let out = run_bounded(
        client_command("node")
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/node"))
            .env("HOME", home)
            .arg(script)
            .arg(format!("http://{}", bench.courtesy.addr))
            .args(["crawl-a", password])
            .args(urls),
    )
    .await;
    assert!(out.status.success(), "{}", both_outputs(&out));
    let lines: Vec<String> = stdout_of(&out).lines().map(str::to_string).collect();
    assert_eq!(lines.len(), urls.len(), "{}", both_outputs(&out));
    lines
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_answers_the_407_challenge_with_its_jobs_credentials_and_a_wrong_password_fails() {
    let bench = bench("chromium").await;
    let home = bench.dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    trust_in_nss_home(&home, &bench.courtesy.ca_path()).await;

    let lines = chromium(
        &bench,
        &home,
        TOKEN_A,
        &[
            bench.http_url("/chromium/plain"),
            bench.https_url("/chromium/secure"),
        ],
    )
    .await;
    assert_eq!(
        lines,
        vec![
            "loaded 200 plain /chromium/plain",
            "loaded 200 secure /chromium/secure",
        ]
    );
    bench.assert_seen_as_job_a(&bench.plain, "/chromium/plain");
    bench.assert_seen_as_job_a(&bench.tls, "/chromium/secure");

    let lines = chromium(
        &bench,
        &home,
        WRONG,
        &[
            bench.http_url("/wrong/plain"),
            bench.https_url("/wrong/secure"),
        ],
    )
    .await;
    eprintln!("chromium with a wrong password: {lines:?}");
    // Playwright answers the first challenge with the password and cancels the second: over
    // plain http the page shown is courtesy's 407 itself (its body says why, never the token);
    // a 407 to the CONNECT ends the navigation (Chromium 156 says ERR_HTTP_RESPONSE_CODE_FAILURE).
    assert!(
        lines[0].starts_with("loaded 407 ")
            && lines[0].contains("the proxy credentials are not accepted")
            && !lines[0].contains(WRONG),
        "{lines:?}"
    );
    assert!(
        !lines[0].contains(WRONG),
        "the body never repeats the token: {lines:?}"
    );
    assert!(
        lines[1].starts_with("failed ") && lines[1].contains("net::ERR_"),
        "{lines:?}"
    );
    bench.assert_nothing_wrong_upstream();
}
