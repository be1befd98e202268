//! Every file in `config/` loads and validates, so the examples never rot; `courtesy check` prints
//! the policies and fails with file, line and key on a bad file.

use std::process::Command;

#[test]
fn every_config_file_in_the_repo_is_valid() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            if let Err(e) = courtesy::config::Config::load(&path) {
                panic!("{} is invalid:\n{e}", path.display());
            }
            seen += 1;
        }
    }
    assert!(seen >= 1, "no config files found in {}", dir.display());
}

#[test]
fn the_default_file_matches_the_built_in_defaults() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/courtesy.toml");
    let file = courtesy::config::Config::load(&path).unwrap();
    let built_in = courtesy::config::Config::default();
    assert_eq!(*file.defaults, *built_in.defaults);
    let mut proxy = file.proxy.clone();
    proxy.state_dir = built_in.proxy.state_dir.clone();
    assert_eq!(proxy, built_in.proxy);
}

#[test]
fn check_prints_each_rule_and_rejects_bad_files() {
    let good = Command::new(env!("CARGO_BIN_EXE_courtesy"))
        .args([
            "check",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/team.toml"),
        ])
        .output()
        .unwrap();
    assert!(good.status.success());
    let out = String::from_utf8_lossy(&good.stdout);
    assert!(
        out.contains("host rule 1 (*.large-retailer.example)"),
        "{out}"
    );
    assert!(out.contains("rate=5/s"), "{out}");

    let dir = std::env::temp_dir().join(format!("courtesy-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "[defaults]\nrate = 0\n[[host]]\nmatch = \"*.shop.test\"\nburst = -2\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_courtesy"))
        .args(["check", bad.to_str().unwrap()])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.toml:2: [defaults]: rate must be > 0"),
        "{err}"
    );
    assert!(
        err.contains("bad.toml:5: host rule 1 (match = \"*.shop.test\"): burst"),
        "{err}"
    );
}

#[test]
fn check_takes_the_file_from_config_too() {
    // `courtesy check --config FILE` is how deploy/courtesy.service's ExecStartPre= and the
    // container examples call it.
    let out = Command::new(env!("CARGO_BIN_EXE_courtesy"))
        .args([
            "check",
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/team.toml"),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("team.toml: ok"));

    let none = Command::new(env!("CARGO_BIN_EXE_courtesy"))
        .arg("check")
        .output()
        .unwrap();
    assert!(!none.status.success());
    assert!(String::from_utf8_lossy(&none.stderr).contains("check needs a file"));
}
