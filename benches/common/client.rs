//! A plain kept-alive HTTP/1.1 client connection, the way a crawler talks to courtesy (and the way
//! the benches call its admin listener).

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper::header::HOST;
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// A kept-alive HTTP/1.1 connection (to courtesy: absolute-form requests, as HTTP_PROXY clients send).
pub struct Client {
    sender: SendRequest<Empty<Bytes>>,
    task: JoinHandle<()>,
}

impl Drop for Client {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Client {
    /// Opens a connection to `addr` (no request yet).
    pub async fn connect(addr: SocketAddr) -> anyhow::Result<Client> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        let task = tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Client { sender, task })
    }

    /// GET `target` (an absolute URL through a proxy, or a path) with `Host: host`.
    pub async fn get(&mut self, target: &str, host: &str) -> anyhow::Result<(u16, Bytes)> {
        let (status, _, body) = self.get_with_headers(target, host).await?;
        Ok((status, body))
    }

    /// Like [`Client::get`], with the response's headers.
    pub async fn get_with_headers(
        &mut self,
        target: &str,
        host: &str,
    ) -> anyhow::Result<(u16, hyper::HeaderMap, Bytes)> {
        let req = Request::get(target).header(HOST, host).body(Empty::new())?;
        self.sender.ready().await?;
        let response = self.sender.send_request(req).await?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await?.to_bytes();
        Ok((status, headers, body))
    }
}
