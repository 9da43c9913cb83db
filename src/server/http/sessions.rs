//! The session origin's edge: `GET /api/v1/jobs/{id}/session` on gpuq's own origin (the way in),
//! and the proxy on the sessions listener (`--sessions-listen`), which lets a request through to
//! a session's container, HTTP and WebSocket, only with that job's session cookie.
//!
//! What never reaches a container: gpuq's session cookie (cookies are not kept apart by port, so
//! a browser sends the UI's cookie for `127.0.0.1:3000` to `127.0.0.1:<sessions port>` too), the
//! session origin's own cookie, any other `gpuq_` cookie, and `Authorization` headers. What never
//! comes back from one: a `Set-Cookie` that names a `gpuq_` cookie (it could overwrite gpuq's).

use super::error::ErrorBody;
use super::ApiError;
use crate::model::{session_path, AppError};
use crate::server::auth::CurrentUser;
use crate::server::sessions::{self, Refusal, Sessions, CODE_PARAM, COOKIE};
use crate::server::AppState;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use sqlx::PgPool;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use uuid::Uuid;

/// `/api/v1/jobs/{id}/session`, on gpuq's origin.
pub fn api_router() -> Router<AppState> {
    Router::new().route("/jobs/{id}/session", get(open))
}

/// `GET /api/v1/jobs/{id}/session`: 303 to the session origin with a one-time code.
#[utoipa::path(get, path = "/api/v1/jobs/{id}/session", tag = "jobs", security(("bearer" = [])), params(("id" = Uuid, Path)), responses((status = 303, description = "to the job's session origin, with a one-time code (a minute, single use) that it trades for its own cookie"), (status = 401, description = "not signed in", body = ErrorBody), (status = 403, description = "not the job's owner (nor an admin where the launch policy's admins_open_sessions allows)", body = ErrorBody), (status = 404, description = "no such session, or this gpuq serves no sessions", body = ErrorBody), (status = 409, description = "the job does not run", body = ErrorBody)))]
pub(super) async fn open(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = super::jobs::job_id(&id)?;
    let url = sessions::open(&state.ctx.pool, state.ctx.sessions.as_ref(), &user, id).await?;
    // A URL no header can carry is gpuq's own fault: say so rather than send a 303 to nowhere.
    HeaderValue::from_str(&url).map_err(|_| AppError::Internal)?;
    Ok(redirect(&url))
}

/// The proxy's state.
#[derive(Clone)]
struct Proxy {
    pool: PgPool,
    sessions: Sessions,
    client: Client<HttpConnector, Body>,
}

/// The sessions listener's router (`--sessions-listen`); `None` when the process serves no
/// sessions.
pub fn router(state: &AppState) -> Option<Router> {
    let sessions = state.ctx.sessions.clone()?;
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    // Containers are on a local bridge: one that answers does so at once, and the address of one
    // that ended answers never (a request to it would hang for the kernel's minutes).
    connector.set_connect_timeout(Some(std::time::Duration::from_secs(2)));
    let client = Client::builder(TokioExecutor::new()).build(connector);
    Some(Router::new().fallback(proxy).with_state(Proxy {
        pool: state.ctx.pool.clone(),
        sessions,
        client,
    }))
}

fn text(status: StatusCode, message: &str) -> Response {
    let mut r = (status, message.to_owned()).into_response();
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// The container runs but its app does not take connections (yet: Jupyter takes a few seconds to
/// start): `503` with `Retry-After`, and a page that reloads itself, so "Open" lands in the app
/// once it is up.
fn not_answering() -> Response {
    let mut r = (
        StatusCode::SERVICE_UNAVAILABLE,
        Html(
            "<!doctype html><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"2\">\
             <title>Starting…</title><p>The session's app does not answer yet: it may still be \
             starting. This page tries again every 2 seconds.</p>",
        ),
    )
        .into_response();
    let h = r.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::RETRY_AFTER, HeaderValue::from_static("2"));
    r
}

fn redirect(location: &str) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(location) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r.headers_mut()
        .insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    r
}

/// The one-time code in a query, and the query without it (`?…` or empty).
fn split_code(query: Option<&str>) -> Option<(String, String)> {
    let query = query?;
    let mut code = None;
    let mut rest = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some((k, v)) if k == CODE_PARAM => code = Some(v.to_owned()),
            _ if pair == CODE_PARAM => code = Some(String::new()),
            _ => rest.push(pair),
        }
    }
    let code = code?;
    let rest = if rest.is_empty() {
        String::new()
    } else {
        format!("?{}", rest.join("&"))
    };
    Some((code, rest))
}

