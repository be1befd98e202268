//! The CLI verbs that talk to the user or to a running instance: `courtesy env`, `courtesy status`,
//! `courtesy check-url` and `courtesy keys`.

pub mod check_url;
pub mod client_env;
pub mod keys;
pub mod status;
