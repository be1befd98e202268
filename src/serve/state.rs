//! What survives a restart: cooldowns, operator pauses and rates, learned rates.
//!
//! Saved as JSON under `state_dir` (atomically: a temporary file and a rename), every few seconds
//! when something changed and at shutdown; loaded at start. A restart in the middle of a one-hour
//! `Retry-After` keeps the host cooling down for what is left. Instants are stored as wall-clock
//! times, since monotonic instants mean nothing to the next process. A corrupt or foreign file
//! gives a warning and a fresh start, never a crash. This module does not decide what is worth
//! keeping (`limiter::Limiter::records` does).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::budget::limiter::HostRecord;
use crate::config::KeyMode;
use crate::pacing::policy::{CooldownCause, PacingRecord};

/// File name under `state_dir`.
pub(crate) const STATE_FILE: &str = "state.json";
const FORMAT: &str = "courtesy-state";
const VERSION: u32 = 1;

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StateFile {
    format: String,
    version: u32,
    saved_at_unix_ms: u64,
    hosts: Vec<SavedHost>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedHost {
    host: String,
    port: u16,
    /// A key several names share (`key = "domain"` or `"ip"`), and what it was made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key_by: Option<KeyMode>,
    rate: f64,
    cooldown_until_unix_ms: Option<u64>,
    cooldown_cause: Option<String>,
    operator_pause_until_unix_ms: Option<u64>,
    rate_override: Option<f64>,
    forced: bool,
}

/// The path of the state file in `dir`.
pub(crate) fn path(dir: &Path) -> PathBuf {
    dir.join(STATE_FILE)
}

/// Serializes `records` as the state file's text, with `now` and `wall_now` read together.
pub(crate) fn encode(records: &[HostRecord], now: Instant, wall_now: SystemTime) -> String {
    // Window ends are rounded up to the next millisecond: a restored window may end a little
    // later than the one saved, never earlier (a cooldown never shortens, a restart included).
    let to_wall = |at: Instant| unix_ms_up(wall_now + at.saturating_duration_since(now));
    let file = StateFile {
        format: FORMAT.into(),
        version: VERSION,
        saved_at_unix_ms: unix_ms(wall_now),
        hosts: records
            .iter()
            .map(|r| SavedHost {
                host: r.host.clone(),
                port: r.port,
                key: r.shared_key.as_ref().map(|(key, _)| key.clone()),
                key_by: r.shared_key.as_ref().map(|(_, kind)| *kind),
                rate: r.pacing.rate,
                cooldown_until_unix_ms: r.pacing.cooldown.map(|(until, _)| to_wall(until)),
                cooldown_cause: r.pacing.cooldown.map(|(_, cause)| cause.word()),
                operator_pause_until_unix_ms: r.pacing.operator_pause.map(to_wall),
                rate_override: r.pacing.rate_override,
                forced: r.forced,
            })
            .collect(),
    };
    serde_json::to_string_pretty(&file).unwrap_or_else(|_| "{}".into())
}

/// Parses a state file's text; windows already over are dropped.
pub(crate) fn decode(
    text: &str,
    now: Instant,
    wall_now: SystemTime,
) -> Result<Vec<HostRecord>, String> {
    let file: StateFile = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if file.format != FORMAT || file.version != VERSION {
        return Err(format!(
            "format {:?} version {} is not {FORMAT:?} version {VERSION}",
            file.format, file.version
        ));
    }
    let to_instant = |ms: u64| -> Option<Instant> {
        let at = UNIX_EPOCH + Duration::from_millis(ms);
        at.duration_since(wall_now).ok().map(|left| now + left)
    };
    Ok(file
        .hosts
        .into_iter()
        .map(|h| HostRecord {
            shared_key: h.key.map(|key| (key, h.key_by.unwrap_or(KeyMode::Domain))),
            host: h.host,
            port: h.port,
            pacing: PacingRecord {
                rate: h.rate,
                cooldown: h
                    .cooldown_until_unix_ms
                    .and_then(to_instant)
                    .map(|until| (until, CooldownCause::from_word(h.cooldown_cause.as_deref()))),
                operator_pause: h.operator_pause_until_unix_ms.and_then(to_instant),
                rate_override: h.rate_override,
            },
            forced: h.forced,
        })
        .collect())
}

/// Writes the state file if its content changed since `last`; returns the new content.
pub(crate) fn save(dir: &Path, records: &[HostRecord], last: &str) -> Option<String> {
    let text = encode(records, Instant::now(), SystemTime::now());
    // The timestamp changes every time; compare the hosts only.
    let hosts_part = |t: &str| t.split_once("\"hosts\"").map(|(_, h)| h.to_string());
    if hosts_part(&text) == hosts_part(last) {
        return None;
    }
    if let Err(e) = std::fs::create_dir_all(dir)
        .map_err(anyhow::Error::from)
        .and_then(|()| crate::util::files::write_atomically(&path(dir), text.as_bytes(), 0o600))
    {
        warn!("cannot save the state to {}: {e:#}", path(dir).display());
        return None;
    }
    Some(text)
}

/// Reads the state file: what it holds, or nothing (with a warning) if it is missing, corrupt or
/// foreign.
pub(crate) fn load(dir: &Path) -> Vec<HostRecord> {
    let file = path(dir);
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            warn!("cannot read {}: {e}; starting fresh", file.display());
            return Vec::new();
        }
    };
    match decode(&text, Instant::now(), SystemTime::now()) {
        Ok(records) => {
            info!(hosts = records.len(), file = %file.display(), "state restored");
            records
        }
        Err(e) => {
            warn!("ignoring {}: {e}; starting fresh", file.display());
            Vec::new()
        }
    }
}

fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Milliseconds since the epoch, rounded up.
fn unix_ms_up(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos().div_ceil(1_000_000) as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(now: Instant) -> HostRecord {
        HostRecord {
            host: "shop.test".into(),
            port: 443,
            shared_key: None,
            pacing: PacingRecord {
                rate: 0.5,
                cooldown: Some((now + Duration::from_secs(3600), CooldownCause::Status(429))),
                operator_pause: Some(now + Duration::from_secs(60)),
                rate_override: Some(2.0),
            },
            forced: true,
        }
    }

    #[test]
    fn records_round_trip_through_wall_clock_time() {
        let now = Instant::now();
        let wall = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let text = encode(&[record(now)], now, wall);
        // Read back 100 s later by another process.
        let later = Instant::now() + Duration::from_secs(5);
        let back = decode(&text, later, wall + Duration::from_secs(100)).unwrap();
        assert_eq!(back.len(), 1);
        let (until, cause) = back[0].pacing.cooldown.unwrap();
        assert_eq!(cause, CooldownCause::Status(429));
        assert_eq!(until.duration_since(later), Duration::from_secs(3500));
        assert_eq!(
            back[0].pacing.operator_pause, None,
            "the 60 s pause is over"
        );
        assert_eq!(back[0].pacing.rate_override, Some(2.0));
        assert!(back[0].forced);
    }

    #[test]
    fn a_shared_key_survives_and_files_without_one_still_read() {
        let now = Instant::now();
        let wall = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut shared = record(now);
        shared.shared_key = Some(("shop.test".into(), KeyMode::Domain));
        let text = encode(&[shared.clone(), record(now)], now, wall);
        let back = decode(&text, now, wall).unwrap();
        assert_eq!(back[0].shared_key, shared.shared_key);
        assert_eq!(back[1].shared_key, None);
        assert!(!text.contains("\"key\": null"), "absent, not null: {text}");
    }

    #[test]
    fn a_restored_window_never_ends_earlier_than_the_saved_one() {
        let now = Instant::now();
        let wall = UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789);
        for extra_ns in [0u64, 1, 400_000, 999_999, 1_000_000, 2_500_001] {
            let mut r = record(now);
            let until = now + Duration::from_secs(3) + Duration::from_nanos(extra_ns);
            r.pacing.cooldown = Some((until, CooldownCause::Status(503)));
            let text = encode(&[r], now, wall);
            let back = decode(&text, now, wall).unwrap();
            let (restored, _) = back[0].pacing.cooldown.unwrap();
            assert!(restored >= until, "{extra_ns} ns: {restored:?} < {until:?}");
            assert!(restored - until < Duration::from_millis(1));
        }
    }

    #[test]
    fn corrupt_or_foreign_files_are_refused() {
        let now = Instant::now();
        let wall = SystemTime::now();
        assert!(decode("{not json", now, wall).is_err());
        assert!(decode(
            "{\"format\":\"other\",\"version\":1,\"saved_at_unix_ms\":0,\"hosts\":[]}",
            now,
            wall
        )
        .is_err());
        assert!(decode("[1,2,3]", now, wall).is_err());
    }

    #[test]
    fn a_corrupt_file_on_disk_means_a_fresh_start() {
        let dir = crate::util::scratch::dir("state");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(path(&dir), "garbage").unwrap();
        assert!(load(&dir).is_empty());
        let saved = save(&dir, &[record(Instant::now())], "").unwrap();
        assert_eq!(load(&dir).len(), 1);
        assert!(save(&dir, &[], &saved).is_some(), "a change is written");
        assert!(load(&dir).is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
