//! The reference page of every key (`docs/configuration.md`, between its markers) and the
//! commented default file (`config/courtesy.toml`), both made from the key tables, so that a
//! key's doc, default and range are written once. `tests/docs.rs` checks both files against what
//! is made here (and rewrites them with `COURTESY_WRITE_DOCS=1`).

use super::key_tables::{Group, Key};
use super::{
    AdminSettings, AlertSettings, HostPolicy, JobSettings, ProxySettings, SharedSettings,
    SigningSettings, TelemetrySettings,
};

/// The line before the generated part of `docs/configuration.md`.
pub const BEGIN: &str =
    "<!-- keys: made from the key tables in src/config; edit them, not this -->";
/// The line after it.
pub const END: &str = "<!-- /keys -->";

/// The reference tables, one per section, in Markdown.
pub fn markdown() -> String {
    let mut out = String::new();
    let proxy = [(ProxySettings::DOC, ProxySettings::KEYS)];
    section_table(&mut out, "[proxy]", &paragraph(ProxySettings::DOC), &proxy);
    let admin = [(AdminSettings::DOC, AdminSettings::KEYS)];
    section_table(&mut out, "[admin]", &paragraph(AdminSettings::DOC), &admin);
    let alerts = [(AlertSettings::DOC, AlertSettings::KEYS)];
    section_table(
        &mut out,
        "[alerts]",
        &paragraph(AlertSettings::DOC),
        &alerts,
    );
    let telemetry = [(TelemetrySettings::DOC, TelemetrySettings::KEYS)];
    section_table(
        &mut out,
        "[telemetry]",
        &paragraph(TelemetrySettings::DOC),
        &telemetry,
    );
    let shared = [(SharedSettings::DOC, SharedSettings::KEYS)];
    section_table(
        &mut out,
        "[shared]",
        &paragraph(SharedSettings::DOC),
        &shared,
    );
    let signing = [(SigningSettings::DOC, SigningSettings::KEYS)];
    section_table(
        &mut out,
        "[signing]",
        &paragraph(SigningSettings::DOC),
        &signing,
    );
    let jobs = [(JobSettings::DOC, JobSettings::KEYS)];
    section_table(&mut out, "[[job]]", &paragraph(JobSettings::DOC), &jobs);
    section_table(
        &mut out,
        "[defaults] and [[host]]",
        DEFAULTS,
        &HostPolicy::GROUPS,
    );
    out.push_str(&format!(
        "{HOST_RULE_KEYS}`upstream_proxy`: {}\n",
        cell(&HostPolicy::RULE_UPSTREAM.summary())
    ));
    out.push_str(INCLUDE_DOC);
    out
}

/// What the reference says of `include`.
const INCLUDE_DOC: &str = "
### `include`

`include = [\"presets/published.toml\"]`, before any table: files whose `[[host]]` and `[[job]]` \
tables join this file's, before its own (a path is relative to the including file; an included \
file holds only those tables and includes nothing itself). Of two equally specific rules the later \
governs, so a file's own rule wins over an included one with the same `match`. \
`courtesy check FILE --host sec.gov` prints which rule, from which file, governs a host. \
`config/presets/published.toml` holds the limits sites publish for crawlers (the SEC, Nominatim, \
crates.io, the Wayback Machine, Wikimedia), each with its source; `config/courtesy.toml` includes it.
";

/// What the reference says of `[defaults]` and `[[host]]` before their keys.
const DEFAULTS: &str = "The policy of every host no `[[host]]` rule matches, in groups by \
    concern (the file is flat: a group is not a table). A `[[host]]` rule takes the same keys; \
    what it leaves out comes from `[defaults]`. The most specific rule wins: exact beats \
    wildcard, a longer suffix beats a shorter one, a port beats no port.";

/// What the reference says of a rule's own keys.
const HOST_RULE_KEYS: &str = "A `[[host]]` rule also takes `match` (required: an exact host \
    such as `\"shop.example.com\"`, `\"127.0.0.2\"` or `\"[::1]\"`, or a wildcard such as \
    `\"*.example.com\"`, which matches sub-domains but not the apex; any of them with `:port`) \
    and ";

fn section_table<T: Default>(out: &mut String, title: &str, intro: &str, groups: &[Group<T>]) {
    let defaults = T::default();
    out.push_str(&format!("\n### `{title}`\n\n{intro}\n\n"));
    out.push_str("| key | default | takes | meaning |\n|---|---|---|---|\n");
    for (doc, keys) in groups {
        if groups.len() > 1 {
            out.push_str(&format!("| **{}** | | | |\n", cell(&paragraph(doc))));
        }
        for key in keys.iter() {
            let default = match key.default_text(&defaults) {
                Some(text) => format!("`{}`", cell(&text)),
                None => "unset".into(),
            };
            out.push_str(&format!(
                "| `{}` | {default} | {} | {} |\n",
                key.name,
                cell(&(key.takes)()),
                cell(&key.summary())
            ));
        }
    }
    out.push('\n');
}

