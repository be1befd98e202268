//! Helpers with no knowledge of proxies or hosts: atomic files, poison-tolerant locks, memory release, batched log writing, scratch directories for tests.

pub(crate) mod files;
pub(crate) mod heap;
pub(crate) mod locks;
pub(crate) mod log_line;
pub(crate) mod log_writer;
pub(crate) mod redact;
#[cfg(test)]
pub(crate) mod scratch;
