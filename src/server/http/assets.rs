//! The browser bundle (`target/site`: the JS and WASM under `pkg/`, the CSS, `public/`'s files)
//! served from inside the binary, so an installed `gpuq serve` needs no checkout and works from any
//! working folder.
//!
//! Release builds carry the bundle (rust-embed includes every file at compile time: build the site
//! first, see `scripts/release.sh`); debug builds read the same folder of the checkout at run time.
//! `--site-root DIR` serves a folder from disk instead (Leptos' own file handler), for development.
//!
//! Files are answered here, before the page renderer: the right `Content-Type`, an `ETag` from the
//! file's SHA-256, the Brotli or gzip copy when the browser takes it, and `Cache-Control: no-cache` (the names carry no hash, so browsers revalidate,
//! and get a 304 when nothing changed). The security headers and the CSP nonce come from the
//! layers around the router, as for every response. A path that is no file goes to the pages' 404.

use super::headers;
use crate::app::shell;
use crate::server::state::SiteSource;
use crate::server::AppState;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::{
    ACCEPT_ENCODING, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_TYPE, ETAG, IF_NONE_MATCH, VARY,
};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use leptos::prelude::{provide_context, ArcStoredValue};
use leptos::WasmSplitManifest;
use rust_embed::RustEmbed;
use std::collections::HashMap;
use std::sync::OnceLock;

/// `target/site` of the checkout this binary was built from (a missing folder embeds nothing;
/// [`use_embedded`] then refuses to start a release build).
#[derive(RustEmbed)]
#[folder = "target/site"]
#[allow_missing = true]
struct Bundle;

/// The files without which no page hydrates.
const REQUIRED: [&str; 2] = ["pkg/gpuq.js", "pkg/gpuq.wasm"];
/// Leptos' map of lazy routes to the WASM chunks to preload (written by `cargo leptos build --split`).
const SPLIT_MANIFEST: &str = "pkg/__wasm_split_manifest.json";
/// The loader of the split chunks, as Leptos names it when file names carry no hash.
const SPLIT_LOADER: &str = "__wasm_split.______________________.js";
/// Leptos' `site_root` while the bundle is embedded: never a folder, so Leptos' own file handler
/// (which serves the pages' 404) finds nothing on disk, whatever the working folder holds.
const NO_SITE_ROOT: &str = "/dev/null";

/// Switches `state` to the bundle inside the binary. A release binary built before its bundle
/// existed fails here, naming the way out (a debug build warns).
pub fn use_embedded(state: &mut AppState) -> anyhow::Result<()> {
    if let Some(missing) = REQUIRED.iter().find(|f| Bundle::get(f).is_none()) {
        let why = format!(
            "this gpuq binary carries no browser bundle ({missing} is missing): build it with \
             scripts/release.sh (the site first, then the server), or pass --site-root DIR"
        );
        // A debug build reads the checkout's target/site at run time: before `cargo leptos build`
        // the API still works (the integration tests start servers so), pages just do not hydrate.
        if !cfg!(debug_assertions) {
            anyhow::bail!(why);
        }
        tracing::warn!("{why}");
    }
    state.site = SiteSource::Embedded;
    state.leptos_options.site_root = NO_SITE_ROOT.into();
    Ok(())
}

/// What every page render gets besides the state: the request's CSP nonce and, from the embedded
/// bundle, the map of lazy-route chunks (Leptos reads it from `site_root` on disk otherwise) so a
/// page still preloads the WASM its route needs.
pub fn page_context(site: SiteSource) -> impl Fn() + Clone + Send + Sync + 'static {
    move || {
        headers::provide_nonce();
        if site == SiteSource::Embedded {
            if let Some(manifest) = split_manifest() {
                provide_context(manifest.clone());
            }
        }
    }
}

