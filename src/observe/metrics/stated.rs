//! What sites said and asked: `courtesy_content_preference_total{job,host,purpose,source,outcome}`
//! (requests whose purpose a site's stated preferences refused, `outcome` enforced or reported)
//! and `courtesy_priced_responses_total{job,host}` (HTTP 402 answers with `crawler-price`). The
//! `job` label is a configured job's name, `anonymous` or `other`, the `host` label is bounded
//! like every host label, and `purpose`, `source` and `outcome` are closed sets, so the series are
//! bounded; a forgotten host's series go with it.

use std::collections::HashSet;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::util::locks::lock;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct PreferenceLabels {
    job: String,
    host: String,
    purpose: &'static str,
    source: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct JobHostLabels {
    job: String,
    host: String,
}

/// The two families and the label sets made so far (to remove a forgotten host's).
pub(super) struct StatedFamilies {
    preference: Family<PreferenceLabels, Counter>,
    priced: Family<JobHostLabels, Counter>,
    made: Mutex<(HashSet<PreferenceLabels>, HashSet<JobHostLabels>)>,
}

impl StatedFamilies {
    /// Registers both families.
    pub(super) fn register(registry: &mut Registry) -> Self {
        let families = StatedFamilies {
            preference: Family::default(),
            priced: Family::default(),
            made: Mutex::new((HashSet::new(), HashSet::new())),
        };
        registry.register(
            "content_preference",
            "Requests whose job's purpose a site's stated preferences refused, by job, host, purpose (search, ai-input, ai-train), source (robots_content_signal, robots_content_usage, content_usage_header) and outcome (enforced: a local 403; reported: forwarded with Courtesy-Content-Preference)",
            families.preference.clone(),
        );
        registry.register(
            "priced_responses",
            "HTTP 402 answers carrying crawler-price (pay per crawl), by job and host: never a block or a slow-down",
            families.priced.clone(),
        );
        families
    }

    /// Counts one refusal.
    pub(super) fn preference(
        &self,
        (job, host): (String, String),
        purpose: &'static str,
        source: &'static str,
        enforced: bool,
    ) {
        let labels = PreferenceLabels {
            job,
            host,
            purpose,
            source,
            outcome: if enforced { "enforced" } else { "reported" },
        };
        self.preference.get_or_create(&labels).inc();
        lock(&self.made).0.insert(labels);
    }

    /// Counts one priced answer.
    pub(super) fn priced(&self, job: String, host: String) {
        let labels = JobHostLabels { job, host };
        self.priced.get_or_create(&labels).inc();
        lock(&self.made).1.insert(labels);
    }

    /// Removes the series of `host`.
    pub(super) fn forget(&self, host: &str) {
        let mut made = lock(&self.made);
        made.0.retain(|labels| {
            let keep = labels.host != host;
            if !keep {
                self.preference.remove(labels);
            }
            keep
        });
        made.1.retain(|labels| {
            let keep = labels.host != host;
            if !keep {
                self.priced.remove(labels);
            }
            keep
        });
    }
}
