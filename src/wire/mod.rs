//! How a host is spelled and named, and the words every layer shares: one canonical spelling per
//! host (`host_name`), the spellings that are addresses (`literal`), the `host:port` key
//! (`host_key`), the hosts file (`hosts_file`), RFC 9209's error types (`proxy_status`), and the
//! URL schemes courtesy forwards (`scheme`); HTTP Message Signatures and the Ed25519 JWK that
//! signs them (`httpsig`).
//! Pure: no I/O, nothing above it.

pub(crate) mod client_group;
pub(crate) mod host_key;
pub mod host_name;
pub(crate) mod hosts_file;
pub(crate) mod httpsig;
pub(crate) mod literal;
pub(crate) mod proxy_status;
pub(crate) mod scheme;
