//! The config's unit tests: parsing, rule precedence, messages with their lines, patterns.

use super::*;

fn parse(text: &str) -> Result<Config, ConfigErrors> {
    Config::parse(text, "test.toml")
}

#[test]
fn an_empty_file_gives_the_seed_defaults() {
    let c = parse("").unwrap();
    assert_eq!(*c.defaults, HostPolicy::default());
    assert_eq!(c.defaults.pacing.rate, 1.0);
    assert_eq!(c.defaults.pacing.concurrency, 1);
    assert_eq!(c.proxy.listen, "127.0.0.1:3128".parse().unwrap());
    assert_eq!(c.proxy.admin_listen, "127.0.0.1:3129".parse().unwrap());
}

#[test]
fn the_most_specific_rule_wins() {
    let c = parse(
        r#"
        [defaults]
        rate = 2
        [[host]]
        match = "*.example.com"
        rate = 3.0
        [[host]]
        match = "*.shop.example.com"
        rate = 4.0
        [[host]]
        match = "a.shop.example.com"
        burst = 7
        [[host]]
        match = "a.shop.example.com:8080"
        rate = 9.0
        "#,
    )
    .unwrap();
    assert_eq!(c.policy_for("other.test", 80).pacing.rate, 2.0);
    assert_eq!(
        c.policy_for("example.com", 80).pacing.rate,
        2.0,
        "*.x does not match x"
    );
    assert_eq!(c.policy_for("www.example.com", 80).pacing.rate, 3.0);
    assert_eq!(c.policy_for("b.shop.example.com", 80).pacing.rate, 4.0);
    let exact = c.policy_for("a.shop.example.com", 443);
    assert_eq!(
        (exact.pacing.rate, exact.pacing.burst),
        (2.0, 7),
        "unset keys come from [defaults]"
    );
    assert_eq!(c.policy_for("a.shop.example.com", 8080).pacing.rate, 9.0);
    assert_eq!(c.policy_for("notexample.com", 80).pacing.rate, 2.0);
}

#[test]
fn all_errors_are_reported_at_once_with_line_key_and_value() {
    let err = parse(
        "[defaults]\nrate = 0\nburst = 0\njitter = 1.5\n[[host]]\nmatch = \"*.shop.test\"\nrate = -1\n",
    )
    .unwrap_err();
    assert_eq!(err.errors.len(), 4, "{err}");
    assert_eq!(
        err.errors[0],
        "test.toml:2: [defaults]: rate must be > 0 and at most 1000000 requests per second, got 0"
    );
    assert!(
        err.errors[1].starts_with("test.toml:3: [defaults]: burst"),
        "{err}"
    );
    assert!(err.errors[2].contains("jitter") && err.errors[2].contains("1.5"));
    assert!(err.errors[3]
        .starts_with("test.toml:7: host rule 1 (match = \"*.shop.test\"): rate must be > 0"));
}

#[test]
fn unknown_keys_and_wrong_types_name_the_line() {
    let err = parse("[defaults]\nrate = 1\nrat = 2\n").unwrap_err();
    assert!(err.errors[0].starts_with("test.toml:3:"), "{err}");
    assert!(err.errors[0].contains("rat"), "{err}");
    let err = parse("[defaults]\njiter = 0.5\n").unwrap_err();
    assert!(err.errors[0].ends_with("did you mean `jitter`?"), "{err}");
    let err = parse("[proxy]\nmax_in_flight = \"many\"\n").unwrap_err();
    assert!(err.errors[0].starts_with("test.toml:2:"), "{err}");
}

#[test]
fn listening_beyond_loopback_needs_allow_clients() {
    let err = parse("[proxy]\nlisten = \"0.0.0.0:3128\"\n").unwrap_err();
    assert!(err.errors[0].contains("allow_clients"), "{err}");
    let c = parse(
        "[proxy]\nlisten = \"0.0.0.0:3128\"\nallow_clients = [\"10.0.0.0/8\", \"192.168.1.7\"]\n",
    )
    .unwrap();
    assert!(c.client_allowed("10.1.2.3".parse().unwrap()));
    assert!(c.client_allowed("192.168.1.7".parse().unwrap()));
    assert!(c.client_allowed("::ffff:10.1.2.3".parse().unwrap()));
    assert!(
        !c.client_allowed("127.0.0.1".parse().unwrap()),
        "the list replaces loopback"
    );
    assert!(!c.client_allowed("192.168.1.8".parse().unwrap()));
    assert!(Config::default().client_allowed("::1".parse().unwrap()));
    assert!(!Config::default().client_allowed("10.0.0.1".parse().unwrap()));
    assert!(c
        .check_listen("listen", "0.0.0.0:1".parse().unwrap())
        .is_ok());
    assert!(Config::default()
        .check_listen("listen", "0.0.0.0:1".parse().unwrap())
        .is_err());
}

