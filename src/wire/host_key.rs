//! The `host:port` spelling of a target (`[v6]:port` for IPv6): the key of a `key = "host"`
//! budget, the name `/hosts` lists, the origin a log line shows. Written on every request.

/// The canonical `key = "host"` key of a target: lowercased host, explicit port, IPv6 in brackets.
pub fn host_key(host: &str, port: u16) -> String {
    let mut key = String::with_capacity(host.len() + 8);
    // Writing into a String cannot fail.
    let _ = write_host_key(&mut key, host, port);
    key
}

/// Writes the `host:port` key of `host`:`port` to `out` (a `String`, a log field): made on
/// every request, so written piece by piece rather than through `format!`.
pub(crate) fn write_host_key<W: std::fmt::Write>(
    out: &mut W,
    host: &str,
    port: u16,
) -> std::fmt::Result {
    if host.contains(':') {
        out.write_char('[')?;
        out.write_str(host)?;
        out.write_char(']')?;
    } else {
        out.write_str(host)?;
    }
    out.write_char(':')?;
    let mut digits = [0u8; 5];
    let mut at = digits.len();
    let mut rest = port;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    // ASCII digits only: always UTF-8.
    out.write_str(std::str::from_utf8(&digits[at..]).unwrap_or("0"))
}
