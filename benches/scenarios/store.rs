//! The Redis that the shared-budget scenarios put their courtesy instances on: a `redis-server` of
//! the bench's own (started with the tests' helper, `tests/support/redis.rs`: a free loopback port,
//! `--save "" --appendonly no`, killed by its PID at the end), its CPU time, and what it executed:
//! `INFO commandstats` over a measured window, and a `SLOWLOG` sample (every command logged) that
//! tells courtesy's round trips apart by script, which the command counts alone cannot (every
//! script is one `EVALSHA`).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, Context as _};
use redis::aio::MultiplexedConnection;

use crate::common::proc_stat::cpu_ticks;

#[path = "../../tests/support/redis.rs"]
#[allow(dead_code)]
mod server;

/// The bench's own commands to the server (the measurement itself), left out of every count.
const OWN_COMMANDS: [&str; 3] = ["info", "config", "slowlog"];

/// The client address `SLOWLOG` gives the commands a script runs.
const SCRIPT_CLIENT: &str = "?:0";

/// The most commands a `SLOWLOG` sample keeps; a sample that fills it says so.
const SAMPLE_MAX: u32 = 200_000;

/// A `redis-server` of this bench's, and a connection to it for the statistics.
pub struct Store {
    server: server::RedisServer,
    pid: String,
    conn: MultiplexedConnection,
}

/// One command's line of `INFO commandstats`.
#[derive(Debug, Clone, Copy, Default)]
pub struct CommandStat {
    /// Executions, from clients and from scripts.
    pub calls: u64,
    /// Time Redis spent in them, µs.
    pub usec: u64,
    /// Executions that failed (such as `EVALSHA` answered `NOSCRIPT`).
    pub failed: u64,
}

/// The top-level commands (round trips) of a `SLOWLOG` sample, by what they did: a courtesy script
/// by its name (`reserve`, `release`, `report`, `heartbeat`, `renew`, `operator`), anything else
/// by its command name; and the commands the scripts ran inside Redis.
#[derive(Debug, Default)]
pub struct Sample {
    /// Round trips by kind.
    pub by_kind: BTreeMap<String, u64>,
    /// Commands run by the scripts (logged as from the scripts' client, `?:0`).
    pub in_scripts: u64,
    /// Whether the sample filled the log (then the counts are a lower bound).
    pub full: bool,
}

impl Store {
    /// Starts a server on a free loopback port (`redis-server` from `PATH`).
    pub async fn start() -> anyhow::Result<Store> {
        let server = tokio::task::spawn_blocking(server::RedisServer::start)
            .await?
            .context("redis-server cannot be started; install it (benches/shared.sh does)")?;
        let pid = server.pid().context("redis-server has no pid")?.to_string();
        let client = redis::Client::open(server.url())?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        // A sample's `SLOWLOG GET` is a large answer; the client's default waits 500 ms.
        conn.set_response_timeout(Duration::from_secs(30));
        Ok(Store { server, pid, conn })
    }

    /// The `[shared]` section for instances on this server with `key_prefix`, counting
    /// `instances` for the fallback share.
    pub fn shared_section(&self, key_prefix: &str, instances: usize) -> String {
        self.server.shared_section(&format!(
            "key_prefix = \"{key_prefix}\"\ninstances = {instances}"
        ))
    }

    /// Its CPU time (utime + stime) in clock ticks.
    pub fn cpu_ticks(&self) -> u64 {
        cpu_ticks(&self.pid).unwrap_or(0)
    }

    /// `CONFIG RESETSTAT`: the command counts start again from zero.
    pub async fn reset_stats(&mut self) -> anyhow::Result<()> {
        redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async::<()>(&mut self.conn)
            .await?;
        Ok(())
    }

