//! Reading the TOML text into its sections (`file.rs`): syntax errors stop here, all of them
//! reported; a section that is not a table, or a table the config does not know, is reported
//! with its line and left out. The keys inside each section are read by the key tables.

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::file::{FileConfig, Section};
use super::validate::Validator;
use super::{line_of, ConfigErrors};

/// The sections a file may have, in the order messages list them.
const SECTIONS: [&str; 10] = [
    "include",
    "proxy",
    "defaults",
    "host",
    "job",
    "admin",
    "alerts",
    "telemetry",
    "shared",
    "signing",
];

/// The file's sections; a syntax error ends reading at once, every other problem goes to `v`.
pub(super) fn read<'t>(
    text: &'t str,
    name: &str,
    v: &mut Validator<'_>,
) -> Result<FileConfig<'t>, ConfigErrors> {
    let (root, syntax) = DeTable::parse_recoverable(text);
    if !syntax.is_empty() {
        let errors = syntax
            .iter()
            .map(|e| {
                let line = e.span().map_or(0, |s| line_of(text, s.start));
                format!("{name}:{line}: {}", e.message().trim())
            })
            .collect();
        return Err(ConfigErrors { errors });
    }
    let mut file = FileConfig::default();
    for (key, value) in root.get_ref().iter() {
        let key: &str = key.get_ref();
        let at = value.span().start;
        if key != "include" {
            file.tables.push((key.to_string(), at));
        }
        match key {
            "include" => match paths_of(value) {
                Some(paths) => file.include = paths,
                None => v.error(
                    at,
                    "include: expected a list of paths such as [\"presets/published.toml\"]",
                ),
            },
            "host" | "job" => match value.get_ref() {
                DeValue::Array(items) => {
                    for (i, item) in items.iter().enumerate() {
                        match section_of(item) {
                            Some(rule) if key == "host" => file.host.push(rule),
                            Some(job) => file.job.push(job),
                            None => v.error(
                                item.span().start,
                                &format!("[[{key}]] {}: invalid type: expected a table", i + 1),
                            ),
                        }
                    }
                }
                _ => v.error(
                    at,
                    &format!("{key}: invalid type: expected an array of tables ([[{key}]])"),
                ),
            },
            "proxy" | "defaults" | "admin" | "alerts" | "telemetry" | "shared" | "signing" => {
                let Some(section) = section_of(value) else {
                    v.error(
                        at,
                        &format!("{key}: invalid type: expected a table ([{key}])"),
                    );
                    continue;
                };
                match key {
                    "proxy" => file.proxy = section,
                    "defaults" => file.defaults = section,
                    "admin" => file.admin = section,
                    "alerts" => file.alerts = section,
                    "telemetry" => file.telemetry = section,
                    "signing" => file.signing = section,
                    _ => file.shared = Some(section),
                }
            }
            other => {
                let message = super::suggest::unknown_key(other, &SECTIONS);
                v.error(at, &format!("{other}: {message}"));
            }
        }
    }
    Ok(file)
}

/// The strings of an array, each with where it is written; `None` when it is not an array of
/// strings.
fn paths_of(value: &Spanned<DeValue<'_>>) -> Option<Vec<(usize, String)>> {
    let DeValue::Array(items) = value.get_ref() else {
        return None;
    };
    items
        .iter()
        .map(|item| match item.get_ref() {
            DeValue::String(s) => Some((item.span().start, s.to_string())),
            _ => None,
        })
        .collect()
}

/// The table `value` holds, as a section; `None` when it is not a table.
fn section_of<'t>(value: &Spanned<DeValue<'t>>) -> Option<Section<'t>> {
    let DeValue::Table(table) = value.get_ref() else {
        return None;
    };
    let mut entries: Vec<(String, Spanned<DeValue<'t>>)> = table
        .iter()
        .map(|(k, v)| (k.get_ref().to_string(), v.clone()))
        .collect();
    entries.sort_by_key(|(_, v)| v.span().start);
    Some(Section {
        at: value.span().start,
        entries,
    })
}
