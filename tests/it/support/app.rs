//! The application under test: the real router over a real Postgres database per test (`#[sqlx::test]`).

use axum::body::Body;
use axum::http::{header, HeaderMap, Request, StatusCode};
use axum::Router;
use gpuq::model::Role;
use gpuq::server::auth::service;
use gpuq::server::http::{app, HttpOptions};
use gpuq::server::notifier::Notifier;
use gpuq::server::peers::{ClusterSecret, Peers};
use gpuq::server::{AppState, Ctx};
use http_body_util::BodyExt;
use serde_json::Value;
use sqlx::PgPool;
use tower::ServiceExt;

/// The origin test requests claim to come from.
pub const ORIGIN: &str = "http://127.0.0.1:3000";
/// The password every test user gets unless a test says otherwise.
pub const PASSWORD: &str = "correct horse battery";

/// Admission settings of the tests: no headroom, so figures are exact.
pub fn pass_config() -> gpuq::server::admission::PassConfig {
    gpuq::server::admission::PassConfig {
        headroom_mib: 0,
        starvation_after: std::time::Duration::from_secs(3600),
        cpu_node: "test-node".into(),
    }
}

/// The application under test.
pub struct TestApp {
    pub pool: PgPool,
    /// This app's notifier: SSE streams and log follows subscribe to it. Nothing is heard until a
    /// test runs it (`start_notifier`, or a `Node`, which runs it as `gpuq serve` does).
    pub notifier: Notifier,
    /// Where this app's job logs are (runners started for it write there).
    pub logs_dir: std::path::PathBuf,
    /// This app's bound on concurrent password checks (it counts the checks it let through).
    pub hashing: gpuq::server::auth::password::HashGate,
    /// The key registry passwords are sealed under: a key file of this app's own (made on first
    /// need), which its nodes share.
    pub secrets: gpuq::server::registries::SecretsKey,
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
        Self::with_backstop(pool, std::time::Duration::from_millis(100)).await
    }

    /// An app whose notifier's backstop timer fires every `backstop` (a long one shows that
    /// something reacts to a notification, not to the timer).
    pub async fn with_backstop(pool: PgPool, backstop: std::time::Duration) -> Self {
        gpuq::server::db::migrate(&pool).await.expect("migrations");
        let logs_dir =
            std::env::temp_dir().join(format!("gpuq-test-logs-{}", uuid::Uuid::new_v4()));
        Self::build(pool, logs_dir, backstop)
    }

    /// An app over a database someone else migrated: for a pool that connects as a role that
    /// may not run migrations (the application's own role).
    pub fn migrated(pool: PgPool) -> Self {
        let logs_dir =
            std::env::temp_dir().join(format!("gpuq-test-logs-{}", uuid::Uuid::new_v4()));
        Self::build(pool, logs_dir, std::time::Duration::from_millis(100))
    }

    fn build(pool: PgPool, logs_dir: std::path::PathBuf, backstop: std::time::Duration) -> Self {
        Self::build_with(
            pool,
            logs_dir,
            backstop,
            HttpOptions::default(),
            gpuq::server::auth::password::HashGate::per_core(),
        )
    }

    fn build_with(
        pool: PgPool,
        logs_dir: std::path::PathBuf,
        backstop: std::time::Duration,
        opts: HttpOptions,
        hashing: gpuq::server::auth::password::HashGate,
    ) -> Self {
        Self::build_full(pool, logs_dir, backstop, opts, hashing, None)
    }

    fn build_full(
        pool: PgPool,
        logs_dir: std::path::PathBuf,
        backstop: std::time::Duration,
        opts: HttpOptions,
        hashing: gpuq::server::auth::password::HashGate,
        peers: Option<Peers>,
    ) -> Self {
        Self::build_edited(pool, logs_dir, backstop, opts, hashing, |ctx| {
            ctx.peers = peers;
        })
    }

    fn build_edited(
        pool: PgPool,
        logs_dir: std::path::PathBuf,
        backstop: std::time::Duration,
        opts: HttpOptions,
        hashing: gpuq::server::auth::password::HashGate,
        edit: impl FnOnce(&mut Ctx),
    ) -> Self {
        super::capture_logs();
        let notifier = Notifier::new(backstop);
        let mut ctx = Ctx::new(
            pool.clone(),
            pass_config(),
            logs_dir.clone(),
            notifier.clone(),
        );
        ctx.hashing = hashing.clone();
        // The tests submit in loops far faster than a person does; `attacks::submits` checks the
        // per-user rate with an app of its own.
        ctx.submit_rate = gpuq::server::limits::SubmitRate::new(0, 0);
        ctx.secrets = gpuq::server::registries::SecretsKey::in_data_dir(
            &std::env::temp_dir().join(format!("gpuq-test-data-{}", uuid::Uuid::new_v4())),
        );
        edit(&mut ctx);
        let secrets = ctx.secrets.clone();
        TestApp {
            pool,
            notifier,
            logs_dir,
            hashing,
            secrets,
            router: app(AppState::new(ctx, "target/site"), opts),
        }
    }

    /// An app with these HTTP options whose domain context `edit` adjusts (rate limits, session
    /// lifetime).
    pub async fn custom(pool: PgPool, opts: HttpOptions, edit: impl FnOnce(&mut Ctx)) -> Self {
        gpuq::server::db::migrate(&pool).await.expect("migrations");
        let logs_dir =
            std::env::temp_dir().join(format!("gpuq-test-logs-{}", uuid::Uuid::new_v4()));
        Self::build_edited(
            pool,
            logs_dir,
            std::time::Duration::from_millis(100),
            opts,
            gpuq::server::auth::password::HashGate::per_core(),
            edit,
        )
    }

    /// The router under test, to serve it some other way (`attacks::listener`).
    pub fn router(&self) -> Router {
        self.router.clone()
    }

    /// An app with these HTTP options (e.g. `secure_cookies`).
    pub async fn with_options(pool: PgPool, opts: HttpOptions) -> Self {
        Self::migrated_with(
            pool,
            opts,
            gpuq::server::auth::password::HashGate::per_core(),
        )
        .await
    }

    /// An app that lets `limit` password checks run at once.
    pub async fn with_hash_limit(pool: PgPool, limit: usize) -> Self {
        let gate = gpuq::server::auth::password::HashGate::new(limit);
        Self::migrated_with(pool, HttpOptions::default(), gate).await
    }

    async fn migrated_with(
        pool: PgPool,
        opts: HttpOptions,
        hashing: gpuq::server::auth::password::HashGate,
    ) -> Self {
        gpuq::server::db::migrate(&pool).await.expect("migrations");
        let logs_dir =
            std::env::temp_dir().join(format!("gpuq-test-logs-{}", uuid::Uuid::new_v4()));
        Self::build_with(
            pool,
            logs_dir,
            std::time::Duration::from_millis(100),
            opts,
            hashing,
        )
    }

    /// The same database and users, with the logs API reading from `dir`.
    pub fn with_logs_dir(&self, dir: std::path::PathBuf) -> TestApp {
        Self::build(
            self.pool.clone(),
            dir,
            std::time::Duration::from_millis(100),
        )
    }

    /// The same database, as node `node` of a cluster whose nodes share `secret` (`None`: a node
    /// given no secret), with its job logs in `logs_dir`.
    pub fn as_node(
        &self,
        node: &str,
        secret: Option<&str>,
        logs_dir: std::path::PathBuf,
    ) -> TestApp {
        let secret = secret.map(|s| ClusterSecret::new(s).expect("a long enough secret"));
        Self::build_full(
            self.pool.clone(),
            logs_dir,
            std::time::Duration::from_millis(100),
            HttpOptions::default(),
            gpuq::server::auth::password::HashGate::per_core(),
            Some(Peers::new(node, secret)),
        )
    }

    /// Serves this app over HTTP on a free loopback port, as `gpuq serve` would, until the test
    /// ends; answers its base URL.
    pub async fn listen(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let router = self.router.clone();
        tokio::spawn(async move {
            let service = router.into_make_service_with_connect_info::<std::net::SocketAddr>();
            axum::serve(listener, service).await.unwrap();
        });
        base
    }

    /// Sends `req` through the router in this process and reads the whole answer. A request that
    /// has not been answered whole within a minute fails the test, naming it, rather than holding
    /// the suite (and CI) forever.
    pub async fn send(&self, req: Request<Body>) -> Reply {
        let what = format!("{} {}", req.method(), req.uri());
        let router = self.router.clone();
        let answer = async move {
            let res = router.oneshot(req).await.expect("router");
            let status = res.status();
            let headers = res.headers().clone();
            let bytes = res.into_body().collect().await.expect("body").to_bytes();
            Reply {
                status,
                headers,
                text: String::from_utf8_lossy(&bytes).into_owned(),
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(60), answer)
            .await
            .unwrap_or_else(|_| panic!("{what}: no whole answer within 60 s"))
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

    /// Runs this app's notifier (its LISTEN connection), as `gpuq serve` does. Stop it before
    /// the test ends (its LISTEN connection would keep the test database from being dropped).
    pub fn start_notifier(
        &self,
    ) -> (
        tokio::sync::watch::Sender<bool>,
        tokio::task::JoinHandle<()>,
    ) {
        let (stop, rx) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(self.notifier.clone().run(self.pool.clone(), rx));
        (stop, task)
    }

    /// Opens a streaming response (SSE) and returns its body.
    pub async fn stream(&self, path: &str, bearer: &str) -> (StatusCode, Body) {
        let req = Request::builder()
            .uri(path)
            .header(header::AUTHORIZATION, bearer)
            .body(Body::empty())
            .expect("request");
        let res = self.router.clone().oneshot(req).await.expect("router");
        (res.status(), res.into_body())
    }

    /// Opens the live event stream as `bearer` once this app's notifier (see `start_notifier`)
    /// listens: pokes the channel until a probe comes through the stream.
    pub async fn live_stream(&self, bearer: &str) -> Body {
        use http_body_util::BodyExt;
        let (status, mut body) = self.stream("/api/v1/events", bearer).await;
        assert_eq!(status, 200);
        for _ in 0..50 {
            sqlx::query("SELECT pg_notify('gpuq_events', '{\"kind\":\"cards\"}')")
                .execute(&self.pool)
                .await
                .unwrap();
            if let Ok(Some(Ok(frame))) =
                tokio::time::timeout(std::time::Duration::from_millis(200), body.frame()).await
            {
                if frame
                    .into_data()
                    .is_ok_and(|d| String::from_utf8_lossy(&d).contains("event: cards"))
                {
                    return body;
                }
            }
        }
        panic!("the notifier never started listening");
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

    /// The login server function's reply to `name` and `password`, sent with `cookie` (a
    /// session the browser already holds) if any.
    pub async fn login_reply(&self, name: &str, password: &str, cookie: Option<&str>) -> Reply {
        let form = format!("username={name}&password={}", password.replace(' ', "+"));
        self.server_fn("login", &form, cookie, &[]).await
    }

    /// Calls a server function from our own page, signed in with the session `cookie`.
    pub async fn signed_in_call(&self, cookie: &str, endpoint: &str, form: &str) -> Reply {
        self.server_fn(endpoint, form, Some(cookie), &[]).await
    }

    /// Signs in through the login server function and returns the session cookie.
    pub async fn login(&self, name: &str, password: &str) -> String {
        let reply = self.login_reply(name, password, None).await;
        assert!(
            reply.status.as_u16() < 400,
            "login failed: {} {}",
            reply.status,
            reply.text
        );
        reply.session_cookie().expect("login sets a session cookie")
    }
}

impl TestApp {
    /// Registers simulated cards of `node` (e.g. `2x24576:RTX,1x81920:A100`); returns their ids in
    /// index order.
    pub async fn sim_cards(&self, spec: &str, node: &str) -> Vec<uuid::Uuid> {
        use gpuq::server::gpu::{self, observer, GpuMode};
        let source = observer::Source {
            pool: self.pool.clone(),
            inventory: std::sync::Arc::from(
                gpu::from_config(GpuMode::Sim, Some(spec), node).expect("sim spec"),
            ),
            node: node.to_owned(),
            proc_root: "/proc".into(),
        };
        gpu::sync::refresh(&self.pool, node, &source.read().await)
            .await
            .expect("inventory");
        sqlx::query_scalar("SELECT uuid FROM gpus WHERE node = $1 ORDER BY idx")
            .bind(node)
            .fetch_all(&self.pool)
            .await
            .unwrap()
    }

    /// A user of `role` and a bearer header for them.
    pub async fn bearer(&self, name: &str, role: Role) -> String {
        self.add_user(name, role).await;
        let t = self.token(name, PASSWORD).await;
        assert_eq!(t.status, 201, "{}", t.text);
        format!("Bearer {}", t.json()["token"].as_str().unwrap())
    }

    /// Submits a job spec; returns the reply.
    pub async fn submit(&self, bearer: &str, spec: Value) -> Reply {
        self.api("POST", "/api/v1/jobs", Some(bearer), Some(spec))
            .await
    }

    /// Submits a job that must be accepted; returns its id.
    pub async fn submit_ok(&self, bearer: &str, spec: Value) -> uuid::Uuid {
        let r = self.submit(bearer, spec).await;
        assert_eq!(r.status, 201, "{}", r.text);
        r.json()["job_id"].as_str().unwrap().parse().unwrap()
    }

    /// One admission pass now.
    pub async fn pass(&self) -> gpuq::server::admission::PassOutcome {
        gpuq::server::admission::run_pass(&self.pool, &pass_config(), chrono::Utc::now())
            .await
            .expect("pass")
    }

    /// A job as the API shows it to `bearer`.
    pub async fn job(&self, bearer: &str, id: uuid::Uuid) -> Value {
        let r = self
            .api("GET", &format!("/api/v1/jobs/{id}"), Some(bearer), None)
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        r.json()
    }

    /// Saves a launch policy as `admin` (fields left out keep their defaults).
    pub async fn set_policy(&self, admin: &str, policy: Value) {
        let r = self
            .api(
                "PUT",
                "/api/v1/settings/launch-policy",
                Some(admin),
                Some(policy),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
    }

    /// Defines a workload type directly (as an admin would through the API).
    pub async fn workload(&self, admin: &str, name: &str, needs: Value) {
        let r = self
            .api(
                "PUT",
                &format!("/api/v1/manifest/{name}"),
                Some(admin),
                Some(serde_json::json!({ "vram_mib": needs })),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
}

/// Reads SSE frames until one contains `needle` (or panics after `secs`).
pub async fn read_stream_until(body: &mut axum::body::Body, needle: &str, secs: u64) -> String {
    use http_body_util::BodyExt;
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(secs);
    while !seen.contains(needle) {
        let frame = tokio::time::timeout_at(deadline, body.frame())
            .await
            .unwrap_or_else(|_| panic!("no `{needle}` in the event stream; got: {seen}"))
            .expect("stream open")
            .expect("frame");
        if let Ok(data) = frame.into_data() {
            seen.push_str(&String::from_utf8_lossy(&data));
        }
    }
    seen
}
