//! The local CA's life cycle, the leaf cache, and upstream root files.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use super::*;

fn temp_dir(tag: &str) -> PathBuf {
    crate::util::scratch::dir(&format!("tls-{tag}"))
}

#[test]
fn the_ca_is_created_once_private_and_reused() {
    let dir = temp_dir("ca");
    let first = LocalCa::load_or_create(&dir).unwrap();
    let key_mode = fs::metadata(dir.join(CA_KEY_FILE))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(key_mode & 0o777, 0o600);
    let dir_mode = fs::metadata(&dir).unwrap().permissions().mode();
    assert_eq!(dir_mode & 0o777, 0o700);
    let again = LocalCa::load_or_create(&dir).unwrap();
    assert_eq!(first.cert_pem(), again.cert_pem(), "reused, not recreated");
    let fresh = LocalCa::regenerate(&dir).unwrap();
    assert_ne!(first.cert_pem(), fresh.cert_pem());
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_key_readable_by_others_is_refused() {
    let dir = temp_dir("mode");
    LocalCa::load_or_create(&dir).unwrap();
    fs::set_permissions(dir.join(CA_KEY_FILE), fs::Permissions::from_mode(0o644)).unwrap();
    let err = LocalCa::load_or_create(&dir).unwrap_err().to_string();
    assert!(err.contains("readable by others"), "{err}");
    let _ = fs::remove_dir_all(&dir);
}

/// `nobody`'s uid: the owner of the files another user left.
const NOBODY: u32 = 65534;

/// Gives `path` to `nobody`; `false` where this process may not (not root, outside CI).
fn give_to_nobody(path: &std::path::Path) -> bool {
    match std::os::unix::fs::chown(path, Some(NOBODY), None) {
        Ok(()) => true,
        Err(e) if std::env::var_os("CI").is_none() => {
            eprintln!(
                "skipped: cannot chown {} ({e}); run as root",
                path.display()
            );
            false
        }
        Err(e) => panic!("cannot chown {}: {e}", path.display()),
    }
}

#[test]
fn a_state_dir_or_ca_key_another_user_owns_is_refused() {
    let dir = temp_dir("owner");
    LocalCa::load_or_create(&dir).unwrap();
    let key = dir.join(CA_KEY_FILE);
    if !give_to_nobody(&key) {
        return;
    }
    let err = format!("{:#}", LocalCa::load_or_create(&dir).unwrap_err());
    assert!(err.contains(&key.display().to_string()), "{err}");
    assert!(
        err.contains("the CA key") && err.contains("uid 65534"),
        "{err}"
    );
    let mine = rustix::process::geteuid().as_raw();
    std::os::unix::fs::chown(&key, Some(mine), None).unwrap();
    LocalCa::load_or_create(&dir).unwrap();

    give_to_nobody(&dir);
    for err in [
        LocalCa::load_or_create(&dir).unwrap_err(),
        crate::util::files::tighten_dir(&dir).unwrap_err(),
    ] {
        let err = format!("{err:#}");
        assert!(err.contains(&dir.display().to_string()), "{err}");
        assert!(
            err.contains("the state directory") && err.contains("uid 65534"),
            "{err}"
        );
    }
    // Root's own directory (a volume's mount point) is trusted: root could read the key anyway.
    std::os::unix::fs::chown(&dir, Some(0), None).unwrap();
    LocalCa::load_or_create(&dir).unwrap();
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn leaves_are_cached_and_bad_names_are_errors() {
    let dir = temp_dir("leaf");
    let interceptor = Interceptor::new(LocalCa::load_or_create(&dir).unwrap());
    interceptor.server_config("shop.example.com").unwrap();
    interceptor.server_config("shop.example.com").unwrap();
    interceptor.server_config("127.0.0.1").unwrap();
    assert_eq!(interceptor.cache_stats(), (1, 2));
    assert!(interceptor.server_config("caf\u{e9}.test").is_err());
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn upstream_ca_files_are_checked() {
    let dir = temp_dir("upstream");
    fs::create_dir_all(&dir).unwrap();
    let empty = dir.join("empty.pem");
    fs::write(&empty, "").unwrap();
    assert!(client_config(Some(&empty)).is_err());
    let ca = LocalCa::load_or_create(&dir.join("ca")).unwrap();
    assert!(client_config(Some(&ca.cert_path())).is_ok());
    assert!(client_config(None).is_ok());
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn concurrent_first_connects_mint_once_per_name() {
    let dir = temp_dir("mint-once");
    let interceptor = Arc::new(Interceptor::new(LocalCa::load_or_create(&dir).unwrap()));
    let threads: Vec<_> = (0..16)
        .map(|i| {
            let interceptor = interceptor.clone();
            std::thread::spawn(move || {
                let name = format!("host{}.test", i % 4);
                interceptor.server_config(&name).unwrap()
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let (hits, minted) = interceptor.cache_stats();
    assert_eq!(minted, 4, "one leaf per name");
    assert_eq!(hits, 12);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn leaves_for_different_names_present_the_one_key_they_are_given() {
    let dir = temp_dir("one-key");
    let ca = LocalCa::load_or_create(&dir).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let public = key.public_key_raw().to_vec();
    let shop = ca.mint("shop.example.com", &key).unwrap();
    let news = ca.mint("news.example.org", &key).unwrap();
    assert_ne!(shop[0], news[0], "a certificate of its own per name");
    for chain in [&shop, &news] {
        assert!(
            chain[0].windows(public.len()).any(|w| w == public),
            "the leaf carries the given public key"
        );
        assert_eq!(
            &chain[1],
            ca.cert_der(),
            "the CA's certificate follows the leaf"
        );
    }
    let _ = fs::remove_dir_all(&dir);
}
