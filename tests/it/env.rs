//! `courtesy env`: a shell set up with `eval "$(courtesy env)"` sends curl (which reads only the
//! lowercase `http_proxy` for http:// URLs), Python requests and httpx through courtesy, and
//! trusts its CA for intercepted https.

use crate::support::*;
use http::Response;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_courtesy_env_sets_up_a_shell_for_curl_requests_and_httpx() {
    let plain = Origin::start("127.0.0.2", |req| async move {
        let via = req
            .headers()
            .get("via")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("none")
            .to_string();
        Response::new(full(format!("plain via {via}\n")))
    })
    .await;
    let test_ca = TestCa::new();
    let secure = Origin::start_tls(
        "127.0.0.2",
        test_ca.server_config(&["127.0.0.2"]),
        |_req| async { Response::new(full("secure\n")) },
    )
    .await;
    let dir = temp_dir("env");
    let origin_ca = test_ca.write(&dir, "origin-ca.pem");
    let courtesy = Courtesy::start(&format!(
        "[proxy]\nupstream_ca = \"{}\"\nconnect_ports = [{}]\n[defaults]\nrate = 50\nburst = 10\n",
        origin_ca.display(),
        secure.addr.port()
    ))
    .await;
    // The config `courtesy env` reads: where this courtesy listens and keeps its CA.
    let config = dir.join("env.toml");
    std::fs::write(
        &config,
        format!(
            "[proxy]\nlisten = \"{}\"\nstate_dir = \"{}\"\n",
            courtesy.addr,
            courtesy.state_dir.display()
        ),
    )
    .unwrap();
    let script = format!(
        r#"set -e
eval "$('{bin}' env --config '{config}')"
curl -sS --fail '{plain}'
curl -sS --fail '{secure}'
python3 - <<'PY'
import requests, httpx
print("requests", requests.get("{plain}").text.strip())
print("requests", requests.get("{secure}").text.strip())
print("httpx", httpx.get("{secure}").text.strip())
PY
"#,
        bin = env!("CARGO_BIN_EXE_courtesy"),
        config = config.display(),
        plain = plain.url("/curl"),
        secure = format!("https://{}/tls", secure.addr),
    );
    let out = run_to_success(client_command("sh").args(["-c", &script])).await;
    assert!(
        out.contains("plain via 1.1 courtesy"),
        "curl's http:// went through courtesy:\n{out}"
    );
    assert!(out.contains("requests plain via 1.1 courtesy"), "{out}");
    assert_eq!(
        out.matches("secure").count(),
        3,
        "intercepted https verified:\n{out}"
    );
    assert_eq!(plain.count(), 2);
    assert_eq!(secure.count(), 3);
}
