//! `skip_resources`: telling the kind of sub-resource a request asks for (images, fonts, scripts,
//! stylesheets, media) by its path's extension, else by its `Accept` header, so that a crawler that
//! does not need them is answered locally and spends no budget on them.

use http::request::Parts;

use crate::config::{HostPolicy, ResourceKind};

/// The kind of sub-resource `req` asks for, if `skip` lists it: by path extension, else by the
/// Accept header.
pub(crate) fn skipped_resource(req: &Parts, skip: &[ResourceKind]) -> Option<ResourceKind> {
    if skip.is_empty() {
        return None;
    }
    let path = req.uri.path().to_ascii_lowercase();
    let extension = path.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
    let by_extension = match extension {
        "png" | "jpg" | "jpeg" | "gif" | "webp" | "svg" | "ico" | "bmp" | "avif" | "tif"
        | "tiff" => Some(ResourceKind::Image),
        "woff" | "woff2" | "ttf" | "otf" | "eot" => Some(ResourceKind::Font),
        "js" | "mjs" => Some(ResourceKind::Script),
        "css" => Some(ResourceKind::Stylesheet),
        "mp4" | "webm" | "mp3" | "ogg" | "oga" | "wav" | "m4a" | "mov" | "avi" | "mkv" | "flac"
        | "m3u8" | "ts" => Some(ResourceKind::Media),
        _ => None,
    };
    let accept = req
        .headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let first = accept.split(',').next().unwrap_or("").trim();
    let by_accept = if first.starts_with("image/") {
        Some(ResourceKind::Image)
    } else if first.starts_with("font/") {
        Some(ResourceKind::Font)
    } else if first.contains("javascript") {
        Some(ResourceKind::Script)
    } else if first.starts_with("text/css") {
        Some(ResourceKind::Stylesheet)
    } else if first.starts_with("video/") || first.starts_with("audio/") {
        Some(ResourceKind::Media)
    } else {
        None
    };
    by_extension.or(by_accept).filter(|k| skip.contains(k))
}

/// Why the host's `skip_resources` refuses `req`, in the words of its local 403, if it does:
/// what the request path and `Proxy::check` both say.
pub(crate) fn skip_reason(req: &Parts, policy: &HostPolicy) -> Option<String> {
    let kind = skipped_resource(req, &policy.blocks.skip_resources)?;
    Some(format!("skip_resources: {kind} ({})", req.uri.path()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Request;

    #[test]
    fn skipped_resources_are_told_by_extension_and_accept() {
        let all = [
            ResourceKind::Image,
            ResourceKind::Font,
            ResourceKind::Script,
            ResourceKind::Stylesheet,
            ResourceKind::Media,
        ];
        let req = |path: &str, accept: &str| {
            Request::get(format!("http://a.test{path}"))
                .header("accept", accept)
                .body(())
                .unwrap()
                .into_parts()
                .0
        };
        assert_eq!(
            skipped_resource(&req("/logo.PNG", "*/*"), &all),
            Some(ResourceKind::Image)
        );
        assert_eq!(
            skipped_resource(&req("/f.woff2", "*/*"), &all),
            Some(ResourceKind::Font)
        );
        assert_eq!(
            skipped_resource(&req("/app.js?v=1", "*/*"), &all),
            Some(ResourceKind::Script)
        );
        assert_eq!(
            skipped_resource(&req("/s.css", "*/*"), &all),
            Some(ResourceKind::Stylesheet)
        );
        assert_eq!(
            skipped_resource(&req("/v.mp4", "*/*"), &all),
            Some(ResourceKind::Media)
        );
        assert_eq!(
            skipped_resource(&req("/pic", "image/avif,image/webp"), &all),
            Some(ResourceKind::Image)
        );
        assert_eq!(
            skipped_resource(&req("/page.html", "text/html"), &all),
            None
        );
        assert_eq!(
            skipped_resource(&req("/logo.png", "*/*"), &[ResourceKind::Font]),
            None
        );
        assert_eq!(skipped_resource(&req("/logo.png", "*/*"), &[]), None);
    }
}