#[test]
fn bad_patterns_and_networks_are_reported() {
    let err = parse(
        "[proxy]\nallow_clients = [\"nope\"]\n[[host]]\nmatch = \"a.*.b\"\n[[host]]\nmatch = \"x:y\"\n",
    )
    .unwrap_err();
    assert_eq!(err.errors.len(), 3, "{err}");
    assert!(err.errors[0].starts_with("test.toml:2:"));
    assert!(err.errors[1].starts_with("test.toml:4: host rule 1"));
    assert!(err.errors[2].starts_with("test.toml:6: host rule 2"));
}

#[test]
fn a_bad_cidr_in_the_destination_lists_names_file_line_and_key() {
    let err = parse(
        "[proxy]\ndeny_destinations = [\"10.0.0.0/8\",\n  \"10.0.0.0/33\"]\nallow_destinations = [\"x\"]\n",
    )
    .unwrap_err();
    assert_eq!(err.errors.len(), 2, "{err}");
    assert!(
        err.errors[0].starts_with("test.toml:3: [proxy] deny_destinations:")
            && err.errors[0].contains("10.0.0.0/33"),
        "{err}"
    );
    assert!(
        err.errors[1].starts_with("test.toml:4: [proxy] allow_destinations:"),
        "{err}"
    );
    let c = parse(
        "[proxy]\ndeny_destinations = [\"10.0.0.0/8\", \"fe80::/10\", \"169.254.169.254\"]\n\
         allow_destinations = [\"10.1.0.0/16\"]\n",
    )
    .unwrap();
    assert_eq!(c.proxy.deny_destinations.len(), 3);
    assert_eq!(c.proxy.allow_destinations.len(), 1);
}

#[test]
fn patterns_parse_ports_and_ipv6() {
    let p = HostPattern::parse("[::1]:8080").unwrap();
    assert!(p.specificity("::1", 8080).is_some());
    assert!(p.specificity("::1", 80).is_none());
    let p = HostPattern::parse("127.0.0.2").unwrap();
    assert!(p.specificity("127.0.0.2", 1234).is_some());
    assert_eq!(
        HostPattern::parse("*.Example.COM").unwrap().to_string(),
        "*.example.com"
    );
}

#[test]
fn patterns_are_canonical_host_names() {
    let p = HostPattern::parse("Slow.Test.:8080").unwrap();
    assert!(p.specificity("slow.test", 8080).is_some());
    let p = HostPattern::parse("[0:0:0:0:0:0:0:1]:8080").unwrap();
    assert!(p.specificity("::1", 8080).is_some());
    assert_eq!(p.to_string(), "[::1]:8080");
    let p = HostPattern::parse("*.Bücher.example").unwrap();
    assert!(p.specificity("www.xn--bcher-kva.example", 443).is_some());
    assert!(HostPattern::parse("[::ffff:127.0.0.2]")
        .unwrap()
        .specificity("127.0.0.2", 80)
        .is_some());
    for bad in ["a..b", "a.test..", "*.a..b", "a b"] {
        assert!(HostPattern::parse(bad).is_err(), "{bad:?}");
    }
}

/// The words of every closed-choice enum, as each file key has always spelled them.
fn words<T: ConfigWord>() -> Vec<&'static str> {
    T::ALL.iter().map(|v| v.word()).collect()
}

/// Each value read back from its word, and shown as it.
fn reads_back<T: ConfigWord + PartialEq + std::fmt::Debug + std::fmt::Display>() {
    for &value in T::ALL {
        assert_eq!(T::from_word(value.word()), Some(value));
        assert_eq!(value.to_string(), value.word());
    }
}

