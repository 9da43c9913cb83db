//! Interactive sessions end to end: real Postgres, real dockerd, the echo server of the image
//! `gpuq-test/jupyter:latest` (tests/fixtures/jupyter/echo.py, which logs every request's
//! headers), and the session proxy served on a real listener.

use crate::support::docker::docker_cli;
use crate::support::isolation::{container_of, log, wait_container_removed};
use crate::support::{cancel_and_wait, wait_status, Node, TestApp};
use gpuq::model::Role;
use gpuq::server::http::listen::{self, ListenLimits};
use gpuq::server::http::HttpOptions;
use gpuq::server::runtime::{ensure_sim_devices, LaunchMode};
use gpuq::server::sessions::{idle, SessionOrigin, Sessions};
use gpuq::server::AppState;
use serde_json::{json, Value};
use sqlx::PgPool;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use uuid::Uuid;

const IMAGE: &str = "gpuq-test/jupyter:latest";

fn echo_session() -> Value {
    json!({ "image": IMAGE, "command": ["python3", "/opt/gpuq/echo.py"], "port": 8888,
            "min_vram_mb": 1000 })
}

/// An app that serves sessions on a listener of its own (no UI URL: a visitor without the
/// session's cookie is refused, not redirected), its sessions, and the listener's base URL.
async fn app_with_sessions(pool: PgPool) -> (TestApp, Sessions, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let sessions = Sessions::new(SessionOrigin::Path { base: base.clone() }, None);
    let mut ctx = None;
    let s = sessions.clone();
    let app = TestApp::custom(pool, HttpOptions::default(), |c| {
        c.sessions = Some(s);
        ctx = Some(c.clone());
    })
    .await;
    let state = AppState::new(ctx.unwrap(), "target/site");
    let router = gpuq::server::http::sessions::router(&state).unwrap();
    tokio::spawn(listen::serve(
        listener,
        router,
        ListenLimits::default(),
        std::future::pending(),
    ));
    (app, sessions, base)
}

