//! Shared test harness: the real router over a real Postgres database per test (`#[sqlx::test]`).
#![allow(dead_code)]

use axum::body::Body;
use axum::http::{header, HeaderMap, Request, StatusCode};
use axum::Router;
use gpuq::model::Role;
use gpuq::server::auth::service;
use gpuq::server::http::{app, HttpOptions};
use gpuq::server::AppState;
use http_body_util::BodyExt;
use leptos::config::LeptosOptions;
use serde_json::Value;
use sqlx::PgPool;
use tower::ServiceExt;

/// The origin test requests claim to come from.
pub const ORIGIN: &str = "http://127.0.0.1:3000";
/// The password every test user gets unless a test says otherwise.
pub const PASSWORD: &str = "correct horse battery";

/// The application under test.
pub struct TestApp {
    pub pool: PgPool,
    router: Router,
}

/// A response, read whole.
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub text: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }

    /// The `name=value` of the session cookie this response sets, if any.
    pub fn session_cookie(&self) -> Option<String> {
        self.headers
            .get_all(header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|v| v.starts_with("gpuq_session="))
            .map(|v| v.split(';').next().unwrap_or_default().to_owned())
    }

    pub fn set_cookie_header(&self) -> String {
        self.headers
            .get_all(header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl TestApp {
    pub async fn new(pool: PgPool) -> Self {
        gpuq::server::db::migrate(&pool).await.expect("migrations");
        let leptos_options = LeptosOptions::builder()
            .output_name("gpuq")
            .site_root("target/site")
            .build();
        let state = AppState {
            pool: pool.clone(),
            leptos_options,
        };
        TestApp {
            pool,
            router: app(state, HttpOptions::default()),
        }
    }

    pub async fn send(&self, req: Request<Body>) -> Reply {
        let res = self.router.clone().oneshot(req).await.expect("router");
        let status = res.status();
        let headers = res.headers().clone();
        let bytes = res.into_body().collect().await.expect("body").to_bytes();
        Reply {
            status,
            headers,
            text: String::from_utf8_lossy(&bytes).into_owned(),
        }
    }

    pub async fn add_user(&self, name: &str, role: Role) -> uuid::Uuid {
        service::add_user(&self.pool, name, role, PASSWORD)
            .await
            .expect("add user")
            .id
    }

    /// A JSON API call; `auth` is `Bearer …` or a cookie (`gpuq_session=…`).
    pub async fn api(
        &self,
        method: &str,
        path: &str,
        auth: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        let mut req = Request::builder().method(method).uri(path);
        match auth {
            Some(a) if a.starts_with("Bearer ") => req = req.header(header::AUTHORIZATION, a),
            Some(c) => {
                req = req
                    .header(header::COOKIE, c)
                    .header(header::ORIGIN, ORIGIN)
                    .header(header::HOST, "127.0.0.1:3000")
            }
            None => {}
        }
        let body = match body {
            Some(v) => {
                req = req.header(header::CONTENT_TYPE, "application/json");
                Body::from(v.to_string())
            }
            None => Body::empty(),
        };
        self.send(req.body(body).expect("request")).await
    }

    /// A page load as a browser makes it (`Accept: text/html`).
    pub async fn page(&self, path: &str, cookie: Option<&str>) -> Reply {
        let mut req = Request::builder()
            .uri(path)
            .header(header::ACCEPT, "text/html,application/xhtml+xml");
        if let Some(c) = cookie {
            req = req.header(header::COOKIE, c);
        }
        self.send(req.body(Body::empty()).expect("request")).await
    }

    pub async fn token(&self, name: &str, password: &str) -> Reply {
        self.api(
            "POST",
            "/api/v1/tokens",
            None,
            Some(serde_json::json!({ "username": name, "password": password, "name": "test" })),
        )
        .await
    }

    /// Calls a server function the way the browser does (form-encoded POST from our own origin).
    pub async fn server_fn(
        &self,
        endpoint: &str,
        form: &str,
        cookie: Option<&str>,
        extra: &[(&str, &str)],
    ) -> Reply {
        let mut req = Request::builder()
            .method("POST")
            .uri(format!("/api/{endpoint}"))
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::ACCEPT, "application/json")
            .header(header::HOST, "127.0.0.1:3000");
        if extra.is_empty() {
            req = req.header("sec-fetch-site", "same-origin");
        }
        for (k, v) in extra {
            req = req.header(*k, *v);
        }
        if let Some(c) = cookie {
            req = req.header(header::COOKIE, c);
        }
        self.send(req.body(Body::from(form.to_owned())).expect("request"))
            .await
    }

    /// Signs in through the login server function and returns the session cookie.
    pub async fn login(&self, name: &str, password: &str) -> String {
        let reply = self
            .server_fn(
                "login",
                &format!("username={name}&password={}", password.replace(' ', "+")),
                None,
                &[],
            )
            .await;
        assert!(
            reply.status.as_u16() < 400,
            "login failed: {} {}",
            reply.status,
            reply.text
        );
        reply.session_cookie().expect("login sets a session cookie")
    }
}
