//! The front door: who gets a connection, caps per client and in total, the HTTP server settings every connection is served with, and the send timeout on every client connection.

pub(crate) mod client_io;
pub(crate) mod connections;
pub(crate) mod gate;
