//! Talking to courtesy the way a crawler's HTTP_PROXY client does: absolute-form requests on
//! fresh or kept-alive connections.

use std::net::SocketAddr;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
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