/// The default configuration file, every key with its doc and default.
pub fn config_file() -> String {
    let mut out = String::from(
        "# courtesy configuration. Every key is shown with its default and meaning; delete what you do\n\
         # not change. Validate with: courtesy check config/courtesy.toml\n\
         # (Made from the key tables in courtesy's source: docs/configuration.md lists the same keys.)\n",
    );
    out.push_str(INCLUDE);
    let proxy = [(ProxySettings::DOC, ProxySettings::KEYS)];
    file_section(&mut out, "[proxy]", &proxy, false);
    let admin = [(AdminSettings::DOC, AdminSettings::KEYS)];
    file_section(&mut out, "[admin]", &admin, false);
    let alerts = [(AlertSettings::DOC, AlertSettings::KEYS)];
    file_section(&mut out, "[alerts]", &alerts, false);
    let telemetry = [(TelemetrySettings::DOC, TelemetrySettings::KEYS)];
    file_section(&mut out, "[telemetry]", &telemetry, false);
    let shared = [(SharedSettings::DOC, SharedSettings::KEYS)];
    file_section(&mut out, "[shared]", &shared, true);
    let signing = [(SigningSettings::DOC, SigningSettings::KEYS)];
    file_section(&mut out, "[signing]", &signing, true);
    let jobs = [(JobSettings::DOC, JobSettings::KEYS)];
    file_section(&mut out, "[[job]]", &jobs, true);
    file_section(&mut out, "[defaults]", &HostPolicy::GROUPS, false);
    out.push_str(HOST_RULES);
    comment(&mut out, HostPolicy::RULE_UPSTREAM.doc);
    out.push_str("# upstream_proxy = \"direct\"\n");
    out
}

/// The default file's `include`: the limits sites publish.
const INCLUDE: &str = "
# Files whose [[host]] and [[job]] tables come before this file's own (paths relative to this
# file): the limits sites publish for crawlers, one rule per site, each a little under the published
# number. A rule of your own with the same `match` wins. Delete the line to do without them.
include = [\"presets/published.toml\"]
";

/// What the file says of `[[host]]` rules, with two examples.
const HOST_RULES: &str = "
# Host rules: `match` is an exact host (\"shop.example.com\", \"127.0.0.2\", \"[::1]\") or a wildcard
# (\"*.example.com\", which matches sub-domains but not example.com itself), optionally with \":port\".
# Any [defaults] key may follow; unset keys come from [defaults]. The most specific match wins:
# exact beats wildcard, a longer suffix beats a shorter one, a port beats no port.
#
# [[host]]
# match = \"*.bigshop.example\"
# rate = 4.0
# burst = 4
# concurrency = 2
#
# [[host]]
# match = \"*.intranet.corp\"
";

/// One section: its doc, its header (`name`), then every key. A section that is off by default
/// (`[shared]`, `[[job]]`) is written commented out.
fn file_section<T: Default>(out: &mut String, name: &str, groups: &[Group<T>], off: bool) {
    let defaults = T::default();
    out.push('\n');
    comment(out, groups[0].0);
    out.push_str(if off { "# " } else { "" });
    out.push_str(&format!("{name}\n"));
    for (i, (doc, keys)) in groups.iter().enumerate() {
        if groups.len() > 1 && i > 0 {
            out.push_str(&format!("\n# --- {} ---\n", paragraph(doc)));
        }
        for key in keys.iter() {
            file_key(out, key, &defaults, off);
        }
    }
}

fn file_key<T>(out: &mut String, key: &Key<T>, defaults: &T, off: bool) {
    comment(out, key.doc);
    match (key.default_text(defaults), key.example) {
        (Some(value), _) if !off => out.push_str(&format!("{} = {value}\n", key.name)),
        (Some(value), _) => out.push_str(&format!("# {} = {value}\n", key.name)),
        (None, Some(example)) => out.push_str(&format!("# {} = {example}\n", key.name)),
        (None, None) => out.push_str(&format!("# {} = (unset)\n", key.name)),
    }
}

/// Doc lines as TOML comments.
fn comment(out: &mut String, doc: &[&str]) {
    for line in doc {
        let line = line.strip_prefix(' ').unwrap_or(line);
        if line.is_empty() {
            out.push_str("#\n");
        } else {
            out.push_str(&format!("# {line}\n"));
        }
    }
}

/// The first paragraph of doc lines, on one line.
fn paragraph(doc: &[&str]) -> String {
    doc.iter()
        .map(|l| l.trim())
        .take_while(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Text fit for a Markdown table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}
