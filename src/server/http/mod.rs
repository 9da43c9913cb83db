//! The HTTP surface: pages, server functions, REST v1, probes; and the layers around them.

mod arrays;
mod assets;
mod budgets;
mod caller;
mod client;
mod cluster;
mod csrf;
mod error;
mod fair_share;
mod gate;
mod headers;
mod health;
mod jobs;
mod json;
mod links;
pub mod listen;
mod live;
pub mod metrics;
mod nodes;
mod notify;
pub mod openapi;
mod peer;
mod registries;
pub mod sessions;
mod suggest;
mod teams;
mod usage;
mod v1;

pub use assets::use_embedded as use_embedded_site;
pub use error::ApiError;
pub use json::ApiJson;

use crate::app::{shell, App};
use crate::server::db::session_store;
use crate::server::AppState;
use axum::routing::get;
use axum::Router;
use leptos_axum::{generate_route_list, AxumRouteListing, LeptosRoutes};
use tower_http::limit::RequestBodyLimitLayer;
use tower_sessions::cookie::SameSite;
use tower_sessions::{Expiry, SessionManagerLayer};

/// Name of the session cookie.
pub const SESSION_COOKIE: &str = "gpuq_session";
/// Name of the session cookie with `--secure-cookies`: the `__Host-` prefix makes browsers accept
/// it only when `Secure`, for path `/` and without a `Domain`, so a sibling host cannot plant one.
pub const SECURE_SESSION_COOKIE: &str = "__Host-gpuq_session";
/// Largest request body accepted anywhere (job specs are small).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Options of the HTTP layer that are not part of the shared state.
#[derive(Debug, Clone, Default)]
pub struct HttpOptions {
    /// HTTPS deployments: mark the session cookie `Secure`, name it with the `__Host-` prefix and
    /// send HSTS.
    pub secure_cookies: bool,
    /// Reverse proxies whose `X-Forwarded-For` names the client (`--trusted-proxy`).
    pub trusted_proxies: Vec<ipnet::IpNet>,
}

/// The router of an agent (`gpuq serve --ui false`): probes and what other nodes ask of it
/// (`/internal/v1/…`); no pages, no REST API, no sign-in.
pub fn agent(state: AppState, opts: HttpOptions) -> Router {
    let header_opts = headers::HeaderOptions {
        https: opts.secure_cookies,
    };
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .merge(peer::router())
        .fallback(agent_fallback)
        .layer(RequestBodyLimitLayer::new(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(
            header_opts,
            headers::security_headers,
        ))
        .with_state(state)
}

/// What an agent answers to anything but its own routes: where the UI and the API are not.
async fn agent_fallback() -> ApiError {
    ApiError(crate::model::AppError::NotFound(
        "this node is an agent (--ui false): it serves no pages and no API; use the UI host".into(),
    ))
}

/// The pages' route list, generated once per process. Generating it raises a process-wide flag
/// (`leptos::server::SuppressResourceLoad`) under which no resource loads: a page whose data
/// started loading on another thread in that window would wait for it forever. `gpuq serve` builds
/// one router before it serves, but a process that builds several (the integration tests, one per
/// test, on parallel threads) hung one render in about thirty runs; built once, the list is ready
/// before any router exists.
fn page_routes() -> Vec<AxumRouteListing> {
    static ROUTES: std::sync::OnceLock<Vec<AxumRouteListing>> = std::sync::OnceLock::new();
    ROUTES.get_or_init(|| generate_route_list(App)).clone()
}

/// Builds the whole application router. Binding a port is the caller's business, so tests drive
/// this directly.
pub fn app(state: AppState, opts: HttpOptions) -> Router {
    let cookie = if opts.secure_cookies {
        SECURE_SESSION_COOKIE
    } else {
        SESSION_COOKIE
    };
    let sessions = SessionManagerLayer::new(session_store(&state.ctx.pool))
        .with_name(cookie)
        .with_path("/")
        .with_http_only(true)
        .with_same_site(SameSite::Strict)
        .with_secure(opts.secure_cookies)
        .with_expiry(Expiry::OnInactivity(time::Duration::hours(12)));
    let routes = page_routes();
    let leptos_options = state.leptos_options.clone();
    let pages = Router::new()
        .leptos_routes_with_context(
            &state,
            routes,
            assets::page_context(state.site),
            move || shell(leptos_options.clone()),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            gate::pages_need_sign_in,
        ))
        .route_layer(axum::middleware::from_fn(
            links::refusals_in_links_carry_no_text,
        ));
    let header_opts = headers::HeaderOptions {
        https: opts.secure_cookies,
    };
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/api/v1/openapi.json", get(openapi::openapi_json))
        .route("/api/v1/events", get(live::events))
        .nest(
            "/api/v1",
            v1::router()
                .merge(jobs::router())
                .merge(cluster::router())
                .merge(nodes::router())
                .merge(usage::router())
                .merge(fair_share::router())
                .merge(suggest::router())
                .merge(registries::router())
                .merge(notify::router())
                .merge(arrays::router())
                .merge(teams::router())
                .merge(budgets::router())
                .merge(sessions::api_router()),
        )
        .merge(peer::router())
        .merge(pages)
        .fallback(assets::fallback)
        .layer(axum::middleware::from_fn(error::server_fn_status))
        .layer(sessions)
        .layer(axum::middleware::from_fn(csrf::same_origin_only))
        .layer(axum::middleware::from_fn_with_state(
            client::TrustedProxies::new(&opts.trusted_proxies),
            client::client_addr,
        ))
        .layer(RequestBodyLimitLayer::new(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(
            header_opts,
            headers::security_headers,
        ))
        .with_state(state)
}
