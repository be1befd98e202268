//! HTTP Message Signatures (RFC 9421) as Web Bot Auth uses them: the Ed25519 key as a JWK with
//! its thumbprint (`key`), and the signature base and fields (`base`). Pure: a key is read from
//! text the config layer read; nothing here does I/O or knows a request type.

mod base;
mod key;

pub(crate) use base::{sf_string, sign, Component, Param};
pub use key::SigningKey;
