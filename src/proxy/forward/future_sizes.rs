//! The request's futures stay small. Every `.await` of an `async fn` builds the callee's future
//! and moves it into the caller's, so a future that grows is copied once more per request at
//! every level above it, and the request's state spreads over more cache lines. These limits
//! hold the sizes measured when they were set (in the test build's layout), with a little room;
//! a change that crosses one should box the large part or keep less across an `.await`.

use std::mem::size_of_val;
use std::sync::Arc;

use crate::config::Config;
use crate::proxy::for_tests::{context, head, proxy};
use crate::proxy::Asking;

/// Bytes of `forward_to`'s future: the whole request after its context is made (4,936 when set).
const FORWARD_TO_LIMIT: usize = 5_300;

/// Bytes of `send_until_answered`'s future: the turns and sends (4,448 when set).
const SEND_UNTIL_ANSWERED_LIMIT: usize = 4_800;

/// Bytes of `Proxy::serve`'s future, the whole request as hyper holds it: moved once per request
/// into hyper's place for it, since it is not boxed (`serve/server.rs`) (7,800 when set).
const SERVE_LIMIT: usize = 8_400;

/// The size of the future an `async fn` of three arguments returns, without calling it.
fn future_size<A, B, C, F: std::future::Future>(_: impl FnOnce(A, B, C) -> F) -> usize {
    std::mem::size_of::<F>()
}

#[tokio::test]
async fn the_request_path_futures_stay_within_their_sizes() {
    let proxy = Arc::new(proxy(Config::default(), "future-sizes"));
    let asking = Asking::for_tests();
    let head = || head("GET", "http://a.test/page", &[]);
    let mut cx = context(&asking, &head(), |_| {});
    let forward_to = size_of_val(&proxy.forward_to(head(), &mut cx));
    let send = size_of_val(&proxy.send_until_answered(head(), &mut cx));
    assert!(
        forward_to <= FORWARD_TO_LIMIT,
        "forward_to's future is {forward_to} bytes, over {FORWARD_TO_LIMIT}"
    );
    assert!(
        send <= SEND_UNTIL_ANSWERED_LIMIT,
        "send_until_answered's future is {send} bytes, over {SEND_UNTIL_ANSWERED_LIMIT}"
    );
    assert!(send < forward_to, "one holds the other");
    let serve = future_size(crate::proxy::Proxy::serve);
    assert!(
        serve <= SERVE_LIMIT,
        "serve's future is {serve} bytes, over {SERVE_LIMIT}"
    );
    assert!(forward_to < serve, "one holds the other");
}
