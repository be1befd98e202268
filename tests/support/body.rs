//! Bodies that the scripted origins answer with and the test clients send: one boxed type for
//! full, empty and streamed bodies, so that every handler and request has the same signature.

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};

/// A response body the origin or client can build: full, empty or streamed.
pub type TestBody = BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// Wraps bytes as a [`TestBody`].
pub fn full(data: impl Into<Bytes>) -> TestBody {
    Full::new(data.into()).map_err(|e| match e {}).boxed()
}

/// An empty [`TestBody`].
pub fn empty() -> TestBody {
    Empty::new().map_err(|e| match e {}).boxed()
}
