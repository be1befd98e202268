//! Stage two: the [`Validator`] turns the file structs into typed settings and policies, checking
//! ranges and meanings. It collects every problem, each with file, line, key and value, instead of
//! stopping at the first.
//!
//! The checks shared by all sections live here; `settings` validates `[proxy]`, `[admin]` and
//! `[alerts]`, and `policy` validates `[defaults]` and `[[host]]` rules.

mod policy;
mod settings;

use std::time::Duration;

use toml::Spanned;

use super::{line_of, ConfigErrors, ConfigWord};

/// Collects the problems of one config text while its sections are validated.
pub(super) struct Validator<'a> {
    name: &'a str,
    text: &'a str,
    errors: Vec<String>,
}

impl<'a> Validator<'a> {
    /// A validator for `text`, which messages call `name`.
    pub(super) fn new(name: &'a str, text: &'a str) -> Self {
        Validator {
            name,
            text,
            errors: Vec::new(),
        }
    }

    /// Every problem found so far, or `Ok` if there was none.
    /// Takes on problems found before validation (unknown keys, wrong types).
    pub(super) fn carry(&mut self, problems: Vec<String>) {
        self.errors.extend(problems);
    }

    /// The problems found (those carried first), or nothing.
    pub(super) fn finish(self) -> Result<(), ConfigErrors> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(ConfigErrors {
                errors: self.errors,
            })
        }
    }
}

impl Validator<'_> {
    fn error(&mut self, offset: usize, message: &str) {
        let line = line_of(self.text, offset);
        self.errors.push(format!("{}:{line}: {message}", self.name));
    }

    /// A number of seconds in `min..=max`, as a `Duration`.
    fn seconds(
        &mut self,
        value: &Option<Spanned<f64>>,
        label: &str,
        key: &str,
        min: f64,
        max: f64,
    ) -> Option<Duration> {
        self.bounded(value, label, key, (min, max), " seconds")
            .map(Duration::from_secs_f64)
    }

    /// A whole number in `min..=max`.
    fn count(
        &mut self,
        value: &Option<Spanned<i64>>,
        label: &str,
        key: &str,
        min: i64,
        max: i64,
    ) -> Option<i64> {
        let v = value.as_ref()?;
        let n = *v.get_ref();
        if (min..=max).contains(&n) {
            Some(n)
        } else {
            self.error(
                v.span().start,
                &format!("{label}: {key} must be between {min} and {max}, got {n}"),
            );
            None
        }
    }

    /// One of a closed set of words, as its enum value.
    fn choice<T: ConfigWord>(
        &mut self,
        value: &Option<Spanned<String>>,
        label: &str,
        key: &str,
    ) -> Option<T> {
        let v = value.as_ref()?;
        let found = T::from_word(v.get_ref());
        if found.is_none() {
            self.error(
                v.span().start,
                &format!(
                    "{label}: {key} must be one of {}, got {:?}",
                    quoted_words::<T>(),
                    v.get_ref()
                ),
            );
        }
        found
    }

    /// A number in `min..=max`.
    fn number(
        &mut self,
        value: &Option<Spanned<f64>>,
        label: &str,
        key: &str,
        min: f64,
        max: f64,
    ) -> Option<f64> {
        self.bounded(value, label, key, (min, max), "")
    }

    /// A finite number in `min..=max` (`unit` follows the bounds in the message).
    fn bounded(
        &mut self,
        value: &Option<Spanned<f64>>,
        label: &str,
        key: &str,
        (min, max): (f64, f64),
        unit: &str,
    ) -> Option<f64> {
        let v = value.as_ref()?;
        let x = *v.get_ref();
        if x.is_finite() && x >= min && x <= max {
            Some(x)
        } else {
            self.error(
                v.span().start,
                &format!("{label}: {key} must be between {min} and {max}{unit}, got {x}"),
            );
            None
        }
    }
}

/// Every word of `T`, quoted and separated by commas: `"reject", "hold"`.
fn quoted_words<T: ConfigWord>() -> String {
    let words: Vec<String> = T::ALL.iter().map(|w| format!("{:?}", w.word())).collect();
    words.join(", ")
}
