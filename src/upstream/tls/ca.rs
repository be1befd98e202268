//! courtesy's local certificate authority: created once under `state_dir` (directory 0700, key
//! 0600, written atomically, never logged), refused if its key is readable by others, and the
//! signer of every leaf certificate.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SerialNumber,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use time::OffsetDateTime;

/// File name of the CA certificate under `state_dir`.
pub(crate) const CA_CERT_FILE: &str = "ca.pem";
/// File name of the CA private key under `state_dir`.
pub(crate) const CA_KEY_FILE: &str = "ca-key.pem";
/// Why a leaf certificate could not be made for a name.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LeafError {
    /// The name is not something a certificate can carry.
    #[error("cannot make a certificate for {name:?}: {reason}")]
    BadName {
        /// The requested name.
        name: String,
        /// What rcgen or rustls said.
        reason: String,
    },
    /// The key every leaf presents could not be made (generated once per process).
    #[error("cannot make the leaf certificates' key: {0}")]
    NoKey(String),
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
        crate::util::files::refuse_foreign_owner(state_dir, "the state directory")?;
        let cert_path = state_dir.join(CA_CERT_FILE);
        let key_path = state_dir.join(CA_KEY_FILE);
        if cert_path.exists() && key_path.exists() {
            return LocalCa::load(state_dir);
        }
        LocalCa::create(state_dir)
    }

    /// Replaces the CA in `state_dir` with a new one (clients must trust the new certificate).
    /// A state directory another user owns is refused as [`LocalCa::load_or_create`] refuses
    /// it: no key is written where someone else can read or replace it.
    pub fn regenerate(state_dir: &Path) -> anyhow::Result<LocalCa> {
        crate::util::files::refuse_foreign_owner(state_dir, "the state directory")?;
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
        crate::util::files::refuse_foreign_owner(&key_path, "the CA key")?;
        crate::util::files::refuse_foreign_owner(&dir.join(CA_CERT_FILE), "the CA certificate")?;
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
        crate::util::files::write_atomically(
            &dir.join(CA_KEY_FILE),
            key.serialize_pem().as_bytes(),
            0o600,
        )?;
        crate::util::files::write_atomically(&dir.join(CA_CERT_FILE), cert_pem.as_bytes(), 0o644)?;
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

    /// Mints a leaf certificate for `name` (a DNS name or an IP literal) presenting `key`, with
    /// the CA's certificate after it.
    pub(super) fn mint(
        &self,
        name: &str,
        key: &KeyPair,
    ) -> Result<Vec<CertificateDer<'static>>, LeafError> {
        let bad = |reason: String| LeafError::BadName {
            name: name.to_string(),
            reason,
        };
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
            .signed_by(key, &self.issuer)
            .map_err(|e| bad(e.to_string()))?;
        Ok(vec![cert.der().clone(), self.cert_der.clone()])
    }
}

fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the state directory {}", dir.display()))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        .with_context(|| format!("cannot make {} private (0700)", dir.display()))?;
    Ok(())
}
