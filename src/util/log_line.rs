//! The text log line, written straight into the line's buffer.
//!
//! With a line per response the formatter is on every request's path. tracing-subscriber's own
//! `Full` format paints every span name, field name and separator through its ANSI styles even when
//! colours are off, escapes the message one character at a time through a `fmt::Formatter`, and
//! formats the timestamp's seven numbers one by one; on a 1 KiB proxied request that was about a
//! fifth of courtesy's instructions. [`PlainLine`] and [`PlainFields`] write the same line, byte for
//! byte (the unit tests compare them), for output without colours, which is what a log file or a
//! pipe gets: the date part of the timestamp is kept per thread and reused within the second,
//! integers go through `itoa`, and the message is escaped only when it holds a control character.
//! A terminal (colours on) keeps tracing-subscriber's formatter; JSON output is not touched.

use std::cell::RefCell;
use std::fmt::{self, Write as _};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_log::NormalizeEvent as _;
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// The event format for lines without colours: timestamp, level, the span scope with its fields,
/// the target, then the event's fields, as tracing-subscriber's default (`Full`) format writes
/// them.
#[derive(Debug, Default, Clone, Copy)]
pub struct PlainLine;

/// The field format that goes with [`PlainLine`] (span fields are formatted once, when the span is
/// made, by the same code).
#[derive(Debug, Default, Clone, Copy)]
pub struct PlainFields;

impl<S, N> FormatEvent<S, N> for PlainLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let normalized = event.normalized_metadata();
        let meta = normalized.as_ref().unwrap_or_else(|| event.metadata());
        write_start(&mut writer, SystemTime::now(), *meta.level())?;
        let mut seen = false;
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                writer.write_str(span.metadata().name())?;
                seen = true;
                let extensions = span.extensions();
                if let Some(fields) = extensions.get::<FormattedFields<N>>() {
                    if !fields.is_empty() {
                        writer.write_char('{')?;
                        writer.write_str(fields)?;
                        writer.write_char('}')?;
                    }
                }
                writer.write_char(':')?;
            }
        }
        // The request the line is about, when it is carried beside its future, not in a span.
        seen |= request::write_current(&mut writer)?;
        if seen {
            writer.write_char(' ')?;
        }
        writer.write_str(meta.target())?;
        writer.write_str(": ")?;
        ctx.format_fields(writer.by_ref(), event)?;
        writer.write_char('\n')
    }
}

impl<'writer> FormatFields<'writer> for PlainFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = PlainVisitor {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

/// Writes the start of every line: the timestamp and the level, each followed by a space.
fn write_start(writer: &mut impl fmt::Write, at: SystemTime, level: Level) -> fmt::Result {
    write_timestamp(writer, at)?;
    writer.write_char(' ')?;
    writer.write_str(level_str(level))?;
    writer.write_char(' ')
}

/// The level as the default format pads it: right-aligned in five columns.
fn level_str(level: Level) -> &'static str {
    match level {
        Level::TRACE => "TRACE",
        Level::DEBUG => "DEBUG",
        Level::INFO => " INFO",
        Level::WARN => " WARN",
        Level::ERROR => "ERROR",
    }
}

/// Writes the fields `name=value`, separated by spaces, the message first by name-less value.
struct PlainVisitor<'writer> {
    writer: Writer<'writer>,
    first: bool,
    result: fmt::Result,
}

