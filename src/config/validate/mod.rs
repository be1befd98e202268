//! Stage two: the [`Validator`] turns the file's sections into typed settings and policies. Each
//! section's keys are read through its key table (`keys`), which checks types and ranges; what
//! is left here are the checks of one key against another. It collects every problem, each with
//! file, line, key and value, instead of stopping at the first, and lists them in file order.
//!
//! `settings` validates `[proxy]`, `[admin]`, `[alerts]` and `[shared]`; `policy` validates
//! `[defaults]` and `[[host]]` rules.

mod jobs;
mod policy;
mod settings;

use super::file::Section;
use super::key_tables::{read_section, Key, Say};
use super::{line_of, ConfigErrors, UpstreamProxy};

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

    /// Reads `section` into `target` through `tables`; `label` names the section in messages
    /// about values, `path` in messages about a key's type or name.
    fn keys<T>(
        &mut self,
        section: &Section<'_>,
        tables: &[&'static [Key<T>]],
        (label, path): (&str, &str),
        target: &mut T,
    ) {
        let mut say = Say {
            v: self,
            label,
            path,
        };
        read_section(&mut say, &section.entries, tables, target);
    }
}

/// Whether `parent` names `listen` (the same port on the same address, or on loopback when
/// courtesy listens on loopback or on every address).
fn is_listen_address(parent: &UpstreamProxy, listen: std::net::SocketAddr) -> bool {
    if parent.port != listen.port() {
        return false;
    }
    let ip = match parent.host.parse::<std::net::IpAddr>() {
        Ok(ip) => crate::wire::literal::judged_ip(ip),
        Err(_) if parent.host == "localhost" => std::net::IpAddr::from([127, 0, 0, 1]),
        Err(_) => return false,
    };
    ip == listen.ip()
        || (ip.is_loopback() && (listen.ip().is_loopback() || listen.ip().is_unspecified()))
}

impl Validator<'_> {
    /// `route`, or an error and `None` when it leads back to courtesy's own `listen` address.
    fn not_a_loop(
        &mut self,
        route: super::Route,
        at: Option<usize>,
        label: &str,
        listen: std::net::SocketAddr,
    ) -> Option<super::Route> {
        match route.parent().filter(|p| is_listen_address(p, listen)) {
            Some(parent) => {
                self.error(
                    at.unwrap_or(0),
                    &format!(
                        "{label}: upstream_proxy {parent} is courtesy's own listen address \
                         ({listen}): requests would come back to courtesy"
                    ),
                );
                None
            }
            None => Some(route),
        }
    }
}
