//! Scratch directories for the unit tests: unique per process and call, empty at the start. Named
//! like the integration tests' (`courtesy-test-…-PID-N`), whose support code removes those of
//! processes that have ended.

use std::path::PathBuf;

/// A fresh, not yet created directory under the system's temp dir, named after `tag`.
pub(crate) fn dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "courtesy-test-unit-{tag}-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}
