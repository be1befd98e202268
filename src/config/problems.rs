//! The collector of one config text's problems, [`Validator`]: each with its file and line, listed
//! in the file's order. The key tables report through it (a key's type, range or name) and so do
//! the section validators (`validate/`, one key against another, which add their methods to it);
//! it imports neither.

use super::{line_of, ConfigErrors};

/// Collects the problems of one config text while its sections are validated.
pub(crate) struct Validator<'a> {
    name: &'a str,
    text: &'a str,
    /// Each problem with its line, in the order found.
    errors: Vec<(usize, String)>,
    /// The problems of the files this text includes, each message whole (with its own file).
    included: Vec<String>,
}

impl<'a> Validator<'a> {
    /// A validator for `text`, which messages call `name`.
    pub(in crate::config) fn new(name: &'a str, text: &'a str) -> Self {
        Validator {
            name,
            text,
            errors: Vec::new(),
            included: Vec::new(),
        }
    }

    /// The problems found, in the order of the file's lines, or nothing.
    /// The problems found, in the order of the file's lines (then those of included files), or
    /// nothing.
    pub(in crate::config) fn finish(mut self) -> Result<(), ConfigErrors> {
        if self.errors.is_empty() && self.included.is_empty() {
            return Ok(());
        }
        self.errors.sort_by_key(|(line, _)| *line);
        let own = self.errors.into_iter().map(|(_, e)| e);
        Err(ConfigErrors {
            errors: own.chain(self.included).collect(),
        })
    }

    /// The name messages give the text (its file).
    pub(in crate::config) fn name(&self) -> &str {
        self.name
    }

    /// Takes on the problems of another text (a file this one includes), after this text's own.
    pub(in crate::config) fn absorb(&mut self, errors: ConfigErrors) {
        self.included.extend(errors.errors);
    }

    /// Reports `message` at byte `offset` of the text, as `name:line: message`.
    pub(crate) fn error(&mut self, offset: usize, message: &str) {
        let line = line_of(self.text, offset);
        self.errors
            .push((line, format!("{}:{line}: {message}", self.name)));
    }
}
