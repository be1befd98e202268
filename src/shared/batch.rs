//! Reservations of several hosts in one round trip. While one reservation call is in flight,
//! the reservations other hosts ask for wait for it, and the next call carries all of them
//! (`scripts::reserve_many`: the reservation script run once per host, atomically, in one
//! `EVALSHA`). A host nobody contends with costs nothing more: with no call in flight a
//! reservation goes at once, alone, as before. With many busy hosts, one round trip, one parse
//! and one hand-off to the connection carry up to [`MAX_BATCH`] reservations.
//!
//! Not on a Redis Cluster: the keys of different hosts live in different slots, and one script
//! may only touch one slot. This module decides nothing about a reservation's content
//! (`mod.rs` builds it, `scripts.rs` runs it).

use tokio::sync::oneshot;

use super::{Store, StoreDown};
use crate::locks::lock;

/// The most reservations one call carries.
const MAX_BATCH: usize = 64;

/// The index, among a reservation's arguments, of its deadline (`ARGV[16]` of `RESERVE`),
/// written when the call is sent.
const DEADLINE_ARG: usize = 15;

/// One host's reservation, ready to send: its four keys and its arguments, as `RESERVE` takes
/// them.
#[derive(Debug)]
pub(super) struct ReserveCall {
    /// Budget, leases, waiting list, waiting list's expiries.
    pub(super) keys: [String; 4],
    /// `RESERVE`'s arguments.
    pub(super) args: Vec<String>,
}

/// The reservations waiting for the call in flight, and whether one is.
#[derive(Debug, Default)]
pub(super) struct Batch {
    busy: bool,
    pending: Vec<Queued>,
}

/// A reservation waiting for the next call, and where its reply goes.
#[derive(Debug)]
struct Queued {
    call: ReserveCall,
    reply: oneshot::Sender<Result<String, StoreDown>>,
}

/// Starts the next call (of the reservations that queued meanwhile) when the one in flight
/// ends, on every path, a cancelled one included: otherwise the queue would wait for good.
struct NextBatch<'a>(&'a Store);

impl Drop for NextBatch<'_> {
    fn drop(&mut self) {
        self.0.next_batch();
    }
}

impl Store {
    /// Runs one host's reservation: at once when no call is in flight, else with the next
    /// call. Returns the script's reply for this host.
    pub(super) async fn run_reserve(&self, call: ReserveCall) -> Result<String, StoreDown> {
        if !self.batching {
            return self.reserve_alone(call).await;
        }
        // The lock is held for these lines only, never across the call.
        let queued = {
            let mut batch = lock(&self.batch);
            if batch.busy {
                let (reply, answer) = oneshot::channel();
                batch.pending.push(Queued { call, reply });
                Err(answer)
            } else {
                batch.busy = true;
                Ok(call)
            }
        };
        match queued {
            Ok(call) => {
                let _next = NextBatch(self);
                self.reserve_alone(call).await
            }
            Err(answer) => answer
                .await
                .unwrap_or_else(|_| Err(StoreDown("the reservation's batch was dropped".into()))),
        }
    }

    /// Sends the reservations that queued while a call was in flight, in a task of their own;
    /// or says that no call is in flight any more.
    fn next_batch(&self) {
        let items: Vec<Queued> = {
            let mut batch = lock(&self.batch);
            if batch.pending.is_empty() {
                batch.busy = false;
                return;
            }
            let n = batch.pending.len().min(MAX_BATCH);
            batch.pending.drain(..n).collect()
        };
        let (Some(store), Ok(runtime)) = (self.me.upgrade(), tokio::runtime::Handle::try_current())
        else {
            // Shutting down: the waiting reservations are answered with an error.
            lock(&self.batch).busy = false;
            return;
        };
        runtime.spawn(async move {
            let _next = NextBatch(&store);
            store.send_batch(items).await;
        });
    }

    /// One reservation in a call of its own.
    async fn reserve_alone(&self, mut call: ReserveCall) -> Result<String, StoreDown> {
        call.args[DEADLINE_ARG] = self.deadline_us().to_string();
        let mut invocation = self.scripts.reserve.prepare_invoke();
        for key in &call.keys {
            invocation.key(key);
        }
        for arg in &call.args {
            invocation.arg(arg);
        }
        let value = self.call("reserve", &invocation).await?;
        super::value_text(&value)
            .map(str::to_string)
            .ok_or_else(|| StoreDown("the reservation script answered an unknown shape".into()))
    }

    /// Several reservations in one call; each gets its own reply, or the call's failure.
    async fn send_batch(&self, mut items: Vec<Queued>) {
        if items.len() == 1 {
            if let Some(one) = items.pop() {
                let answer = self.reserve_alone(one.call).await;
                let _ = one.reply.send(answer);
            }
            return;
        }
        let deadline = self.deadline_us().to_string();
        let mut invocation = self.scripts.reserve_many.prepare_invoke();
        for item in &mut items {
            item.call.args[DEADLINE_ARG].clone_from(&deadline);
            for key in &item.call.keys {
                invocation.key(key);
            }
            invocation.arg(item.call.args.len());
            for arg in &item.call.args {
                invocation.arg(arg);
            }
        }
        let answers: Result<Vec<String>, StoreDown> =
            self.call("reserve", &invocation).await.and_then(|value| {
                let replies: Vec<String> = super::value_text(&value)
                    .map(|text| text.split('\n').map(str::to_string).collect())
                    .unwrap_or_default();
                if replies.len() == items.len() {
                    Ok(replies)
                } else {
                    Err(StoreDown(
                        "the batched reservation script answered an unknown shape".into(),
                    ))
                }
            });
        match answers {
            Ok(replies) => {
                for (item, reply) in items.into_iter().zip(replies) {
                    let _ = item.reply.send(Ok(reply));
                }
            }
            Err(down) => {
                for item in items {
                    let _ = item.reply.send(Err(StoreDown(down.0.clone())));
                }
            }
        }
    }
}
