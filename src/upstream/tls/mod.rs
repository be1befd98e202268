//! TLS: the local CA, leaf certificates minted per host (cached, bounded), and the rustls client
//! and server configurations.
//!
//! The CA lives under `state_dir` (directory 0700, key 0600, written atomically, never logged) and is
//! reused across runs; courtesy refuses to start if the key is readable by others. Leaf certificates
//! are minted on demand for the name a client asked for (SNI, else the CONNECT authority), backdated
//! for clock skew, and cached so that a second CONNECT to a host costs no key generation. One crypto
//! provider, [`provider()`], is passed explicitly to every config: no global state, no OpenSSL. It is
//! ring, or with the cargo feature `aws-lc-rs` rustls's aws-lc-rs provider (docs/https.md).
//! This module does not move bytes (`crate::proxy` does, in `proxy/connect/mod.rs`).
//!
//! | file | owns |
//! |---|---|
//! | `ca.rs` | [`LocalCa`]: created once, private, reused; signs leaves |
//! | `leaves.rs` | [`Interceptor`]: leaf server configs per name, minted on demand, cached |
//! | `upstream.rs` | [`client_config`]: verified upstream TLS |

mod ca;
mod leaves;
mod upstream;

use std::sync::Arc;

pub use ca::LocalCa;
#[cfg(test)]
use ca::CA_KEY_FILE;
pub(crate) use leaves::Interceptor;
use rustls::crypto::CryptoProvider;
pub(crate) use upstream::client_config;

/// The crypto provider every config uses: ring, or aws-lc-rs when built with the feature
/// `aws-lc-rs`.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(default_provider())
}

/// The provider of [`provider()`], by value (for `install_default`).
#[cfg(not(feature = "aws-lc-rs"))]
pub(crate) fn default_provider() -> CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// The provider of [`provider()`], by value (for `install_default`).
#[cfg(feature = "aws-lc-rs")]
pub(crate) fn default_provider() -> CryptoProvider {
    rustls::crypto::aws_lc_rs::default_provider()
}

#[cfg(test)]
mod tests;
