//! `/metrics`: the Prometheus text format, rendered from memory (never a database round trip),
//! optionally behind a bearer token.

use crate::server::metrics::{Metrics, CONTENT_TYPE};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// Who may scrape.
#[derive(Clone)]
struct Scrape {
    metrics: Metrics,
    /// SHA-256 of the required token; `None` = open.
    token_digest: Option<Arc<[u8; 32]>>,
}

/// A router with the one route `GET /metrics`. With `token`, a scrape must send
/// `Authorization: Bearer <token>`; anything else is answered 401 without a body worth reading.
pub fn router(metrics: Metrics, token: Option<&str>) -> Router {
    let token_digest = token.map(|t| Arc::new(Sha256::digest(t.as_bytes()).into()));
    Router::new()
        .route("/metrics", get(scrape))
        .with_state(Scrape {
            metrics,
            token_digest,
        })
}

async fn scrape(State(s): State<Scrape>, headers: HeaderMap) -> Response {
    if let Some(want) = &s.token_digest {
        if !authorized(&headers, want) {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer realm=\"gpuq metrics\"")],
                "a metrics token is required\n",
            )
                .into_response();
        }
    }
    let body = s.metrics.render();
    (
        [
            (header::CONTENT_TYPE, CONTENT_TYPE),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

/// Whether the request carries the token. Both sides are hashed first, so the comparison takes
/// the same time whatever the length or content of what was sent.
fn authorized(headers: &HeaderMap, want: &[u8; 32]) -> bool {
    let Some(sent) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    let got: [u8; 32] = Sha256::digest(sent.trim().as_bytes()).into();
    got.ct_eq(want).into()
}
