//! Leaf certificates for intercepted connections: one server config per host name, minted on
//! demand with the local CA, backdated for clock skew, and kept in a bounded cache so that a
//! second CONNECT to a host costs no signature.
//!
//! Every leaf presents one key pair, made when the first leaf is minted and kept in memory only
//! (as mitmproxy does): a new host then costs one signature by the CA and no key generation or
//! key loading. The key is as secret as the CA's, which signs for any name anyway.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use lru::LruCache;
use rcgen::KeyPair;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::{CertifiedKey, SigningKey};
use rustls::ServerConfig;
use rustls_pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

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
    cache: Mutex<LruCache<String, Arc<Leaf>>>,
    /// The key pair every leaf presents, made at the first mint.
    key: OnceLock<Result<LeafKey, LeafError>>,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// One name's leaf: minted once, by the first caller; callers for the same name meanwhile wait
/// for it, callers for other names do not.
#[derive(Debug)]
struct Leaf {
    made: Instant,
    config: OnceLock<Result<Arc<ServerConfig>, LeafError>>,
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
            key: OnceLock::new(),
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
        // The cache's lock is held only to find or place the name's slot; minting (an ECDSA key
        // and a signature) happens outside it, once per name: first CONNECTs to different hosts
        // never wait for each other.
        let leaf = {
            let mut cache = crate::util::locks::lock(&self.cache);
            match cache.get(name) {
                Some(leaf) if leaf.made.elapsed() < LEAF_REFRESH => leaf.clone(),
                _ => {
                    let leaf = Arc::new(Leaf {
                        made: Instant::now(),
                        config: OnceLock::new(),
                    });
                    cache.put(name.to_string(), leaf.clone());
                    leaf
                }
            }
        };
        let mut minted_here = false;
        let config = leaf.config.get_or_init(|| {
            minted_here = true;
            self.mint(name)
        });
        let counter = if minted_here {
            &self.misses
        } else {
            &self.hits
        };
        counter.fetch_add(1, Ordering::Relaxed);
        config.clone()
    }

    /// A new leaf for `name` and the server config presenting it.
    fn mint(&self, name: &str) -> Result<Arc<ServerConfig>, LeafError> {
        let key = self
            .key
            .get_or_init(|| LeafKey::new(&self.provider))
            .as_ref()
            .map_err(Clone::clone)?;
        let chain = self.ca.mint(name, &key.pair)?;
        let certified = Arc::new(CertifiedKey::new(chain, key.signing.clone()));
        let mut config = ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map(|b| {
                b.with_no_client_auth()
                    .with_cert_resolver(Arc::new(OneLeaf(certified)))
            })
            .map_err(|e: rustls::Error| LeafError::BadName {
                name: name.to_string(),
                reason: e.to_string(),
            })?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// The key pair every leaf presents: rcgen's, to sign certificates for, and rustls's, to sign
/// handshakes with.
struct LeafKey {
    pair: KeyPair,
    signing: Arc<dyn SigningKey>,
}

impl LeafKey {
    /// A new ECDSA P-256 key pair, loaded once for rustls.
    fn new(provider: &CryptoProvider) -> Result<Self, LeafError> {
        let no_key = |e: &dyn std::fmt::Display| LeafError::NoKey(e.to_string());
        let pair = KeyPair::generate().map_err(|e| no_key(&e))?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pair.serialize_der()));
        let signing = provider
            .key_provider
            .load_private_key(der)
            .map_err(|e| no_key(&e))?;
        Ok(LeafKey { pair, signing })
    }
}

/// The one certificate a leaf's server config presents, whatever the client asks for (the
/// config is the name's own: the CONNECT chose it).
#[derive(Debug)]
struct OneLeaf(Arc<CertifiedKey>);

impl ResolvesServerCert for OneLeaf {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}
