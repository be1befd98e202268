//! Reaching an origin: DNS with a timeout and the addresses it may dial, parent proxies, TLS (the local CA and the client and server configs).

pub(crate) mod parent;
pub(crate) mod resolve;
pub(crate) mod tls;
