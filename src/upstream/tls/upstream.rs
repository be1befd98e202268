//! The rustls client config for upstream connections: webpki's roots plus `[proxy] upstream_ca`,
//! verification always on.

use std::path::Path;

use anyhow::{bail, Context as _};
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

use super::provider;

/// The client config for upstream TLS: webpki's roots plus `upstream_ca` (a PEM file of private
/// roots). Verification is always on.
pub(crate) fn client_config(upstream_ca: Option<&Path>) -> anyhow::Result<ClientConfig> {
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
