//! The RateLimit fields as draft-ietf-httpapi-ratelimit-headers writes them (-10 and later):
//! `RateLimit-Policy: "burst";q=100;w=60;qu="request";pk=:...:, "daily";q=1000;w=86400` and
//! `RateLimit: "burst";r=50;t=30`, read as RFC 9651 structured-field Lists (the `sfv` crate).
//! Each named policy is kept on its own with its quota unit (`qu`) and partition key (`pk`), and
//! the counters of `RateLimit` (`r`, `t`) are matched to it by name. The older forms of the same
//! two fields are read here too: a policy written as a bare number (`10;w=1`) and the draft-03
//! dictionary `RateLimit: limit=10, remaining=5, reset=30`.
//!
//! Pure: bytes of a field in, [`Fields`] out. Which policy the pacing obeys is
//! `crate::pacing::feedback`'s choice; a field that is not what the draft allows is ignored
//! whole and said so ([`Fields::malformed`]), never a panic.

use std::time::Duration;

use base64::Engine as _;
use sfv::{BareItem, Dictionary, List, ListEntry, Parameters, Parser};

/// What a policy's quota counts: its `qu` parameter (`"request"` when absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuotaUnit {
    /// Requests: the request budget (the rate).
    Request,
    /// Bytes of content: the host's byte budget.
    ContentBytes,
    /// Requests in flight at once: a ceiling on `concurrency`.
    Concurrency,
    /// A unit the draft does not define: shown, never obeyed.
    Other(Box<str>),
}

impl QuotaUnit {
    /// The unit as the field spells it.
    pub fn as_str(&self) -> &str {
        match self {
            QuotaUnit::Request => "request",
            QuotaUnit::ContentBytes => "content-bytes",
            QuotaUnit::Concurrency => "concurrency",
            QuotaUnit::Other(word) => word,
        }
    }

    fn of(word: &str) -> QuotaUnit {
        match word {
            "request" => QuotaUnit::Request,
            "content-bytes" => QuotaUnit::ContentBytes,
            "concurrency" => QuotaUnit::Concurrency,
            other => QuotaUnit::Other(other.into()),
        }
    }
}

/// One policy the server announced, with what its counters say now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedPolicy {
    /// Its name (empty for the older form `10;w=1`, which has none).
    pub name: String,
    /// The quota (`q`), in `unit`s per window.
    pub quota: Option<u64>,
    /// The window (`w`), when said.
    pub window: Option<Duration>,
    /// What the quota counts (`qu`).
    pub unit: QuotaUnit,
    /// The partition key (`pk`) as the field carries it: base64 (RFC 9651 byte sequence).
    pub partition: Option<String>,
    /// What is left of the quota in this window (`r` of the `RateLimit` member of that name).
    pub remaining: Option<u64>,
    /// Time until the window resets (`t` of that member).
    pub reset: Option<Duration>,
    /// Written in the older form (`10;w=1`): its quota is an announcement the learned limit
    /// aims under, not a cap on the rate (as courtesy always read it).
    pub legacy: bool,
}

/// The draft-03 form of `RateLimit`: a dictionary `limit=10, remaining=5, reset=30`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Combined {
    /// `limit`: the quota.
    pub limit: Option<u64>,
    /// `remaining`.
    pub remaining: Option<u64>,
    /// `reset`, in seconds.
    pub reset: Option<u64>,
}

/// What `RateLimit-Policy` and `RateLimit` said.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Fields {
    /// Every policy, in `RateLimit-Policy`'s order, then one for each `RateLimit` member whose
    /// name no policy has (its unit unknown, so `request`, the default).
    pub policies: Vec<NamedPolicy>,
    /// `RateLimit-Policy` was present and read: the policies are the server's whole list.
    pub listed: bool,
    /// `RateLimit` in its draft-03 dictionary form.
    pub combined: Option<Combined>,
    /// A field that was ignored because it is not a structured field of the draft's shape:
    /// `"RateLimit-Policy"` or `"RateLimit"` (the first found).
    pub malformed: Option<&'static str>,
}

/// Reads the two fields (each the field lines of one name joined with `, `, RFC 9651 4.2).
pub(crate) fn read(policy: Option<&[u8]>, limit: Option<&[u8]>) -> Fields {
    let mut fields = Fields::default();
    if let Some(value) = policy {
        match Parser::new(value).parse::<List>() {
            Ok(list) => {
                fields.listed = true;
                fields.policies = list.iter().filter_map(policy_member).collect();
            }
            Err(_) => fields.malformed = Some("RateLimit-Policy"),
        }
    }
    if let Some(value) = limit {
        if let Ok(list) = Parser::new(value).parse::<List>() {
            for (name, params) in list.iter().filter_map(named_item) {
                add_counters(&mut fields.policies, name, params);
            }
        } else if let Ok(dict) = Parser::new(value).parse::<Dictionary>() {
            fields.combined = Some(combined(&dict));
        } else {
            fields.malformed = fields.malformed.or(Some("RateLimit"));
        }
    }
    fields
}

