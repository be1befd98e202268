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
}

/// A binary installed alone (a wheel, an npm package) has no `config/` beside it: with no file
/// given and none at the default path, `run`, `check` and `env` use the config compiled in, the
/// published-limit presets included; `courtesy config` prints it, and the printed file, saved
/// anywhere, reads back with its presets.
#[test]
fn without_a_file_the_built_in_config_and_its_presets_are_used() {
    let empty = std::env::temp_dir().join(format!("courtesy-no-config-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let courtesy = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_courtesy"))
            .args(args)
            .current_dir(&empty)
            .env("HOME", &empty)
            .env_remove("XDG_STATE_HOME")
            .output()
            .unwrap()
    };
    let check = courtesy(&["check"]);
    assert!(check.status.success(), "{check:?}");
    let out = String::from_utf8_lossy(&check.stdout);
    assert!(
        out.starts_with("<built-in config/courtesy.toml>: ok"),
        "{out}"
    );
    assert!(
        out.contains("of <built-in presets/published.toml> (sec.gov)"),
        "the presets are in: {out}"
    );

    let sec = courtesy(&["check", "--host", "www.sec.gov"]);
    assert!(sec.status.success(), "{sec:?}");
    let out = String::from_utf8_lossy(&sec.stdout);
    assert!(
        out.contains("of <built-in presets/published.toml>") && out.contains("rate=8/s"),
        "the SEC's published limit, from the built-in preset: {out}"
    );

    let printed = courtesy(&["config"]);
    assert!(printed.status.success(), "{printed:?}");
    let text = String::from_utf8(printed.stdout).unwrap();
    assert_eq!(
        text,
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/courtesy.toml"))
            .unwrap(),
        "`courtesy config` prints the file the repository holds"
    );
    // Saved anywhere, without a presets folder beside it, it reads back with the built-in preset.
    let saved = empty.join("mine.toml");
    std::fs::write(&saved, &text).unwrap();
    let mine = courtesy(&["check", saved.to_str().unwrap(), "--host", "www.sec.gov"]);
    assert!(mine.status.success(), "{mine:?}");
    let out = String::from_utf8_lossy(&mine.stdout);
    assert!(
        out.contains("of <built-in presets/published.toml>"),
        "{out}"
    );

    let env = courtesy(&["env"]);
    assert!(env.status.success(), "{env:?}");
    assert!(
        String::from_utf8_lossy(&env.stdout).contains("127.0.0.1:3128"),
        "{env:?}"
    );
    std::fs::remove_dir_all(&empty).ok();
}

/// `include`: an included file's `[[host]]` rules come before the file's own, so that the file's
/// own rule for the same `match` wins; `check --host` names the rule and its file; a file that
/// cannot be read, holds more than rules and jobs, or includes again is a clear error.
#[test]
fn included_rules_come_first_and_a_files_own_rule_wins() {
    let dir = std::env::temp_dir().join(format!("courtesy-include-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("presets")).unwrap();
    std::fs::write(
        dir.join("presets/sites.toml"),
        "[[host]]\nmatch = \"slow.test\"\nrate = 0.5\n[[host]]\nmatch = \"api.test\"\nrate = 3.0\n\
         [[job]]\nname = \"preset-job\"\nweight = 2.0\n",
    )
    .unwrap();
    let main = dir.join("courtesy.toml");
    std::fs::write(
        &main,
        "include = [\"presets/sites.toml\"]\n[[host]]\nmatch = \"api.test\"\nrate = 7.0\n",
    )
    .unwrap();
    let config = courtesy::config::Config::load(&main).unwrap();
    assert_eq!(config.policy_for("slow.test", 443).pacing.rate, 0.5);
    assert_eq!(
        config.policy_for("api.test", 443).pacing.rate,
        7.0,
        "the file's own rule wins"
    );
    assert_eq!(config.jobs[0].name, "preset-job");
    let rule = config.rule_for("slow.test", 443).unwrap();
    assert!(
        rule.source.ends_with("presets/sites.toml"),
        "{}",
        rule.source
    );

    let out = Command::new(env!("CARGO_BIN_EXE_courtesy"))
        .args(["check", main.to_str().unwrap(), "--host", "slow.test"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    assert!(
        said.starts_with("slow.test:443: host rule 1 (slow.test) of ")
            && said.contains("presets/sites.toml")
            && said.contains("rate=0.5/s"),
        "{said}"
    );

    // Problems, each with its file and line.
    std::fs::write(&main, "include = [\"presets/none.toml\"]\n").unwrap();
    let err = courtesy::config::Config::load(&main)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("courtesy.toml:1: include \"presets/none.toml\": cannot read"),
        "{err}"
    );
    std::fs::write(
        dir.join("presets/bad.toml"),
        "[proxy]\nlisten = \"127.0.0.1:1\"\n[[host]]\nmatch = \"x.test\"\nrate = 0\ninclude = 3\n",
    )
    .unwrap();
    std::fs::write(&main, "include = [\"presets/bad.toml\"]\n").unwrap();
    let err = courtesy::config::Config::load(&main)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("bad.toml:1: [proxy] cannot come from an included file"),
        "{err}"
    );
    assert!(
        err.contains("bad.toml:5: host rule 1 (match = \"x.test\"): rate must be > 0"),
        "{err}"
    );
    std::fs::write(
        dir.join("presets/nested.toml"),
        "include = [\"sites.toml\"]\n",
    )
    .unwrap();
    std::fs::write(&main, "include = [\"presets/nested.toml\"]\n").unwrap();
    let err = courtesy::config::Config::load(&main)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("nested.toml:1: an included file cannot include others"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The default config reads the published limits, and they govern their sites.
#[test]
fn the_default_config_reads_the_published_limits() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/courtesy.toml");
    let config = courtesy::config::Config::load(&path).unwrap();
    let sec = config.policy_for("www.sec.gov", 443);
    assert!(
        sec.pacing.rate < 10.0 && sec.pacing.rate >= 5.0,
        "{}",
        sec.pacing.rate
    );
    assert_eq!(
        sec.scope.key,
        courtesy::config::KeyMode::Domain,
        "one budget for all of sec.gov"
    );
    let nominatim = config.policy_for("nominatim.openstreetmap.org", 443);
    assert!(nominatim.pacing.rate <= 1.0 && nominatim.pacing.concurrency == 1);
    assert!(config.policy_for("crates.io", 443).pacing.rate <= 1.0);
}

/// Every `*.toml` under `dir`, at any depth.
fn tomls_under(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            tomls_under(&path, out);
        } else if path.extension().is_some_and(|e| e == "toml") {
            out.push(path);
        }
    }
}

#[test]
fn every_shipped_deny_list_names_the_prefixes_that_carry_ipv4() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    tomls_under(&root.join("config"), &mut files);
    tomls_under(&root.join("deploy"), &mut files);
    let mut lists = 0;
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let Ok(doc) = text.parse::<toml::Table>() else {
            continue;
        };
        let Some(deny) = doc
            .get("proxy")
            .and_then(|p| p.get("deny_destinations"))
            .and_then(|d| d.as_array())
            .filter(|d| !d.is_empty())
        else {
            continue;
        };
        lists += 1;
        for net in [
            "127.0.0.0/8",
            "169.254.0.0/16",
            "64:ff9b::/96",
            "64:ff9b:1::/48",
            "2002::/16",
        ] {
            assert!(
                deny.iter().any(|d| d.as_str() == Some(net)),
                "{}: deny_destinations lacks {net}",
                path.display()
            );
        }
    }
    assert!(lists >= 3, "the team, Kubernetes and compose examples");
}
