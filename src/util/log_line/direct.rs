//! The line per response, written without `tracing`'s event machinery.
//!
//! At the default level every proxied request writes one line (`upstream response`). Through
//! `tracing`, that line is an event: its fields gathered into a value set, dispatched to the
//! subscriber, filtered, visited one by one through `dyn Visit`, formatted into the layer's
//! thread-local buffer, then handed to the writer; about five thousand instructions, a twentieth
//! of a proxied request's. When lines are plain text and carry their request
//! ([`super::request`]), and no span is open around the line, [`write_line`] writes the same
//! bytes (the unit tests compare them with the subscriber's) straight into the batched writer.
//! Anywhere else (colours, JSON, a span filter, any span open around the line) the caller falls
//! back to its `info!`, so what reaches the log never depends on which path wrote it.

use std::cell::RefCell;
use std::fmt::{self, Write as _};
use std::io::Write as _;
use std::sync::OnceLock;
use std::time::SystemTime;

use tracing_subscriber::fmt::MakeWriter as _;

use crate::util::log_writer::BatchedWriter;

/// Where direct lines go: the writer the subscriber writes to (set once, with the subscriber).
static SINK: OnceLock<BatchedWriter> = OnceLock::new();

thread_local! {
    /// The line being written, its allocation reused from line to line.
    static LINE: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Lets the line per response be written straight into `writer`, the one the subscriber writes
/// to, without an event. Called by logging set-up, only with `PlainLine` lines that carry their
/// request (after `carry_requests_in_lines`); a second call changes nothing.
pub fn write_lines_directly(writer: BatchedWriter) {
    let _ = SINK.set(writer);
}

/// A field's value, as the plain format writes it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Value {
    /// An unsigned integer.
    Unsigned(u64),
    /// A float (`{:?}`'s digits).
    Float(f64),
}

/// Writes one `INFO` line of `target` with `message` and `fields` (in the order the event macro
/// would record them) straight into the log, if it can; `false` when the caller must log it
/// through `tracing` instead: direct lines are off, or a span is open around the line. The
/// caller checks that its callsite is enabled (`tracing::enabled!`) first.
pub(crate) fn write_line(target: &str, message: &str, fields: &[(&str, Value)]) -> bool {
    let Some(sink) = SINK.get() else {
        return false;
    };
    if !super::request::lines_carry_requests() || in_a_span() {
        return false;
    }
    LINE.with(|cell| {
        let Ok(mut line) = cell.try_borrow_mut() else {
            return false;
        };
        line.clear();
        if format_line(&mut line, SystemTime::now(), target, message, fields).is_err() {
            return false;
        }
        let _ = sink.make_writer().write(line.as_bytes());
        true
    })
}

/// Whether the thread may be inside a `tracing` span (whose name and fields the line would
/// carry): it is in one, or the subscriber does not say.
fn in_a_span() -> bool {
    tracing::dispatcher::get_default(|dispatch| {
        let current = dispatch.current_span();
        !current.is_known() || current.id().is_some()
    })
}

/// The whole line, as `PlainLine` writes an event with these fields and no span around it.
pub(super) fn format_line(
    out: &mut String,
    at: SystemTime,
    target: &str,
    message: &str,
    fields: &[(&str, Value)],
) -> fmt::Result {
    super::write_start(out, at, tracing::Level::INFO)?;
    if super::request::write_current(out)? {
        out.push(' ');
    }
    out.push_str(target);
    out.push_str(": ");
    super::write_message(out, message)?;
    let (mut digits, mut float) = (itoa::Buffer::new(), ryu::Buffer::new());
    for (name, value) in fields {
        out.push(' ');
        out.push_str(name);
        out.push('=');
        match *value {
            Value::Unsigned(n) => out.push_str(digits.format(n)),
            Value::Float(x) => match super::float_text(x, &mut float) {
                Some(text) => out.push_str(text),
                None => write!(out, "{x:?}")?,
            },
        }
    }
    out.push('\n');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_inside_a_span_or_under_a_subscriber_that_does_not_say_is_left_to_tracing() {
        let subscriber = tracing_subscriber::fmt()
            .with_writer(std::io::sink)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            assert!(!in_a_span(), "no span entered");
            let span = tracing::info_span!("connect");
            let entered = span.enter();
            assert!(in_a_span());
            drop(entered);
            assert!(!in_a_span());
        });
        // No subscriber at all cannot say which span is current.
        tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), || {
            assert!(in_a_span());
        });
    }

    #[test]
    fn without_a_sink_the_caller_logs_through_tracing() {
        // No `write_lines_directly` in unit tests: every line goes through `info!`.
        assert!(!write_line(module_path!(), "upstream response", &[]));
    }
}
