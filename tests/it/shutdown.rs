//! End-to-end graceful shutdown inside intercepted HTTPS: a request in flight inside a CONNECT
//! tunnel gets `shutdown_grace_seconds` to finish like a plain one, a request queued inside a tunnel
//! gets the 503, and courtesy does not return before the tunnel's work is done.

use std::time::Duration;

use crate::support::*;
use http::Response;

/// A reqwest client that sends https:// through `courtesy` and trusts its CA.
fn intercepting_client(courtesy: &Courtesy) -> reqwest::Client {
    reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(format!("http://{}", courtesy.addr)).unwrap())
        .tls_backend_preconfigured(client_tls_trusting(&courtesy.ca_path()))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_inside_intercepted_tunnels_get_the_grace_and_queued_ones_the_503() {
    let test_ca = TestCa::new();
    let tls = test_ca.server_config(&["127.0.0.1"]);
    let origin = Origin::start_tls("127.0.0.1", tls, |_req| async {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        Response::new(full("finished inside the tunnel"))
    })
    .await;
    let dir = temp_dir("tunnel-shutdown");
    let ca = test_ca.write(&dir, "origin-ca.pem");
    let config = format!(
        "[proxy]\nupstream_ca = \"{}\"\nconnect_ports = [{}]\nshutdown_grace_seconds = 20\n\
         [defaults]\nrate = 0.2\nburst = 1\nconcurrency = 1\n",
        ca.display(),
        origin.addr.port()
    );
    let courtesy = Courtesy::start(&config).await;
    let url = format!("https://{}/slow", origin.addr);
    let in_flight = {
        let (client, url) = (intercepting_client(&courtesy), url.clone());
        tokio::spawn(async move { client.get(url).send().await })
    };
    assert!(eventually(Duration::from_secs(5), || origin.count() == 1).await);
    // A second tunnel's request waits for the next token (5 s away at 0.2/s).
    let queued = {
        let client = intercepting_client(&courtesy);
        tokio::spawn(async move { client.get(url).send().await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stopped = courtesy.begin_shutdown();

    let queued = queued.await.unwrap().unwrap();
    assert_eq!(queued.status(), 503);
    let status = queued.headers()["proxy-status"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(status.contains("shutting down"), "{status}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !stopped.is_finished(),
        "courtesy returned while a request inside a tunnel was still in flight"
    );
    let finished = in_flight.await.unwrap().unwrap();
    assert_eq!(finished.status(), 200);
    assert_eq!(finished.text().await.unwrap(), "finished inside the tunnel");
    let run = tokio::time::timeout(Duration::from_secs(10), stopped)
        .await
        .expect("courtesy stops once the tunnel's request is done");
    assert!(run.unwrap().is_ok());
    assert_eq!(origin.count(), 1, "the queued request never left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_requests_drain_readyz_says_503_and_the_admin_port_answers() {
    let origin = Origin::slow("127.0.0.1", Duration::from_millis(1500), "late but whole").await;
    let courtesy = Courtesy::start("[proxy]\nshutdown_grace_seconds = 10\n").await;
    let admin = courtesy.admin;
    let (status, _) = admin_call("GET", &format!("http://{admin}/readyz"), None, "").await;
    assert_eq!(status, http::StatusCode::OK);
    let in_flight = courtesy.client().spawn_get(origin.url("/slow"));
    assert!(eventually(Duration::from_secs(2), || origin.count() == 1).await);
    let stopped = courtesy.begin_shutdown();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (status, body) = admin_call("GET", &format!("http://{admin}/readyz"), None, "").await;
    assert_eq!(status, http::StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(
        body.contains("\"ready\":false") || body.contains("\"ready\": false"),
        "{body}"
    );
    let (status, _) = admin_call("GET", &format!("http://{admin}/metrics"), None, "").await;
    assert_eq!(
        status,
        http::StatusCode::OK,
        "metrics stay readable while draining"
    );
    let got = in_flight.await.unwrap();
    assert_eq!(got.status, http::StatusCode::OK);
    stopped.await.unwrap().unwrap();
    assert!(
        std::net::TcpStream::connect(admin).is_err(),
        "the admin port closes once the drain is over"
    );
}
