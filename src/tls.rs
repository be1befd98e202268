//! TLS: the local CA, leaf certificates minted per host (cached, bounded), and the rustls client
//! and server configurations.
//!
//! The CA lives under `state_dir` (directory 0700, key 0600, written atomically, never logged) and is
//! reused across runs; courtesy refuses to start if the key is readable by others. Leaf certificates
//! are minted on demand for the name a client asked for (SNI, else the CONNECT authority), backdated
//! for clock skew, and cached so that a second CONNECT to a host costs no key generation. One crypto
//! provider (ring) is passed explicitly to every config: no global state, no OpenSSL, no aws-lc.
//! This module does not move bytes (`crate::proxy` does, in `proxy/connect.rs`).

use std::fs;
use std::num::NonZeroUsize;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use lru::LruCache;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SerialNumber,
};
use rustls::crypto::CryptoProvider;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use time::OffsetDateTime;

/// File name of the CA certificate under `state_dir`.
pub const CA_CERT_FILE: &str = "ca.pem";
/// File name of the CA private key under `state_dir`.
pub const CA_KEY_FILE: &str = "ca-key.pem";
/// How many hosts' leaf certificates are kept.
const LEAF_CACHE_SIZE: usize = 4096;
/// A cached leaf older than this is minted again (leaves are valid for 30 days).
const LEAF_REFRESH: Duration = Duration::from_secs(7 * 24 * 3600);

/// The crypto provider every config uses.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Why a leaf certificate could not be made for a name.
#[derive(Debug, thiserror::Error)]
pub enum LeafError {
    /// The name is not something a certificate can carry.
    #[error("cannot make a certificate for {name:?}: {reason}")]
    BadName {
        /// The requested name.
        name: String,
        /// What rcgen or rustls said.
        reason: String,
    },
}

/// courtesy's local certificate authority.
pub struct LocalCa {
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
    dir: PathBuf,
}

impl std::fmt::Debug for LocalCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("LocalCa").field("dir", &self.dir).finish()
    }
}

impl LocalCa {
    /// Loads the CA from `state_dir`, creating it on first run.
    pub fn load_or_create(state_dir: &Path) -> anyhow::Result<LocalCa> {
        let cert_path = state_dir.join(CA_CERT_FILE);
        let key_path = state_dir.join(CA_KEY_FILE);
        if cert_path.exists() && key_path.exists() {
            return LocalCa::load(state_dir);
        }
        LocalCa::create(state_dir)
    }

    /// Replaces the CA in `state_dir` with a new one (clients must trust the new certificate).
    pub fn regenerate(state_dir: &Path) -> anyhow::Result<LocalCa> {
        LocalCa::create(state_dir)
    }

    /// Where the certificate (not the key) is.
    pub fn cert_path(&self) -> PathBuf {
        self.dir.join(CA_CERT_FILE)
    }

    /// The certificate in PEM, for `/ca.pem` and `courtesy ca`.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The certificate in DER, for tests and trust stores.
    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    fn load(dir: &Path) -> anyhow::Result<LocalCa> {
        let key_path = dir.join(CA_KEY_FILE);
        let mode = fs::metadata(&key_path)
            .with_context(|| format!("cannot read {}", key_path.display()))?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            bail!(
                "{} is readable by others (mode {:o}): run `chmod 600 {}` or `courtesy ca --regenerate`",
                key_path.display(),
                mode & 0o777,
                key_path.display()
            );
        }
        let key_pem = fs::read_to_string(&key_path)
            .with_context(|| format!("cannot read {}", key_path.display()))?;
        let cert_path = dir.join(CA_CERT_FILE);
        let cert_pem = fs::read_to_string(&cert_path)
            .with_context(|| format!("cannot read {}", cert_path.display()))?;
        let key = KeyPair::from_pem(&key_pem).with_context(|| {
            format!("{} does not hold a usable private key", key_path.display())
        })?;
        let cert_der = CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .with_context(|| format!("{} does not hold a certificate", cert_path.display()))?;
        let issuer = Issuer::from_ca_cert_der(&cert_der, key)
            .with_context(|| format!("{} is not a usable CA certificate", cert_path.display()))?;
        Ok(LocalCa {
            cert_pem,
            cert_der,
            issuer,
            dir: dir.to_path_buf(),
        })
    }

    fn create(dir: &Path) -> anyhow::Result<LocalCa> {
        create_private_dir(dir)?;
        let key = KeyPair::generate().context("cannot generate the CA key")?;
        let mut params = CertificateParams::default();
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, "courtesy local CA");
        name.push(DnType::OrganizationName, "courtesy");
        params.distinguished_name = name;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let now = OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::days(2);
        params.not_after = now + time::Duration::days(3650);
        params.serial_number = Some(SerialNumber::from_slice(&rand::random::<[u8; 16]>()));
        let cert = params
            .self_signed(&key)
            .context("cannot sign the CA certificate")?;
        let cert_pem = cert.pem();
        crate::files::write_atomically(
            &dir.join(CA_KEY_FILE),
            key.serialize_pem().as_bytes(),
            0o600,
        )?;
        crate::files::write_atomically(&dir.join(CA_CERT_FILE), cert_pem.as_bytes(), 0o644)?;
        tracing::info!(cert = %dir.join(CA_CERT_FILE).display(), "created a new local CA");
        let cert_der = cert.der().clone();
        let issuer = Issuer::new(params, key);
        Ok(LocalCa {
            cert_pem,
            cert_der,
            issuer,
            dir: dir.to_path_buf(),
        })
    }

    /// Mints a leaf certificate and key for `name` (a DNS name or an IP literal).
    fn mint(
        &self,
        name: &str,
    ) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), LeafError> {
        let bad = |reason: String| LeafError::BadName {
            name: name.to_string(),
            reason,
        };
        let key = KeyPair::generate().map_err(|e| bad(e.to_string()))?;
        let mut params =
            CertificateParams::new(vec![name.to_string()]).map_err(|e| bad(e.to_string()))?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        params.distinguished_name = dn;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let now = OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::days(2);
        params.not_after = now + time::Duration::days(30);
        params.serial_number = Some(SerialNumber::from_slice(&rand::random::<[u8; 16]>()));
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| bad(e.to_string()))?;
        let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        Ok((vec![cert.der().clone(), self.cert_der.clone()], key_der))
    }
}

fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the state directory {}", dir.display()))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        .with_context(|| format!("cannot make {} private (0700)", dir.display()))?;
    Ok(())
}

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

/// The client config for upstream TLS: webpki's roots plus `upstream_ca` (a PEM file of private
/// roots). Verification is always on.
pub fn client_config(upstream_ca: Option<&Path>) -> anyhow::Result<ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = upstream_ca {
        let mut added = 0;
        for cert in CertificateDer::pem_file_iter(path)
            .with_context(|| format!("[proxy] upstream_ca: cannot read {}", path.display()))?
        {
            let cert = cert.with_context(|| {
                format!("[proxy] upstream_ca: {} is not valid PEM", path.display())
            })?;
            roots.add(cert).with_context(|| {
                format!(
                    "[proxy] upstream_ca: a certificate in {} is not a usable root",
                    path.display()
                )
            })?;
            added += 1;
        }
        if added == 0 {
            bail!(
                "[proxy] upstream_ca: {} holds no certificate",
                path.display()
            );
        }
    }
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .context("rustls has no usable protocol versions")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> PathBuf {
        crate::scratch::dir(&format!("tls-{tag}"))
    }

    #[test]
    fn the_ca_is_created_once_private_and_reused() {
        let dir = temp_dir("ca");
        let first = LocalCa::load_or_create(&dir).unwrap();
        let key_mode = fs::metadata(dir.join(CA_KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(key_mode & 0o777, 0o600);
        let dir_mode = fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(dir_mode & 0o777, 0o700);
        let again = LocalCa::load_or_create(&dir).unwrap();
        assert_eq!(first.cert_pem(), again.cert_pem(), "reused, not recreated");
        let fresh = LocalCa::regenerate(&dir).unwrap();
        assert_ne!(first.cert_pem(), fresh.cert_pem());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_key_readable_by_others_is_refused() {
        let dir = temp_dir("mode");
        LocalCa::load_or_create(&dir).unwrap();
        fs::set_permissions(dir.join(CA_KEY_FILE), fs::Permissions::from_mode(0o644)).unwrap();
        let err = LocalCa::load_or_create(&dir).unwrap_err().to_string();
        assert!(err.contains("readable by others"), "{err}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn leaves_are_cached_and_bad_names_are_errors() {
        let dir = temp_dir("leaf");
        let interceptor = Interceptor::new(LocalCa::load_or_create(&dir).unwrap());
        interceptor.server_config("shop.example.com").unwrap();
        interceptor.server_config("shop.example.com").unwrap();
        interceptor.server_config("127.0.0.1").unwrap();
        assert_eq!(interceptor.cache_stats(), (1, 2));
        assert!(interceptor.server_config("caf\u{e9}.test").is_err());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn upstream_ca_files_are_checked() {
        let dir = temp_dir("upstream");
        fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        fs::write(&empty, "").unwrap();
        assert!(client_config(Some(&empty)).is_err());
        let ca = LocalCa::load_or_create(&dir.join("ca")).unwrap();
        assert!(client_config(Some(&ca.cert_path())).is_ok());
        assert!(client_config(None).is_ok());
        let _ = fs::remove_dir_all(&dir);
    }
}
