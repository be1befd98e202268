//! Addresses held for names whose budget is kept per address (`key = "ip"`): the one address a
//! name's key was made from, for as long as its DNS answer lives, so that the connection goes
//! where the budget was counted.
//!
//! The address comes from a DNS resolver that reports TTLs (hickory, reading the system's
//! `resolv.conf` and `/etc/hosts`); where the system's configuration cannot be read, from the
//! system resolver with a fixed lifetime. This module does not choose keys (`crate::budget::keys`) and
//! does not connect (`super::Resolver`).

use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use hickory_resolver::config::{LookupIpStrategy, ResolveHosts};
use hickory_resolver::TokioResolver;
use lru::LruCache;
use tokio::sync::OnceCell;
use tokio::time::Instant;

use super::DnsError;

/// The most names held at once; the least recently used goes first.
const MAX_PINS: usize = 65_536;
/// The shortest life of a pin: a TTL of 0 would mean one DNS query per request.
const MIN_TTL: Duration = Duration::from_secs(1);
/// The life of a pin whose answer came without a TTL (the system resolver).
const SYSTEM_TTL: Duration = Duration::from_secs(30);
/// How long after its TTL a pin still steers connections: a request keyed by it may have waited
/// in its queue that long (up to `max_wait_seconds`); a fresh key is made at the next request.
const GRACE: Duration = Duration::from_secs(300);

/// One name's address and how long it stands.
#[derive(Debug, Clone, Copy)]
struct Pin {
    addr: IpAddr,
    /// Until then the key is made from this address without asking DNS again.
    fresh_until: Instant,
    /// Until then connections to the name go to this address.
    steers_until: Instant,
}

/// The held addresses, and the resolver that reports TTLs.
#[derive(Debug)]
pub(crate) struct Pins {
    held: Mutex<LruCache<Box<str>, Pin>>,
    /// Whether any name was ever pinned: the connector skips the lock when none was.
    any: AtomicBool,
    dns: OnceCell<Option<TokioResolver>>,
}

impl Default for Pins {
    fn default() -> Self {
        Pins {
            held: Mutex::new(LruCache::new(
                NonZeroUsize::new(MAX_PINS).unwrap_or(NonZeroUsize::MIN),
            )),
            any: AtomicBool::new(false),
            dns: OnceCell::new(),
        }
    }
}

impl Pins {
    /// Pins whose answers come from `dns` (a test's own name server).
    #[cfg(test)]
    fn with_dns(dns: TokioResolver) -> Self {
        let pins = Pins::default();
        let _ = pins.dns.set(Some(dns));
        pins
    }

    /// The address connections to `name` go to, if a key was made from one that still stands.
    pub(crate) fn steering(&self, name: &str) -> Option<IpAddr> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        let now = Instant::now();
        let mut held = crate::util::locks::lock(&self.held);
        let pin = held.peek(name).copied()?;
        if now < pin.steers_until {
            Some(pin.addr)
        } else {
            held.pop(name);
            None
        }
    }

    /// The address `name` is keyed by: the one held while its TTL lasts, else a fresh answer
    /// (the first address, IPv4 asked first), held from now on.
    pub(crate) async fn address(&self, name: &str, timeout: Duration) -> Result<IpAddr, DnsError> {
        let now = Instant::now();
        if let Some(pin) = crate::util::locks::lock(&self.held).get(name).copied() {
            if now < pin.fresh_until {
                return Ok(pin.addr);
            }
        }
        let (addr, ttl) = self.ask(name, timeout).await?;
        let now = Instant::now();
        let ttl = ttl.max(MIN_TTL);
        let pin = Pin {
            addr,
            fresh_until: now + ttl,
            steers_until: now + ttl + GRACE,
        };
        crate::util::locks::lock(&self.held).put(name.into(), pin);
        self.any.store(true, Ordering::Release);
        Ok(addr)
    }

    /// One lookup: the first address and its TTL.
    async fn ask(&self, name: &str, timeout: Duration) -> Result<(IpAddr, Duration), DnsError> {
        let failed = |reason: String| DnsError::Failed {
            name: name.to_string(),
            reason,
        };
        let timed_out = || DnsError::Timeout {
            name: name.to_string(),
            seconds: timeout.as_secs_f64(),
        };
        let dns = self.dns.get_or_init(|| async { build(timeout) }).await;
        let Some(dns) = dns else {
            let system = super::Resolver::system(name, timeout).await?;
            let addrs: Vec<IpAddr> = system.iter().map(|a| a.ip()).collect();
            let first = first_v4_else_first(&addrs);
            return first
                .map(|addr| (addr, SYSTEM_TTL))
                .ok_or_else(|| failed("no addresses".into()));
        };
        let lookup = match tokio::time::timeout(timeout, dns.lookup_ip(name)).await {
            Ok(Ok(lookup)) => lookup,
            Ok(Err(e)) => return Err(failed(e.to_string())),
            Err(_) => return Err(timed_out()),
        };
        let ttl = lookup
            .valid_until()
            .saturating_duration_since(std::time::Instant::now());
        let addrs: Vec<IpAddr> = lookup.iter().collect();
        first_v4_else_first(&addrs)
            .map(|addr| (addr, ttl))
            .ok_or_else(|| failed("no addresses".into()))
    }
}

