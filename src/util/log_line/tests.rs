//! The plain line is the default format's line, byte for byte: the same events are written through
//! both and compared (the timestamps apart, which are checked on their own).

use std::io;
use std::sync::{Arc, Mutex};

use tracing::{debug, error, info, info_span, trace, warn, Span};

use super::*;

/// A `MakeWriter` target that keeps what was written.
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| io::Error::other("poisoned"))?
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Sink {
    fn text(&self) -> String {
        let bytes = self.0.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8(bytes).unwrap_or_default()
    }
}

/// What `emit` logs, through the default format (`plain` false) or through ours.
fn capture(plain: bool, emit: &dyn Fn()) -> String {
    let sink = Sink::default();
    let writer = {
        let sink = sink.clone();
        move || sink.clone()
    };
    let builder = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(Level::TRACE)
        .with_writer(writer);
    if plain {
        let subscriber = builder
            .fmt_fields(PlainFields)
            .event_format(PlainLine)
            .finish();
        tracing::subscriber::with_default(subscriber, emit);
    } else {
        tracing::subscriber::with_default(builder.finish(), emit);
    }
    sink.text()
}

/// The line without its timestamp (everything up to the first space), which must be RFC 3339
/// with microseconds.
fn untimed(text: &str) -> Vec<String> {
    text.lines()
        .map(|line| {
            let (stamp, rest) = line.split_once(' ').unwrap_or(("", line));
            assert_eq!(stamp.len(), 27, "timestamp {stamp:?} in {line:?}");
            assert!(
                stamp.ends_with('Z') && stamp.as_bytes()[10] == b'T',
                "{stamp:?}"
            );
            rest.to_string()
        })
        .collect()
}

fn same_as_default(emit: &dyn Fn()) {
    let default = capture(false, emit);
    let plain = capture(true, emit);
    assert!(!default.is_empty(), "nothing was logged");
    assert_eq!(untimed(&plain), untimed(&default));
}

#[derive(Debug)]
struct Outer(Inner);
#[derive(Debug)]
struct Inner;
impl fmt::Display for Outer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("outer \x1b[2J failed")
    }
}
impl fmt::Display for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("inner cause")
    }
}
impl std::error::Error for Outer {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}
impl std::error::Error for Inner {}

#[test]
fn the_access_line_is_the_default_formats() {
    same_as_default(&|| {
        let client: std::net::SocketAddr = "127.0.0.1:50312".parse().unwrap_or(([0; 4], 0).into());
        let span = info_span!("request", client = %client, job = "default", method = %http::Method::GET, host = %"example.com:80");
        let _in = span.enter();
        info!(
            status = 200u16,
            latency_ms = 3u64,
            wait_ms = 0u64,
            rate = 2.5f64,
            attempt = 1u32,
            "upstream response"
        );
    });
}

#[test]
fn nested_spans_empty_spans_and_recorded_fields_are_the_default_formats() {
    same_as_default(&|| {
        let outer =
            info_span!("connect", client = %"127.0.0.1:1", host = "a.example:443", mode = ?Some(3));
        let _o = outer.enter();
        let empty = info_span!("empty");
        let _e = empty.enter();
        let inner = info_span!("request", status = tracing::field::Empty, method = "GET");
        inner.record("status", 503u64);
        let _i = inner.enter();
        warn!(reason = ?("busy", 2), "refused locally");
        error!(code = -7i64, ok = false, "both levels");
        debug!("debug line");
        trace!(n = 1u64);
    });
}

