//! Notifications end to end: a real HTTP receiver and a real SMTP sink (Debian's aiosmtpd) on
//! 127.0.0.1, started by each test; jobs ended by the real lifecycle (a failing container on a
//! fenced node, or a cancel through the API); the outbox row surviving a `kill -9` of `gpuq serve`
//! between the send and its mark. The SSRF attacks of a member's webhook URL are refused at save
//! and at send. The harness is here; the tests are in `delivery` and `attacks`.

mod attacks;
mod delivery;

use crate::support::TestApp;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use gpuq::model::Role;
use gpuq::server::notify::send::{SmtpConfig, SmtpTls};
use gpuq::server::notify::{deliver, DeliveryConfig, NotifySetup};
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
        let mut relay = std::process::Command::new("/usr/bin/python3");
        relay
            .args(["-m", "aiosmtpd", "-n", "-l", &format!("127.0.0.1:{port}")])
            .args(["-c", "aiosmtpd.handlers.Mailbox"])
            .arg(dir.path().join("mail"));
        SmtpSink::run(relay, port, dir).await
    }

    /// Starts `relay` (an aiosmtpd listening on 127.0.0.1:`port` that writes the mails it takes
    /// to the maildir `dir`/mail) and waits until it listens.
    async fn run(mut relay: std::process::Command, port: u16, dir: tempfile::TempDir) -> SmtpSink {
        let child = relay
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
            ca_pem: None,
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

/// A relay as strict as a company's (tests/fixtures/smtp-relay/relay.py): STARTTLS required
/// before anything else, AUTH (over TLS only) before a mail, its certificate for 127.0.0.1 signed
/// by a CA of its own made here with openssl.
struct StrictRelay {
    sink: SmtpSink,
    /// The CA that signed the relay's certificate (PEM).
    ca: Vec<u8>,
}

/// Runs `openssl` with `args` (split on white space) in `dir`.
fn openssl(dir: &std::path::Path, args: &str) {
    let args: Vec<&str> = args.split_whitespace().collect();
    let out = std::process::Command::new("openssl")
        .args(&args)
        .current_dir(dir)
        .output()
        .expect("openssl (scripts/deps.sh installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl StrictRelay {
    async fn start(user: &str, password: &str) -> StrictRelay {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        openssl(
            d,
            "req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=gpuq-test-relay-CA \
             -keyout ca.key -out ca.pem",
        );
        openssl(
            d,
            "req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout relay.key -out relay.csr",
        );
        std::fs::write(
            d.join("ext.cnf"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        openssl(
            d,
            "x509 -req -in relay.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
             -extfile ext.cnf -out relay.pem",
        );
        let port = crate::support::free_port();
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/smtp-relay/relay.py"
        );
        let mut relay = std::process::Command::new("/usr/bin/python3");
        relay
            .arg(script)
            .arg(port.to_string())
            .arg(d.join("mail"))
            .arg(d.join("relay.pem"))
            .arg(d.join("relay.key"))
            .args([user, password]);
        let ca = std::fs::read(d.join("ca.pem")).unwrap();
        StrictRelay {
            sink: SmtpSink::run(relay, port, dir).await,
            ca,
        }
    }

    fn config(&self, tls: SmtpTls, credentials: Option<(&str, &str)>, ca: bool) -> SmtpConfig {
        SmtpConfig {
            tls,
            credentials: credentials.map(|(u, p)| (u.to_owned(), p.to_owned())),
            ca_pem: ca.then(|| self.ca.clone()),
            ..self.sink.config()
        }
    }

    fn mails(&self) -> Vec<String> {
        self.sink.mails()
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
