//! The hints: one pub/sub subscription per instance to `<prefix>:hints`, on which the scripts say
//! that a slot came free, a cooldown began, an operator acted, or an instance waits behind the
//! allowances others hold. A hint only wakes or closes a
//! host early; the store stays the truth, and a lost hint costs at most a wait until the next
//! lease expiry or reservation.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

use super::RedisStore;
use crate::pacing::policy::CooldownCause;

/// A hint as received.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Hint {
    /// A concurrency slot of the host came free; for the instance named (the one that waited
    /// longest), or for any (`None`).
    Free(String, Option<String>),
    /// The host cools down for this long, for this cause.
    Cool(String, Duration, CooldownCause),
    /// An operator paused the host for this long.
    Pause(String, Duration),
    /// An operator ended the host's pause.
    Resume(String),
    /// An operator pinned the host's rate (or, `None`, let it go).
    Rate(String, Option<f64>),
    /// The instance named was refused a turn of the host while allowances are held: every
    /// other holder gives its allowance back.
    Yield(String, String),
}

impl Hint {
    /// Reads one message; anything else is ignored.
    pub(crate) fn parse(text: &str) -> Option<Hint> {
        let mut words = text.split(' ');
        let kind = words.next()?;
        let host = words.next()?.to_string();
        let millis = |w: Option<&str>| w?.parse::<u64>().ok().map(Duration::from_millis);
        match kind {
            "free" => Some(Hint::Free(host, words.next().map(str::to_string))),
            "cool" => {
                let d = millis(words.next())?;
                Some(Hint::Cool(host, d, CooldownCause::from_word(words.next())))
            }
            "pause" => Some(Hint::Pause(host, millis(words.next())?)),
            "resume" => Some(Hint::Resume(host)),
            "yield" => Some(Hint::Yield(host, words.next()?.to_string())),
            "rate" => {
                let rate = words.next()?;
                let rate = if rate == "-" {
                    None
                } else {
                    Some(
                        rate.parse::<f64>()
                            .ok()
                            .filter(|r| r.is_finite() && *r > 0.0)?,
                    )
                };
                Some(Hint::Rate(host, rate))
            }
            _ => None,
        }
    }
}

/// Delivers every hint to `deliver` until `stop`, subscribing again a second after any failure.
pub(crate) async fn run_hints(
    store: Arc<RedisStore>,
    deliver: impl Fn(Hint) + Send + 'static,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            () = follow(&store, &deliver) => {}
            () = stop.cancelled() => return,
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// Subscribes to the hints and delivers them until the subscription fails or ends.
async fn follow(store: &RedisStore, deliver: &impl Fn(Hint)) {
    // A Sentinel master that moves ends the subscription on the old one.
    let mut moves = store.conn.moves();
    let moved = async {
        match &mut moves {
            Some(m) => {
                let _ = m.changed().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    let connect = store.conn.pubsub();
    let limit = store.settings.timeout.max(Duration::from_secs(1));
    let Ok(Ok(mut pubsub)) = tokio::time::timeout(limit, connect).await else {
        return;
    };
    if pubsub.subscribe(&store.channel).await.is_err() {
        return;
    }
    let mut messages = pubsub.on_message();
    let receive = async {
        while let Some(message) = messages.next().await {
            if let Some(hint) = std::str::from_utf8(message.get_payload_bytes())
                .ok()
                .and_then(Hint::parse)
            {
                deliver(hint);
            }
        }
    };
    tokio::select! {
        () = receive => {}
        () = moved => {}
    }
}
