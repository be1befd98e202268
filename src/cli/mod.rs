//! The CLI verbs that talk to the user or to a running instance: `courtesy env` and `courtesy status`.

pub mod client_env;
pub mod status;