    /// `INFO commandstats` since the last reset, without the bench's own commands.
    pub async fn command_stats(&mut self) -> anyhow::Result<BTreeMap<String, CommandStat>> {
        let text: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut self.conn)
            .await?;
        Ok(parse_command_stats(&text))
    }

    /// Logs every command from now on, until [`Store::end_sample`].
    pub async fn start_sample(&mut self) -> anyhow::Result<()> {
        self.config_set("slowlog-max-len", &SAMPLE_MAX.to_string())
            .await?;
        self.config_set("slowlog-log-slower-than", "0").await?;
        redis::cmd("SLOWLOG")
            .arg("RESET")
            .query_async::<()>(&mut self.conn)
            .await?;
        Ok(())
    }

    /// Stops logging and sorts what was logged since [`Store::start_sample`] by kind (see
    /// [`Sample`]); `key_prefix` is the instances' (their hint channel tells release from
    /// reserve).
    pub async fn end_sample(&mut self, key_prefix: &str) -> anyhow::Result<Sample> {
        self.config_set("slowlog-log-slower-than", "10000").await?;
        type Entry = (i64, i64, i64, Vec<String>, String, String);
        let entries: Vec<Entry> = redis::cmd("SLOWLOG")
            .arg("GET")
            .arg(SAMPLE_MAX)
            .query_async(&mut self.conn)
            .await?;
        redis::cmd("SLOWLOG")
            .arg("RESET")
            .query_async::<()>(&mut self.conn)
            .await?;
        self.config_set("slowlog-max-len", "128").await?;
        let channel = format!("{key_prefix}:hints");
        let mut sample = Sample {
            full: entries.len() >= SAMPLE_MAX as usize,
            ..Sample::default()
        };
        for (_, _, _, args, client, _) in &entries {
            if client == SCRIPT_CLIENT {
                sample.in_scripts += 1;
                continue;
            }
            let kind = classify(args, &channel);
            if !OWN_COMMANDS.contains(&kind.as_str()) {
                *sample.by_kind.entry(kind).or_default() += 1;
            }
        }
        Ok(sample)
    }

    async fn config_set(&mut self, key: &str, value: &str) -> anyhow::Result<()> {
        let reply: String = redis::cmd("CONFIG")
            .arg("SET")
            .arg(key)
            .arg(value)
            .query_async(&mut self.conn)
            .await?;
        if reply != "OK" {
            bail!("CONFIG SET {key} {value} answered {reply}");
        }
        Ok(())
    }

    /// Kills the server (SIGKILL to its PID) and waits for it.
    pub fn stop(self) {
        drop(self.conn);
        drop(self.server);
    }
}

/// `cmdstat_<name>:calls=N,usec=N,usec_per_call=F,rejected_calls=N,failed_calls=N` lines, by name
/// (subcommands as Redis writes them, `script|load`); the bench's own commands are left out.
pub fn parse_command_stats(text: &str) -> BTreeMap<String, CommandStat> {
    let mut stats = BTreeMap::new();
    for line in text.lines() {
        let Some((name, fields)) = line
            .trim()
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let base = name.split('|').next().unwrap_or(name);
        if OWN_COMMANDS.contains(&base) {
            continue;
        }
        let mut stat = CommandStat::default();
        for field in fields.split(',') {
            let Some((key, value)) = field.split_once('=') else {
                continue;
            };
            let value = value.parse::<u64>().unwrap_or(0);
            match key {
                "calls" => stat.calls = value,
                "usec" => stat.usec = value,
                "failed_calls" => stat.failed = value,
                _ => {}
            }
        }
        stats.insert(name.to_string(), stat);
    }
    stats
}

/// What one logged command was: a courtesy script by its name, told apart by its keys (see
/// `src/store/scripts.rs`): a reservation takes five keys (budget, leases, waiting list and its
/// expiries, allowances), and one that wants no turn (its thirteenth argument `0`) only settles
/// an allowance ("settle"); release takes
/// the budget, lease and waiting-list keys, withdraw the waiting list, its expiries and the
/// budget (its first key ends in `:q`); report and operator take the budget key, the operator's
/// first argument being its action; heartbeat takes the instance set, renew the lease key. Any
/// other command by its name.
fn classify(args: &[String], _channel: &str) -> String {
    let command = args
        .first()
        .map(|c| c.to_ascii_lowercase())
        .unwrap_or_default();
    if command != "evalsha" && command != "eval" {
        return command;
    }
    let numkeys = args.get(2).map(String::as_str);
    let key = args.get(3).map(String::as_str).unwrap_or("");
    let keys = numkeys.and_then(|n| n.parse::<usize>().ok()).unwrap_or(0);
    let kind = match numkeys {
        _ if keys == 5 && args.get(3 + keys + 12).is_some_and(|want| want == "0") => "settle",
        _ if keys == 5 => "reserve",
        Some("3") if key.ends_with(":q") => "withdraw",
        Some("3") => "release",
        Some("1") if key.ends_with(":instances") => "heartbeat",
        Some("1") if key.ends_with(":l") => "renew",
        Some("1")
            if args
                .get(5)
                .is_some_and(|a| ["pause", "resume", "rate", "unrate"].contains(&a.as_str())) =>
        {
            "operator"
        }
        Some("1") if key.ends_with(":b") => "report",
        _ => "other script",
    };
    if command == "eval" {
        format!("{kind} (eval)")
    } else {
        kind.to_string()
    }
}

/// Counts per request, most first, as "evalsha 3.00, hset 2.00, …", and their total per request.
pub fn per_request<'a>(
    counts: impl Iterator<Item = (&'a str, u64)>,
    requests: u64,
) -> (f64, String) {
    let n = requests.max(1) as f64;
    let mut counts: Vec<(&str, u64)> = counts.filter(|(_, c)| *c > 0).collect();
    counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let total = counts.iter().map(|(_, c)| *c as f64).sum::<f64>() / n;
    let text = counts
        .iter()
        .map(|(name, c)| format!("{name} {:.3}", *c as f64 / n))
        .collect::<Vec<_>>()
        .join(", ");
    (total, text)
}
