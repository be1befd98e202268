//! Leaf certificates for intercepted connections: one server config per host name, minted on
//! demand with the local CA, backdated for clock skew, and kept in a bounded cache so that a
//! second CONNECT to a host costs no key generation.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lru::LruCache;
use rustls::ServerConfig;

use rustls::crypto::CryptoProvider;

use super::ca::{LeafError, LocalCa};
use super::provider;

/// How many hosts' leaf certificates are kept.
const LEAF_CACHE_SIZE: usize = 4096;
/// A cached leaf older than this is minted again (leaves are valid for 30 days).
const LEAF_REFRESH: Duration = Duration::from_secs(7 * 24 * 3600);

/// Server configs for intercepted connections, one per host name, minted on demand and cached.
pub struct Interceptor {
    ca: LocalCa,
    provider: Arc<CryptoProvider>,
    cache: Mutex<LruCache<String, (Arc<ServerConfig>, Instant)>>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl std::fmt::Debug for Interceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interceptor")
            .field("ca", &self.ca)
            .field("hits", &self.hits)
            .field("misses", &self.misses)
            .finish()
    }
}

impl Interceptor {
    /// An interceptor signing with `ca`.
    pub fn new(ca: LocalCa) -> Self {
        Interceptor {
            ca,
            provider: provider(),
            cache: Mutex::new(LruCache::new(
                NonZeroUsize::new(LEAF_CACHE_SIZE).unwrap_or(NonZeroUsize::MIN),
            )),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The CA it signs with.
    pub fn ca(&self) -> &LocalCa {
        &self.ca
    }

    /// Leaf-cache hits and misses so far.
    pub fn cache_stats(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }

    /// The server config presenting a certificate for `name` (lowercase host or IP literal).
    pub fn server_config(&self, name: &str) -> Result<Arc<ServerConfig>, LeafError> {
        // Minting (an ECDSA key and a signature, well under a millisecond with ring) happens under
        // the lock, so that two first CONNECTs to one host never both mint.
        let mut cache = crate::locks::lock(&self.cache);
        if let Some((config, minted)) = cache.get(name) {
            if minted.elapsed() < LEAF_REFRESH {
                self.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(config.clone());
            }
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let (chain, key) = self.ca.mint(name)?;
        let mut config = ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .and_then(|b| b.with_no_client_auth().with_single_cert(chain, key))
            .map_err(|e: rustls::Error| LeafError::BadName {
                name: name.to_string(),
                reason: e.to_string(),
            })?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let config = Arc::new(config);
        cache.put(name.to_string(), (config.clone(), Instant::now()));
        Ok(config)
    }
}
