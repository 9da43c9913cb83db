//! The sign-in gate of the pages: a page request from someone not signed in is answered with a
//! `303 See Other` to `/login?next=<the page>` before anything is rendered, so no empty shell is
//! served and nothing relies on JavaScript to move the browser on.

use super::ApiError;
use crate::server::auth::CurrentUser;
use crate::server::AppState;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The sign-in page, which stays open to everyone.
pub const LOGIN_PATH: &str = "/login";

/// Middleware (on the page routes): strangers go to the sign-in page.
pub async fn pages_need_sign_in(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    if !is_gated_page(req.method(), req.uri().path()) {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    match CurrentUser::resolve(&parts, &state.ctx.pool, state.ctx.session_lifetime).await {
        Ok(Some(_)) => next.run(Request::from_parts(parts, body)).await,
        Ok(None) => {
            let here = parts
                .uri
                .path_and_query()
                .map_or("/", |pq| pq.as_str())
                .to_owned();
            to_sign_in(&here)
        }
        Err(e) => ApiError(e).into_response(),
    }
}

/// Page loads (not server functions, not the sign-in page itself).
fn is_gated_page(method: &Method, path: &str) -> bool {
    matches!(*method, Method::GET | Method::HEAD)
        && !path.starts_with("/api/")
        && path != LOGIN_PATH
}

/// `303` to the sign-in page, which returns to `here` afterwards.
fn to_sign_in(here: &str) -> Response {
    let location = if here == "/" {
        LOGIN_PATH.to_owned()
    } else {
        format!("{LOGIN_PATH}?next={}", encode_component(here))
    };
    match HeaderValue::from_str(&location) {
        Ok(v) => (StatusCode::SEE_OTHER, [(header::LOCATION, v)]).into_response(),
        Err(_) => (
            StatusCode::SEE_OTHER,
            [(header::LOCATION, HeaderValue::from_static(LOGIN_PATH))],
        )
            .into_response(),
    }
}

/// Percent-encodes everything but unreserved characters and `/`, so the path survives as one query
/// value.
fn encode_component(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_page_loads_are_gated() {
        assert!(is_gated_page(&Method::GET, "/jobs"));
        assert!(is_gated_page(&Method::GET, "/"));
        assert!(!is_gated_page(&Method::GET, "/login"));
        assert!(!is_gated_page(&Method::POST, "/api/login"));
        assert!(!is_gated_page(&Method::GET, "/api/whoami"));
    }

    #[test]
    fn the_page_travels_as_one_query_value() {
        assert_eq!(encode_component("/jobs/1?a=b&c"), "/jobs/1%3Fa%3Db%26c");
        let res = to_sign_in("/jobs");
        assert_eq!(res.status(), StatusCode::SEE_OTHER);
        assert_eq!(res.headers()[header::LOCATION], "/login?next=/jobs");
        assert_eq!(to_sign_in("/").headers()[header::LOCATION], "/login");
    }
}
