//! Notifications end to end: a real HTTP receiver and a real SMTP sink (Debian's aiosmtpd) on
//! 127.0.0.1, started by each test; jobs ended by the real lifecycle (a failing container on a
//! fenced node, or a cancel through the API); the outbox row surviving a `kill -9` of `gpuq serve`
//! between the send and its mark. The SSRF attacks of a member's webhook URL are refused at save
//! and at send.

use crate::support::{api_as_admin, json_of, post_job, Node, Serve, TestApp};
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use gpuq::model::Role;
use gpuq::server::notify::send::{SmtpConfig, SmtpTls};
use gpuq::server::notify::{deliver, DeliveryConfig, NotifySetup};
use gpuq::server::runtime::{ensure_sim_devices, LaunchMode};
use gpuq::server::Ctx;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;
use sqlx::PgPool;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uuid::Uuid;

const IMAGE: &str = "gpuq-test/busybox:latest";
const SECRET: &str = "a-receivers-shared-secret";

/// How the test receiver answers its n-th request (200 past the list).
#[derive(Clone)]
enum Answer {
    Status(u16),
    /// Reads the request and never answers.
    Hang,
    /// `302 Found` to this URL.
    Redirect(&'static str),
}

/// One request the receiver got.
#[derive(Clone, Debug)]
struct Seen {
    headers: HeaderMap,
    body: Bytes,
}

impl Seen {
    fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

/// An HTTP receiver on 127.0.0.1 that records every request.
struct Receiver {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    async fn start(answers: Vec<Answer>) -> Receiver {
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let record = Arc::clone(&seen);
        let handler = move |headers: HeaderMap, body: Bytes| {
            let record = Arc::clone(&record);
            let answers = answers.clone();
            async move {
                let n = {
                    let mut seen = record.lock().unwrap();
                    seen.push(Seen { headers, body });
                    seen.len() - 1
                };
                match answers.get(n).cloned().unwrap_or(Answer::Status(200)) {
                    Answer::Status(code) => StatusCode::from_u16(code).unwrap().into_response(),
                    Answer::Redirect(to) => axum::response::Redirect::to(to).into_response(),
                    Answer::Hang => std::future::pending().await,
                }
            }
        };
        let router = axum::Router::new().route("/hook", axum::routing::post(handler));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        Receiver { addr, seen, task }
    }

    fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    async fn wait_for(&self, count: usize, secs: u64) -> Vec<Seen> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let seen = self.seen();
            if seen.len() >= count {
                return seen;
            }
            assert!(
                Instant::now() < deadline,
                "the receiver got {} of {count} requests in {secs} s",
                seen.len()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The receiver's check, as docs/security.md tells a receiver to make it: HMAC-SHA256 with the
/// shared secret over `<X-Gpuq-Timestamp>.<body>`, compared in constant time.
fn verify(seen: &Seen, secret: &str) -> bool {
    let ts = seen.header("x-gpuq-timestamp");
    let Some(hex_sig) = seen
        .header("x-gpuq-signature")
        .strip_prefix("sha256=")
        .map(str::to_owned)
    else {
        return false;
    };
    let Ok(sig) = hex::decode(hex_sig) else {
        return false;
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(ts.as_bytes());
    mac.update(b".");
    mac.update(&seen.body);
    mac.verify_slice(&sig).is_ok()
}

/// Debian's aiosmtpd on 127.0.0.1, writing each message it accepts to a maildir.
struct SmtpSink {
    child: std::process::Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl SmtpSink {
    async fn start() -> SmtpSink {
        let port = crate::support::free_port();
        let dir = tempfile::tempdir().unwrap();
        let child = std::process::Command::new("/usr/bin/python3")
            .args(["-m", "aiosmtpd", "-n", "-l", &format!("127.0.0.1:{port}")])
            .args(["-c", "aiosmtpd.handlers.Mailbox"])
            .arg(dir.path().join("mail"))
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("python3-aiosmtpd (scripts/deps.sh installs it)");
        let deadline = Instant::now() + Duration::from_secs(15);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(Instant::now() < deadline, "aiosmtpd did not listen");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        SmtpSink { child, port, dir }
    }

    fn config(&self) -> SmtpConfig {
        SmtpConfig {
            host: "127.0.0.1".into(),
            port: self.port,
            tls: SmtpTls::None,
            credentials: None,
            from: "gpuq <gpuq@example.org>".into(),
        }
    }

    fn mails(&self) -> Vec<String> {
        let new = self.dir.path().join("mail/new");
        let Ok(entries) = std::fs::read_dir(new) else {
            return Vec::new();
        };
        entries
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
            .collect()
    }

    async fn wait_for(&self, count: usize, secs: u64) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let mails = self.mails();
            if mails.len() >= count {
                return mails;
            }
            assert!(Instant::now() < deadline, "no mail in {secs} s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Short retries, for tests.
fn quick(smtp: Option<SmtpConfig>) -> DeliveryConfig {
    DeliveryConfig {
        smtp,
        retry_first: Duration::from_millis(50),
        retry_max: Duration::from_millis(200),
        attempts: 3,
        lease: Duration::from_secs(30),
        public_url: "https://gpuq.example.org".into(),
        own: Vec::new(),
        webhook_timeout: Duration::from_millis(500),
    }
}

/// This app's delivery worker and, with `notes`, its notifier (a `Node` runs one already).
struct Worker {
    stop: tokio::sync::watch::Sender<bool>,
    notes: Option<(
        tokio::sync::watch::Sender<bool>,
        tokio::task::JoinHandle<()>,
    )>,
}

impl Worker {
    fn start(app: &TestApp, cfg: DeliveryConfig, notes: bool) -> Worker {
        let notes = notes.then(|| app.start_notifier());
        let ctx = Ctx::new(
            app.pool.clone(),
            crate::support::pass_config(),
            app.logs_dir.clone(),
            app.notifier.clone(),
        );
        let (stop, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(deliver::run(
            NotifySetup { ctx, cfg },
            app.notifier.subscribe(),
            rx,
        ));
        Worker { stop, notes }
    }

    /// Stops it (the notifier's LISTEN connection must go before the test database is dropped).
    async fn stop(self) {
        let _ = self.stop.send(true);
        if let Some((stop, task)) = self.notes {
            let _ = stop.send(true);
            task.await.unwrap();
        }
    }
}

async fn put(app: &TestApp, bearer: &str, body: Value) -> crate::support::Reply {
    app.api("PUT", "/api/v1/me/notifications", Some(bearer), Some(body))
        .await
}

async fn deliveries(app: &TestApp, bearer: &str) -> Value {
    let r = app
        .api(
            "GET",
            "/api/v1/me/notifications/deliveries",
            Some(bearer),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.json()
}

/// Polls the caller's deliveries until `done` holds of them.
async fn deliveries_until(
    app: &TestApp,
    bearer: &str,
    secs: u64,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let d = deliveries(app, bearer).await;
        if done(&d) {
            return d;
        }
        assert!(Instant::now() < deadline, "deliveries never got there: {d}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An app with one simulated card on `node` (no runner), an admin who allowlists `allow` for
/// webhooks, and a member.
async fn app_with(pool: PgPool, node: &str, allow: &[String]) -> (TestApp, String, String) {
    let app = TestApp::new(pool).await;
    app.sim_cards("1x24576:NVIDIA GeForce RTX 3090", node).await;
    let admin = app.bearer("root", Role::Admin).await;
    app.set_policy(&admin, json!({ "webhook_allowlist": allow }))
        .await;
    let member = app.bearer("alice", Role::Member).await;
    (app, admin, member)
}

/// Submits a job of `bearer` and cancels it while it waits: a `cancelled` status change.
async fn cancelled_job(app: &TestApp, bearer: &str) -> Uuid {
    let spec = json!({ "image": IMAGE, "command": ["true"], "min_vram_mb": 1000 });
    let id = app.submit_ok(bearer, spec).await;
    let r = app
        .api(
            "POST",
            &format!("/api/v1/jobs/{id}/cancel"),
            Some(bearer),
            None,
        )
        .await;
    assert!(r.status.is_success(), "{}", r.text);
    id
}

#[sqlx::test(migrations = false)]
async fn a_failing_job_sends_a_signed_webhook_and_a_mail_and_a_success_nothing(pool: PgPool) {
    let receiver = Receiver::start(Vec::new()).await;
    let sink = SmtpSink::start().await;
    let app = TestApp::new(pool).await;
    ensure_sim_devices(1).unwrap();
    app.sim_cards("1x24576:NVIDIA GeForce RTX 3090", "n1").await;
    let admin = app.bearer("root", Role::Admin).await;
    app.set_policy(
        &admin,
        json!({ "webhook_allowlist": [receiver.addr.to_string()] }),
    )
    .await;
    let member = app.bearer("alice", Role::Member).await;
    let r = put(
        &app,
        &member,
        json!({ "email": "alice@example.org", "on": ["failed"],
                "webhooks": [{ "url": receiver.url(), "format": "generic", "secret": SECRET }] }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let node = Node::start(&app, "n1", LaunchMode::Fenced).await;
    let worker = Worker::start(&app, quick(Some(sink.config())), false);

    // A success first: alice did not ask for `succeeded`, so it writes nothing and sends nothing.
    let ok = app
        .submit_ok(
            &member,
            json!({ "image": IMAGE, "command": ["true"], "min_vram_mb": 1000 }),
        )
        .await;
    crate::support::wait_status(&app, &member, ok, &["succeeded"], 60).await;
    let script = "echo starting; echo the-last-words >&2; exit 3";
    let spec = json!({ "image": IMAGE, "command": ["sh", "-c", script], "min_vram_mb": 1000,
                       "name": "doomed" });
    let bad = app.submit_ok(&member, spec).await;

    let seen = receiver.wait_for(1, 60).await;
    let hook = &seen[0];
    assert!(
        verify(hook, SECRET),
        "the signature does not verify: {hook:?}"
    );
    assert!(!verify(hook, "another-secret-entirely"), "any key verifies");
    let body = hook.json();
    assert_eq!(body["event"], "failed", "{body}");
    assert_eq!(body["job"]["id"], bad.to_string());
    assert_eq!(body["job"]["name"], "doomed");
    assert_eq!(body["job"]["exit_code"], 3, "{body}");
    assert!(
        body["job"]["reason"].as_str().is_some(),
        "no reason: {body}"
    );
    assert!(
        body["log_tail"]
            .as_str()
            .unwrap()
            .contains("the-last-words"),
        "{body}"
    );
    assert_eq!(
        body["job"]["url"],
        format!("https://gpuq.example.org/jobs/{bad}")
    );
    let key = hook.header("idempotency-key");
    assert_eq!(body["idempotency_key"], key);
    assert_eq!(hook.header("x-gpuq-event"), "failed");

    let mails = sink.wait_for(1, 30).await;
    let mail = &mails[0];
    assert!(mail.contains("Subject: [gpuq] job doomed failed"), "{mail}");
    assert!(mail.contains("Exit code: 3"), "{mail}");
    assert!(mail.contains("the-last-words"), "{mail}");
    assert!(mail.contains(&format!("/jobs/{bad}")), "{mail}");
    assert!(mail.contains("X-RcptTo: alice@example.org"), "{mail}");
    let d = deliveries_until(&app, &member, 30, |d| {
        d.as_array().unwrap().iter().all(|x| x["state"] == "sent")
    })
    .await;
    assert_eq!(d.as_array().unwrap().len(), 2, "{d}");
    let mail_key = d
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["channel"] == "email")
        .unwrap()["idempotency_key"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(mail.contains(&format!("<{mail_key}@gpuq>")), "{mail}");

    let for_success: i64 =
        sqlx::query_scalar("SELECT count(*) FROM notification_outbox WHERE job_id = $1")
            .bind(ok)
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(
        for_success, 0,
        "a success alice did not ask for was written"
    );
    assert_eq!(receiver.seen().len(), 1, "more than the failure was posted");
    worker.stop().await;
    node.stop().await;
}

#[sqlx::test(migrations = false)]
async fn a_500_is_retried_with_the_same_idempotency_key_until_a_200(pool: PgPool) {
    let receiver = Receiver::start(vec![Answer::Status(500)]).await;
    let (app, _admin, member) = app_with(pool, "n1", &[receiver.addr.to_string()]).await;
    let r = put(
        &app,
        &member,
        json!({ "on": ["cancelled"], "webhooks": [{ "url": receiver.url(), "format": "slack" }] }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let worker = Worker::start(&app, quick(None), true);
    let job = cancelled_job(&app, &member).await;
    let seen = receiver.wait_for(2, 30).await;
    assert_eq!(
        seen[0].header("idempotency-key"),
        seen[1].header("idempotency-key")
    );
    assert_eq!(seen[0].body, seen[1].body, "a retry sent another message");
    let text = seen[1].json()["text"].as_str().unwrap().to_owned();
    assert!(
        text.contains(&job.to_string()) && text.contains("cancelled"),
        "{text}"
    );
    let d = deliveries_until(&app, &member, 10, |d| d[0]["state"] == "sent").await;
    assert_eq!(d[0]["attempts"], 2, "{d}");
    assert!(d[0]["last_error"].as_str().unwrap().contains("500"), "{d}");
    assert_eq!(d[0]["idempotency_key"], seen[0].header("idempotency-key"));
    worker.stop().await;
}

#[sqlx::test(migrations = false)]
async fn a_receiver_that_never_answers_ends_failed_with_the_reason(pool: PgPool) {
    let receiver = Receiver::start(vec![Answer::Hang; 10]).await;
    let (app, _admin, member) = app_with(pool, "n1", &[receiver.addr.to_string()]).await;
    let r = put(
        &app,
        &member,
        json!({ "on": ["cancelled"], "webhooks": [{ "url": receiver.url() }] }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let worker = Worker::start(&app, quick(None), true);
    cancelled_job(&app, &member).await;
    let d = deliveries_until(&app, &member, 30, |d| d[0]["state"] == "failed").await;
    assert_eq!(
        d[0]["attempts"], 3,
        "not the bounded number of attempts: {d}"
    );
    let why = d[0]["last_error"].as_str().unwrap();
    assert!(why.contains("no answer in time"), "{why}");
    assert_eq!(receiver.seen().len(), 3);
    worker.stop().await;
}

#[sqlx::test(migrations = false)]
async fn every_forbidden_webhook_target_is_refused_at_save(pool: PgPool) {
    let (app, admin, member) = app_with(pool, "n1", &[]).await;
    sqlx::query(
        "INSERT INTO nodes (name, version, advertise_url, runs_jobs) \
         VALUES ('gpu7', '0', 'http://203.0.113.7:3000', true)",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    for url in [
        "http://127.0.0.1/hook",
        "http://127.1.2.3:8080/",
        "http://localhost/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/",
        "http://172.16.5.4/",
        "http://192.168.1.1/",
        "http://100.64.0.1/",
        "http://0.0.0.0:3000/",
        "http://224.0.0.1/",
        "http://[::1]/",
        "http://[fc00::1]/",
        "http://[fe80::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://203.0.113.7:9000/",
        "http://2130706433/",
        "http://0x7f.0.0.1/",
        "ftp://example.org/",
        "file:///etc/passwd",
        "http://user:pw@1.1.1.1/",
    ] {
        let r = put(
            &app,
            &member,
            json!({ "on": ["failed"], "webhooks": [{ "url": url }] }),
        )
        .await;
        assert_eq!(r.status, 400, "{url} accepted: {}", r.text);
        assert_eq!(r.json()["field"], "webhooks[0].url", "{url}: {}", r.text);
        assert!(r.text.contains(url), "{url} not named: {}", r.text);
    }
    // The node's own address is refused as such.
    let r = put(
        &app,
        &member,
        json!({ "webhooks": [{ "url": "http://203.0.113.7:9000/" }] }),
    )
    .await;
    assert!(r.text.contains("gpuq node"), "{}", r.text);
    // An admin's allowlist opens exactly what it names.
    app.set_policy(
        &admin,
        json!({ "webhook_allowlist": ["10.0.0.0/8", "127.0.0.1:8080"] }),
    )
    .await;
    for url in ["http://10.0.0.1/", "http://127.0.0.1:8080/x"] {
        let r = put(&app, &member, json!({ "webhooks": [{ "url": url }] })).await;
        assert_eq!(r.status, 200, "{url}: {}", r.text);
    }
    for url in ["http://127.0.0.1:8081/x", "http://192.168.1.1/"] {
        let r = put(&app, &member, json!({ "webhooks": [{ "url": url }] })).await;
        assert_eq!(r.status, 400, "{url}: {}", r.text);
    }
    // A bad allowlist entry is refused, naming it.
    let r = app
        .api(
            "PUT",
            "/api/v1/settings/launch-policy",
            Some(&admin),
            Some(json!({ "webhook_allowlist": ["10.0.0.0/99"] })),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["field"], "webhook_allowlist[0]", "{}", r.text);
}

#[sqlx::test(migrations = false)]
async fn settings_are_checked_field_by_field_and_secrets_never_shown(pool: PgPool) {
    let (app, _admin, member) = app_with(pool, "n1", &["127.0.0.1:9".into()]).await;
    for (body, field) in [
        (json!({ "email": "not-an-address" }), "email"),
        (json!({ "email": "a@b@c" }), "email"),
        (json!({ "on": ["exploded"] }), "body"),
        (
            json!({ "started_after_wait_minutes": 0 }),
            "started_after_wait_minutes",
        ),
        (
            json!({ "webhooks": [{ "url": "http://127.0.0.1:9/", "secret": "short" }] }),
            "webhooks[0].secret",
        ),
        (
            json!({ "webhooks": [{ "url": "http://127.0.0.1:9/", "format": "teams" }] }),
            "body",
        ),
    ] {
        let r = put(&app, &member, body.clone()).await;
        assert_eq!(r.status, 400, "{body} accepted: {}", r.text);
        let named = r.json()["field"].as_str().unwrap_or_default().to_owned();
        assert!(
            named == field || (field == "body" && !named.is_empty()),
            "{body}: {}",
            r.text
        );
    }
    let r = put(
        &app,
        &member,
        json!({ "email": "alice@example.org", "on": ["failed", "started_after_wait"],
                "started_after_wait_minutes": 5,
                "webhooks": [{ "url": "http://127.0.0.1:9/", "secret": SECRET }] }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(!r.text.contains(SECRET), "the secret came back: {}", r.text);
    // Saved again without the secret: it is kept (write-only, not wiped by a re-save).
    let r = put(
        &app,
        &member,
        json!({ "webhooks": [{ "url": "http://127.0.0.1:9/" }], "on": ["failed"] }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let got = app
        .api("GET", "/api/v1/me/notifications", Some(&member), None)
        .await;
    assert!(
        !got.text.contains(SECRET),
        "the secret is shown: {}",
        got.text
    );
    let v = got.json();
    assert_eq!(v["webhooks"][0]["secret_set"], true, "{v}");
    assert_eq!(v["on"], json!(["failed"]));
    let stored: Option<String> =
        sqlx::query_scalar("SELECT secret FROM notification_webhooks LIMIT 1")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(stored.as_deref(), Some(SECRET));
    let unsigned = app.api("GET", "/api/v1/me/notifications", None, None).await;
    assert_eq!(unsigned.status, 401);
}

#[sqlx::test(migrations = false)]
async fn another_member_cannot_read_or_change_my_settings_or_deliveries(pool: PgPool) {
    let receiver = Receiver::start(Vec::new()).await;
    let (app, _admin, alice) = app_with(pool, "n1", &[receiver.addr.to_string()]).await;
    let mallory = app.bearer("mallory", Role::Member).await;
    let mine = json!({ "email": "alice@example.org", "on": ["cancelled"],
                       "webhooks": [{ "url": receiver.url(), "secret": SECRET }] });
    assert_eq!(put(&app, &alice, mine).await.status, 200);
    let worker = Worker::start(&app, quick(None), true);
    cancelled_job(&app, &alice).await;
    deliveries_until(&app, &alice, 30, |d| d[0]["state"] == "sent").await;

    // Mallory's view is her own: none of alice's address, URL or deliveries.
    let hers = app
        .api("GET", "/api/v1/me/notifications", Some(&mallory), None)
        .await;
    assert_eq!(hers.status, 200);
    assert!(
        !hers.text.contains("alice") && !hers.text.contains("/hook"),
        "{}",
        hers.text
    );
    let d = deliveries(&app, &mallory).await;
    assert_eq!(d, json!([]), "mallory sees deliveries: {d}");
    // Her own save changes only hers; there is no route that names another user.
    let r = put(
        &app,
        &mallory,
        json!({ "email": "mallory@example.org", "on": ["failed"] }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    for path in [
        "/api/v1/users/alice/notifications",
        "/api/v1/me/notifications?user=alice",
    ] {
        let r = app.api("GET", path, Some(&mallory), None).await;
        assert!(!r.text.contains("alice@example.org"), "{path}: {}", r.text);
    }
    let a = app
        .api("GET", "/api/v1/me/notifications", Some(&alice), None)
        .await
        .json();
    assert_eq!(a["email"], "alice@example.org", "{a}");
    assert_eq!(a["webhooks"][0]["url"], receiver.url());
    assert_eq!(
        deliveries(&app, &alice).await.as_array().unwrap().len(),
        2,
        "a mail and a webhook"
    );
    worker.stop().await;
}

#[sqlx::test(migrations = false)]
async fn a_name_that_resolves_to_loopback_is_refused_at_send(pool: PgPool) {
    let receiver = Receiver::start(Vec::new()).await;
    // Even with the receiver's own address and port allowlisted, a *name* that resolves there is
    // judged by the address it resolves to when the delivery is sent.
    let (app, _admin, member) = app_with(pool, "n1", &[receiver.addr.to_string()]).await;
    assert_eq!(
        put(&app, &member, json!({ "on": ["cancelled"] }))
            .await
            .status,
        200
    );
    // The URL as a name whose DNS changed since it was saved would be: written as stored.
    let by_name = format!("http://localhost:{}/hook", receiver.addr.port());
    let user: Uuid = sqlx::query_scalar("SELECT id FROM users WHERE username = 'alice'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO notification_webhooks (user_id, position, url, format) VALUES ($1, 0, $2, 'generic')",
    )
    .bind(user)
    .bind(&by_name)
    .execute(&app.pool)
    .await
    .unwrap();
    let worker = Worker::start(&app, quick(None), true);
    cancelled_job(&app, &member).await;
    let d = deliveries_until(&app, &member, 30, |d| d[0]["state"] == "failed").await;
    let why = d[0]["last_error"].as_str().unwrap();
    assert!(why.contains("loopback"), "{why}");
    assert_eq!(
        d[0]["attempts"], 1,
        "a refused destination is not retried: {d}"
    );
    assert!(receiver.seen().is_empty(), "the request went out");
    worker.stop().await;
}

#[sqlx::test(migrations = false)]
async fn an_outbox_row_survives_kill9_between_send_and_mark_and_is_sent_again(pool: PgPool) {
    // The first request is taken in and never answered: gpuq is killed while it waits, so it
    // sent the message but never marked it. The restarted process sends it again, same key.
    let receiver = Receiver::start(vec![Answer::Hang]).await;
    let app = TestApp::new(pool).await;
    let serve = Serve::new(
        &app.pool,
        &["--notify-lease-s", "2", "--notify-retry-first-ms", "100"],
    );
    let first = serve.start("a.log").await;
    let (client, admin) = api_as_admin(serve.port).await;
    let base = serve.base();
    let policy = json_of(
        client
            .put(format!("{base}/api/v1/settings/launch-policy"))
            .header("authorization", &admin)
            .json(&json!({ "webhook_allowlist": [receiver.addr.to_string()] })),
    )
    .await;
    assert_eq!(
        policy["webhook_allowlist"][0],
        receiver.addr.to_string(),
        "{policy}"
    );
    let saved = json_of(
        client
            .put(format!("{base}/api/v1/me/notifications"))
            .header("authorization", &admin)
            .json(&json!({ "on": ["cancelled"],
                           "webhooks": [{ "url": receiver.url(), "secret": SECRET }] })),
    )
    .await;
    assert_eq!(saved["webhooks"][0]["secret_set"], true, "{saved}");
    let spec = json!({ "image": IMAGE, "command": ["true"], "min_vram_mb": 1000 });
    let job = post_job(&client, serve.port, &admin, &spec).await;
    let cancel = client
        .post(format!("{base}/api/v1/jobs/{job}/cancel"))
        .header("authorization", &admin)
        .send()
        .await
        .unwrap();
    assert!(cancel.status().is_success());
    let seen = receiver.wait_for(1, 30).await;
    first.kill9();
    let state: (String, i32) =
        sqlx::query_as("SELECT state, attempts FROM notification_outbox WHERE job_id = $1")
            .bind(job)
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(
        state,
        ("pending".to_owned(), 1),
        "the row was lost or marked"
    );

    let _second = serve.start("b.log").await;
    let again = receiver.wait_for(2, 30).await;
    assert_eq!(
        seen[0].header("idempotency-key"),
        again[1].header("idempotency-key")
    );
    assert!(verify(&again[1], SECRET));
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (state, attempts): (String, i32) =
            sqlx::query_as("SELECT state, attempts FROM notification_outbox WHERE job_id = $1")
                .bind(job)
                .fetch_one(&app.pool)
                .await
                .unwrap();
        if state == "sent" {
            assert_eq!(attempts, 2);
            break;
        }
        assert!(Instant::now() < deadline, "never marked sent: {state}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(receiver.seen().len(), 2, "sent more than twice");
}

/// The outbox rows a status change of `job` wrote: (event, channel).
async fn rows_of(pool: &PgPool, job: Uuid) -> Vec<(String, String)> {
    sqlx::query_as("SELECT event, channel FROM notification_outbox WHERE job_id = $1 ORDER BY id")
        .bind(job)
        .fetch_all(pool)
        .await
        .unwrap()
}

/// Moves a job as the lifecycle would (the trigger sees only the row's change).
async fn set(pool: &PgPool, job: Uuid, sql: &str) {
    sqlx::query(&format!("UPDATE jobs SET {sql} WHERE id = $1"))
        .bind(job)
        .execute(pool)
        .await
        .unwrap();
}

#[sqlx::test(migrations = false)]
async fn the_trigger_writes_one_row_per_place_for_exactly_the_events_asked_for(pool: PgPool) {
    let (app, _admin, member) = app_with(pool, "n1", &["127.0.0.1:9".into()]).await;
    let r = put(
        &app,
        &member,
        json!({ "email": "alice@example.org", "on": ["failed", "started_after_wait"],
                "started_after_wait_minutes": 5,
                "webhooks": [{ "url": "http://127.0.0.1:9/a" }, { "url": "http://127.0.0.1:9/b", "format": "slack" }] }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let spec = json!({ "image": IMAGE, "command": ["true"], "min_vram_mb": 1000 });

    // Started after 10 minutes of waiting (more than 5): told, to the mail and both webhooks.
    let late = app.submit_ok(&member, spec.clone()).await;
    set(
        &app.pool,
        late,
        "created_at = now() - interval '10 minutes'",
    )
    .await;
    set(&app.pool, late, "status = 'running', started_at = now()").await;
    let rows = rows_of(&app.pool, late).await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(
        rows.iter().all(|(e, _)| e == "started_after_wait"),
        "{rows:?}"
    );
    // Its success was not asked for: nothing more.
    set(&app.pool, late, "status = 'succeeded', finished_at = now()").await;
    assert_eq!(rows_of(&app.pool, late).await.len(), 3);

    // Started after a short wait: not told.
    let quick_start = app.submit_ok(&member, spec.clone()).await;
    set(
        &app.pool,
        quick_start,
        "status = 'running', started_at = now()",
    )
    .await;
    assert!(rows_of(&app.pool, quick_start).await.is_empty());
    // Stopped for VRAM overuse: a failure of its own kind, heard by who asked for `failed`.
    set(
        &app.pool,
        quick_start,
        "status = 'failed', stop_cause = 'vram_overuse', finished_at = now()",
    )
    .await;
    let rows = rows_of(&app.pool, quick_start).await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(rows.iter().all(|(e, _)| e == "vram_overuse"), "{rows:?}");
    assert_eq!(
        rows.iter().filter(|(_, c)| c == "email").count(),
        1,
        "{rows:?}"
    );

    // A cancel (not asked for) and another user's failure (no settings): nothing.
    let cancelled = cancelled_job(&app, &member).await;
    assert!(rows_of(&app.pool, cancelled).await.is_empty());
    let bob = app.bearer("bob", Role::Member).await;
    let his = app.submit_ok(&bob, spec).await;
    set(&app.pool, his, "status = 'failed', finished_at = now()").await;
    assert!(rows_of(&app.pool, his).await.is_empty());
}

#[sqlx::test(migrations = false)]
async fn a_redirect_is_a_failed_attempt_never_followed_inward(pool: PgPool) {
    // The allowlisted receiver answers every delivery with a redirect to the cloud metadata
    // address: gpuq must not follow it (that would bypass the destination check).
    let receiver = Receiver::start(vec![
        Answer::Redirect(
            "http://169.254.169.254/latest/meta-data/"
        );
        3
    ])
    .await;
    let (app, _admin, member) = app_with(pool, "n1", &[receiver.addr.to_string()]).await;
    let r = put(
        &app,
        &member,
        json!({ "on": ["cancelled"], "webhooks": [{ "url": receiver.url() }] }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let worker = Worker::start(&app, quick(None), true);
    cancelled_job(&app, &member).await;
    let d = deliveries_until(&app, &member, 30, |d| d[0]["state"] == "failed").await;
    let why = d[0]["last_error"].as_str().unwrap();
    assert!(why.contains("redirects are not followed"), "{why}");
    assert_eq!(
        receiver.seen().len(),
        3,
        "every attempt reached the receiver only"
    );
    worker.stop().await;
}