/// Whether a cookie name is gpuq's (its session, the session origin's own, any other `gpuq_`).
fn is_gpuq_cookie(name: &str) -> bool {
    let name = name.trim();
    let bare = name
        .strip_prefix("__Host-")
        .or_else(|| name.strip_prefix("__Secure-"))
        .unwrap_or(name);
    bare.starts_with("gpuq_")
}

/// The values of cookie `name` in the request's `Cookie` headers.
fn cookie_values(headers: &HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
        .collect()
}

/// Headers of a hop, not of the message: never passed on (except an upgrade's own).
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
];

/// What a request to a container keeps: no credential of gpuq's, no hop-by-hop header (an
/// upgrade keeps its `Connection` and `Upgrade`).
fn clean_request(headers: &mut HeaderMap, upgrade: bool) {
    headers.remove(header::AUTHORIZATION);
    headers.remove(header::PROXY_AUTHORIZATION);
    let kept: Vec<String> = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .map(str::trim)
        .filter(|pair| !pair.is_empty())
        .filter(|pair| !is_gpuq_cookie(pair.split('=').next().unwrap_or_default()))
        .map(str::to_owned)
        .collect();
    headers.remove(header::COOKIE);
    if !kept.is_empty() {
        if let Ok(v) = HeaderValue::from_str(&kept.join("; ")) {
            headers.insert(header::COOKIE, v);
        }
    }
    strip_hop_by_hop(headers, upgrade);
}

/// Removes the hop-by-hop headers, except an upgrade's own `Connection` and `Upgrade`.
fn strip_hop_by_hop(headers: &mut HeaderMap, upgrade: bool) {
    if !upgrade {
        for h in HOP_BY_HOP {
            headers.remove(h);
        }
        headers.remove(header::UPGRADE);
    }
}

/// What a container's answer keeps: no `Set-Cookie` of a `gpuq_` name, no hop-by-hop header
/// (a switch of protocols keeps its own).
fn clean_response(headers: &mut HeaderMap, upgrade: bool) {
    let cookies: Vec<HeaderValue> = headers
        .get_all(header::SET_COOKIE)
        .iter()
        .filter(|v| {
            v.to_str()
                .ok()
                .and_then(|s| s.split('=').next())
                .is_some_and(|name| !is_gpuq_cookie(name))
        })
        .cloned()
        .collect();
    headers.remove(header::SET_COOKIE);
    for c in cookies {
        headers.append(header::SET_COOKIE, c);
    }
    strip_hop_by_hop(headers, upgrade);
}

/// The session cookie's `Set-Cookie`: HttpOnly, only for the job's path, expiring with the job.
fn set_cookie(sessions: &Sessions, job: Uuid, cookie: &sessions::Cookie) -> Option<HeaderValue> {
    let max_age = (cookie.expires - chrono::Utc::now()).num_seconds().max(0);
    let secure = if sessions.origin().https() {
        "; Secure"
    } else {
        ""
    };
    HeaderValue::from_str(&format!(
        "{COOKIE}={}; Path={}; Max-Age={max_age}; HttpOnly; SameSite=Lax{secure}",
        cookie.value,
        session_path(job)
    ))
    .ok()
}

async fn proxy(State(p): State<Proxy>, mut req: Request) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned);
    let path = req.uri().path().to_owned();
    let Some(job) = p.sessions.origin().job_of(host.as_deref(), &path) else {
        return text(StatusCode::NOT_FOUND, "no session here");
    };
    let prefix = session_path(job);
    if !path.starts_with(&prefix) {
        let query = req
            .uri()
            .query()
            .map(|q| format!("?{q}"))
            .unwrap_or_default();
        return redirect(&format!("{prefix}{query}"));
    }
    if let Some((code, rest)) = split_code(req.uri().query()) {
        return match sessions::exchange(&p.pool, job, &code).await {
            Ok(cookie) => {
                let mut r = redirect(&format!("{path}{rest}"));
                if let Some(v) = set_cookie(&p.sessions, job, &cookie) {
                    r.headers_mut().append(header::SET_COOKIE, v);
                }
                r
            }
            Err(_) => text(
                StatusCode::FORBIDDEN,
                "this link to the session is used up or expired: open the session again from gpuq",
            ),
        };
    }
    let values = cookie_values(req.headers(), COOKIE);
    let refs: Vec<&str> = values.iter().map(String::as_str).collect();
    let addr = match sessions::admit(&p.pool, &p.sessions, job, &refs).await {
        Ok(addr) => addr,
        Err(Refusal::NotFound) => return text(StatusCode::NOT_FOUND, "no such session"),
        Err(Refusal::Gone) => return text(StatusCode::GONE, "this session has ended"),
        Err(Refusal::Forbidden) => {
            return text(StatusCode::FORBIDDEN, "you may not open this session")
        }
        Err(Refusal::NoCookie) => {
            return match p.sessions.sign_in_url(job) {
                Some(url) if req.method() == Method::GET => redirect(&url),
                _ => text(
                    StatusCode::FORBIDDEN,
                    "open this session from its job's page in gpuq (only its owner may)",
                ),
            }
        }
    };
    p.sessions.saw(job);
    let upgrade = req.headers().contains_key(header::UPGRADE);
    let path_and_query = req
        .uri()
        .path_and_query()
        .map(|pq| pq.as_str().to_owned())
        .unwrap_or(path);
    let Ok(uri) = format!("http://{addr}{path_and_query}").parse::<axum::http::Uri>() else {
        return text(StatusCode::BAD_REQUEST, "a path the proxy cannot pass on");
    };
    *req.uri_mut() = uri;
    clean_request(req.headers_mut(), upgrade);
    if upgrade {
        return relay_upgrade(p, req, job).await;
    }
    match p.client.request(req).await {
        Ok(resp) => {
            let (mut parts, body) = resp.into_parts();
            clean_response(&mut parts.headers, false);
            Response::from_parts(parts, Body::new(body))
        }
        Err(e) => {
            tracing::debug!(%job, error = %e, "a session's app did not answer");
            not_answering()
        }
    }
}