/// A `RateLimit-Policy` member: a named policy with its `q` (required), or the older bare
/// number `10;w=1`. Anything else (an inner list, no quota) is no policy.
fn policy_member(entry: &ListEntry) -> Option<NamedPolicy> {
    let ListEntry::Item(item) = entry else {
        return None;
    };
    let params = &item.params;
    let (name, quota, legacy) = match &item.bare_item {
        BareItem::Integer(q) => (String::new(), whole(Some(&BareItem::Integer(*q)))?, true),
        bare => (name_of(bare)?, whole(params.get("q"))?, false),
    };
    let unit = match params.get("qu") {
        None => QuotaUnit::Request,
        Some(word) => QuotaUnit::of(word_of(word)?),
    };
    Some(NamedPolicy {
        name,
        quota: Some(quota),
        window: seconds(params.get("w")).filter(|w| !w.is_zero()),
        unit,
        partition: partition(params),
        remaining: None,
        reset: None,
        legacy,
    })
}

/// A `RateLimit` member: its name and parameters.
fn named_item(entry: &ListEntry) -> Option<(String, &Parameters)> {
    let ListEntry::Item(item) = entry else {
        return None;
    };
    Some((name_of(&item.bare_item)?, &item.params))
}

/// Puts a `RateLimit` member's `r` and `t` on the first policy of its name that has none yet,
/// or on a policy of its own (unit `request`) when no policy has that name.
fn add_counters(policies: &mut Vec<NamedPolicy>, name: String, params: &Parameters) {
    let Some(remaining) = whole(params.get("r")) else {
        return;
    };
    let reset = seconds(params.get("t"));
    let spot = policies
        .iter()
        .position(|p| p.name == name && p.remaining.is_none());
    match spot {
        Some(i) => {
            policies[i].remaining = Some(remaining);
            policies[i].reset = reset;
            if policies[i].partition.is_none() {
                policies[i].partition = partition(params);
            }
        }
        None => policies.push(NamedPolicy {
            name,
            quota: None,
            window: None,
            unit: QuotaUnit::Request,
            partition: partition(params),
            remaining: Some(remaining),
            reset,
            legacy: false,
        }),
    }
}

/// The draft-03 dictionary's three numbers (members of another kind are ignored).
fn combined(dict: &Dictionary) -> Combined {
    let number = |key: &str| match dict.get(key) {
        Some(ListEntry::Item(item)) => whole(Some(&item.bare_item)),
        _ => None,
    };
    Combined {
        limit: number("limit"),
        remaining: number("remaining"),
        reset: number("reset"),
    }
}

/// A policy's name: a String (the draft since -09) or a Token (as earlier drafts wrote it).
fn name_of(bare: &BareItem) -> Option<String> {
    match bare {
        BareItem::String(s) => Some(s.as_str().to_string()),
        BareItem::Token(t) => Some(t.as_str().to_string()),
        _ => None,
    }
}

/// A word parameter (`qu`): a String or a Token.
fn word_of(bare: &BareItem) -> Option<&str> {
    match bare {
        BareItem::String(s) => Some(s.as_str()),
        BareItem::Token(t) => Some(t.as_str()),
        _ => None,
    }
}

/// A non-negative Integer parameter.
fn whole(bare: Option<&BareItem>) -> Option<u64> {
    let n = i64::from(bare?.as_integer()?);
    u64::try_from(n).ok()
}

/// A non-negative Integer parameter in seconds.
fn seconds(bare: Option<&BareItem>) -> Option<Duration> {
    whole(bare).map(Duration::from_secs)
}