#[test]
fn each_choice_has_one_word_table_with_the_file_words() {
    assert_eq!(words::<OnCooldown>(), ["reject", "hold", "auto"]);
    assert_eq!(words::<HttpsMode>(), ["intercept", "tunnel"]);
    assert_eq!(words::<CacheMode>(), ["off", "http", "revalidate", "dev"]);
    assert_eq!(words::<KeyMode>(), ["host", "domain", "ip"]);
    assert_eq!(
        words::<ResourceKind>(),
        ["image", "font", "script", "stylesheet", "media"]
    );
    reads_back::<OnCooldown>();
    reads_back::<HttpsMode>();
    reads_back::<CacheMode>();
    reads_back::<KeyMode>();
    reads_back::<ResourceKind>();
    assert_eq!(words::<Controller>(), ["aimd", "cubic"]);
    reads_back::<Controller>();
    assert_eq!(words::<UpstreamHttp2>(), ["auto", "off"]);
    reads_back::<UpstreamHttp2>();
    assert_eq!(OnCooldown::from_word("Reject"), None, "words are exact");
    assert_eq!(CacheMode::from_word(""), None);
}

#[test]
fn a_word_outside_its_table_lists_every_choice_in_file_order() {
    let err = parse(
        "[defaults]\non_cooldown = \"x\"\nhttps = \"y\"\ncache = \"z\"\nskip_resources = [\"image\", \"gif\"]\n",
    )
    .unwrap_err();
    assert_eq!(
        err.errors,
        [
            "test.toml:2: [defaults]: on_cooldown must be one of \"reject\", \"hold\", \"auto\", got \"x\"",
            "test.toml:3: [defaults]: https must be one of \"intercept\", \"tunnel\", got \"y\"",
            "test.toml:4: [defaults]: cache must be one of \"off\", \"http\", \"revalidate\", \"dev\", got \"z\"",
            "test.toml:5: [defaults]: skip_resources takes \"image\", \"font\", \"script\", \
             \"stylesheet\", \"media\", got \"gif\"",
        ]
    );
    let c =
        parse("[defaults]\non_cooldown = \"hold\"\nhttps = \"tunnel\"\ncache = \"dev\"\n").unwrap();
    assert_eq!(
        (
            c.defaults.cooldown.on_cooldown,
            c.defaults.forward.https,
            c.defaults.forward.cache
        ),
        (OnCooldown::Hold, HttpsMode::Tunnel, CacheMode::Dev)
    );
}

#[test]
fn unknown_keys_wrong_types_and_bad_values_are_all_reported_with_their_keys() {
    let err = parse(
        "[proxy]\nmax_in_flight = \"many\"\n[defaults]\nrate = \"fast\"\nburst = -1\nratee = 3\n\
         [[host]]\nmatch = \"a.test\"\nconcurrency = \"two\"\n[[host]]\nrate = 2\n",
    )
    .unwrap_err();
    assert_eq!(err.errors.len(), 6, "{err}");
    for start in [
        "test.toml:2: [proxy] max_in_flight: invalid type",
        "test.toml:4: [defaults] rate: invalid type",
        "test.toml:5: [defaults]: burst must be",
        "test.toml:6: [defaults] ratee: unknown field",
        "test.toml:9: [[host]] 1: concurrency: invalid type",
        "test.toml:10: [[host]] 2: missing field `match`",
    ] {
        assert!(
            err.errors.iter().any(|e| e.starts_with(start)),
            "{start}: {err}"
        );
    }
}

#[test]
fn every_syntax_error_is_reported() {
    let err = parse("[defaults\nrate = = 1\n").unwrap_err();
    assert!(!err.errors.is_empty());
    assert!(
        err.errors.iter().all(|e| e.starts_with("test.toml:")),
        "{err}"
    );
}

