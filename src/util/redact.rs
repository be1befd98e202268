//! URLs as logs and messages show them: a webhook's or an exporter's URL may carry a secret in
//! its user, path or query, and secrets never reach a log, an API answer or an error.

/// `url` as logs and messages show it: scheme, host and port only, since its path, query and
/// user may carry the webhook's secret.
pub(crate) fn redacted(url: &str) -> String {
    match url.parse::<http::Uri>() {
        Ok(uri) if uri.host().is_some() => {
            let host = uri.host().unwrap_or("");
            let port = uri.port().map(|p| format!(":{p}")).unwrap_or_default();
            let hidden = uri.path_and_query().is_some_and(|p| p.as_str() != "/")
                || uri.authority().is_some_and(|a| a.as_str().contains('@'));
            format!(
                "{}://{host}{port}{}",
                uri.scheme_str().unwrap_or("?"),
                if hidden { "/***" } else { "" }
            )
        }
        _ => "***".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::redacted;

    #[test]
    fn a_webhook_url_is_shown_without_what_may_carry_its_secret() {
        for (url, shown) in [
            (
                "https://hooks.example/T0/B1/s3cr3t",
                "https://hooks.example/***",
            ),
            (
                "https://hooks.example:8443/x?token=s3cr3t",
                "https://hooks.example:8443/***",
            ),
            (
                "http://user:s3cr3t@hooks.example/",
                "http://hooks.example/***",
            ),
            ("http://hooks.example/", "http://hooks.example"),
            ("not a url", "***"),
        ] {
            assert_eq!(redacted(url), shown);
            assert!(!redacted(url).contains("s3cr3t"));
        }
    }
}