async fn setup(pool: PgPool, node: &str) -> (TestApp, Sessions, String, String, Node) {
    let (app, sessions, base) = app_with_sessions(pool).await;
    ensure_sim_devices(2).unwrap();
    app.sim_cards("2x24576:NVIDIA GeForce RTX 3090", node).await;
    let owner = app.bearer("alice", Role::Member).await;
    let node = Node::start(&app, node, LaunchMode::Fenced).await;
    (app, sessions, base, owner, node)
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Waits until a running session's view names its URL.
async fn session_url(app: &TestApp, owner: &str, id: Uuid) -> String {
    wait_status(app, owner, id, &["running"], 60).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = app.job(owner, id).await;
        if let Some(url) = v["session_url"].as_str() {
            return url.to_owned();
        }
        assert!(Instant::now() < deadline, "no session_url: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The owner's way in: the 303 from gpuq, then the code traded for the session's cookie.
async fn cookie_for(app: &TestApp, who: &str, id: Uuid) -> String {
    let r = app.get(&format!("/api/v1/jobs/{id}/session"), who).await;
    assert_eq!(r.status, 303, "{}", r.text);
    let to = r.headers["location"].to_str().unwrap().to_owned();
    assert!(to.contains("gpuq_code="), "{to}");
    let r = client().get(&to).send().await.unwrap();
    assert_eq!(r.status(), 303);
    let set = r.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(set.contains("HttpOnly"), "{set}");
    assert!(set.contains(&format!("Path=/s/{id}/")), "{set}");
    let cookie = set.split(';').next().unwrap().to_owned();
    // The container runs before its app listens: until it does, the proxy answers 503 with a
    // page that reloads itself (a browser lands in the app once it is up).
    let root = to.split('?').next().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = client()
            .get(&root)
            .header("cookie", cookie.clone())
            .send()
            .await
            .unwrap();
        if r.status() != 503 {
            break;
        }
        assert_eq!(r.headers()["retry-after"], "2");
        assert!(r.text().await.unwrap().contains("http-equiv=\"refresh\""));
        assert!(
            Instant::now() < deadline,
            "the session's app never answered"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cookie
}

/// Ends sessions as their owner and waits until the runner removed their containers: the tests
/// leave the host as they found it.
async fn end(app: &TestApp, owner: &str, ids: &[Uuid]) {
    for id in ids {
        let r = app.post(&format!("/api/v1/jobs/{id}/cancel"), owner).await;
        assert!(r.status.is_success(), "{}", r.text);
    }
    for id in ids {
        wait_status(app, owner, *id, &["cancelled"], 60).await;
        wait_container_removed(app, *id).await;
    }
}

#[sqlx::test(migrations = false)]
async fn only_the_owner_gets_through_and_no_gpuq_credential_reaches_the_container(pool: PgPool) {
    let (app, _sessions, base, owner, _node) = setup(pool, "sess1").await;
    let other = app.bearer("bob", Role::Member).await;
    let admin = app.bearer("root", Role::Admin).await;
    let id = app.submit_ok(&owner, echo_session()).await;
    let url = session_url(&app, &owner, id).await;
    assert_eq!(url, format!("{base}/s/{id}/"));
    // The port is reached on the job network only: nothing is published on the host, and the
    // container is on no network but the jobs' own.
    let container = container_of(&app, id)
        .await
        .expect("the session's container");
    let published = docker_cli(&[
        "inspect",
        "-f",
        "{{json .HostConfig.PortBindings}} {{json .NetworkSettings.Ports}} {{.HostConfig.PublishAllPorts}}",
        &container,
    ]);
    assert!(
        matches!(
            published.as_str(),
            "{} {} false" | "null {} false" | "{} null false" | "null null false"
        ),
        "{published}"
    );
    let networks = docker_cli(&[
        "inspect",
        "-f",
        "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}",
        &container,
    ]);
    let networks: Vec<&str> = networks.split_whitespace().collect();
    assert_eq!(networks, [gpuq::server::runtime::JOB_NETWORK]);

    // Another member, and an admin while the policy says no: 403 from gpuq, and nothing without
    // a cookie gets past the session origin either.
    for who in [&other, &admin] {
        let r = app.get(&format!("/api/v1/jobs/{id}/session"), who).await;
        assert_eq!(r.status, 403, "{}", r.text);
    }
    let r = client()
        .get(format!("{url}stranger"))
        .header("cookie", "gpuq_proxy=forged")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);

    // The owner: with gpuq's own cookie and a bearer token riding along, as a browser on the same
    // host would send them.
    let cookie = cookie_for(&app, &owner, id).await;
    let r = client()
        .get(format!("{url}hello?x=1"))
        .header(
            "cookie",
            format!("gpuq_session=ui-secret; {cookie}; _xsrf=app-cookie"),
        )
        .header("authorization", "Bearer gpuq_token_secret")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.text().await.unwrap(),
        format!("echo GET /s/{id}/hello?x=1")
    );
    // A Set-Cookie of a gpuq name never comes back.
    let r = client()
        .get(format!("{url}set-cookie"))
        .header("cookie", cookie.clone())
        .send()
        .await
        .unwrap();
    let set: Vec<_> = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    assert_eq!(set, vec!["app=1; Path=/".to_owned()]);

    let seen = log(&app, &owner, id).await;
    assert!(seen.contains("/hello?x=1"), "{seen}");
    assert!(
        seen.contains("app-cookie"),
        "the app's own cookie passes: {seen}"
    );
    assert!(
        !seen.contains("ui-secret"),
        "gpuq's cookie reached the container: {seen}"
    );
    assert!(!seen.contains("gpuq_proxy"), "{seen}");
    assert!(!seen.contains("gpuq_token_secret"), "{seen}");
    assert!(
        !seen.contains("stranger"),
        "a refused request reached the container: {seen}"
    );

    // An admin gets in once the policy allows it.
    app.set_policy(&admin, json!({ "admins_open_sessions": true }))
        .await;
    let r = app.get(&format!("/api/v1/jobs/{id}/session"), &admin).await;
    assert_eq!(r.status, 303, "{}", r.text);

    // The session ends: its cookie opens nothing any more.
    cancel_and_wait(&app, &owner, id).await;
    // An admitted cookie is trusted for up to two seconds without asking the database again.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = client()
            .get(format!("{url}after"))
            .header("cookie", cookie.clone())
            .send()
            .await
            .unwrap();
        if r.status() == 410 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still {} after the end",
            r.status()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[sqlx::test(migrations = false)]
async fn codes_are_single_use_and_cookies_open_only_their_job(pool: PgPool) {
    let (app, _sessions, _base, owner, _node) = setup(pool, "sess2").await;
    let a = app.submit_ok(&owner, echo_session()).await;
    let b = app.submit_ok(&owner, echo_session()).await;
    let url_a = session_url(&app, &owner, a).await;
    let url_b = session_url(&app, &owner, b).await;
    let r = app.get(&format!("/api/v1/jobs/{a}/session"), &owner).await;
    let to = r.headers["location"].to_str().unwrap().to_owned();
    assert_eq!(client().get(&to).send().await.unwrap().status(), 303);
    assert_eq!(client().get(&to).send().await.unwrap().status(), 403);
    // A's code on B's path: refused, and used up.
    let r = app.get(&format!("/api/v1/jobs/{a}/session"), &owner).await;
    let to = r.headers["location"].to_str().unwrap().to_owned();
    let code = to.split("gpuq_code=").nth(1).unwrap();
    let r = client()
        .get(format!("{url_b}?gpuq_code={code}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    // A's cookie on B's path opens nothing.
    let cookie_a = cookie_for(&app, &owner, a).await;
    let r = client()
        .get(format!("{url_b}x"))
        .header("cookie", cookie_a.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = client()
        .get(format!("{url_a}x"))
        .header("cookie", cookie_a)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    end(&app, &owner, &[a, b]).await;
}

/// A minimal WebSocket client: the upgrade, one masked text frame, its echo.
async fn websocket_echo(base: &str, path: &str, cookie: &str, message: &str) -> String {
    let host = base.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(host).await.unwrap();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
         Cookie: {cookie}\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        s.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let mask = [1u8, 2, 3, 4];
    let mut frame = vec![0x81, 0x80 | message.len() as u8];
    frame.extend_from_slice(&mask);
    frame.extend(message.bytes().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    s.write_all(&frame).await.unwrap();
    let mut h = [0u8; 2];
    s.read_exact(&mut h).await.unwrap();
    let mut body = vec![0u8; (h[1] & 0x7f) as usize];
    s.read_exact(&mut body).await.unwrap();
    String::from_utf8(body).unwrap()
}

#[sqlx::test(migrations = false)]
async fn websockets_pass_through_for_the_owner_only(pool: PgPool) {
    let (app, _sessions, base, owner, _node) = setup(pool, "sess3").await;
    let id = app.submit_ok(&owner, echo_session()).await;
    session_url(&app, &owner, id).await;
    let cookie = cookie_for(&app, &owner, id).await;
    let echoed = websocket_echo(&base, &format!("/s/{id}/ws"), &cookie, "ping through").await;
    assert_eq!(echoed, "ping through");
    end(&app, &owner, &[id]).await;
}

#[sqlx::test(migrations = false)]
async fn sessions_are_capped_per_user_and_arrays_cannot_be_sessions(pool: PgPool) {
    let (app, _sessions, _base) = app_with_sessions(pool).await;
    app.sim_cards("1x24576:NVIDIA GeForce RTX 3090", "nowhere")
        .await;
    let admin = app.bearer("root", Role::Admin).await;
    let owner = app.bearer("alice", Role::Member).await;
    app.set_policy(&admin, json!({ "max_sessions_per_user": 1 }))
        .await;
    app.submit_ok(&owner, echo_session()).await;
    let r = app.submit(&owner, echo_session()).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["field"], "port");
    // A batch job is not capped by it.
    let mut batch = echo_session();
    batch.as_object_mut().unwrap().remove("port");
    app.submit_ok(&owner, batch).await;
    // An array of sessions would pass the cap at once.
    let mut array = echo_session();
    array["array"] = json!("0-3");
    let r = app.submit(&owner, array).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["field"], "port");
    for bad in [json!(0), json!(65536), json!("8888"), json!(-1)] {
        let mut s = echo_session();
        s["port"] = bad.clone();
        let r = app.submit(&owner, s).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.text);
        assert_eq!(r.json()["field"], "port");
    }
}

#[sqlx::test(migrations = false)]
async fn an_idle_session_is_warned_then_stopped(pool: PgPool) {
    let (app, sessions, _base, owner, _node) = setup(pool, "sess4").await;
    let admin = app.bearer("root", Role::Admin).await;
    // 0.05 min = 3 s.
    app.set_policy(&admin, json!({ "session_idle_min": 0.05 }))
        .await;
    let id = app.submit_ok(&owner, echo_session()).await;
    session_url(&app, &owner, id).await;
    let now = chrono::Utc::now();
    // Traffic now keeps it alive now.
    sessions.saw(id);
    let r = idle::round(&app.pool, Some(&sessions), now).await.unwrap();
    assert_eq!(r, idle::Round::default());
    // Long past the window: warned first, never stopped in the same round.
    let later = now + chrono::TimeDelta::seconds(60);
    let r = idle::round(&app.pool, Some(&sessions), later)
        .await
        .unwrap();
    assert_eq!((r.warned, r.stopped), (1, 0));
    let r = idle::round(&app.pool, Some(&sessions), later)
        .await
        .unwrap();
    assert_eq!((r.warned, r.stopped), (0, 1));
    let v = wait_status(&app, &owner, id, &["cancelled", "failed"], 60).await;
    assert!(
        v["status_reason"].as_str().unwrap().starts_with("idle"),
        "{v}"
    );
    assert_eq!(v["stop_cause"], "session_idle");
    let events = app.get(&format!("/api/v1/jobs/{id}/events"), &owner).await;
    let kinds: Vec<String> = events
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect();
    let warn = kinds.iter().position(|k| k == "session_idle_warning");
    let stop = kinds.iter().position(|k| k == "session_idle_stop");
    assert!(warn.is_some() && stop.is_some() && warn < stop, "{kinds:?}");
}
