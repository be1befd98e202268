//! docs/clients.md cannot drift: every block it marks `<!-- run: NAME -->` is run as written
//! (shell, Python, Node, Go) against a local https site called example.com, through courtesy, in
//! the environment `courtesy env` sets up (browsers: with courtesy's CA in a fresh NSS database, as
//! `courtesy ca` says), and must print the site's page; the site must have seen the request come
//! through courtesy. Only `127.0.0.1:3128` (the proxy) and `https://example.com/` (the site, on a
//! free port) are replaced. Every block marked `<!-- from: FILE -->` must be made of lines of
//! FILE, the script a test runs (the Crawlee crawls of tests/it/crawlee.rs).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::*;
use http::Response;

/// What the site says, and what each snippet must print.
const PAGE: &str = "hello from example.com through courtesy";

/// One fenced block of docs/clients.md with the marker before it (also read by
/// `frontier_clients`, whose section marks its blocks `<!-- excerpt: FILE -->`).
pub(crate) struct Snippet {
    /// `run`, `from` or `excerpt`.
    pub(crate) kind: String,
    /// The client's name (`run`) or the file (`from`, `excerpt`).
    pub(crate) name: String,
    /// The fence's language.
    pub(crate) lang: String,
    /// The code.
    pub(crate) code: String,
}

/// The text of docs/clients.md.
pub(crate) fn clients_doc() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/clients.md"))
        .expect("docs/clients.md")
}

/// Every marked block of the doc, in order.
pub(crate) fn snippets(doc: &str) -> Vec<Snippet> {
    let mut found = Vec::new();
    let mut lines = doc.lines();
    while let Some(line) = lines.next() {
        let Some(marker) = line
            .trim()
            .strip_prefix("<!--")
            .and_then(|l| l.strip_suffix("-->"))
        else {
            continue;
        };
        let Some((kind, name)) = marker.trim().split_once(':') else {
            continue;
        };
        let fence = lines.next().unwrap_or_default().trim();
        let lang = fence
            .strip_prefix("```")
            .unwrap_or_else(|| panic!("a fenced block must follow <!--{marker}-->"));
        let mut code = String::new();
        for l in lines.by_ref() {
            if l.trim() == "```" {
                break;
            }
            code.push_str(l);
            code.push('\n');
        }
        found.push(Snippet {
            kind: kind.trim().to_string(),
            name: name.trim().to_string(),
            lang: lang.to_string(),
            code,
        });
    }
    found
}

/// courtesy in front of the example.com site, as a crawler's machine has it.
struct Setup {
    origin: Origin,
    courtesy: Courtesy,
    dir: PathBuf,
    /// A home whose NSS database trusts courtesy's CA (the commands `courtesy ca` prints).
    browser_home: PathBuf,
}

async fn setup() -> Setup {
    let ca = TestCa::new();
    let dir = temp_dir("client-snippets");
    let origin = Origin::start_tls(
        "127.0.0.1",
        ca.server_config(&["example.com"]),
        |_req| async {
            Response::builder()
                .header("content-type", "text/html; charset=utf-8")
                .body(full(format!("<html><body>{PAGE}</body></html>")))
                .unwrap()
        },
    )
    .await;
    let hosts = dir.join("hosts");
    std::fs::write(&hosts, "127.0.0.1 example.com\n").unwrap();
    let courtesy = Courtesy::start(&format!(
        "[proxy]\nupstream_ca = {:?}\nhosts_file = {:?}\n[defaults]\nrate = 50\nburst = 10\n",
        ca.write(&dir, "site-ca.pem").display().to_string(),
        hosts.display().to_string()
    ))
    .await;
    let browser_home = dir.join("home");
    std::fs::create_dir_all(&browser_home).unwrap();
    trust_in_nss_home(&browser_home, &courtesy.ca_path()).await;
    Setup {
        origin,
        courtesy,
        dir,
        browser_home,
    }
}

impl Setup {
    /// The snippet's code with the proxy and the site replaced by the test's.
    fn localize(&self, code: &str) -> String {
        code.replace("127.0.0.1:3128", &self.courtesy.addr.to_string())
            .replace(
                "https://example.com/",
                &format!("https://example.com:{}/", self.origin.addr.port()),
            )
    }