impl PlainVisitor<'_> {
    /// Starts a field: the separating space, then `name=` unless it is the message. `None` when the
    /// field is not written at all (`log.*` metadata of a `log` record, already in the target).
    fn start(&mut self, field: &Field) -> Option<bool> {
        if self.result.is_err() {
            return None;
        }
        let name = field.name();
        if name.starts_with("log.") {
            return None;
        }
        if self.first {
            self.first = false;
        } else if let Err(e) = self.writer.write_char(' ') {
            self.result = Err(e);
            return None;
        }
        if name == "message" {
            return Some(true);
        }
        let name = name.strip_prefix("r#").unwrap_or(name);
        self.result = self
            .writer
            .write_str(name)
            .and_then(|()| self.writer.write_char('='));
        self.result.is_ok().then_some(false)
    }

    /// The message, with terminal control characters escaped (a message can carry text from the
    /// network).
    fn message(&mut self, value: fmt::Arguments<'_>) {
        let mut escaping = Escaping(&mut self.writer);
        self.result = escaping.write_fmt(value);
    }

    /// A value written as it is: a number or a bool.
    fn integer(&mut self, field: &Field, text: &str) {
        match self.start(field) {
            Some(true) => self.message(format_args!("{text}")),
            Some(false) => self.result = self.writer.write_str(text),
            None => {}
        }
    }
}

impl Visit for PlainVisitor<'_> {
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.integer(field, itoa::Buffer::new().format(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.integer(field, itoa::Buffer::new().format(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.integer(field, if value { "true" } else { "false" });
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match self.start(field) {
            Some(true) => self.message(format_args!("{value}")),
            // What `{:?}` writes for text it need not escape, without the formatting machinery.
            Some(false) if needs_no_escape(value) => {
                self.result = self
                    .writer
                    .write_char('"')
                    .and_then(|()| self.writer.write_str(value))
                    .and_then(|()| self.writer.write_char('"'));
            }
            Some(false) => self.result = write!(self.writer, "{value:?}"),
            None => {}
        }
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        match float_text(value, &mut ryu::Buffer::new()) {
            Some(text) => self.integer(field, text),
            None => self.record_debug(field, &value),
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        let Some(is_message) = self.start(field) else {
            return;
        };
        let Some(source) = value.source() else {
            return self.error_text(is_message, value);
        };
        self.error_text(is_message, value);
        if self.result.is_ok() {
            self.result = write!(self.writer, " {}.sources=[", field.name());
            let mut next = Some(source);
            let mut first = true;
            while let (Some(error), Ok(())) = (next, self.result) {
                if !first {
                    self.result = self.writer.write_str(", ");
                }
                first = false;
                let mut escaping = Escaping(&mut self.writer);
                self.result = self.result.and_then(|()| write!(escaping, "{error}"));
                next = error.source();
            }
            self.result = self.result.and_then(|()| self.writer.write_char(']'));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        match self.start(field) {
            Some(true) => self.message(format_args!("{value:?}")),
            Some(false) => self.result = write!(self.writer, "{value:?}"),
            None => {}
        }
    }
}

/// `value` as `{:?}` writes it, where ryu writes the same text, faster: `{:?}` writes the
/// shortest digits that read back as the value, in decimal notation for zero and for
/// 1e-4 <= |value| < 1e16. `None` outside that range, where `{:?}` writes an exponent and is left
/// to do so.
fn float_text(value: f64, buffer: &mut ryu::Buffer) -> Option<&str> {
    let magnitude = value.abs();
    (value == 0.0 || (1e-4..1e16).contains(&magnitude)).then(|| buffer.format_finite(value))
}

/// Writes an event's message as the plain format does: terminal control characters escaped.
fn write_message(writer: &mut impl fmt::Write, message: &str) -> fmt::Result {
    Escaping(writer).write_str(message)
}

/// Whether `{:?}` writes `text` as it is between quotes: printable ASCII without `"` or `\`.
fn needs_no_escape(text: &str) -> bool {
    text.bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
}

/// A socket address written as its `Display` writes it, without the formatting machinery: the
/// request span names its client on every request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AddrText(pub(crate) std::net::SocketAddr);

impl AddrText {
    /// Writes the address as its `Display` does, into any writer: an IPv4 address without the
    /// formatting machinery.
    pub(crate) fn write_to(&self, writer: &mut impl fmt::Write) -> fmt::Result {
        let std::net::SocketAddr::V4(addr) = self.0 else {
            return write!(writer, "{}", self.0);
        };
        let mut digits = itoa::Buffer::new();
        for (i, octet) in addr.ip().octets().into_iter().enumerate() {
            if i > 0 {
                writer.write_char('.')?;
            }
            writer.write_str(digits.format(octet))?;
        }
        writer.write_char(':')?;
        writer.write_str(digits.format(addr.port()))
    }
}

impl fmt::Display for AddrText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_to(f)
    }
}

impl PlainVisitor<'_> {
    /// An error's own text, escaped as the default format escapes it.
    fn error_text(&mut self, is_message: bool, value: &(dyn std::error::Error + 'static)) {
        if is_message {
            self.message(format_args!("{value}"));
        } else {
            let mut escaping = Escaping(&mut self.writer);
            self.result = write!(escaping, "{value}");
        }
    }
}

/// Writes text with the characters a terminal could act on (ESC, BEL, BS, FF, DEL and the C1
/// controls) spelled out, as tracing-subscriber escapes messages. Text without any is written in
/// one piece.
struct Escaping<'a, W: fmt::Write>(&'a mut W);

impl<W: fmt::Write> fmt::Write for Escaping<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        // C1 controls (U+0080..U+009F) are 0xC2 0x80..0x9F in UTF-8.
        let plain = !s
            .bytes()
            .any(|b| matches!(b, 0x1b | 0x07 | 0x08 | 0x0c | 0x7f | 0xc2));
        if plain {
            return self.0.write_str(s);
        }
        for ch in s.chars() {
            match ch {
                '\x1b' => self.0.write_str("\\x1b")?,
                '\x07' => self.0.write_str("\\x07")?,
                '\x08' => self.0.write_str("\\x08")?,
                '\x0c' => self.0.write_str("\\x0c")?,
                '\x7f' => self.0.write_str("\\x7f")?,
                ch if ('\u{80}'..='\u{9f}').contains(&ch) => {
                    write!(self.0, "\\u{{{:x}}}", ch as u32)?;
                }
                ch => self.0.write_char(ch)?,
            }
        }
        Ok(())
    }
}

