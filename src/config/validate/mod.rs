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
pub(crate) use super::problems::Validator;
use super::UpstreamProxy;

impl Validator<'_> {
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