    /// The command that runs `snippet`, in the environment `courtesy env` sets up.
    fn command(&self, snippet: &Snippet) -> tokio::process::Command {
        let code = self.localize(&snippet.code);
        let node_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/node");
        let mut cmd = match snippet.lang.as_str() {
            "sh" => {
                let mut c = client_command("sh");
                c.args(["-c", &code]);
                c
            }
            "python" => {
                let mut c = client_command("python3");
                c.args(["-c", &code]);
                c
            }
            "js" => {
                // An ES module beside tests/node's packages, so that its imports resolve there.
                let file = Path::new(node_dir).join(format!(".snippet-{}.mjs", snippet.name));
                std::fs::write(&file, &code).unwrap();
                let mut c = client_command("node");
                c.arg(&file);
                c
            }
            "go" => {
                let dir = self.dir.join(format!("go-{}", snippet.name));
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(dir.join("main.go"), &code).unwrap();
                let mut c = client_command("go");
                c.args(["run", "main.go"]);
                c
            }
            other => panic!("{}: no way to run a {other} block", snippet.name),
        };
        let proxy = format!("http://{}", self.courtesy.addr);
        let ca = self.courtesy.ca_path();
        for var in ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"] {
            cmd.env(var, &proxy);
        }
        for var in ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"] {
            cmd.env(var, &ca);
        }
        cmd.env("NODE_EXTRA_CA_CERTS", &ca);
        if matches!(snippet.name.as_str(), "playwright" | "puppeteer") {
            cmd.env("HOME", &self.browser_home);
        }
        cmd.current_dir(if snippet.lang == "go" {
            self.dir.join(format!("go-{}", snippet.name))
        } else if snippet.lang == "js" {
            PathBuf::from(node_dir)
        } else {
            self.dir.clone()
        });
        cmd
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_snippet_of_the_docs_fetches_through_courtesy() {
    let doc = clients_doc();
    let runs: Vec<Snippet> = snippets(&doc)
        .into_iter()
        .filter(|s| s.kind == "run")
        .collect();
    let names: Vec<&str> = runs.iter().map(|s| s.name.as_str()).collect();
    for family in [
        "curl",
        "requests",
        "httpx",
        "aiohttp",
        "scrapy",
        "undici",
        "go",
        "playwright",
        "puppeteer",
    ] {
        assert!(
            names.contains(&family),
            "docs/clients.md runs no {family} snippet: {names:?}"
        );
    }
    let setup = setup().await;
    for snippet in &runs {
        let before = setup.origin.count();
        let mut cmd = setup.command(snippet);
        let out = tokio::time::timeout(Duration::from_secs(120), run_to_success(&mut cmd))
            .await
            .unwrap_or_else(|_| panic!("{}: no end within 120 s", snippet.name));
        assert!(
            out.contains(PAGE),
            "{}: the snippet did not print the page: {out}",
            snippet.name
        );
        let arrivals = setup.origin.arrivals();
        assert!(
            arrivals.len() > before,
            "{}: the site saw no request",
            snippet.name
        );
        for a in &arrivals[before..] {
            let via = a
                .headers
                .get("via")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            assert!(
                via.contains("courtesy"),
                "{}: a request reached the site around courtesy: {:?}",
                snippet.name,
                a.headers
            );
        }
        eprintln!("{}: fetched the page through courtesy", snippet.name);
    }
    for snippet in runs.iter().filter(|s| s.lang == "js") {
        let _ = std::fs::remove_file(
            Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/node"))
                .join(format!(".snippet-{}.mjs", snippet.name)),
        );
    }
}

#[test]
fn the_crawlee_snippets_are_lines_of_the_crawls_the_tests_run() {
    let doc = clients_doc();
    let from: Vec<Snippet> = snippets(&doc)
        .into_iter()
        .filter(|s| s.kind == "from")
        .collect();
    assert_eq!(
        from.len(),
        3,
        "the Node crawl on Crawlee's defaults, and the Node and the Python crawl of the recipe"
    );
    for snippet in from {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join(&snippet.name);
        let script =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let lines: Vec<&str> = script.lines().map(str::trim).collect();
        for line in snippet
            .code
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
        {
            assert!(
                lines.contains(&line),
                "docs/clients.md shows `{line}` from {}, which has no such line",
                snippet.name
            );
        }
    }
}