thread_local! {
    /// The last second this thread wrote, and its `YYYY-MM-DDTHH:MM:SS`.
    static SECOND: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

/// Writes `at` in RFC 3339 with microseconds, in UTC (`2026-12-06T04:30:00.123456Z`), as
/// tracing-subscriber's `SystemTime` timer does; before 1970 it writes the epoch.
fn write_timestamp(writer: &mut impl fmt::Write, at: SystemTime) -> fmt::Result {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    SECOND.with(|cell| {
        let mut cached = cell.borrow_mut();
        if cached.0 != secs {
            cached.1.clear();
            write_civil(&mut cached.1, secs)?;
            cached.0 = secs;
        }
        writer.write_str(&cached.1)
    })?;
    let micros = since.subsec_micros();
    let mut digits = [b'0'; 6];
    let mut rest = micros;
    for d in digits.iter_mut().rev() {
        *d = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    writer.write_char('.')?;
    // Six ASCII digits.
    writer.write_str(std::str::from_utf8(&digits).map_err(|_| fmt::Error)?)?;
    writer.write_char('Z')
}

/// `YYYY-MM-DDTHH:MM:SS` of `secs` since the Unix epoch, in UTC (the proleptic Gregorian calendar;
/// days to a civil date after Howard Hinnant's `civil_from_days`).
fn write_civil(out: &mut String, secs: u64) -> fmt::Result {
    let days = (secs / 86_400) as i64;
    let of_day = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    if year > 9999 {
        write!(out, "+{year}")?;
    } else {
        write!(out, "{year:04}")?;
    }
    write!(
        out,
        "-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60
    )
}

pub(crate) mod direct;
pub(crate) mod request;

#[cfg(test)]
mod tests;
