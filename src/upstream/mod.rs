//! Reaching an origin: DNS with a timeout and the addresses it may dial, parent proxies, the pooled upstream connections, TLS (the local CA and the client and server configs).

pub(crate) mod parent;
pub(crate) mod pool;
pub(crate) mod resolve;
pub(crate) mod tls;
