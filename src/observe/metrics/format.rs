//! Which text format `/metrics` answers in. The registry writes OpenMetrics 1.0; a scraper that
//! asks for it (Prometheus does, first) gets it under its own content type, and a client that
//! accepts only the classic Prometheus text format (0.0.4) gets that, translated: counters are
//! named with their `_total` in `# TYPE`/`# HELP`, and the OpenMetrics-only lines go. Sending
//! OpenMetrics under the 0.0.4 type made classic parsers read every counter as untyped.

/// The OpenMetrics text format's content type.
pub(crate) const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The classic Prometheus text format's content type.
pub(crate) const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The body and content type for a client whose `Accept` header is `accept`; `openmetrics` is what
/// the registry wrote.
pub(crate) fn negotiate(openmetrics: String, accept: Option<&str>) -> (String, &'static str) {
    if wants_classic(accept) {
        (to_classic(&openmetrics), PROMETHEUS_TEXT)
    } else {
        (openmetrics, OPENMETRICS)
    }
}

/// Whether `accept` rules OpenMetrics out (or prefers text/plain to it): no header, `*/*` or any
/// mention of OpenMetrics at a quality at least that of text/plain means OpenMetrics.
fn wants_classic(accept: Option<&str>) -> bool {
    let Some(accept) = accept else { return false };
    let quality = |wanted: &str| -> Option<f64> {
        accept
            .split(',')
            .filter_map(|range| {
                let mut parts = range.split(';').map(str::trim);
                let kind = parts.next()?.to_ascii_lowercase();
                let q = parts
                    .filter_map(|p| p.strip_prefix("q="))
                    .find_map(|q| q.parse::<f64>().ok())
                    .unwrap_or(1.0);
                (kind == wanted).then_some(q)
            })
            .reduce(f64::max)
    };
    let open = quality("application/openmetrics-text").filter(|q| *q > 0.0);
    let plain = quality("text/plain").filter(|q| *q > 0.0);
    match (open, plain) {
        (Some(o), Some(p)) => p > o,
        (None, Some(_)) => true,
        _ => false,
    }
}

/// OpenMetrics text as the classic format: `# TYPE name counter` becomes `# TYPE name_total
/// counter` (and its `# HELP` likewise), `# UNIT` and `# EOF` go.
fn to_classic(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# TYPE ", "# HELP "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            counters
                .contains(name)
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        match renamed {
            Some(line) => out.push_str(line.trim_end()),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "# HELP courtesy_requests Requests.\n# TYPE courtesy_requests counter\n\
        courtesy_requests_total{host=\"a\"} 3\n# HELP courtesy_hosts_known Hosts.\n\
        # TYPE courtesy_hosts_known gauge\ncourtesy_hosts_known 2\n# EOF\n";

    #[test]
    fn scrapers_get_the_format_they_ask_for() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                          version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(negotiate(SAMPLE.into(), Some(prometheus)).1, OPENMETRICS);
        assert_eq!(negotiate(SAMPLE.into(), None).1, OPENMETRICS);
        assert_eq!(negotiate(SAMPLE.into(), Some("*/*")).1, OPENMETRICS);
        let (classic, kind) = negotiate(SAMPLE.into(), Some("text/plain;version=0.0.4"));
        assert_eq!(kind, PROMETHEUS_TEXT);
        assert!(classic.contains("# TYPE courtesy_requests_total counter\n"));
        assert!(classic.contains("# HELP courtesy_requests_total Requests.\n"));
        assert!(classic.contains("# TYPE courtesy_hosts_known gauge\n"));
        assert!(classic.contains("courtesy_requests_total{host=\"a\"} 3\n"));
        assert!(!classic.contains("# EOF"));
    }
}
