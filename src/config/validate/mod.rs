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

use super::{line_of, ConfigErrors, ConfigWord, Route, UpstreamProxy};

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

impl Validator<'_> {
    /// An `upstream_proxy` value (`"direct"` or a parent URL) for `label`; a parent that is
    /// courtesy's own `listen` address is refused (a loop).
    fn route(
        &mut self,
        value: &Option<Spanned<String>>,
        label: &str,
        listen: std::net::SocketAddr,
    ) -> Option<Route> {
        let v = value.as_ref()?;
        let at = v.span().start;
        match Route::parse(v.get_ref()) {
            Ok(route) => {
                if let Some(parent) = route.parent().filter(|p| is_listen_address(p, listen)) {
                    self.error(
                        at,
                        &format!(
                            "{label}: upstream_proxy {parent} is courtesy's own listen address                              ({listen}): requests would come back to courtesy"
                        ),
                    );
                    return None;
                }
                Some(route)
            }
            // The message never repeats the value: it may hold a password.
            Err(why) => {
                self.error(at, &format!("{label}: upstream_proxy {why}"));
                None
            }
        }
    }
}

/// Whether `parent` names `listen` (the same port on the same address, or on loopback when
/// courtesy listens on loopback or on every address).
fn is_listen_address(parent: &UpstreamProxy, listen: std::net::SocketAddr) -> bool {
    if parent.port != listen.port() {
        return false;
    }
    let ip = match parent.host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip,
        Err(_) if parent.host == "localhost" => std::net::IpAddr::from([127, 0, 0, 1]),
        Err(_) => return false,
    };
    ip == listen.ip()
        || (ip.is_loopback() && (listen.ip().is_loopback() || listen.ip().is_unspecified()))
}

/// Every word of `T`, quoted and separated by commas: `"reject", "hold"`.
fn quoted_words<T: ConfigWord>() -> String {
    let words: Vec<String> = T::ALL.iter().map(|w| format!("{:?}", w.word())).collect();
    words.join(", ")
}
