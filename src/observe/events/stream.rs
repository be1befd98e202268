//! A subscriber's response body: its events as they come, `: keep-alive` after every
//! [`KEEP_ALIVE_EVERY`] without one, and the end when the hub drops the subscriber (it fell
//! behind) or closes (courtesy shuts down). Dropping the body (the client went away)
//! unsubscribes.

use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::Frame;
use tokio::time::{Instant, Sleep};

use super::frame::KEEP_ALIVE;
use super::{Next, Subscription, KEEP_ALIVE_EVERY};

/// The body of a `GET /v1/events` answer.
#[derive(Debug)]
pub struct EventStream {
    subscription: Subscription,
    /// When the next keep-alive is due (moved on by every frame sent).
    keep_alive: Pin<Box<Sleep>>,
    ended: bool,
}

impl EventStream {
    /// The stream of `subscription`.
    pub(crate) fn new(subscription: Subscription) -> Self {
        EventStream {
            subscription,
            keep_alive: Box::pin(tokio::time::sleep(KEEP_ALIVE_EVERY)),
            ended: false,
        }
    }

    /// Whether the stream has ended.
    pub(crate) fn is_end_stream(&self) -> bool {
        self.ended
    }

    /// The next chunk: events waiting, else a keep-alive when one is due, else pending (woken by
    /// the next event or the keep-alive's timer); `None` at the end.
    pub(crate) fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::convert::Infallible>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        match self.subscription.next(cx.waker()) {
            Next::Frames(chunk) => {
                self.keep_alive_later();
                return Poll::Ready(Some(Ok(Frame::data(chunk))));
            }
            Next::End => {
                self.ended = true;
                return Poll::Ready(None);
            }
            Next::Nothing => {}
        }
        if self.keep_alive.as_mut().poll(cx).is_ready() {
            self.keep_alive_later();
            return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(KEEP_ALIVE)))));
        }
        Poll::Pending
    }

    /// Moves the keep-alive to [`KEEP_ALIVE_EVERY`] from now.
    fn keep_alive_later(&mut self) {
        self.keep_alive
            .as_mut()
            .reset(Instant::now() + KEEP_ALIVE_EVERY);
    }
}
