//! HTTP Message Signatures (RFC 9421) as Web Bot Auth uses them: the Ed25519 key as a JWK with
//! its thumbprint (`key`), the signature base and fields (`base`), and the signatures a message
//! already carries (`carried`). Pure: a key is read from
//! text the config layer read; nothing here does I/O or knows a request type.

mod base;
mod carried;
mod key;

pub(crate) use base::{sf_string, sign, Component, Param};
pub(crate) use carried::{carried, members, Carried};
pub use key::SigningKey;
