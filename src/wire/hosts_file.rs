//! `[proxy] hosts_file`: names answered from a file in `/etc/hosts` format before DNS is asked,
//! like Squid's `hosts_file` and curl's `--resolve`: a staging site under its real name, or a
//! name the crawler's DNS does not know.
//!
//! This module parses and answers; it does not read the file (the config's validator does, so a
//! bad line fails at start-up with the file and line).

use std::collections::HashMap;
use std::net::IpAddr;

/// Names and their addresses, in the file's order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StaticHosts(HashMap<String, Vec<IpAddr>>);

impl StaticHosts {
    /// Reads `text` in `/etc/hosts` format: an address, then one or more names, per line; `#`
    /// starts a comment. A name on several lines gets every address, in order. The error is the
    /// 1-based line and what is wrong with it.
    pub fn parse(text: &str) -> Result<StaticHosts, (usize, String)> {
        let mut names: HashMap<String, Vec<IpAddr>> = HashMap::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("");
            let mut fields = line.split_whitespace();
            let Some(address) = fields.next() else {
                continue;
            };
            let ip: IpAddr = address
                .parse()
                .map_err(|_| (index + 1, format!("{address:?} is not an IP address")))?;
            let mut any = false;
            for name in fields {
                // Keyed by the canonical name (`crate::wire::host_name`), the one targets are looked
                // up by: `Staging.Example.` and `bücher.example` answer their every spelling.
                let name = crate::wire::host_name::canonical(name)
                    .map_err(|e| (index + 1, e.to_string()))?;
                let list = names.entry(name).or_default();
                if !list.contains(&ip) {
                    list.push(ip);
                }
                any = true;
            }
            if !any {
                return Err((index + 1, format!("{address} has no name after it")));
            }
        }
        Ok(StaticHosts(names))
    }

    /// The addresses of `name` (canonical: [`crate::wire::host_name::canonical`]), if the file names it.
    pub fn get(&self, name: &str) -> Option<&[IpAddr]> {
        self.0.get(name).map(Vec::as_slice)
    }

    /// How many names the file has.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the file names no host.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_comments_and_several_names_per_address() {
        let hosts = StaticHosts::parse(
            "# staging\n127.0.0.1 a.shop.test B.Shop.Test.  # both\n\n::1 a.shop.test\n",
        )
        .unwrap();
        let v4: IpAddr = "127.0.0.1".parse().unwrap();
        let v6: IpAddr = "::1".parse().unwrap();
        assert_eq!(hosts.get("a.shop.test"), Some(&[v4, v6][..]));
        assert_eq!(hosts.get("b.shop.test"), Some(&[v4][..]));
        assert_eq!(hosts.get("c.shop.test"), None);
        assert_eq!(hosts.len(), 2);
        let idn = StaticHosts::parse("127.0.0.2 Bücher.Example.\n").unwrap();
        let v4: IpAddr = "127.0.0.2".parse().unwrap();
        assert_eq!(idn.get("xn--bcher-kva.example"), Some(&[v4][..]));
    }

    #[test]
    fn a_bad_line_is_named() {
        assert_eq!(
            StaticHosts::parse("127.0.0.1 ok.test\nnot-an-ip a.test\n")
                .unwrap_err()
                .0,
            2
        );
        assert_eq!(StaticHosts::parse("127.0.0.1\n").unwrap_err().0, 1);
        assert_eq!(StaticHosts::parse("127.0.0.1 a/b\n").unwrap_err().0, 1);
    }
}
