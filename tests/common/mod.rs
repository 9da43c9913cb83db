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
    /// The live-event channel SSE streams read.
    pub live: tokio::sync::broadcast::Sender<String>,
    /// Where this app's job logs are (runners started for it write there).
    pub logs_dir: std::path::PathBuf,
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
        let logs_dir =
            std::env::temp_dir().join(format!("gpuq-test-logs-{}", uuid::Uuid::new_v4()));
        // Live events reach SSE streams only once a test starts the forwarder (`start_live`).
        let live = gpuq::server::live::channel();
        let state = AppState {
            pool: pool.clone(),
            leptos_options,
            pass: pass_config(),
            logs_dir: logs_dir.clone(),
            live: live.clone(),
            docker: None,
        };
        TestApp {
            pool,
            live,
            logs_dir,
            router: app(state, HttpOptions::default()),
        }
    }

    /// The same database and users, with the logs API reading from `dir`.
    pub fn with_logs_dir(&self, dir: std::path::PathBuf) -> TestApp {
        let state = AppState {
            pool: self.pool.clone(),
            leptos_options: LeptosOptions::builder()
                .output_name("gpuq")
                .site_root("target/site")
                .build(),
            pass: pass_config(),
            logs_dir: dir.clone(),
            live: gpuq::server::live::channel(),
            docker: None,
        };
        TestApp {
            pool: self.pool.clone(),
            live: self.live.clone(),
            logs_dir: dir,
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

    /// Starts forwarding NOTIFY payloads to the SSE streams, as `gpuq serve` does. Stop it before
    /// the test ends (its LISTEN connection would keep the test database from being dropped).
    pub fn start_live(
        &self,
    ) -> (
        tokio::sync::watch::Sender<bool>,
        tokio::task::JoinHandle<()>,
    ) {
        let (stop, rx) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(gpuq::server::live::forward(
            self.pool.clone(),
            self.live.clone(),
            rx,
        ));
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

impl TestApp {
    /// Registers simulated cards of `node` (e.g. `2x24576:RTX,1x81920:A100`); returns their ids in
    /// index order.
    pub async fn sim_cards(&self, spec: &str, node: &str) -> Vec<uuid::Uuid> {
        use gpuq::server::gpu::{self, GpuInventory, GpuMode};
        let inv: std::sync::Arc<dyn GpuInventory> = std::sync::Arc::from(
            gpu::from_config(GpuMode::Sim, Some(spec), node).expect("sim spec"),
        );
        gpu::sync::refresh(&self.pool, &inv, node)
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

/// The ledger invariants: every card's `reserved_mib` equals the sum of its live reservations and
/// stays within its size; an exclusive card holds nothing else; no job was admitted twice or holds
/// a number of live cards other than it asked for. Returns the violations found.
pub async fn ledger_violations(pool: &PgPool) -> Vec<String> {
    let mut bad: Vec<String> = sqlx::query_scalar(
        "SELECT format('card %s: reserved_mib %s but live reservations sum to %s (total %s)', \
                       g.uuid, g.reserved_mib, coalesce(s.sum, 0), g.total_mib) \
         FROM gpus g LEFT JOIN (SELECT gpu_uuid, sum(vram_mib) AS sum FROM reservations \
                                WHERE released_at IS NULL GROUP BY gpu_uuid) s ON s.gpu_uuid = g.uuid \
         WHERE g.reserved_mib <> coalesce(s.sum, 0) OR coalesce(s.sum, 0) > g.total_mib",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    bad.extend(
        sqlx::query_scalar::<_, String>(
            "SELECT format('card %s: exclusive job shares it with %s other reservation(s)', gpu_uuid, count(*) - 1) \
             FROM reservations WHERE released_at IS NULL GROUP BY gpu_uuid \
             HAVING bool_or(exclusive) AND count(*) > 1",
        )
        .fetch_all(pool)
        .await
        .unwrap(),
    );
    bad.extend(
        sqlx::query_scalar::<_, String>(
            "SELECT format('job %s admitted %s times', job_id, count(*)) FROM job_events \
             WHERE kind = 'admitted' GROUP BY job_id HAVING count(*) > 1",
        )
        .fetch_all(pool)
        .await
        .unwrap(),
    );
    bad.extend(
        sqlx::query_scalar::<_, String>(
            "SELECT format('job %s (%s) holds %s live cards, asked for %s', j.id, j.status, \
                           count(r.id), j.gpu_count) \
             FROM jobs j LEFT JOIN reservations r ON r.job_id = j.id AND r.released_at IS NULL \
             GROUP BY j.id \
             HAVING (j.status IN ('admitted', 'starting', 'running') AND count(r.id) <> j.gpu_count) \
                 OR (j.released_at IS NOT NULL AND count(r.id) > 0) \
                 OR (j.status = 'queued' AND count(r.id) > 0)",
        )
        .fetch_all(pool)
        .await
        .unwrap(),
    );
    bad
}

/// A `gpuq serve` child process, killed when dropped.
pub struct Server(pub std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The URL of the test's own database.
pub fn database_url(pool: &PgPool) -> String {
    let base = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let db = pool.connect_options().get_database().unwrap().to_owned();
    format!("{}/{db}", base.rsplit_once('/').unwrap().0)
}

/// Starts `gpuq serve` on simulated cards (node `shared`) and waits until it is ready.
pub async fn start_server(url: &str, port: u16, log: &std::path::Path, extra: &[&str]) -> Server {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_gpuq"))
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--database-url",
            url,
        ])
        .args([
            "--gpus",
            "sim",
            "--sim-gpus",
            "4x24576:NVIDIA GeForce RTX 3090",
        ])
        .args(if extra.contains(&"--node") {
            &[][..]
        } else {
            &["--node", "shared"][..]
        })
        .args(["--pass-interval-ms", "100", "--vram-headroom-mib", "0"])
        .args(if extra.contains(&"--runner") {
            &[][..]
        } else {
            &["--runner", "false"][..]
        })
        .args(extra)
        .env("GPUQ_BOOTSTRAP_ADMIN_PASSWORD", PASSWORD)
        .stdout(std::fs::File::create(log.with_extension("out")).unwrap())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("start gpuq serve");
    let server = Server(child);
    let client = reqwest::Client::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        // Without a usable Docker the server answers but is not ready, by design.
        let probe = if extra.contains(&"--docker-socket") {
            "healthz"
        } else {
            "readyz"
        };
        if let Ok(r) = client
            .get(format!("http://127.0.0.1:{port}/{probe}"))
            .send()
            .await
        {
            if r.status().is_success() {
                return server;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "server on {port} not ready: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A runner and a scheduler for `node`, in this process (so tests can choose the launch mode).
pub struct Node {
    stop: tokio::sync::watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Where this node keeps job logs.
    pub logs_dir: std::path::PathBuf,
}

impl Node {
    /// Starts a node: re-adoption first, then the runner and a fast scheduler.
    pub async fn start(app: &TestApp, node: &str, mode: gpuq::server::runtime::LaunchMode) -> Node {
        use gpuq::server::runner::{DockerHealth, Runner, RunnerConfig};
        let pool = &app.pool;
        let logs_dir = app.logs_dir.clone();
        let docker = gpuq::server::runtime::Docker::connect()
            .await
            .expect("dockerd must be running");
        let runner = Runner::new(
            pool.clone(),
            docker,
            RunnerConfig {
                node: node.to_owned(),
                logs_dir: logs_dir.clone(),
                log_max_bytes: 1 << 20,
                stop_grace: std::time::Duration::from_secs(1),
                mode,
                poll: std::time::Duration::from_millis(100),
            },
            std::sync::Arc::new(DockerHealth::default()),
        );
        let (stop, mut rx) = tokio::sync::watch::channel(false);
        assert!(runner.start_up(&mut rx).await);
        let sched = gpuq::server::admission::scheduler::run(
            pool.clone(),
            gpuq::server::admission::PassConfig {
                cpu_node: node.to_owned(),
                ..pass_config()
            },
            std::time::Duration::from_millis(100),
            rx.clone(),
        );
        let tasks = vec![tokio::spawn(runner.run(rx)), tokio::spawn(sched)];
        Node {
            stop,
            tasks,
            logs_dir,
        }
    }

    /// Stops the runner and scheduler (containers already running are left alone).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// Polls a job until its status is one of `statuses` (or panics after `secs`).
pub async fn wait_status(
    app: &TestApp,
    bearer: &str,
    id: uuid::Uuid,
    statuses: &[&str],
    secs: u64,
) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        let v = app.job(bearer, id).await;
        if statuses.iter().any(|s| v["status"] == *s) {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "job {id} never reached {statuses:?}: {v}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Submits a job over HTTP to a running `gpuq serve`; returns its id.
pub async fn post_job(
    client: &reqwest::Client,
    port: u16,
    bearer: &str,
    spec: &Value,
) -> uuid::Uuid {
    let r: Value = client
        .post(format!("http://127.0.0.1:{port}/api/v1/jobs"))
        .header("authorization", bearer)
        .json(spec)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    r["job_id"]
        .as_str()
        .unwrap_or_else(|| panic!("not accepted: {r}"))
        .parse()
        .unwrap()
}

/// An HTTP client and an admin bearer header for a running `gpuq serve`.
pub async fn api_as_admin(port: u16) -> (reqwest::Client, String) {
    let client = reqwest::Client::new();
    let token: Value = client
        .post(format!("http://127.0.0.1:{port}/api/v1/tokens"))
        .json(&serde_json::json!({ "username": "admin", "password": PASSWORD, "name": "t" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    (
        client,
        format!("Bearer {}", token["token"].as_str().unwrap()),
    )
}
