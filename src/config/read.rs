//! Reading a file into its structs (`file.rs`) while finding every problem at once: a key that
//! does not exist or a value of the wrong type is reported with file, line and key, taken out, and
//! the rest of the file read again, so that one `courtesy check` lists all of a file's problems.
//! Syntax errors are all reported too, but then nothing more is read.

use serde::Deserialize as _;
use toml::de::{DeArray, DeTable, DeValue, ValueDeserializer};
use toml::Spanned;

use super::file::FileConfig;
use super::{line_of, ConfigErrors};

/// More problems than this in one file are not worth listing one by one.
const MAX_PROBLEMS: usize = 64;

/// The file's structure with every entry that did not fit taken out, and one message per problem
/// (`name:line: key: what`). Only syntax errors stop it.
pub(super) fn read(text: &str, name: &str) -> Result<(FileConfig, Vec<String>), ConfigErrors> {
    let (mut root, syntax) = DeTable::parse_recoverable(text);
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
    // Found in the order serde meets them; listed in the order of the file.
    let mut problems: Vec<(usize, String)> = Vec::new();
    let in_file_order = |mut problems: Vec<(usize, String)>| {
        problems.sort_by_key(|(line, _)| *line);
        problems.into_iter().map(|(_, p)| p).collect::<Vec<_>>()
    };
    loop {
        let value = Spanned::new(root.span(), DeValue::Table(root.get_ref().clone()));
        let error = match FileConfig::deserialize(ValueDeserializer::from(value)) {
            Ok(file) => return Ok((file, in_file_order(problems))),
            Err(error) => error,
        };
        let at = error.span().map(|s| s.start);
        let line = at.map_or(0, |at| line_of(text, at));
        let removed = at.and_then(|at| take_out(root.get_mut(), at));
        let key = removed
            .as_deref()
            .map(|path| format!("{path}: "))
            .unwrap_or_default();
        let message = match removed.as_deref() {
            // A secret of the wrong type is still a secret: its value is not repeated.
            Some(path) if is_secret(path) => {
                "wrong type (the value is not shown): expected a string".to_string()
            }
            _ => super::suggest::with_suggestion(error.message().trim()),
        };
        problems.push((line, format!("{name}:{line}: {key}{message}")));
        if removed.is_none() || problems.len() >= MAX_PROBLEMS {
            return Err(ConfigErrors {
                errors: in_file_order(problems),
            });
        }
    }
}

/// Whether the key the file names as `path` holds a secret (a token, a URL that may carry one).
fn is_secret(path: &str) -> bool {
    matches!(
        path,
        "[admin] token" | "[alerts] webhook" | "[shared] redis_url" | "[proxy] upstream_proxy"
    ) || path.ends_with(" upstream_proxy")
}

/// Removes the innermost entry of `table` at byte `at` of the file (a key, or its value), or the
/// `[[host]]` element there; returns how the file names it (`[defaults] rate`, `[[host]] 2`).
/// Tables are searched first: a table's own span need not cover the lines under its header.
fn take_out(table: &mut DeTable<'_>, at: usize) -> Option<String> {
    let keys: Vec<String> = table.keys().map(|k| k.get_ref().to_string()).collect();
    for key in &keys {
        let Some(value) = table.get_mut(key.as_str()) else {
            continue;
        };
        let inner = match value.get_mut() {
            DeValue::Table(inner) => take_out(inner, at).map(|path| match path {
                p if p.starts_with('[') => p,
                p => format!("[{key}] {p}"),
            }),
            DeValue::Array(items) => take_out_of_array(items, at, key),
            _ => None,
        };
        if inner.is_some() {
            return inner;
        }
    }
    let key = table
        .iter()
        .find(|(k, v)| k.span().contains(&at) || v.span().contains(&at))
        .map(|(k, _)| k.get_ref().to_string())?;
    table.remove(key.as_str());
    Some(key)
}

/// Within an array of tables: the entry inside an element at `at`, else the element at `at`.
fn take_out_of_array(items: &mut DeArray<'_>, at: usize, key: &str) -> Option<String> {
    let slots: &mut [Spanned<DeValue<'_>>] = items;
    for (index, slot) in slots.iter_mut().enumerate() {
        if let DeValue::Table(element) = slot.get_mut() {
            if let Some(path) = take_out(element, at) {
                return Some(format!("[[{key}]] {}: {path}", index + 1));
            }
        }
    }
    let index = items.iter().position(|item| item.span().contains(&at))?;
    let mut kept = DeArray::new();
    for (i, item) in items.iter().enumerate() {
        if i != index {
            kept.push(item.clone());
        }
    }
    *items = kept;
    Some(format!("[[{key}]] {}", index + 1))
}
