//! Cross-site request refusal for cookie-authenticated state changes.
//!
//! Session cookies are `SameSite=Strict`, but Leptos server functions carry no CSRF token of their own,
//! so every state-changing request that a browser could send with our cookie (any request with a
//! cookie, and every server-function call) must prove it comes from our own pages: `Sec-Fetch-Site:
//! same-origin`, or failing that an `Origin` equal to the host it was sent to. A request that carries
//! an `Authorization` header and no cookie is exempt: browsers never attach that header on their
//! own, and without a cookie there is no session to ride on. An `Authorization` header next to a
//! cookie exempts nothing (`Bearer junk` plus the victim's cookie is checked like the cookie alone).

use crate::model::AppError;
use crate::server::http::ApiError;
use axum::extract::Request;
use axum::http::{header, HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Middleware refusing cross-site state changes.
pub async fn same_origin_only(req: Request, next: Next) -> Response {
    if needs_check(req.method(), req.uri().path(), req.headers()) && !same_origin(req.headers()) {
        tracing::warn!(path = %req.uri().path(), "refused a cross-site request");
        return ApiError(AppError::CrossSite).into_response();
    }
    next.run(req).await
}

fn needs_check(method: &Method, path: &str, headers: &HeaderMap) -> bool {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return false;
    }
    let cookie = headers.contains_key(header::COOKIE);
    if headers.contains_key(header::AUTHORIZATION) && !cookie {
        return false;
    }
    let server_fn = path.starts_with("/api/") && !path.starts_with("/api/v1/");
    server_fn || cookie
}

fn same_origin(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site") {
        return matches!(site.to_str(), Ok("same-origin") | Ok("none"));
    }
    let (Some(origin), Some(host)) = (headers.get(header::ORIGIN), headers.get(header::HOST))
    else {
        return false;
    };
    let (Ok(origin), Ok(host)) = (origin.to_str(), host.to_str()) else {
        return false;
    };
    origin
        .split_once("://")
        .is_some_and(|(_, authority)| authority.eq_ignore_ascii_case(host))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn reads_and_bearer_calls_are_not_checked() {
        let cookie = headers(&[("cookie", "gpuq_session=x")]);
        assert!(!needs_check(&Method::GET, "/api/v1/me", &cookie));
        let bearer = headers(&[("authorization", "Bearer t")]);
        assert!(!needs_check(&Method::POST, "/api/v1/jobs", &bearer));
        assert!(!needs_check(&Method::POST, "/api/logout", &bearer));
        // A bearer header rides along with a cookie: the cookie is what is checked.
        let both = headers(&[("authorization", "Bearer junk"), ("cookie", "a=b")]);
        assert!(needs_check(&Method::POST, "/api/v1/jobs", &both));
        assert!(needs_check(&Method::POST, "/api/logout", &both));
        assert!(!needs_check(
            &Method::POST,
            "/api/v1/tokens",
            &HeaderMap::new()
        ));
        assert!(needs_check(&Method::POST, "/api/login", &HeaderMap::new()));
        assert!(needs_check(&Method::POST, "/api/v1/tokens", &cookie));
    }

    #[test]
    fn origin_must_match_host() {
        assert!(same_origin(&headers(&[("sec-fetch-site", "same-origin")])));
        assert!(!same_origin(&headers(&[("sec-fetch-site", "cross-site")])));
        assert!(!same_origin(&headers(&[("sec-fetch-site", "same-site")])));
        assert!(same_origin(&headers(&[
            ("origin", "http://127.0.0.1:3000"),
            ("host", "127.0.0.1:3000")
        ])));
        assert!(!same_origin(&headers(&[
            ("origin", "http://evil.example"),
            ("host", "127.0.0.1:3000")
        ])));
        assert!(!same_origin(&headers(&[("host", "127.0.0.1:3000")])));
    }
}
