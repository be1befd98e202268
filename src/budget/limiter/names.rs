//! The names that share one budget (`key = "domain"` or `"ip"`): which ones `/hosts` lists, which
//! one's rule gives the budget its policy, and the Crawl-delay each one's robots.txt asked for.
//!
//! Boxed in the host's state, so a budget of one name (`key = "host"`, the default) pays one
//! pointer for it.

use crate::budget::keys::BudgetKey;

/// The most names listed per budget; more still share it, unlisted.
const MAX_NAMES: usize = 100;

/// The names seen sharing one budget.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    /// The first name seen (host, port): the rule matching it gives the budget's policy.
    pub(crate) first: (String, u16),
    /// Each name seen (host, port), in order, with the rate its robots.txt Crawl-delay allows.
    seen: Vec<(Box<str>, u16, Option<f64>)>,
    /// Names beyond [`MAX_NAMES`] were seen.
    pub(crate) truncated: bool,
    /// The strictest Crawl-delay cap of names beyond the list (kept while the budget lives).
    unlisted_cap: Option<f64>,
}

impl Names {
    /// The names of a budget first asked for by `key`.
    pub(crate) fn new(key: &BudgetKey) -> Self {
        Names {
            first: (key.host.clone(), key.port),
            seen: vec![(key.host.as_str().into(), key.port, None)],
            truncated: false,
            unlisted_cap: None,
        }
    }

    /// Notes that `key`'s name spends this budget.
    pub(crate) fn note(&mut self, key: &BudgetKey) {
        if self.position(key).is_none() {
            self.add(key);
        }
    }

    /// Records the rate `name`'s robots.txt allows (`None`: no Crawl-delay) and returns the cap
    /// for the whole budget: the strictest of its names'.
    pub(crate) fn set_cap(&mut self, key: &BudgetKey, cap: Option<f64>) -> Option<f64> {
        let index = self.position(key).or_else(|| self.add(key));
        match index {
            Some(i) => self.seen[i].2 = cap,
            None => self.unlisted_cap = strictest(self.unlisted_cap, cap),
        }
        self.seen
            .iter()
            .fold(self.unlisted_cap, |acc, (_, _, cap)| strictest(acc, *cap))
    }

    /// `host:port` of every listed name, in the order they were seen.
    pub(crate) fn list(&self) -> Vec<String> {
        self.seen
            .iter()
            .map(|(host, port, _)| crate::wire::host_key::host_key(host, *port))
            .collect()
    }

    fn position(&self, key: &BudgetKey) -> Option<usize> {
        self.seen
            .iter()
            .position(|(host, port, _)| *port == key.port && **host == *key.host)
    }

    fn add(&mut self, key: &BudgetKey) -> Option<usize> {
        if self.seen.len() >= MAX_NAMES {
            self.truncated = true;
            return None;
        }
        self.seen.push((key.host.as_str().into(), key.port, None));
        Some(self.seen.len() - 1)
    }
}

fn strictest(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::KeyMode;

    fn key(host: &str, port: u16) -> BudgetKey {
        BudgetKey::without_lookup(host, port, KeyMode::Domain).unwrap()
    }

    #[test]
    fn names_are_listed_once_in_order_and_bounded() {
        let mut names = Names::new(&key("a.example.com", 80));
        names.note(&key("b.example.com", 8443));
        names.note(&key("a.example.com", 80));
        names.note(&key("a.example.com", 81));
        assert_eq!(
            names.list(),
            ["a.example.com:80", "b.example.com:8443", "a.example.com:81"]
        );
        for i in 0..200 {
            names.note(&key(&format!("n{i}.example.com"), 80));
        }
        assert_eq!(names.list().len(), MAX_NAMES);
        assert!(names.truncated);
        assert_eq!(names.first, ("a.example.com".to_string(), 80));
    }

    #[test]
    fn the_strictest_crawl_delay_of_any_name_caps_the_budget() {
        let mut names = Names::new(&key("a.example.com", 80));
        assert_eq!(
            names.set_cap(&key("a.example.com", 80), Some(0.5)),
            Some(0.5)
        );
        assert_eq!(
            names.set_cap(&key("b.example.com", 80), Some(0.2)),
            Some(0.2)
        );
        assert_eq!(names.set_cap(&key("b.example.com", 80), None), Some(0.5));
        assert_eq!(names.set_cap(&key("a.example.com", 80), None), None);
    }
}