#[test]
fn messages_and_fields_are_escaped_as_the_default_format_escapes_them() {
    same_as_default(&|| {
        info!("evil \x1b[31m red \u{85} bell \x07 \x08 \x0c \x7f é ü 日本");
        info!(
            url = "a\"b\\c\n",
            r#type = "kind",
            "quoted {} and {:?}",
            1,
            "x"
        );
        info!(message = "a message given as a field", extra = 1u64);
        info!(text = %"display \x1b raw", "fields other than the message are not escaped");
        let err = Outer(Inner);
        warn!(
            error = &err as &(dyn std::error::Error + 'static),
            "an error with a source"
        );
        warn!(
            error = &Inner as &(dyn std::error::Error + 'static),
            "an error without one"
        );
        info!(count = u64::MAX, low = i64::MIN);
    });
}

#[test]
fn the_civil_date_matches_the_time_crate() {
    let samples = (0..4000u64).map(|i| i * 1_234_567).chain([
        0,
        59,
        951_782_399,
        951_782_400,
        4_102_444_799,
        4_107_542_400,
        13_569_465_600,
    ]);
    for secs in samples {
        let mut ours = String::new();
        write_civil(&mut ours, secs).unwrap_or_default();
        let at = time::OffsetDateTime::from_unix_timestamp(secs as i64)
            .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
        let theirs = format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
            at.year(),
            u8::from(at.month()),
            at.day(),
            at.hour(),
            at.minute(),
            at.second()
        );
        assert_eq!(ours, theirs, "{secs}");
    }
}

#[test]
fn the_timestamp_has_microseconds_and_reuses_the_second() {
    let at = UNIX_EPOCH + std::time::Duration::new(1_796_531_400, 7_000);
    let mut out = String::new();
    write_timestamp(&mut Writer::new(&mut out), at).unwrap_or_default();
    write_timestamp(
        &mut Writer::new(&mut out),
        at + std::time::Duration::from_micros(999_000),
    )
    .unwrap_or_default();
    write_timestamp(
        &mut Writer::new(&mut out),
        at + std::time::Duration::from_secs(1),
    )
    .unwrap_or_default();
    assert_eq!(
        out,
        "2026-12-06T04:30:00.000007Z2026-12-06T04:30:00.999007Z2026-12-06T04:30:01.000007Z"
    );
}

#[test]
fn floats_and_text_written_without_fmt_are_what_the_default_format_writes() {
    let floats = [
        0.0f64,
        -0.0,
        1.0,
        2.5,
        0.1,
        1e-4,
        0.000123,
        9.99e-5,
        1e15,
        9.9e15,
        1e16,
        1e300,
        1e-300,
        1000000.0,
        123456.789,
        -3.75,
        f64::MAX,
        f64::MIN_POSITIVE,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1.0 / 3.0,
    ];
    same_as_default(&|| {
        for rate in floats {
            info!(rate, "a float");
        }
        for text in [
            "default",
            "",
            "a b-c_d.e",
            "quote\"d",
            "back\\slash",
            "tab\there",
            "é",
            "'",
        ] {
            info!(job = text, "a text");
        }
    });
}

#[test]
fn a_client_written_without_fmt_is_its_display() {
    for client in [
        "127.0.0.1:50312",
        "0.0.0.0:0",
        "255.255.255.255:65535",
        "[::1]:8080",
    ] {
        let addr: std::net::SocketAddr = client.parse().unwrap_or(([0; 4], 0).into());
        assert_eq!(AddrText(addr).to_string(), addr.to_string());
    }
    same_as_default(&|| {
        let client: std::net::SocketAddr = "10.1.2.3:4567".parse().unwrap_or(([0; 4], 0).into());
        let span = info_span!("request", client = %AddrText(client), job = "j");
        let _in = span.enter();
        info!("inside");
    });
}

/// Polls `future` once, to its end (the futures here never wait).
fn run_once<F: std::future::Future<Output = ()>>(future: F) {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let polled = std::pin::pin!(future).poll(&mut cx);
    assert!(polled.is_ready());
}

#[test]
fn a_request_carried_beside_its_future_is_written_as_its_span_was() {
    use request::{InRequest, RequestLine};
    let cases = [
        ("127.0.0.1:50312", "default", "GET", "example.com:80", None),
        (
            "[::1]:9",
            "team \"a\"\u{7}",
            "POST",
            "[::1]:8443",
            Some("https"),
        ),
    ];
    for (client, job, method, host, scheme) in cases {
        let client: std::net::SocketAddr = client.parse().unwrap_or(([0; 4], 0).into());
        let method: http::Method = method.parse().unwrap_or_default();
        let spanned = capture(false, &|| {
            let outer = info_span!("connect", host = %host);
            let _outer = outer.enter();
            let span = match scheme {
                None => {
                    info_span!("request", client = %AddrText(client), job = job, method = %method, host = %host)
                }
                Some(s) => {
                    info_span!("request", client = %AddrText(client), job = job, method = %method, host = %host, scheme = s)
                }
            };
            run_once(InRequest::new(
                async { info!(status = 200u16, "upstream response") },
                span,
                None,
            ));
            warn!("after the request");
        });
        let carried = capture(true, &|| {
            let outer = info_span!("connect", host = %host);
            let _outer = outer.enter();
            let line = RequestLine {
                client,
                job: job.into(),
                method: method.clone(),
                host: host.to_string(),
                scheme,
            };
            let inner = async { info!(status = 200u16, "upstream response") };
            let spawned = async {
                // A task spawned inside the request carries it too.
                run_once(InRequest::current(async { debug!("socket closed") }));
            };
            run_once(InRequest::new(
                async {
                    inner.await;
                    spawned.await;
                },
                Span::none(),
                Some(std::sync::Arc::new(line)),
            ));
            warn!("after the request");
        });
        let spanned = untimed(&spanned);
        let carried = untimed(&carried);
        assert_eq!(carried.len(), 3, "{carried:?}");
        assert_eq!(carried[0], spanned[0]);
        assert_eq!(carried[2], spanned[1], "nothing carried after the request");
        // The level apart, the spawned task's line is in the same spans.
        let scope = |line: &str| line[6..line.find("}: ").map_or(6, |i| i + 3)].to_string();
        assert_eq!(scope(&carried[1]), scope(&spanned[0]), "{carried:?}");
    }
}

#[test]
fn a_tunnel_carried_beside_its_future_is_written_as_its_connect_span_was() {
    use request::{InRequest, RequestLine, TunnelLine};
    #[derive(Debug)]
    enum Mode {
        Intercept,
    }
    let client: std::net::SocketAddr = "127.0.0.1:40001".parse().unwrap_or(([0; 4], 0).into());
    let (job, host, mode) = ("team \"b\"", "example.com:443", Mode::Intercept);
    let spanned = capture(false, &|| {
        let connect =
            info_span!("connect", client = %AddrText(client), job = job, host = %host, ?mode);
        run_once(InRequest::new(
            async {
                info!("tunnel open");
                let request = info_span!("request", client = %AddrText(client), job = job, method = %http::Method::GET, host = %host, scheme = "https");
                run_once(InRequest::new(
                    async { info!(status = 200u16, "upstream response") },
                    request,
                    None,
                ));
            },
            connect,
            None,
        ));
        warn!("after the tunnel");
    });
    let tunnel = std::sync::Arc::new(TunnelLine {
        client,
        job: job.into(),
        host: host.to_string(),
        mode: format!("{mode:?}"),
    });
    let request = std::sync::Arc::new(RequestLine {
        client,
        job: job.into(),
        method: http::Method::GET,
        host: host.to_string(),
        scheme: Some("https"),
    });
    let carried = capture(true, &|| {
        run_once(InRequest::tunnel(
            async {
                info!("tunnel open");
                run_once(InRequest::new(
                    async {
                        info!(status = 200u16, "upstream response");
                        // A task spawned inside the request carries the tunnel too.
                        run_once(InRequest::current(async { info!("socket closed") }));
                    },
                    Span::none(),
                    Some(request.clone()),
                ));
            },
            tunnel.clone(),
        ));
        warn!("after the tunnel");
    });
    let (spanned, carried) = (untimed(&spanned), untimed(&carried));
    assert_eq!(spanned.len(), 3, "{spanned:?}");
    assert_eq!(carried.len(), 4, "{carried:?}");
    assert_eq!(
        carried[0], spanned[0],
        "a line in the tunnel, outside a request"
    );
    assert_eq!(
        carried[1], spanned[1],
        "a line in a request inside the tunnel"
    );
    assert!(carried[2].starts_with(" INFO connect{client=127.0.0.1:40001 job=\"team \\\"b\\\"\" host=example.com:443 mode=Intercept}:request{"), "{carried:?}");
    assert_eq!(carried[3], spanned[2], "nothing carried after the tunnel");
}

#[test]
fn the_direct_line_is_written_as_the_subscriber_writes_the_event() {
    use request::{InRequest, RequestLine};
    let request = |client: &str, job: &str, scheme| {
        std::sync::Arc::new(RequestLine {
            client: client.parse().unwrap_or(([0; 4], 0).into()),
            job: job.into(),
            method: http::Method::GET,
            host: "example.com:443".to_string(),
            scheme,
        })
    };
    let requests = [
        None,
        Some(request("127.0.0.1:40000", "default", None)),
        Some(request("[::1]:5", "a \"quoted\" job", Some("https"))),
    ];
    for line in requests {
        for rate in [1_000_000.0, 0.5, 2.0, 1e-7, 3e17, 0.0] {
            let fields = [
                ("status", direct::Value::Unsigned(200)),
                ("latency_ms", direct::Value::Unsigned(12)),
                ("wait_ms", direct::Value::Unsigned(0)),
                ("rate", direct::Value::Float(rate)),
                ("attempt", direct::Value::Unsigned(3)),
            ];
            let direct = std::cell::RefCell::new(String::new());
            let written = capture(true, &|| {
                run_once(InRequest::new(
                    async {
                        info!(
                            status = 200u16,
                            latency_ms = 12u64,
                            wait_ms = 0u64,
                            rate,
                            attempt = 3u32,
                            "upstream response"
                        );
                        let mut out = direct.borrow_mut();
                        let at = std::time::SystemTime::now();
                        let target = module_path!();
                        let formatted =
                            direct::format_line(&mut out, at, target, "upstream response", &fields);
                        assert!(formatted.is_ok());
                    },
                    Span::none(),
                    line.clone(),
                ));
            });
            let (written, direct) = (untimed(&written), untimed(&direct.borrow()));
            assert_eq!(written.len(), 1, "{written:?}");
            assert_eq!(written, direct);
            assert!(
                direct[0].contains(": upstream response status=200 latency_ms=12 wait_ms=0 rate="),
                "{direct:?}"
            );
            assert_eq!(direct[0].contains("request{client="), line.is_some());
        }
    }
}
