//! Requests courtesy answered without asking the host: `courtesy_requests_not_sent_total{job,
//! host,how}` (`how`: `stored`, an answer from the response store; `coalesced`, a follower of an
//! identical request in flight), and the same counts per host for `/hosts`. Labels are bounded as
//! every host label is (`job` a configured name, `anonymous` or `other`; `how` a closed set); the
//! counts per host follow the host table (a forgotten host's go with it).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::util::locks::lock;

/// How a request was answered without being sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotSent {
    /// From the response store (fresh, within `min_refetch_seconds`, or a local 304).
    Stored,
    /// With the answer of an identical request in flight (`coalesce`).
    Coalesced,
}

impl NotSent {
    /// The `how` label, and the `desc` of courtesy's `Server-Timing` entry.
    pub(crate) const fn word(self) -> &'static str {
        match self {
            NotSent::Stored => "stored",
            NotSent::Coalesced => "coalesced",
        }
    }

    /// Its place in a `[stored, coalesced]` pair of counts.
    pub(crate) const fn index(self) -> usize {
        match self {
            NotSent::Stored => 0,
            NotSent::Coalesced => 1,
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct NotSentLabels {
    job: String,
    host: String,
    how: &'static str,
}

/// The family, the label sets made so far, and the counts per host (by the host table's key).
pub(super) struct NotSentFamilies {
    family: Family<NotSentLabels, Counter>,
    made: Mutex<HashSet<NotSentLabels>>,
    per_host: Mutex<HashMap<String, [u64; 2]>>,
}

impl NotSentFamilies {
    /// Registers the family.
    pub(super) fn register(registry: &mut Registry) -> Self {
        let families = NotSentFamilies {
            family: Family::default(),
            made: Mutex::new(HashSet::new()),
            per_host: Mutex::new(HashMap::new()),
        };
        registry.register(
            "requests_not_sent",
            "Requests answered without asking the host, by job, host and how: stored (from the response store) or coalesced (with the answer of an identical request in flight); neither took a turn of the host's budget",
            families.family.clone(),
        );
        families
    }

    /// Counts one request of `job` to `host` (its key; `label` its metric label) answered `how`.
    pub(super) fn count(&self, job: String, (host, label): (&str, String), how: NotSent) {
        let labels = NotSentLabels {
            job,
            host: label,
            how: how.word(),
        };
        self.family.get_or_create(&labels).inc();
        lock(&self.made).insert(labels);
        let mut per_host = lock(&self.per_host);
        match per_host.get_mut(host) {
            Some(counts) => counts[how.index()] += 1,
            None => {
                let mut counts = [0; 2];
                counts[how.index()] = 1;
                per_host.insert(host.to_string(), counts);
            }
        }
    }

    /// `host`'s counts, `[stored, coalesced]`, if it has any.
    pub(super) fn of(&self, host: &str) -> Option<[u64; 2]> {
        lock(&self.per_host).get(host).copied()
    }

    /// Removes `host`'s series (by its label) and counts (by its key).
    pub(super) fn forget(&self, host: &str) {
        lock(&self.per_host).remove(host);
        lock(&self.made).retain(|labels| {
            let keep = labels.host != host;
            if !keep {
                self.family.remove(labels);
            }
            keep
        });
    }

    /// Forgets the counts of hosts for which `known` says no (the label series follow the
    /// labelled hosts, [`NotSentFamilies::forget`]).
    pub(super) fn keep_known(&self, known: impl Fn(&str) -> bool) {
        lock(&self.per_host).retain(|host, _| known(host));
    }
}
