//! Validation of host policies: `[defaults]` over the built-in defaults, then each `[[host]]` rule
//! over `[defaults]`. The keys are read through [`HostPolicy::KEYS`]; here are a rule's own keys
//! (`match`, `upstream_proxy`) and the checks of one key against another.

use std::sync::Arc;

use super::Validator;
use crate::config::file::Section;
use crate::config::key_tables::Say;
use crate::config::{HostPattern, HostPolicy, HostRule};

impl Validator<'_> {
    /// The `[[host]]` rules in file order, each over `defaults`; a rule whose `match` is bad is
    /// reported and left out.
    pub(in crate::config) fn host_rules(
        &mut self,
        rules: &mut [Section<'_>],
        defaults: &HostPolicy,
        listen: std::net::SocketAddr,
    ) -> Vec<HostRule> {
        let mut hosts = Vec::new();
        for (i, rule) in rules.iter_mut().enumerate() {
            let number = i + 1;
            let path = format!("[[host]] {number}: ");
            let Some(found) = rule.take("match") else {
                self.error(rule.at, &format!("{path}missing field `match`"));
                continue;
            };
            let mut say = Say {
                v: self,
                label: "",
                path: &path,
            };
            let Some(text) = say.typed::<String>(&found, "match", false) else {
                continue;
            };
            let label = format!("host rule {number} (match = {text:?})");
            let pattern = match HostPattern::parse(&text) {
                Ok(p) => p,
                Err(msg) => {
                    self.error(found.span().start, &format!("{label}: match {msg}"));
                    continue;
                }
            };
            let upstream = rule.take("upstream_proxy");
            let mut policy = self.policy(defaults, rule, &label, &path);
            if let Some(value) = upstream {
                let mut say = Say {
                    v: self,
                    label: &label,
                    path: &path,
                };
                (HostPolicy::RULE_UPSTREAM.read)(&value, &mut say, &mut policy);
                let route = std::mem::replace(
                    &mut policy.forward.upstream,
                    defaults.forward.upstream.clone(),
                );
                let at = Some(value.span().start);
                if let Some(route) = self.not_a_loop(route, at, &label, listen) {
                    policy.forward.upstream = route;
                }
            }
            hosts.push(HostRule {
                number,
                source: Arc::from(self.name()),
                pattern,
                policy: Arc::new(policy),
            });
        }
        hosts
    }

    /// `section` over `base`; `label` names the section in messages about values, `path` in
    /// messages about a key's type. A bad key keeps its `base` value.
    pub(in crate::config) fn policy(
        &mut self,
        base: &HostPolicy,
        section: &Section<'_>,
        label: &str,
        path: &str,
    ) -> HostPolicy {
        let mut p = base.clone();
        self.keys(section, &HostPolicy::keys(), (label, path), &mut p);
        let span = ["rate", "min_rate", "max_rate"]
            .into_iter()
            .find_map(|key| section.at(key));
        let (a, rate) = (&p.adaptive, p.pacing.rate);
        if a.min_rate > a.max_rate {
            self.error(
                span.unwrap_or(0),
                &format!(
                    "{label}: min_rate ({}) must not be above max_rate ({})",
                    a.min_rate, a.max_rate
                ),
            );
        } else if a.enabled && (rate < a.min_rate || rate > a.max_rate) && span.is_some() {
            self.error(
                span.unwrap_or(0),
                &format!(
                    "{label}: with adaptive = true, rate ({}) must be between min_rate ({}) and max_rate ({})",
                    rate, a.min_rate, a.max_rate
                ),
            );
        }
        let c = &p.cooldown;
        if c.backoff_initial > c.backoff_max {
            let at = section
                .at("backoff_initial_seconds")
                .or(section.at("backoff_max_seconds"));
            self.error(
                at.unwrap_or(0),
                &format!(
                    "{label}: backoff_initial_seconds ({}) must not be above backoff_max_seconds ({})",
                    c.backoff_initial.as_secs_f64(),
                    c.backoff_max.as_secs_f64()
                ),
            );
        }
        p
    }
}
