//! Accepting on the benches' origins: the next connection, with Nagle off, pausing briefly on an
//! accept error (out of descriptors and the like) instead of spinning.

use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

/// The next accepted connection on `listener`.
pub async fn next_connection(listener: &TcpListener) -> TcpStream {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                return stream;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}
