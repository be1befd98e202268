//! Validation of host policies: `[defaults]` over the built-in defaults, then each `[[host]]` rule
//! over `[defaults]`.

use std::sync::Arc;
use std::time::Duration;

use super::{quoted_words, Validator};
use crate::blocks::BlockMarkers;
use crate::config::file::{FileHostRule, FileOffPeak, FilePolicy};
use crate::config::{ConfigWord, HostPattern, HostPolicy, HostRule, OffPeak, ResourceKind};

impl Validator<'_> {
    /// The `[[host]]` rules in file order, each over `defaults`; a rule whose `match` is bad is
    /// reported and left out.
    pub(in crate::config) fn host_rules(
        &mut self,
        rules: &[FileHostRule],
        defaults: &HostPolicy,
        listen: std::net::SocketAddr,
    ) -> Vec<HostRule> {
        let mut hosts = Vec::new();
        for (i, rule) in rules.iter().enumerate() {
            let number = i + 1;
            let label = format!("host rule {number} (match = {:?})", rule.pattern.get_ref());
            let pattern = match HostPattern::parse(rule.pattern.get_ref()) {
                Ok(p) => p,
                Err(msg) => {
                    self.error(rule.pattern.span().start, &format!("{label}: match {msg}"));
                    continue;
                }
            };
            let mut policy = self.policy(defaults, &rule.policy(), &label);
            if let Some(route) = self.route(&rule.upstream_proxy, &label, listen) {
                policy.upstream = route;
            }
            hosts.push(HostRule {
                number,
                pattern,
                policy: Arc::new(policy),
            });
        }
        hosts
    }

    /// `file` over `base`; `label` names the section in messages. A bad key keeps its `base` value.
    pub(in crate::config) fn policy(
        &mut self,
        base: &HostPolicy,
        file: &FilePolicy,
        label: &str,
    ) -> HostPolicy {
        let mut p = base.clone();
        if let Some(v) = &file.rate {
            let rate = *v.get_ref();
            if rate.is_finite() && rate > 0.0 && rate <= 1_000_000.0 {
                p.rate = rate;
            } else {
                self.error(
                    v.span().start,
                    &format!("{label}: rate must be > 0 and at most 1000000 requests per second, got {rate}"),
                );
            }
        }
        if let Some(n) = self.count(&file.burst, label, "burst", 1, 1_000_000) {
            p.burst = n as u32;
        }
        if let Some(n) = self.count(&file.concurrency, label, "concurrency", 1, 1_000_000) {
            p.concurrency = n as u32;
        }
        if let Some(v) = &file.jitter {
            let j = *v.get_ref();
            if (0.0..=1.0).contains(&j) {
                p.jitter = j;
            } else {
                self.error(
                    v.span().start,
                    &format!("{label}: jitter must be between 0 and 1, got {j}"),
                );
            }
        }
        if let Some(n) = self.count(&file.max_queue, label, "max_queue", 0, 10_000_000) {
            p.max_queue = n as usize;
        }
        let w = &file.max_wait_seconds;
        if let Some(d) = self.seconds(w, label, "max_wait_seconds", 0.0, 86400.0) {
            p.max_wait = d;
        }
        if let Some(v) = &file.adaptive {
            p.adaptive = *v.get_ref();
        }
        if let Some(x) = self.choice(&file.controller, label, "controller") {
            p.controller = x;
        }
        let s = &file.probe_after_seconds;
        if let Some(d) = self.seconds(s, label, "probe_after_seconds", 0.1, 3600.0) {
            p.probe_after = d;
        }
        let rates = [
            (&file.min_rate, "min_rate", &mut p.min_rate, 1e-6, 1e6),
            (&file.max_rate, "max_rate", &mut p.max_rate, 1e-6, 1e6),
            (
                &file.decrease_factor,
                "decrease_factor",
                &mut p.decrease_factor,
                0.01,
                1.0,
            ),
            (
                &file.slow_factor,
                "slow_factor",
                &mut p.slow_factor,
                0.01,
                1.0,
            ),
            (
                &file.resume_factor,
                "resume_factor",
                &mut p.resume_factor,
                0.01,
                1.0,
            ),
            (
                &file.learned_margin,
                "learned_margin",
                &mut p.learned_margin,
                0.0,
                0.5,
            ),
            (
                &file.increase_step,
                "increase_step",
                &mut p.increase_step,
                0.0,
                1e6,
            ),
        ];
        for (value, key, slot, min, max) in rates {
            if let Some(x) = self.number(value, label, key, min, max) {
                *slot = x;
            }
        }
        if let Some(ms) = self.count(
            &file.slow_response_ms,
            label,
            "slow_response_ms",
            1,
            3_600_000,
        ) {
            p.slow_response = Duration::from_millis(ms as u64);
        }
        let r = &file.max_retry_after_seconds;
        if let Some(d) = self.seconds(r, label, "max_retry_after_seconds", 0.0, 7.0 * 86400.0) {
            p.max_retry_after = d;
        }
        let b = &file.backoff_initial_seconds;
        if let Some(d) = self.seconds(b, label, "backoff_initial_seconds", 0.001, 86400.0) {
            p.backoff_initial = d;
        }
        let b = &file.backoff_max_seconds;
        if let Some(d) = self.seconds(b, label, "backoff_max_seconds", 0.001, 7.0 * 86400.0) {
            p.backoff_max = d;
        }
        if let Some(list) = &file.backoff_statuses {
            let mut statuses = Vec::new();
            for s in list.get_ref() {
                match u16::try_from(*s) {
                    Ok(code) if (100..=599).contains(&code) && code != 429 => statuses.push(code),
                    _ => self.error(
                        list.span().start,
                        &format!("{label}: backoff_statuses must hold HTTP statuses from 100 to 599 other than 429 (always a throttle), got {s}"),
                    ),
                }
            }
            p.backoff_statuses = statuses;
        }
        if let Some(x) = self.choice(&file.on_cooldown, label, "on_cooldown") {
            p.on_cooldown = x;
        }
        if let Some(n) = self.count(&file.retry_idempotent, label, "retry_idempotent", 0, 10) {
            p.retry_idempotent = n as u32;
        }
        if let Some(x) = self.choice(&file.https, label, "https") {
            p.https = x;
        }
        if let Some(x) = self.choice(&file.key, label, "key") {
            p.key = x;
        }
        if let Some(v) = &file.enforce {
            p.enforce = *v.get_ref();
        }
        if let Some(v) = &file.obey_robots {
            p.obey_robots = *v.get_ref();
        }
        if let Some(v) = &file.robots_user_agent {
            let agent = v.get_ref().trim();
            p.robots_user_agent = (!agent.is_empty()).then(|| agent.to_string());
        }
        let c = &file.max_crawl_delay_seconds;
        if let Some(d) = self.seconds(c, label, "max_crawl_delay_seconds", 0.001, 86400.0) {
            p.max_crawl_delay = d;
        }
        let b = &file.block_scan_bytes;
        if let Some(n) = self.count(b, label, "block_scan_bytes", 0, 16 * 1024 * 1024) {
            p.block_scan_bytes = n as usize;
        }
        if let Some(list) = &file.block_markers {
            let markers: Vec<String> = list.get_ref().iter().map(|m| m.to_lowercase()).collect();
            if markers.iter().any(|m| m.trim().len() < 3) {
                self.error(
                    list.span().start,
                    &format!(
                        "{label}: block_markers must each have at least 3 characters, got {:?}",
                        list.get_ref()
                    ),
                );
            } else {
                p.block_markers = Arc::new(BlockMarkers::new(markers));
            }
        }
        let b = &file.block_pause_seconds;
        if let Some(d) = self.seconds(b, label, "block_pause_seconds", 1.0, 30.0 * 86400.0) {
            p.block_pause = d;
        }
        if let Some(x) = self.number(
            &file.block_resume_factor,
            label,
            "block_resume_factor",
            0.01,
            1.0,
        ) {
            p.block_resume_factor = x;
        }
        if let Some(n) = self.count(&file.hard_block_after, label, "hard_block_after", 0, 1000) {
            p.hard_block_after = n as u32;
        }
        if let Some(list) = &file.skip_resources {
            let mut kinds = Vec::new();
            for word in list.get_ref() {
                match ResourceKind::from_word(word) {
                    Some(kind) => kinds.push(kind),
                    None => self.error(
                        list.span().start,
                        &format!(
                            "{label}: skip_resources takes {}, got {word:?}",
                            quoted_words::<ResourceKind>()
                        ),
                    ),
                }
            }
            p.skip_resources = kinds;
        }
        if let Some(x) = self.choice(&file.cache, label, "cache") {
            p.cache = x;
        }
        if let Some(v) = &file.off_peak {
            match parse_off_peak(v.get_ref()) {
                Ok(o) => p.off_peak = Some(o),
                Err(why) => self.error(v.span().start, &format!("{label}: off_peak {why}")),
            }
        }
        let span = [&file.rate, &file.min_rate, &file.max_rate]
            .into_iter()
            .flatten()
            .map(|s| s.span().start)
            .next();
        if p.min_rate > p.max_rate {
            self.error(
                span.unwrap_or(0),
                &format!(
                    "{label}: min_rate ({}) must not be above max_rate ({})",
                    p.min_rate, p.max_rate
                ),
            );
        } else if p.adaptive && (p.rate < p.min_rate || p.rate > p.max_rate) && span.is_some() {
            self.error(
                span.unwrap_or(0),
                &format!(
                    "{label}: with adaptive = true, rate ({}) must be between min_rate ({}) and max_rate ({})",
                    p.rate, p.min_rate, p.max_rate
                ),
            );
        }
        if p.backoff_initial > p.backoff_max {
            let span = file
                .backoff_initial_seconds
                .as_ref()
                .or(file.backoff_max_seconds.as_ref());
            self.error(
                span.map_or(0, |s| s.span().start),
                &format!(
                    "{label}: backoff_initial_seconds ({}) must not be above backoff_max_seconds ({})",
                    p.backoff_initial.as_secs_f64(),
                    p.backoff_max.as_secs_f64()
                ),
            );
        }
        p
    }
}

