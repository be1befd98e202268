//! The front door: who gets a connection, caps per client and in total, the HTTP server settings every connection is served with, the send timeout on every client connection, and the bounds on WebSockets and tunnels (`sockets`).

pub(crate) mod client_io;
pub(crate) mod connections;
pub(crate) mod gate;
pub(crate) mod sockets;
