//! The config files compiled into the binary: `config/courtesy.toml` (every key at its default) and
//! the presets it includes. A courtesy installed from a wheel or an npm package has no checkout
//! beside it, and must still start with the published-limit presets in force and be able to show
//! its defaults (`courtesy config`).

/// What `courtesy run` reads when it is given no config and finds none at the default path; its
/// name in messages and in `check`'s output.
pub const BUILT_IN_NAME: &str = "<built-in config/courtesy.toml>";

/// The text of the built-in config, `config/courtesy.toml` as generated from the key tables.
pub const BUILT_IN_CONFIG: &str = include_str!("../../config/courtesy.toml");

/// The presets compiled in, by the path an `include` names them with. A file that includes one of
/// these names and has no such file beside it gets the built-in copy, so that the output of
/// `courtesy config` works wherever it is saved.
const PRESETS: &[(&str, &str)] = &[(
    "presets/published.toml",
    include_str!("../../config/presets/published.toml"),
)];

/// The built-in text of the preset an `include` names `rel`, with the name its messages use.
pub(super) fn preset(rel: &str) -> Option<(String, &'static str)> {
    let wanted = rel.trim_start_matches("./");
    PRESETS
        .iter()
        .find(|(name, _)| *name == wanted)
        .map(|(name, text)| (format!("<built-in {name}>"), *text))
}