/// An `off_peak` table as a window, or why it is not one.
fn parse_off_peak(file: &FileOffPeak) -> Result<OffPeak, String> {
    let minute = |t: &str| -> Option<u16> {
        let (h, m) = t.trim().split_once(':')?;
        let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
        (h <= 24 && m < 60 && h * 60 + m <= 24 * 60).then_some(h * 60 + m)
    };
    let (start, end) = file
        .hours
        .split_once('-')
        .and_then(|(a, b)| Some((minute(a)?, minute(b)?)))
        .ok_or_else(|| format!("hours must look like \"01:00-06:00\", got {:?}", file.hours))?;
    if start == end {
        return Err(format!("hours {:?} is an empty window", file.hours));
    }
    let timezone = jiff::tz::TimeZone::get(&file.timezone).map_err(|_| {
        format!(
            "timezone must be an IANA name such as \"Europe/Berlin\" or \"UTC\", got {:?}",
            file.timezone
        )
    })?;
    if !(file.rate.is_finite() && file.rate > 0.0) {
        return Err(format!("rate must be > 0, got {}", file.rate));
    }
    Ok(OffPeak {
        start_minute: start,
        end_minute: end % (24 * 60),
        timezone_name: file.timezone.clone(),
        timezone,
        rate: file.rate,
    })
}
