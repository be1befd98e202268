//! Files that must never be seen half-written (the CA key, the state file): written through a
//! temporary file, synced, then renamed over the old one.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context as _;

/// Refuses `path` (`what` names it in the message) if it exists and is owned by a user other
/// than courtesy's own (the effective uid) or root, as OpenSSH's `StrictModes` does for a user's
/// keys: the owner of the state directory or of the CA key can read or replace the key, and so
/// read or forge every TLS answer clients trust the CA for. Root may own them (root can do all
/// of that anyway, and a volume mount point, a Kubernetes `emptyDir`, is root's); running as
/// root, only root may. A missing path passes: courtesy creates it, as its own.
pub(crate) fn refuse_foreign_owner(path: &Path, what: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(meta) = fs::symlink_metadata(path) else {
        return Ok(());
    };
    let own = rustix::process::geteuid().as_raw();
    let owner = meta.uid();
    if owner == own || owner == 0 {
        return Ok(());
    }
    anyhow::bail!(
        "{what} {} is owned by uid {owner}{}, not by courtesy's user (uid {own}{}) or root: \
         whoever owns it can read or replace the CA key. Run courtesy as its owner, `chown` it \
         to courtesy's user, or set [proxy] state_dir to a directory of courtesy's own",
        path.display(),
        user_name(owner).map_or(String::new(), |n| format!(" ({n})")),
        user_name(own).map_or(String::new(), |n| format!(" ({n})")),
    )
}

/// Refuses a private key file (`what` names it: `"the key file"`) that others may read or
/// that a user other than courtesy's own (or root) owns, as [`refuse_foreign_owner`] and the CA
/// key's mode check do for the CA key: whoever can read a Web Bot Auth key can sign as the
/// crawler, and whoever owns the file can replace it. The message names the path, its mode and
/// its owner. A missing file passes here; reading it says so.
pub(crate) fn refuse_loose_private_file(path: &Path, what: &str) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(meta) = fs::metadata(path) else {
        return Ok(());
    };
    let own = rustix::process::geteuid().as_raw();
    let (owner, mode) = (meta.uid(), meta.mode() & 0o777);
    let named = |uid: u32| user_name(uid).map_or(String::new(), |n| format!(" ({n})"));
    if owner != own && owner != 0 {
        return Err(format!(
            "{what} {} (mode {mode:04o}) is owned by uid {owner}{}, not by courtesy's user \
             (uid {own}{}) or root: whoever owns it can replace the key. `chown` it to \
             courtesy's user and `chmod 600` it",
            path.display(),
            named(owner),
            named(own),
        ));
    }
    if mode & 0o077 != 0 {
        return Err(format!(
            "{what} {} is readable or writable by group or others (mode {mode:04o}, owner uid \
             {owner}{}): whoever reads it can sign as the crawler. Run `chmod 600 {}`",
            path.display(),
            named(owner),
            path.display(),
        ));
    }
    Ok(())
}

/// The name of user `uid` in `/etc/passwd`, for messages (none where it is not listed).
fn user_name(uid: u32) -> Option<String> {
    let passwd = fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        (fields.nth(1)?.parse::<u32>().ok()? == uid).then(|| name.to_string())
    })
}

/// Makes an existing directory private (0700) if others may read or enter it; whether it had to.
/// The state directory holds the CA key, the cooldowns and cached responses. A directory another
/// user owns is refused first ([`refuse_foreign_owner`]). One of courtesy's own that others could
/// write to is made private, not refused: a file another user left in it meanwhile is refused
/// when read (the CA key and certificate are checked for their owner too), so tightening is
/// enough, and it keeps a volume created with a loose mode working.
pub(crate) fn tighten_dir(dir: &Path) -> anyhow::Result<bool> {
    use std::os::unix::fs::PermissionsExt as _;
    refuse_foreign_owner(dir, "the state directory")?;
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