/// The resolver with the system's configuration, or `None` (logged) where it cannot be read.
fn build(timeout: Duration) -> Option<TokioResolver> {
    match TokioResolver::builder_tokio() {
        Ok(mut builder) => {
            let options = builder.options_mut();
            options.timeout = timeout;
            options.ip_strategy = LookupIpStrategy::Ipv4thenIpv6;
            options.use_hosts_file = ResolveHosts::Always;
            options.cache_size = 4096;
            Some(builder.build())
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the system's DNS configuration; key = \"ip\" uses the system resolver with a {}s lifetime", SYSTEM_TTL.as_secs());
            None
        }
    }
}

/// The address a key is made from: the first IPv4 one (what most crawlers connect to first),
/// else the first.
pub(crate) fn first_v4_else_first(addrs: &[IpAddr]) -> Option<IpAddr> {
    addrs
        .iter()
        .find(|ip| ip.is_ipv4())
        .or_else(|| addrs.first())
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_name_is_pinned_to_one_address_that_steers_connections() {
        let pins = Pins::default();
        assert_eq!(pins.steering("localhost"), None, "nothing pinned yet");
        let addr = pins
            .address("localhost", Duration::from_secs(5))
            .await
            .unwrap();
        assert!(addr.is_loopback(), "{addr}");
        assert_eq!(pins.steering("localhost"), Some(addr));
        assert_eq!(pins.steering("other.test"), None);
        let err = pins
            .address("no-such-host.invalid", Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("no-such-host.invalid"), "{err}");
    }

    /// A name server on loopback that answers every A query for any name with `answer` and a
    /// TTL of 1 s, counting the queries.
    async fn name_server(
        answer: std::sync::Arc<Mutex<std::net::Ipv4Addr>>,
        asked: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    ) -> std::net::SocketAddr {
        use hickory_resolver::proto::op::{Message, MessageType};
        use hickory_resolver::proto::rr::{rdata::A, RData, Record};
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        tokio::spawn(async move {
            let mut buf = [0u8; 512];
            while let Ok((n, from)) = socket.recv_from(&mut buf).await {
                let Ok(query) = Message::from_vec(&buf[..n]) else {
                    continue;
                };
                asked.fetch_add(1, Ordering::SeqCst);
                let mut reply = Message::new();
                reply
                    .set_id(query.id())
                    .set_message_type(MessageType::Response)
                    .set_recursion_available(true);
                for q in query.queries() {
                    reply.add_query(q.clone());
                    if q.query_type() == hickory_resolver::proto::rr::RecordType::A {
                        let ip = *answer.lock().unwrap();
                        reply.add_answer(Record::from_rdata(q.name().clone(), 1, RData::A(A(ip))));
                    }
                }
                if let Ok(bytes) = reply.to_vec() {
                    let _ = socket.send_to(&bytes, from).await;
                }
            }
        });
        addr
    }

    #[tokio::test]
    async fn a_pin_lives_as_long_as_the_answer_s_ttl() {
        use hickory_resolver::config::{NameServerConfigGroup, ResolverConfig};
        use hickory_resolver::name_server::TokioConnectionProvider;
        let answer = std::sync::Arc::new(Mutex::new(std::net::Ipv4Addr::new(127, 0, 0, 31)));
        let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let server = name_server(answer.clone(), asked.clone()).await;
        let config = ResolverConfig::from_parts(
            None,
            vec![],
            NameServerConfigGroup::from_ips_clear(&[server.ip()], server.port(), true),
        );
        let dns =
            TokioResolver::builder_with_config(config, TokioConnectionProvider::default()).build();
        let pins = Pins::with_dns(dns);
        let timeout = Duration::from_secs(5);
        let first = pins.address("moving.test.", timeout).await.unwrap();
        assert_eq!(first.to_string(), "127.0.0.31");
        // The site moves; within the TTL the key (and the connection) stay where they were.
        *answer.lock().unwrap() = std::net::Ipv4Addr::new(127, 0, 0, 32);
        assert_eq!(pins.address("moving.test.", timeout).await.unwrap(), first);
        assert_eq!(pins.steering("moving.test."), Some(first));
        let queries = asked.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(1300)).await;
        let moved = pins.address("moving.test.", timeout).await.unwrap();
        assert_eq!(
            moved.to_string(),
            "127.0.0.32",
            "asked again once the TTL ran out"
        );
        assert!(asked.load(Ordering::SeqCst) > queries);
        assert_eq!(pins.steering("moving.test."), Some(moved));
    }

    #[test]
    fn ipv4_is_preferred() {
        let v4: IpAddr = "192.0.2.1".parse().unwrap();
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(first_v4_else_first(&[v6, v4]), Some(v4));
        assert_eq!(first_v4_else_first(&[v6]), Some(v6));
        assert_eq!(first_v4_else_first(&[]), None);
    }
}