/// The embedded split manifest, parsed once (`None` for a bundle built without `--split`).
fn split_manifest() -> Option<&'static WasmSplitManifest> {
    static MANIFEST: OnceLock<Option<WasmSplitManifest>> = OnceLock::new();
    MANIFEST
        .get_or_init(|| {
            let file = Bundle::get(SPLIT_MANIFEST)?;
            let preloads: HashMap<String, Vec<String>> = serde_json::from_slice(&file.data)
                .inspect_err(|e| tracing::warn!("unreadable {SPLIT_MANIFEST} in the bundle: {e}"))
                .ok()?;
            Some(WasmSplitManifest(ArcStoredValue::new((
                "/pkg".to_owned(),
                preloads,
                SPLIT_LOADER.to_owned(),
            ))))
        })
        .as_ref()
}

/// The router's fallback: a file of the bundle, or else what Leptos answers (a file under
/// `--site-root`, or the pages' 404).
pub async fn fallback(State(state): State<AppState>, req: Request) -> Response {
    if state.site == SiteSource::Embedded {
        if let Some(res) = embedded_file(&req) {
            return res;
        }
    }
    let handler = leptos_axum::file_and_error_handler_with_context::<AppState, _>(
        page_context(state.site),
        shell,
    );
    handler(req.uri().clone(), State(state), req).await
}

/// The embedded file `req` asks for, if it is a GET or HEAD of one: its Brotli or gzip copy when
/// the bundle has one (`cargo leptos build --precompress`) and the browser accepts it.
fn embedded_file(req: &Request) -> Option<Response> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return None;
    }
    let path = req.uri().path().strip_prefix('/')?;
    if path.is_empty() || path.split('/').any(|seg| seg == ".." || seg == ".") {
        return None;
    }
    let original = Bundle::get(path)?;
    let accepted = req
        .headers()
        .get(ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let (file, encoding) = [("br", ".br"), ("gzip", ".gz")]
        .into_iter()
        .filter(|(name, _)| accepts(accepted, name))
        .find_map(|(name, ext)| Some((Bundle::get(&format!("{path}{ext}"))?, Some(name))))
        .unwrap_or((original.clone(), None));
    let etag = format!("\"{}\"", hex::encode(file.metadata.sha256_hash()));
    let etag = HeaderValue::from_str(&etag).ok()?;
    let fresh = req.headers().get(IF_NONE_MATCH).is_some_and(|seen| {
        seen.as_bytes()
            .split(|b| *b == b',')
            .any(|tag| tag.trim_ascii() == etag.as_bytes() || tag.trim_ascii() == b"*")
    });
    let mut res = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        // hyper drops the body of a HEAD response and keeps its length.
        Body::from(file.data).into_response()
    };
    let headers = res.headers_mut();
    if let Ok(mime) = HeaderValue::from_str(original.metadata.mimetype()) {
        headers.insert(CONTENT_TYPE, mime);
    }
    if let Some(encoding) = encoding {
        headers.insert(CONTENT_ENCODING, HeaderValue::from_static(encoding));
    }
    headers.insert(VARY, HeaderValue::from_static("accept-encoding"));
    headers.insert(ETAG, etag);
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Some(res)
}

/// Whether an `Accept-Encoding` value accepts `coding` (listed, and not with `q=0`).
fn accepts(accept_encoding: &str, coding: &str) -> bool {
    accept_encoding.split(',').any(|item| {
        let mut parts = item.split(';').map(str::trim);
        parts
            .next()
            .is_some_and(|name| name.eq_ignore_ascii_case(coding))
            && !parts.any(|p| p.replace(' ', "").eq_ignore_ascii_case("q=0"))
    })
}

#[cfg(test)]
mod tests {
    use super::accepts;

    #[test]
    fn accept_encoding_is_read_per_coding() {
        assert!(accepts("gzip, deflate, br, zstd", "br"));
        assert!(accepts("gzip, deflate, br, zstd", "gzip"));
        assert!(accepts("BR;q=0.5", "br"));
        assert!(!accepts("br;q=0, gzip", "br"));
        assert!(!accepts("identity", "gzip"));
        assert!(!accepts("", "br"));
        assert!(!accepts("brotli", "br"));
    }
}
