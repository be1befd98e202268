//! Temporary directories for tests: each one fresh and empty, named after the test process so
//! that parallel tests and runs never share state. The first call in a process removes the
//! directories that earlier test processes left behind (named after a process that is gone), so
//! that runs do not pile them up in the temp dir.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;

/// What every directory made here is named with first.
const PREFIX: &str = "courtesy-test-";

/// A fresh, empty temporary directory for one test.
pub fn temp_dir(tag: &str) -> PathBuf {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    static SWEPT: Once = Once::new();
    SWEPT.call_once(|| sweep_stale(&std::env::temp_dir()));
    let dir = std::env::temp_dir().join(format!(
        "{PREFIX}{tag}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Removes the directories under `tmp` made here by test processes that no longer run.
fn sweep_stale(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let owner = name.to_str().and_then(owner_of);
        let gone = owner.is_some_and(|pid| {
            pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists()
        });
        if gone && entry.file_type().is_ok_and(|t| t.is_dir()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The process a directory named by [`temp_dir`] belongs to: `courtesy-test-TAG-PID-N`.
fn owner_of(name: &str) -> Option<u32> {
    let mut parts = name.strip_prefix(PREFIX)?.rsplit('-');
    parts.next()?.parse::<usize>().ok()?;
    parts.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_made_here_have_an_owner() {
        assert_eq!(owner_of("courtesy-test-state-123-4"), Some(123));
        assert_eq!(owner_of("courtesy-test-ws-tls-9-0"), Some(9));
        assert_eq!(owner_of("courtesy-instructions.RC8yS0"), None);
        assert_eq!(owner_of("courtesy-test-state-x-4"), None);
        assert_eq!(owner_of("other-state-123-4"), None);
    }
}