/// A WebSocket (or any upgrade): the container's `101` is passed back, then bytes are copied both
/// ways; what the browser sends counts as the session's traffic.
async fn relay_upgrade(p: Proxy, mut req: Request, job: Uuid) -> Response {
    let from_client = hyper::upgrade::on(&mut req);
    let (parts, _) = req.into_parts();
    let up = Request::from_parts(parts, Body::empty());
    let mut resp = match p.client.request(up).await {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(%job, error = %e, "a session's app did not answer an upgrade");
            return not_answering();
        }
    };
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        let (mut parts, body) = resp.into_parts();
        clean_response(&mut parts.headers, false);
        return Response::from_parts(parts, Body::new(body));
    }
    let from_app = hyper::upgrade::on(&mut resp);
    let (mut parts, _) = resp.into_parts();
    clean_response(&mut parts.headers, true);
    let sessions = p.sessions.clone();
    tokio::spawn(async move {
        let (client, app) = tokio::join!(from_client, from_app);
        let (Ok(client), Ok(app)) = (client, app) else {
            return;
        };
        let mut client = Marked {
            io: TokioIo::new(client),
            sessions,
            job,
        };
        let mut app = TokioIo::new(app);
        let _ = tokio::io::copy_bidirectional(&mut client, &mut app).await;
    });
    Response::from_parts(parts, Body::empty())
}

/// A stream whose reads mark the session's traffic.
struct Marked<T> {
    io: T,
    sessions: Sessions,
    job: Uuid,
}

impl<T: AsyncRead + Unpin> AsyncRead for Marked<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.sessions.saw(self.job);
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Marked<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpuq_cookies_and_authorization_never_reach_a_container() {
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_static("gpuq_session=ui; _xsrf=app; gpuq_proxy=s"),
        );
        h.append(
            header::COOKIE,
            HeaderValue::from_static("__Host-gpuq_session=x; theme=dark"),
        );
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer gpuq_t"),
        );
        h.insert(header::CONNECTION, HeaderValue::from_static("keep-alive"));
        clean_request(&mut h, false);
        assert_eq!(h.get(header::COOKIE).unwrap(), "_xsrf=app; theme=dark");
        assert!(h.get(header::AUTHORIZATION).is_none());
        assert!(h.get(header::CONNECTION).is_none());
    }

    #[test]
    fn a_container_cannot_set_a_gpuq_cookie() {
        let mut h = HeaderMap::new();
        h.append(
            header::SET_COOKIE,
            HeaderValue::from_static("app=1; Path=/"),
        );
        h.append(
            header::SET_COOKIE,
            HeaderValue::from_static("gpuq_session=forged; Path=/"),
        );
        h.append(
            header::SET_COOKIE,
            HeaderValue::from_static("__Host-gpuq_session=forged; Path=/; Secure"),
        );
        clean_response(&mut h, false);
        let left: Vec<_> = h.get_all(header::SET_COOKIE).iter().collect();
        assert_eq!(left, vec!["app=1; Path=/"]);
    }

    #[test]
    fn the_code_is_taken_out_of_the_query() {
        assert_eq!(
            split_code(Some("gpuq_code=abc")),
            Some(("abc".into(), String::new()))
        );
        assert_eq!(
            split_code(Some("a=1&gpuq_code=abc&b=2")),
            Some(("abc".into(), "?a=1&b=2".into()))
        );
        assert_eq!(split_code(Some("a=1")), None);
        assert_eq!(split_code(None), None);
    }
}