/// The `pk` byte sequence, base64 as the field carries it.
fn partition(params: &Parameters) -> Option<String> {
    let bytes = params.get("pk")?.as_byte_sequence()?;
    Some(base64::engine::general_purpose::STANDARD.encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_str(policy: Option<&str>, limit: Option<&str>) -> Fields {
        read(policy.map(str::as_bytes), limit.map(str::as_bytes))
    }

    fn secs(n: u64) -> Option<Duration> {
        Some(Duration::from_secs(n))
    }

    #[test]
    fn named_policies_keep_their_unit_partition_and_counters() {
        let f = read_str(
            Some(
                "\"burst\";q=100;w=60;qu=\"request\";pk=:Y2xpZW50LTQy:, \"daily\";q=1000;w=86400, \
                 \"bytes\";q=1048576;w=10;qu=\"content-bytes\", \"par\";q=4;qu=concurrency",
            ),
            Some("\"burst\";r=50;t=30, \"daily\";r=999;t=4000"),
        );
        assert!(f.listed);
        assert_eq!(f.malformed, None);
        let names: Vec<_> = f.policies.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["burst", "daily", "bytes", "par"]);
        let burst = &f.policies[0];
        assert_eq!(
            (burst.quota, burst.window, &burst.unit),
            (Some(100), secs(60), &QuotaUnit::Request)
        );
        assert_eq!(burst.partition.as_deref(), Some("Y2xpZW50LTQy"));
        assert_eq!((burst.remaining, burst.reset), (Some(50), secs(30)));
        let daily = &f.policies[1];
        assert_eq!(daily.unit, QuotaUnit::Request, "qu absent: request");
        assert_eq!((daily.remaining, daily.reset), (Some(999), secs(4000)));
        assert_eq!(f.policies[2].unit, QuotaUnit::ContentBytes);
        assert_eq!((f.policies[2].remaining, f.policies[2].reset), (None, None));
        assert_eq!(f.policies[3].unit, QuotaUnit::Concurrency, "qu as a token");
        assert_eq!(f.policies[3].window, None);
        assert!(f.policies.iter().all(|p| !p.legacy));
    }

    #[test]
    fn counters_without_a_policy_of_their_name_are_requests() {
        let f = read_str(None, Some("\"a\";r=9;t=5, \"b\";r=2;pk=:AAE=:"));
        assert!(!f.listed);
        assert_eq!(f.policies.len(), 2);
        assert_eq!(f.policies[0].unit, QuotaUnit::Request);
        assert_eq!(f.policies[0].quota, None);
        assert_eq!(
            (f.policies[1].remaining, f.policies[1].reset),
            (Some(2), None)
        );
        assert_eq!(f.policies[1].partition.as_deref(), Some("AAE="));
        // A member without `r` says nothing.
        assert!(read_str(None, Some("\"a\";t=5")).policies.is_empty());
    }

    #[test]
    fn the_older_forms_of_the_two_fields_are_read() {
        let f = read_str(Some("10;w=1"), Some("limit=10, remaining=5, reset=30"));
        assert_eq!(f.policies.len(), 1);
        assert!(f.policies[0].legacy);
        assert_eq!(
            (f.policies[0].quota, f.policies[0].window),
            (Some(10), secs(1))
        );
        assert_eq!(
            f.combined,
            Some(Combined {
                limit: Some(10),
                remaining: Some(5),
                reset: Some(30)
            })
        );
        assert_eq!(f.malformed, None);
        // Draft -08's token names.
        let f = read_str(Some("default;q=100;w=10"), Some("default;r=3;t=7"));
        assert_eq!(f.policies[0].name, "default");
        assert_eq!(f.policies[0].remaining, Some(3));
    }

    #[test]
    fn malformed_fields_are_ignored_whole_and_named() {
        for bad in [
            "\"a\";q=10;w=1,",
            "\"unterminated;q=1",
            "\"a\";q=1;;w=2",
            "\"a\";q=1 w=2",
            "\u{1}",
            "\"a\";q=99999999999999999999",
        ] {
            let f = read_str(Some(bad), None);
            assert_eq!(f.malformed, Some("RateLimit-Policy"), "{bad:?}");
            assert!(f.policies.is_empty(), "{bad:?}");
        }
        let f = read_str(Some("\"a\";q=5"), Some("limit=5, remaining=,"));
        assert_eq!(f.malformed, Some("RateLimit"));
        assert_eq!(f.policies.len(), 1, "the good field is still read");
        // Valid fields of the wrong shape: members that are no policy are skipped.
        let f = read_str(
            Some("(\"a\" \"b\");q=1, \"neg\";q=-1, \"dec\";q=1.5, \"noq\";w=1, ?1;q=3, \"ok\";q=2;qu=5"),
            Some("\"ok\";r=-1;t=2"),
        );
        assert_eq!(f.malformed, None);
        assert!(f.policies.is_empty(), "{:?}", f.policies);
        let f = read_str(None, Some("\"ok\";r=1;t=-2"));
        assert_eq!(
            (f.policies[0].remaining, f.policies[0].reset),
            (Some(1), None)
        );
    }

    #[test]
    fn an_unknown_unit_is_kept_as_written() {
        let f = read_str(Some("\"x\";q=5;w=1;qu=\"widgets\""), None);
        assert_eq!(f.policies[0].unit, QuotaUnit::Other("widgets".into()));
        assert_eq!(f.policies[0].unit.as_str(), "widgets");
    }
}