#[test]
fn a_shared_section_is_checked_and_defaults_the_rest() {
    assert_eq!(parse("").unwrap().shared, None);
    let c = parse("[shared]\nredis_url = \"rediss://:pw@store.internal:6380/2\"\n").unwrap();
    let shared = c.shared.unwrap();
    assert_eq!(shared.key_prefix, "courtesy");
    assert_eq!(shared.instances, None);
    assert_eq!(shared.timeout, std::time::Duration::from_millis(250));
    assert_eq!(shared.redacted_url(), "rediss://***@store.internal:6380/2");
    let c = parse(
        "[shared]\nredis_url = \"redis://127.0.0.1:6379/0\"\nkey_prefix = \"team-a\"\ninstances = 4\n\
         timeout_ms = 100\nlease_seconds = 5\n",
    )
    .unwrap();
    let shared = c.shared.unwrap();
    assert_eq!(
        (shared.key_prefix.as_str(), shared.instances),
        ("team-a", Some(4))
    );
    assert_eq!(shared.lease, std::time::Duration::from_secs(5));

    let err = parse("[shared]\nkey_prefix = \"x\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("test.toml:1: [shared] redis_url is required"),
        "{err}"
    );
    let err = parse(
        "[shared]\nredis_url = \"http://:secret@x:1/\"\nkey_prefix = \"a b\"\ninstances = 0\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("test.toml:2: [shared] redis_url must be a redis:// or rediss:// URL"),
        "{err}"
    );
    assert!(!err.contains("secret"), "a password never shows: {err}");
    assert!(err.contains("test.toml:3: [shared] key_prefix"), "{err}");
    assert!(
        err.contains("test.toml:4: [shared]: instances must be between 1 and 10000"),
        "{err}"
    );
    let err = parse("[shared]\nredis_url = \"redis://x\"\nredis = 1\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("test.toml:3"), "{err}");
    let err = parse("[shared]\nredis_url = \"redis://x\"\nca_file = \"/etc/hostname\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("test.toml:3: [shared] ca_file is for a rediss://"),
        "{err}"
    );
    let err = parse("[shared]\nredis_url = \"rediss://x\"\nca_file = \"/no/such.pem\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("[shared] ca_file: no such file /no/such.pem"),
        "{err}"
    );
}

#[test]
fn the_shared_store_urls_client_certificate_and_readiness_are_checked() {
    for url in [
        "redis+cluster://127.0.0.1:7000,127.0.0.1:7001",
        "rediss+cluster://:pw@a:7000,b:7001",
        "redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster",
        "rediss+sentinel://u:pw@s1:26379/mymaster/3",
    ] {
        let c = parse(&format!("[shared]\nredis_url = \"{url}\"\n"));
        assert!(c.is_ok(), "{url}: {:?}", c.err().map(|e| e.to_string()));
    }
    let err = parse("[shared]\nredis_url = \"redis+sentinel://:secret@s1:26379\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("test.toml:2:") && err.contains("master"),
        "{err}"
    );
    assert!(!err.contains("secret"), "{err}");

    let c = parse("[shared]\nredis_url = \"redis://x\"\nready_in_fallback = false\n").unwrap();
    assert!(!c.shared.unwrap().ready_in_fallback);
    let c = parse("[shared]\nredis_url = \"redis://x\"\n").unwrap();
    assert!(c.shared.unwrap().ready_in_fallback);
    let err = parse("[shared]\nredis_url = \"redis://x\"\nready_in_fallback = \"no\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("test.toml:3"), "{err}");

    let err = parse("[shared]\nredis_url = \"rediss://x\"\ncert_file = \"/etc/hostname\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("test.toml:3: [shared] cert_file and key_file go together"),
        "{err}"
    );
    let err = parse(
        "[shared]\nredis_url = \"redis://x\"\ncert_file = \"/etc/hostname\"\nkey_file = \"/etc/hostname\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("test.toml:3: [shared] cert_file and key_file are for a TLS redis_url"),
        "{err}"
    );
    let err = parse(
        "[shared]\nredis_url = \"rediss://x\"\ncert_file = \"/no/client.pem\"\nkey_file = \"/etc/hostname\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("test.toml:3: [shared] cert_file: no such file /no/client.pem"),
        "{err}"
    );
    assert!(
        err.contains("test.toml:4: [shared] key_file: /etc/hostname holds no PEM private key"),
        "{err}"
    );
}

#[test]
fn a_budget_key_is_a_word_and_a_hosts_file_must_read() {
    let err = parse("[defaults]\nkey = \"subnet\"\n").unwrap_err();
    assert_eq!(
        err.errors,
        ["test.toml:2: [defaults]: key must be one of \"host\", \"domain\", \"ip\", got \"subnet\""]
    );
    let c = parse("[defaults]\nkey = \"domain\"\n[[host]]\nmatch = \"*.cdn.test\"\nkey = \"ip\"\n")
        .unwrap();
    assert_eq!(c.policy_for("a.shop.test", 80).scope.key, KeyMode::Domain);
    assert_eq!(c.policy_for("x.cdn.test", 443).scope.key, KeyMode::Ip);
    let err = parse("[proxy]\nhosts_file = \"/no/such/hosts\"\n").unwrap_err();
    assert!(
        err.errors[0].starts_with("test.toml:2: [proxy] hosts_file \"/no/such/hosts\": "),
        "{err}"
    );
    let dir = crate::util::scratch::dir("hosts-file");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("hosts");
    std::fs::write(&path, "127.0.0.1 a.test\nnonsense b.test\n").unwrap();
    let err = parse(&format!(
        "[proxy]\nhosts_file = {:?}\n",
        path.display().to_string()
    ))
    .unwrap_err();
    assert!(
        err.errors[0].contains("line 2: \"nonsense\" is not an IP address"),
        "{err}"
    );
    std::fs::write(&path, "127.0.0.1 a.test\n").unwrap();
    let c = parse(&format!(
        "[proxy]\nhosts_file = {:?}\n",
        path.display().to_string()
    ))
    .unwrap();
    assert_eq!(c.proxy.static_hosts.len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_controller_and_its_knobs_are_read_per_host_and_checked() {
    let config = parse(
        "[defaults]\nadaptive = true\ncontroller = \"cubic\"\nprobe_after_seconds = 12\n\
         learned_margin = 0.05\n[[host]]\nmatch = \"slow.test\"\ncontroller = \"aimd\"\n",
    )
    .unwrap();
    assert_eq!(config.defaults.adaptive.controller, Controller::Cubic);
    assert_eq!(
        config.defaults.adaptive.probe_after,
        std::time::Duration::from_secs(12)
    );
    assert_eq!(config.defaults.adaptive.learned_margin, 0.05);
    assert_eq!(config.hosts[0].policy.adaptive.controller, Controller::Aimd);
    assert_eq!(
        config.hosts[0].policy.adaptive.learned_margin, 0.05,
        "the rest comes from [defaults]"
    );
    let err = parse(
        "[defaults]\ncontroller = \"gradient\"\nprobe_after_seconds = 0\nlearned_margin = 0.9\n",
    )
    .unwrap_err();
    assert_eq!(
        err.errors,
        [
            "test.toml:2: [defaults]: controller must be one of \"aimd\", \"cubic\", got \"gradient\"",
            "test.toml:3: [defaults]: probe_after_seconds must be between 0.1 and 3600 seconds, got 0",
            "test.toml:4: [defaults]: learned_margin must be between 0 and 0.5, got 0.9",
        ]
    );
}

#[test]
fn a_job_without_a_token_is_a_warning_only_when_other_machines_may_connect() {
    let jobs = "[[job]]\nname = \"sidecar\"\n\n[[job]]\nname = \"team\"\ntoken = \"a-long-random-token-for-team\"\n";
    let local = parse(jobs).unwrap();
    assert!(local.warnings().is_empty(), "{:?}", local.warnings());
    let shared = parse(&format!(
        "[proxy]\nlisten = \"0.0.0.0:3128\"\nallow_clients = [\"10.0.0.0/8\"]\n\
         deny_destinations = [\"169.254.0.0/16\"]\n\n{jobs}"
    ))
    .unwrap();
    let warnings = shared.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("[[job]] sidecar has no token"),
        "{warnings:?}"
    );
}

#[test]
fn purposes_and_content_preferences_are_words_checked_with_file_line_and_key() {
    use super::{ContentPreferences, Purpose};
    assert_eq!(words::<Purpose>(), ["search", "ai-input", "ai-train"]);
    assert_eq!(words::<ContentPreferences>(), ["enforce", "report", "off"]);
    reads_back::<Purpose>();
    reads_back::<ContentPreferences>();
    let err = parse(
        "[defaults]\npurpose = \"ai_train\"\ncontent_preferences = \"strict\"\n\
         [[job]]\nname = \"crawl-a\"\npurpose = \"training\"\n",
    )
    .unwrap_err();
    assert_eq!(
        err.errors,
        [
            "test.toml:2: [defaults]: purpose must be one of \"search\", \"ai-input\", \"ai-train\", got \"ai_train\"",
            "test.toml:3: [defaults]: content_preferences must be one of \"enforce\", \"report\", \"off\", got \"strict\"",
            "test.toml:6: job 1: purpose must be one of \"search\", \"ai-input\", \"ai-train\", got \"training\"",
        ]
    );
    let c = parse(
        "[defaults]\npurpose = \"search\"\n[[host]]\nmatch = \"a.test\"\ncontent_preferences = \"enforce\"\n\
         [[job]]\nname = \"crawl-a\"\npurpose = \"ai-train\"\n",
    )
    .unwrap();
    assert_eq!(c.defaults.preferences.purpose, Some(Purpose::Search));
    assert_eq!(
        c.defaults.preferences.content_preferences,
        ContentPreferences::Report,
        "report by default"
    );
    assert_eq!(
        c.policy_for("a.test", 80).preferences.content_preferences,
        ContentPreferences::Enforce
    );
    assert_eq!(c.jobs[0].purpose, Some(Purpose::AiTrain));
}

#[test]
fn upstream_http2_is_auto_by_default_per_host_and_a_bad_word_names_file_line_and_key() {
    let err = parse("[defaults]\nrate = 2.0\nupstream_http2 = \"on\"\n").unwrap_err();
    assert_eq!(
        err.errors,
        ["test.toml:3: [defaults]: upstream_http2 must be one of \"auto\", \"off\", got \"on\""]
    );
    let c = parse("[[host]]\nmatch = \"old.test\"\nupstream_http2 = \"off\"\n").unwrap();
    assert_eq!(c.defaults.forward.http2, UpstreamHttp2::Auto);
    assert_eq!(
        c.policy_for("old.test", 443).forward.http2,
        UpstreamHttp2::Off
    );
    assert_eq!(
        c.policy_for("new.test", 443).forward.http2,
        UpstreamHttp2::Auto
    );
}

#[test]
fn a_parent_at_an_ipv6_form_of_the_listen_address_is_a_loop() {
    for parent in [
        "http://[64:ff9b::7f00:1]:3128",
        "http://[::127.0.0.1]:3128",
        "http://[2002:7f00:1::1]:3128",
    ] {
        let text = format!("[proxy]\nupstream_proxy = \"{parent}\"\n");
        let errors = parse(&text).unwrap_err().errors;
        assert!(
            errors
                .iter()
                .any(|e| e.contains("is courtesy's own listen address")),
            "{parent}: {errors:?}"
        );
    }
}

#[test]
fn a_listener_beyond_loopback_without_a_deny_list_is_a_warning() {
    let open = "[proxy]\nlisten = \"0.0.0.0:3128\"\nallow_clients = [\"10.0.0.0/8\"]\n";
    let warnings = parse(open).unwrap().warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("[proxy] listen 0.0.0.0:3128 is not a loopback address and [proxy] deny_destinations is empty"),
        "{warnings:?}"
    );
    let denied = format!("{open}deny_destinations = [\"169.254.0.0/16\"]\n");
    assert!(parse(&denied).unwrap().warnings().is_empty());
    assert!(parse("").unwrap().warnings().is_empty(), "loopback");
}

#[test]
fn weak_and_published_tokens_are_warnings_that_never_show_them() {
    let text = "[admin]\ntoken = \"aaaaaaaaaaaaaaaa\"\n\
                [[job]]\nname = \"a\"\ntoken = \"a-long-random-token-for-crawl-a\"\n\
                [[job]]\nname = \"b\"\n\
                token_sha256 = \"dbb592e5b38c4ded208b00c3fdd7f4edcc869782b18ed935c6ffc90f5d6e0837\"\n\
                [[job]]\nname = \"c\"\ntoken = \"9f86d081884c7d659a2feaa0c55ad015\"\n";
    let warnings = parse(text).unwrap().warnings();
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    assert!(
        warnings[0].starts_with("[admin] token is guessable: about 5 bits"),
        "{warnings:?}"
    );
    assert!(
        warnings[1].starts_with("[[job]] a token is a shipped example's"),
        "{warnings:?}"
    );
    assert!(
        warnings[2].starts_with("[[job]] b token_sha256 is a shipped example's"),
        "{warnings:?}"
    );
    for w in &warnings {
        assert!(
            !w.contains("aaaaaaaa") && !w.contains("crawl-a") && !w.contains("dbb592"),
            "{w}"
        );
    }
}
