//! Talking to courtesy the way a crawler's HTTP_PROXY client does: absolute-form requests on
//! fresh or kept-alive connections, requests spawned to wait in courtesy side by side, and raw
//! CONNECT tunnels.

use std::fmt::Display;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use super::body::{empty, TestBody};

/// A response as the client got it, body collected.
#[derive(Debug)]
pub struct Got {
    /// Status code.
    pub status: StatusCode,
    /// Headers.
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
}

impl Got {
    /// A header as a string ("" when missing).
    pub fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    }

    /// Every line of a header, in order ("?" for one that is not text).
    pub fn header_lines(&self, name: &str) -> Vec<&str> {
        self.headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap_or("?"))
            .collect()
    }
}

/// Sends requests through a proxy, as HTTP_PROXY clients do: absolute-form request lines.
#[derive(Debug, Clone, Copy)]
pub struct ProxyClient {
    /// The proxy's address.
    pub proxy: SocketAddr,
}

/// A kept-alive connection to the proxy.
pub struct ProxyConn {
    sender: hyper::client::conn::http1::SendRequest<TestBody>,
    task: JoinHandle<()>,
}

impl Drop for ProxyConn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ProxyClient {
    /// Opens a new connection to the proxy.
    pub async fn connect(&self) -> ProxyConn {
        let stream = TcpStream::connect(self.proxy).await.unwrap();
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        let task = tokio::spawn(async move {
            let _ = conn.await;
        });
        ProxyConn { sender, task }
    }

    /// GET `url` on a fresh connection.
    pub async fn get(&self, url: &str) -> Got {
        self.connect().await.get(url).await
    }

    /// Sends `req` on a fresh connection.
    pub async fn send(&self, req: Request<TestBody>) -> Got {
        self.connect().await.send(req).await
    }

    /// GET `url` on a fresh connection in a task of its own, so that the test can go on while
    /// the request waits in courtesy (queued, in flight, or to be given up by aborting the task).
    pub fn spawn_get(&self, url: String) -> JoinHandle<Got> {
        let client = *self;
        tokio::spawn(async move { client.get(&url).await })
    }

    /// [`ProxyClient::spawn_get`] for each of `urls`, spawned in their order: so many clients
    /// at once, each on its own connection.
    pub fn spawn_gets(&self, urls: impl IntoIterator<Item = String>) -> Vec<JoinHandle<Got>> {
        urls.into_iter().map(|url| self.spawn_get(url)).collect()
    }
}

impl ProxyConn {
    /// GET `url` on this connection.
    pub async fn get(&mut self, url: &str) -> Got {
        self.send(Request::get(url).body(empty()).unwrap()).await
    }

    /// Sends `req` on this connection and collects the response.
    pub async fn send(&mut self, req: Request<TestBody>) -> Got {
        self.sender.ready().await.unwrap();
        let response = self.sender.send_request(req).await.unwrap();
        let (parts, body) = response.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        Got {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    }

    /// Sends `req` and returns the streaming response.
    pub async fn send_streaming(&mut self, req: Request<TestBody>) -> Response<Incoming> {
        self.sender.ready().await.unwrap();
        self.sender.send_request(req).await.unwrap()
    }
}

/// Opens a TCP connection to the proxy at `proxy`, asks it to `CONNECT target`, and returns the
/// stream with the first bytes of the answer (its status line and headers) as text, so that the
/// test can check the answer and then speak through the tunnel.
pub async fn open_tunnel(proxy: SocketAddr, target: impl Display) -> (TcpStream, String) {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    stream
        .write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = vec![0u8; 1024];
    let n = stream.read(&mut buf).await.unwrap();
    let head = String::from_utf8_lossy(&buf[..n]).into_owned();
    (stream, head)
}
