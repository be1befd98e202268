//! Files that must never be seen half-written (the CA key, the state file): written through a
//! temporary file, synced, then renamed over the old one.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context as _;

/// Makes an existing directory private (0700) if others may read or enter it; whether it had to.
/// The state directory holds the CA key, the cooldowns and cached responses.
pub(crate) fn tighten_dir(dir: &Path) -> anyhow::Result<bool> {
    use std::os::unix::fs::PermissionsExt as _;
    let Ok(meta) = fs::metadata(dir) else {
        return Ok(false);
    };
    if !meta.is_dir() || meta.permissions().mode() & 0o077 == 0 {
        return Ok(false);
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        .with_context(|| format!("cannot make {} private (0700)", dir.display()))?;
    Ok(true)
}

/// Writes `data` to `path` through a temporary file and a rename, created with `mode` from the start.
pub(crate) fn write_atomically(path: &Path, data: &[u8], mode: u32) -> anyhow::Result<()> {
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let tmp = path.with_extension(format!(
        "tmp-{}-{}",
        std::process::id(),
        WRITES.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_file(&tmp);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .with_context(|| format!("cannot create {}", tmp.display()))?;
    file.write_all(data)
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    fs::rename(&tmp, path).with_context(|| format!("cannot replace {}", path.display()))?;
    // The rename is durable once the directory is synced too.
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .with_context(|| format!("cannot sync {}", dir.display()))?;
    }
    Ok(())
}
