//! The scripted origin the scenarios send to through courtesy: many loopback addresses, each
//! recording when requests arrive, because arrival instants are what pacing is judged by.

use std::convert::Infallible;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{anyhow, Context as _};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONNECTION};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Where the proxy's requests go: `127.0.(i / 250 + 1).(i % 250 + 1)`, never 127.0.0.x (courtesy
/// itself listens on 127.0.0.1).
pub fn host_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, (i / 250 + 1) as u8, (i % 250 + 1) as u8)
}

/// One HTTP/1.1 origin listener per address, all on one port, answering 200 "ok" at once and
/// recording every arrival's instant per address.
pub struct Origin {
    /// The port every address listens on.
    pub port: u16,
    arrivals: Arc<Vec<Mutex<Vec<Instant>>>>,
    total: Arc<AtomicU64>,
    stop: watch::Sender<bool>,
    accept_tasks: Vec<JoinHandle<()>>,
}

impl Origin {
    /// Listens on `ips` (one port for all); with `close`, every answer says `Connection: close`.
    pub async fn start(ips: &[Ipv4Addr], close: bool) -> anyhow::Result<Origin> {
        let mut last = anyhow!("no address given");
        for _attempt in 0..20 {
            match Origin::bind_all(ips).await {
                Ok((port, listeners)) => return Ok(Origin::serve(port, listeners, close)),
                Err(e) => last = e,
            }
        }
        Err(last.context(format!("binding an origin on {} addresses", ips.len())))
    }

    /// Binds every address on one port (the first address's, picked by the system).
    async fn bind_all(ips: &[Ipv4Addr]) -> anyhow::Result<(u16, Vec<TcpListener>)> {
        let first_ip = *ips.first().context("no address")?;
        let first = TcpListener::bind((first_ip, 0)).await?;
        let port = first.local_addr()?.port();
        let mut listeners = Vec::with_capacity(ips.len());
        listeners.push(first);
        for ip in &ips[1..] {
            let l = TcpListener::bind((*ip, port))
                .await
                .with_context(|| format!("bind {ip}:{port}"))?;
            listeners.push(l);
        }
        Ok((port, listeners))
    }

    /// Serves every listener until the origin is dropped.
    fn serve(port: u16, listeners: Vec<TcpListener>, close: bool) -> Origin {
        let arrivals: Arc<Vec<Mutex<Vec<Instant>>>> = Arc::new(
            (0..listeners.len())
                .map(|_| Mutex::new(Vec::new()))
                .collect(),
        );
        let total = Arc::new(AtomicU64::new(0));
        let (stop, stopped) = watch::channel(false);
        let mut accept_tasks = Vec::with_capacity(listeners.len());
        for (idx, listener) in listeners.into_iter().enumerate() {
            let (arrivals, total, stopped) = (arrivals.clone(), total.clone(), stopped.clone());
            accept_tasks.push(tokio::spawn(async move {
                loop {
                    let stream = crate::common::accept::next_connection(&listener).await;
                    let (arrivals, total, mut stopped) =
                        (arrivals.clone(), total.clone(), stopped.clone());
                    tokio::spawn(async move {
                        let service = service_fn(move |_req: Request<Incoming>| {
                            let at = Instant::now();
                            arrivals[idx]
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .push(at);
                            total.fetch_add(1, Ordering::Relaxed);
                            let mut response = Response::new(Full::new(Bytes::from_static(b"ok")));
                            if close {
                                response
                                    .headers_mut()
                                    .insert(CONNECTION, HeaderValue::from_static("close"));
                            }
                            std::future::ready(Ok::<_, Infallible>(response))
                        });
                        let conn = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service);
                        tokio::select! {
                            _ = conn => {}
                            _ = stopped.changed() => {}
                        }
                    });
                }
            }));
        }
        Origin {
            port,
            arrivals,
            total,
            stop,
            accept_tasks,
        }
    }

    /// Arrivals at address `idx`, in seconds since `start`, sorted, up to `until`.
    pub fn times(&self, idx: usize, start: Instant, until: Instant) -> Vec<f64> {
        let mut times: Vec<f64> = self.arrivals[idx]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|&&at| at >= start && at <= until)
            .map(|&at| at.duration_since(start).as_secs_f64())
            .collect();
        times.sort_by(f64::total_cmp);
        times
    }

    /// Requests that arrived, at all addresses.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        for task in &self.accept_tasks {
            task.abort();
        }
    }
}
