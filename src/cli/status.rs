//! `courtesy status`: the host table of a running instance, read from its admin API, printed like
//! `kubectl get`. Colours only on a terminal.

use std::net::SocketAddr;

use anyhow::{bail, Context as _};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::admin::views::{HostView, HostsPage, JobsPage, RateLimitPolicyView};

/// `GET /hosts` as `courtesy status` reads it.
pub type Page = HostsPage<Vec<HostView>>;

/// The most hosts `courtesy status` reads (pages of [`PAGE`]); a table longer than this is not
/// one a person reads, and the totals count them all anyway.
const MAX_HOSTS: usize = 100_000;
/// Hosts asked for per page.
const PAGE: usize = 1000;

/// Fetches every page of `/hosts` (up to [`MAX_HOSTS`] hosts) from the admin listener at `admin`,
/// with `token` as a bearer token if given: one page in key order after another, each bounded.
pub async fn fetch_hosts(admin: SocketAddr, token: Option<&str>) -> anyhow::Result<Page> {
    let client: Client<_, Empty<bytes::Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut page = fetch_page(&client, admin, token, "").await?;
    while let Some(after) = page.next.take() {
        if page.hosts.len() >= MAX_HOSTS {
            break;
        }
        let more = fetch_page(&client, admin, token, &after).await?;
        page.hosts.extend(more.hosts);
        page.next = more.next;
        page.total = more.total;
    }
    Ok(page)
}

/// The admin client `courtesy status` reads with.
type AdminClient = Client<hyper_util::client::legacy::connect::HttpConnector, Empty<bytes::Bytes>>;

/// One page of `/hosts` after the cursor `after`.
async fn fetch_page(
    client: &AdminClient,
    admin: SocketAddr,
    token: Option<&str>,
    after: &str,
) -> anyhow::Result<Page> {
    let after = percent_encoding::utf8_percent_encode(after, percent_encoding::NON_ALPHANUMERIC);
    fetch_json(
        client,
        admin,
        token,
        &format!("/hosts?limit={PAGE}&after={after}"),
    )
    .await
}

/// `/jobs` of the admin listener at `admin`: every job, what it waits for and what it used.
pub async fn fetch_jobs(admin: SocketAddr, token: Option<&str>) -> anyhow::Result<JobsPage> {
    let client: AdminClient = Client::builder(TokioExecutor::new()).build_http();
    fetch_json(&client, admin, token, "/jobs").await
}

/// `/hosts/<host>` of the admin listener at `admin`: one host (`host:port`, a host name, or a
/// shared key), with its state in words.
pub async fn fetch_host(
    admin: SocketAddr,
    token: Option<&str>,
    host: &str,
) -> anyhow::Result<HostView> {
    let client: AdminClient = Client::builder(TokioExecutor::new()).build_http();
    let host = percent_encoding::utf8_percent_encode(host, percent_encoding::NON_ALPHANUMERIC);
    fetch_json(&client, admin, token, &format!("/hosts/{host}")).await
}

/// One host: its key, state, rate, queue and in flight, and what it waits for, in words; then
/// the RateLimit policies it announced, one a line.
pub fn render_host(h: &HostView) -> String {
    let mut out = format!(
        "{}: {} at {:.3}/s, {} queued, {} in flight\n{}\n",
        h.host, h.state, h.rate, h.queued, h.in_flight, h.explain
    );
    for p in &h.ratelimit_policies {
        out.push_str(&render_policy(p));
        out.push('\n');
    }
    out
}

/// One announced RateLimit policy in words: `RateLimit policy "burst": 100 request per 60 s,
/// 50 left, reset in 30 s, pk Y2xpZW50`.
fn render_policy(p: &RateLimitPolicyView) -> String {
    let mut line = format!("RateLimit policy \"{}\":", p.name);
    if let Some(q) = p.q {
        line.push_str(&format!(" {q} {}", p.qu));
        if let Some(w) = p.w {
            line.push_str(&format!(" per {w} s"));
        }
    } else {
        line.push_str(&format!(" ({})", p.qu));
    }
    if let Some(r) = p.r {
        line.push_str(&format!(", {r} left"));
    }
    if let Some(t) = p.t {
        line.push_str(&format!(", reset in {t} s"));
    }
    if let Some(pk) = &p.pk {
        line.push_str(&format!(", pk {pk}"));
    }
    line
}

