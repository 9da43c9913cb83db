//! Security headers on every response, and the Content-Security-Policy nonce the pages' scripts
//! carry.
//!
//! The nonce is made here, per request, and handed to the page renderer (see [`provide_nonce`]),
//! which puts it on the scripts Leptos emits (hydration, streamed resources). The policy allows
//! scripts only from this origin or with that nonce; `'wasm-unsafe-eval'` lets the browser compile
//! the WebAssembly bundle (it permits no JavaScript `eval`).

use axum::extract::{Request, State};
use axum::http::header::{
    CONTENT_SECURITY_POLICY, REFERRER_POLICY, STRICT_TRANSPORT_SECURITY, X_CONTENT_TYPE_OPTIONS,
    X_FRAME_OPTIONS,
};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use rand::RngCore;

/// The nonce of one request's scripts.
#[derive(Debug, Clone)]
pub struct CspNonce(pub String);

impl CspNonce {
    /// 16 random bytes, in hex.
    fn fresh() -> Self {
        let mut bytes = [0u8; 16];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        CspNonce(hex::encode(bytes))
    }
}

/// What the header layer needs to know about the deployment.
#[derive(Debug, Clone, Copy)]
pub struct HeaderOptions {
    /// Served over HTTPS: send HSTS.
    pub https: bool,
}

/// How long browsers remember to use HTTPS only (one year).
const HSTS: &str = "max-age=31536000; includeSubDomains";

/// The policy for a response whose scripts carry `nonce`.
pub fn content_security_policy(nonce: &str) -> String {
    format!(
        "default-src 'self'; script-src 'self' 'nonce-{nonce}' 'wasm-unsafe-eval'; \
         style-src 'self'; style-src-attr 'unsafe-inline'; img-src 'self' data:; \
         connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; \
         form-action 'self'; frame-ancestors 'none'"
    )
}

/// Middleware: makes the request's nonce and sets the security headers on whatever answers.
pub async fn security_headers(
    State(opts): State<HeaderOptions>,
    mut req: Request,
    next: Next,
) -> Response {
    let nonce = CspNonce::fresh();
    req.extensions_mut().insert(nonce.clone());
    let mut res = next.run(req).await;
    let headers = res.headers_mut();
    if let Ok(csp) = HeaderValue::from_str(&content_security_policy(&nonce.0)) {
        headers.insert(CONTENT_SECURITY_POLICY, csp);
    }
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        REFERRER_POLICY,
        HeaderValue::from_static("strict-origin-when-cross-origin"),
    );
    if opts.https {
        headers.insert(STRICT_TRANSPORT_SECURITY, HeaderValue::from_static(HSTS));
    }
    res
}

/// For the page renderer (run as Leptos' additional context): replaces the nonce Leptos made for
/// this render with the one of the request's header, so both say the same.
pub fn provide_nonce() {
    use leptos::prelude::{provide_context, use_context};
    let nonce = use_context::<axum::http::request::Parts>()
        .and_then(|p| p.extensions.get::<CspNonce>().cloned());
    if let Some(CspNonce(value)) = nonce {
        provide_context(leptos::nonce::Nonce::from_value(value));
    }
}
