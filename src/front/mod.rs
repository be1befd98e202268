//! The front door: who gets a connection, caps per client and in total, and the HTTP server settings every connection is served with.

pub(crate) mod connections;
pub(crate) mod gate;