/// The JSON answer of the admin API at `path`, within 10 s.
async fn fetch_json<T: serde::de::DeserializeOwned>(
    client: &AdminClient,
    admin: SocketAddr,
    token: Option<&str>,
    path: &str,
) -> anyhow::Result<T> {
    let mut request = http::Request::get(format!("http://{admin}{path}"));
    if let Some(token) = token {
        request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = request
        .body(Empty::new())
        .context("cannot build the request")?;
    let response =
        tokio::time::timeout(std::time::Duration::from_secs(10), client.request(request))
            .await
            .with_context(|| format!("the admin listener at {admin} did not answer within 10 s"))?
            .with_context(|| {
                format!("cannot reach courtesy's admin listener at {admin} (is courtesy running?)")
            })?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .context("cannot read the admin answer")?
        .to_bytes();
    if status == http::StatusCode::UNAUTHORIZED {
        bail!("the admin API wants a token: pass --token or set COURTESY_ADMIN_TOKEN");
    }
    if !status.is_success() {
        bail!(
            "the admin API answered {status}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    serde_json::from_slice(&body).context("the admin API did not answer JSON")
}

/// The jobs as a table: name, weight, priority, waiting, served, quota left.
pub fn render_jobs(page: &JobsPage) -> String {
    let mut out = format!("client_auth = {}\n", page.client_auth);
    let header = [
        "JOB",
        "WEIGHT",
        "PRIORITY",
        "WAITING",
        "SERVED",
        "REFUSED(QUOTA)",
        "QUOTA LEFT",
    ];
    let rows: Vec<[String; 7]> = page
        .jobs
        .iter()
        .map(|j| {
            let name = if j.configured {
                j.job.clone()
            } else {
                format!("{} (no [[job]])", j.job)
            };
            let quota = j.quota.as_ref().map_or("-".to_string(), |q| {
                format!(
                    "{}/{} ({}s left)",
                    q.remaining,
                    q.max_requests,
                    q.reset_seconds.ceil()
                )
            });
            [
                name,
                format!("{}", j.weight),
                j.priority.clone(),
                j.waiting.to_string(),
                j.served.to_string(),
                j.refused_quota.to_string(),
                quota,
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        padded.join("  ").trim_end().to_string() + "\n"
    };
    out.push_str(&line(header.to_vec()));
    for row in &rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// The line above the table for a shared budget (nothing for a local one): the mode, the store and
/// the instances seen.
fn budget_line(budget: &crate::admin::views::BudgetView) -> String {
    if budget.mode == "local" {
        return String::new();
    }
    let seen = budget
        .instances_seen
        .map_or(String::new(), |n| format!(", {n} instances seen"));
    let share = match (budget.mode.as_str(), budget.fallback_share) {
        ("fallback", Some(share)) => format!(", keeping {:.0} % of each budget", share * 100.0),
        _ => String::new(),
    };
    format!(
        "budget: {} on {} (prefix {}{seen}{share})\n",
        budget.mode,
        budget.store.as_deref().unwrap_or("?"),
        budget.key_prefix.as_deref().unwrap_or("?"),
    )
}

/// The table's columns.
const COLUMNS: [&str; 8] = [
    "HOST",
    "STATE",
    "RATE/S",
    "QUEUE",
    "IN-FLIGHT",
    "COOLDOWN",
    "SENT",
    "LAST",
];

/// Renders the `/hosts` page as an aligned table; `color` adds ANSI colours to the state.
pub fn render(page: &Page, color: bool) -> String {
    let budget = budget_line(&page.budget);
    let list = &page.hosts;
    if list.is_empty() {
        return format!("{budget}no hosts yet\n");
    }
    let mut list: Vec<&HostView> = list.iter().collect();
    list.sort_by(|a, b| {
        trouble_rank(&a.state)
            .cmp(&trouble_rank(&b.state))
            .then_with(|| host_order(&a.host).cmp(&host_order(&b.host)))
    });
    let rows: Vec<[String; 8]> = list.into_iter().map(row_of).collect();
    let mut widths = COLUMNS.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = budget;
    let line = |cells: &[String], out: &mut String, paint: Option<&str>| {
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            let padded = format!("{cell:<w$}");
            match (i, paint) {
                (1, Some(code)) => out.push_str(&format!("\x1b[{code}m{padded}\x1b[0m")),
                _ => out.push_str(&padded),
            }
            out.push_str(if i + 1 < cells.len() { "  " } else { "\n" });
        }
    };
    line(&COLUMNS.map(String::from), &mut out, None);
    for row in &rows {
        let state = row[1].split(' ').next().unwrap_or("");
        line(row, &mut out, color.then_some(state_colour(state)));
    }
    out.lines()
        .map(|l| l.trim_end().to_string() + "\n")
        .collect()
}

/// One host's row, in the order of [`COLUMNS`]: its names, its state (report-only said), rate,
/// queue, in flight, cooldown left, requests sent and its last five statuses.
fn row_of(h: &HostView) -> [String; 8] {
    let cooldown = match &h.cooldown {
        Some(c) => format!("{:.0}s", c.remaining_seconds),
        None => "-".into(),
    };
    let last: Vec<String> = h
        .last_statuses
        .iter()
        .rev()
        .take(5)
        .rev()
        .map(|s| match s {
            0 => "ERR".to_string(),
            n => n.to_string(),
        })
        .collect();
    [
        match h.names.len() {
            0 => h.host.clone(),
            n => format!(
                "{} ({n} names{})",
                h.host,
                if h.names_truncated { "+" } else { "" }
            ),
        },
        if h.policy.enforce {
            h.state.clone()
        } else {
            format!("{} (report-only)", h.state)
        },
        format!("{:.2}", h.rate),
        h.queued.to_string(),
        h.in_flight.to_string(),
        cooldown,
        h.counters.sent.to_string(),
        if last.is_empty() {
            "-".into()
        } else {
            last.join(",")
        },
    ]
}

/// The ANSI colour of a state: trouble stands out, an idle host is dim.
fn state_colour(state: &str) -> &'static str {
    match state {
        "cooling_down" => "33",
        "paused" => "35",
        "queued" => "36",
        "active" => "32",
        _ => "2",
    }
}

/// Hosts in trouble first: paused, cooling down, queued, active, idle.
fn trouble_rank(state: &str) -> u8 {
    match state {
        "paused" => 0,
        "cooling_down" => 1,
        "queued" => 2,
        "active" => 3,
        "idle" => 4,
        _ => 5,
    }
}

/// How a `host:port` key sorts: addresses as addresses (`127.0.1.2` before `127.0.1.10`, IPv4
/// before IPv6), names after them alphabetically, then by port.
fn host_order(key: &str) -> (bool, Option<std::net::IpAddr>, String, u16) {
    let (host, port) = key.rsplit_once(':').unwrap_or((key, ""));
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = port.parse().unwrap_or(0);
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => (false, Some(ip), String::new(), port),
        Err(_) => (true, None, host.to_string(), port),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn page(json: serde_json::Value) -> Page {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn one_host_lists_its_ratelimit_policies_with_their_partition_keys() {
        let view: HostView = serde_json::from_value(json!({
            "host": "api.test:443", "state": "idle", "rate": 1.0, "explain": "nothing waits",
            "ratelimit_policies": [
                {"name": "burst", "q": 100, "w": 60, "qu": "request", "pk": "Y2xpZW50", "r": 50, "t": 30},
                {"name": "par", "q": 2, "qu": "concurrency"},
                {"name": "x", "qu": "request", "r": 3}
            ]
        }))
        .unwrap();
        let text = render_host(&view);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[2..],
            [
                "RateLimit policy \"burst\": 100 request per 60 s, 50 left, reset in 30 s, pk Y2xpZW50",
                "RateLimit policy \"par\": 2 concurrency",
                "RateLimit policy \"x\": (request), 3 left",
            ]
        );
    }

    #[test]
    fn the_table_is_aligned_and_plain_without_a_terminal() {
        let hosts = page(json!({"hosts": [
            {"host": "shop.test:443", "state": "cooling_down", "rate": 0.5, "queued": 3, "in_flight": 1,
             "cooldown": {"remaining_seconds": 41.6}, "counters": {"sent": 12}, "last_statuses": [200, 200, 429]},
            {"host": "a.test:80", "state": "idle", "rate": 1.0, "queued": 0, "in_flight": 0,
             "cooldown": null, "counters": {"sent": 1}, "last_statuses": [0]},
        ]}));
        let text = render(&hosts, false);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("HOST           STATE"));
        assert!(
            lines[1].contains("cooling_down")
                && lines[1].contains("42s")
                && lines[1].contains("200,200,429")
        );
        assert!(lines[2].contains("ERR"));
        assert!(!text.contains('\x1b'));
        assert!(render(&hosts, true).contains("\x1b[33m"));
        assert_eq!(render(&page(json!({"hosts": []})), false), "no hosts yet\n");
    }

    #[test]
    fn a_shared_budget_is_named_above_the_table() {
        let shared = page(json!({
            "budget": {"mode": "fallback", "store": "redis://***@10.0.0.5:6379/0",
                       "key_prefix": "team", "instances_seen": 4, "fallback_share": 0.25},
            "hosts": [{"host": "a.test:80", "state": "idle"}],
        }));
        let text = render(&shared, false);
        assert_eq!(
            text.lines().next(),
            Some(
                "budget: fallback on redis://***@10.0.0.5:6379/0 (prefix team, 4 instances seen, \
                 keeping 25 % of each budget)"
            )
        );
        assert!(text.lines().nth(1).is_some_and(|l| l.starts_with("HOST")));
    }

    #[test]
    fn trouble_comes_first_and_addresses_sort_as_addresses() {
        let hosts = page(json!({"hosts": [
            {"host": "127.0.1.10:80", "state": "idle"},
            {"host": "b.test:80", "state": "idle"},
            {"host": "127.0.1.2:80", "state": "idle"},
            {"host": "127.0.1.1:80", "state": "idle"},
            {"host": "z.test:443", "state": "cooling_down"},
        ]}));
        let text = render(&hosts, false);
        let order: Vec<&str> = text
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert_eq!(
            order,
            [
                "z.test:443",
                "127.0.1.1:80",
                "127.0.1.2:80",
                "127.0.1.10:80",
                "b.test:80"
            ]
        );
    }
}
