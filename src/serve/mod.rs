//! Running the whole: building the parts, accepting on both ports, the tasks beside serving, the state that survives a restart, graceful shutdown.

pub(crate) mod server;
pub(crate) mod state;
pub(crate) mod tasks;
pub(crate) mod unparsable;
