//! Logs from any node: a job's log stays on the node that ran it, and another node fetches it
//! over HTTP with a grant signed by the secret the nodes share. What a member (or anyone who can
//! reach a node's port) could try against that path is refused here.

use crate::support::{
    api_as_admin, get_with, ledger_violations, post_job, wait_status, Node, Serve, TestApp,
    PASSWORD,
};
use axum::body::Body;
use axum::http::Request;
use gpuq::model::Role;
use gpuq::server::nodes::{self, Registration};
use gpuq::server::peers::{ClusterSecret, GRANT_HEADER};
use gpuq::server::runtime::LaunchMode;
use serde_json::json;
use sqlx::PgPool;
use std::time::{Duration, Instant, SystemTime};
use uuid::Uuid;

const SECRET: &str = "0123456789abcdef0123456789abcdef-test";
const RTX: &str = "NVIDIA GeForce RTX 3090";

/// Registers `node` as reachable at `url`.
async fn register_at(app: &TestApp, node: &str, url: &str) {
    let reg = Registration {
        name: node.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        advertise_url: url.to_owned(),
        runs_jobs: true,
        lost_after_s: 15,
    };
    nodes::register(&app.pool, &reg).await.unwrap();
}

fn logs_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("gpuq-test-logs-{}", Uuid::new_v4()))
}

/// Two nodes over one database: `{tag}-a` runs jobs and serves HTTP on a real port; `{tag}-b` is
/// the node users ask. Returns (node a's app, node b's app, node a's URL). Node names are the
/// test's own: containers carry their node's name, and a runner starting up takes every container
/// of its name as its own.
async fn two_nodes(pool: PgPool, b_secret: Option<&str>, tag: &str) -> (TestApp, TestApp, String) {
    let base = TestApp::with_sim_devices(pool, 1).await;
    base.sim_cards(&format!("1x24576:{RTX}"), &format!("{tag}-a"))
        .await;
    let a = base.as_node(&format!("{tag}-a"), Some(SECRET), logs_dir());
    let b = base.as_node(&format!("{tag}-b"), b_secret, logs_dir());
    let url = a.listen().await;
    register_at(&a, &format!("{tag}-a"), &url).await;
    register_at(&a, &format!("{tag}-b"), "http://127.0.0.1:9").await;
    (a, b, url)
}

/// Runs one job on node `{tag}-a` to its end; answers its id.
async fn job_on_a(a: &TestApp, tag: &str, bearer: &str, lines: usize) -> Uuid {
    let script = format!("for i in $(seq 1 {lines}); do echo line $i; done");
    let spec = json!({ "image": "gpuq-test/busybox:latest", "command": ["sh", "-c", script],
                       "min_vram_mb": 1000 });
    let id = a.submit_ok(bearer, spec).await;
    let node = Node::start(a, &format!("{tag}-a"), LaunchMode::Fenced).await;
    let v = wait_status(a, bearer, id, &["succeeded", "failed"], 60).await;
    assert_eq!(v["status"], "succeeded", "{v}");
    assert_eq!(v["node"], format!("{tag}-a"));
    node.stop().await;
    id
}

fn lines(n: usize) -> String {
    (1..=n).map(|i| format!("line {i}\n")).collect()
}

#[sqlx::test(migrations = false)]
async fn a_log_is_read_through_another_node_and_a_lost_nodes_log_says_so(pool: PgPool) {
    let (a, b, _) = two_nodes(pool, Some(SECRET), "fwd").await;
    let (admin, alice) = a.admin_and_member("alice").await;
    let bob = a.bearer("bob", Role::Member).await;
    let id = job_on_a(&a, "fwd", &alice, 300).await;
    // node-b holds no file of it, yet its owner reads it there, whole, by tail and by follow.
    assert!(!gpuq::server::runner::logs::log_path(&b.logs_dir, id).exists());
    let whole = b.get(&format!("/api/v1/jobs/{id}/logs"), &alice).await;
    assert_eq!(whole.status, 200, "{}", whole.text);
    assert_eq!(whole.text, lines(300));
    let tail = b
        .get(&format!("/api/v1/jobs/{id}/logs?tail=2"), &alice)
        .await;
    assert_eq!(tail.text, "line 299\nline 300\n");
    let followed = b
        .get(&format!("/api/v1/jobs/{id}/logs?follow=true"), &admin)
        .await;
    assert_eq!(followed.status, 200, "{}", followed.text);
    assert_eq!(followed.text, lines(300), "a follow of an ended job ends");
    // The job page's server function goes the same way.
    let cookie = b.login("alice", PASSWORD).await;
    let form = format!("id={id}&tail=3");
    let page = b.server_fn("job_log", &form, Some(&cookie), &[]).await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert_eq!(page.json(), json!("line 298\nline 299\nline 300\n"));
    // Another member is refused by node-b itself: nothing is forwarded for them.
    let peek = b.get(&format!("/api/v1/jobs/{id}/logs"), &bob).await;
    assert_eq!(peek.status, 403, "{}", peek.text);
    // node-a goes silent: its log is not answered empty, it is said to be out of reach.
    sqlx::query("UPDATE nodes SET heartbeat_at = now() - interval '1 minute' WHERE name = 'fwd-a'")
        .execute(&a.pool)
        .await
        .unwrap();
    let lost = b.get(&format!("/api/v1/jobs/{id}/logs"), &alice).await;
    assert_eq!(lost.status, 503, "{}", lost.text);
    let msg = lost.json()["error"].as_str().unwrap().to_owned();
    assert!(
        msg.contains("node `fwd-a`, which is lost (no heartbeat for ")
            && msg.contains("once the node is back"),
        "{msg}"
    );
    let follow = b
        .get(&format!("/api/v1/jobs/{id}/logs?follow=true"), &alice)
        .await;
    assert_eq!(follow.status, 503, "{}", follow.text);
}

#[sqlx::test(migrations = false)]
async fn without_a_shared_secret_a_node_says_where_the_log_is_and_how_to_read_it(pool: PgPool) {
    let (a, b, url) = two_nodes(pool, None, "bare").await;
    let (_, alice) = a.admin_and_member("alice").await;
    let id = job_on_a(&a, "bare", &alice, 3).await;
    let r = b.get(&format!("/api/v1/jobs/{id}/logs"), &alice).await;
    assert_eq!(r.status, 503, "{}", r.text);
    let msg = r.json()["error"].as_str().unwrap().to_owned();
    assert!(
        msg.contains("on node `bare-a`") && msg.contains("--cluster-secret") && msg.contains(&url),
        "{msg}"
    );
    // node-a itself still reads it.
    assert_eq!(
        a.get(&format!("/api/v1/jobs/{id}/logs"), &alice).await.text,
        lines(3)
    );
}

/// `GET /internal/v1/jobs/{id}/logs` on `app` with these headers.
async fn internal(app: &TestApp, id: Uuid, headers: &[(&str, String)]) -> (u16, String) {
    let mut req = Request::builder().uri(format!("/internal/v1/jobs/{id}/logs"));
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    let r = app.send(req.body(Body::empty()).unwrap()).await;
    (r.status.as_u16(), r.text)
}

#[sqlx::test(migrations = false)]
async fn the_internal_log_route_takes_only_a_fresh_grant_for_that_very_job(pool: PgPool) {
    let (a, b, _) = two_nodes(pool, Some(SECRET), "grant").await;
    let (admin, alice) = a.admin_and_member("alice").await;
    let id = job_on_a(&a, "grant", &alice, 3).await;
    let alice_id: Uuid = a
        .scalar("SELECT id FROM users WHERE username = 'alice'")
        .await;
    let now = SystemTime::now();
    let secret = ClusterSecret::new(SECRET).unwrap();
    let good = secret.grant(id, alice_id, now);
    let (status, text) = internal(&a, id, &[(GRANT_HEADER, good.clone())]).await;
    assert_eq!((status, text.as_str()), (200, lines(3).as_str()));
    let other_job = Uuid::new_v4();
    let other_secret = ClusterSecret::new(&"z".repeat(40)).unwrap();
    let stale = now - std::time::Duration::from_secs(gpuq::server::peers::GRANT_TTL_S + 5);
    let refused = [
        ("no grant", vec![]),
        (
            "a user's bearer token",
            vec![("authorization", admin.clone())],
        ),
        ("a malformed grant", vec![(GRANT_HEADER, "a.b.c".into())]),
        (
            "another job's grant",
            vec![(GRANT_HEADER, secret.grant(other_job, alice_id, now))],
        ),
        (
            "another secret's grant",
            vec![(GRANT_HEADER, other_secret.grant(id, alice_id, now))],
        ),
        (
            "an expired grant",
            vec![(GRANT_HEADER, secret.grant(id, alice_id, stale))],
        ),
    ];
    for (what, headers) in refused {
        let (status, text) = internal(&a, id, &headers).await;
        assert_eq!(status, 401, "{what}: {text}");
        assert!(!text.contains("line 1"), "{what} leaked the log: {text}");
    }
    // A good grant for a job of another node is not answered with this node's (absent) file.
    let (status, text) = internal(&b, id, &[(GRANT_HEADER, good.clone())]).await;
    assert_eq!(status, 404, "{text}");
    assert!(text.contains("did not run on node `grant-b`"), "{text}");
    // A node given no secret answers no grant at all.
    let bare = a.as_node("grant-a", None, a.logs_dir.clone());
    let (status, text) = internal(&bare, id, &[(GRANT_HEADER, good)]).await;
    assert_eq!(status, 404, "{text}");
    assert!(text.contains("no --cluster-secret"), "{text}");
}

#[sqlx::test(migrations = false)]
async fn a_forwarded_read_carries_a_grant_and_never_the_users_credential(pool: PgPool) {
    let (a, b, _) = two_nodes(pool, Some(SECRET), "spy").await;
    let (_, alice) = a.admin_and_member("alice").await;
    let id = job_on_a(&a, "spy", &alice, 1).await;
    // node-a's advertised address is now a listener that records what it is sent.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    register_at(&a, "spy-a", &url).await;
    let seen = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut conn, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 16 * 1024];
        let n = conn.read(&mut buf).await.unwrap();
        let reply = "HTTP/1.1 200 OK\r\ncontent-length: 8\r\n\r\nforward\n";
        conn.write_all(reply.as_bytes()).await.unwrap();
        String::from_utf8_lossy(&buf[..n]).to_lowercase()
    });
    let r = b
        .get(&format!("/api/v1/jobs/{id}/logs?tail=5"), &alice)
        .await;
    assert_eq!((r.status.as_u16(), r.text.as_str()), (200, "forward\n"));
    let request = seen.await.unwrap();
    assert!(
        request.starts_with(&format!("get /internal/v1/jobs/{id}/logs?")),
        "{request}"
    );
    assert!(request.contains("tail=5"), "{request}");
    assert!(request.contains(&format!("{GRANT_HEADER}: ")), "{request}");
    let token = alice.trim_start_matches("Bearer ").to_lowercase();
    assert!(!request.contains("authorization"), "{request}");
    assert!(!request.contains("cookie"), "{request}");
    assert!(
        !request.contains(&token),
        "the user's token went to another host: {request}"
    );
    assert!(
        !request.contains(&SECRET.to_lowercase()),
        "the secret itself travelled: {request}"
    );
}

/// One of three `gpuq serve` processes sharing the test's database and the cluster secret, each
/// with two simulated cards of its own; `agent` serves no UI.
fn cluster_node(pool: &PgPool, name: &str, agent: bool) -> Serve {
    let mut extra = vec![
        "--gpu-source",
        "sim",
        "--sim-gpus",
        "2x24576:NVIDIA GeForce RTX 3090",
        "--cluster-secret",
        SECRET,
        "--stop-grace-s",
        "1",
    ];
    if agent {
        extra.extend(["--ui", "false"]);
    }
    Serve::runner(pool, name, &extra)
}

/// Every job's (status, node), as the database has them.
async fn placements(pool: &PgPool, ids: &[Uuid]) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    for id in ids {
        let row: (String, Option<String>) =
            sqlx::query_as("SELECT status::text, node FROM jobs WHERE id = $1")
                .bind(id)
                .fetch_one(pool)
                .await
                .unwrap();
        out.push(row);
    }
    out
}

/// `GET path` of a running node as `bearer`: (status, body).
async fn read(client: &reqwest::Client, base: &str, path: &str, bearer: &str) -> (u16, String) {
    let r = get_with(client, &format!("{base}{path}"), bearer).await;
    (r.status().as_u16(), r.text().await.unwrap())
}

#[sqlx::test(migrations = false)]
async fn three_nodes_spread_jobs_read_each_others_logs_and_survive_a_kill9(pool: PgPool) {
    let app = TestApp::with_sim_devices(pool, 2).await;
    let (a, b, c) = (
        cluster_node(&app.pool, "trio-a", false),
        cluster_node(&app.pool, "trio-b", false),
        cluster_node(&app.pool, "trio-c", true),
    );
    let _a = a.start("a.log").await;
    let _b = b.start("b.log").await;
    let c_proc = c.start("c1.log").await;
    let (client, admin) = api_as_admin(a.port).await;
    // The agent serves probes and /internal only: no pages, no API, no first admin of its own.
    let (status, text) = read(&client, &c.base(), "/api/v1/jobs", &admin).await;
    assert_eq!(status, 404, "{text}");
    assert!(text.contains("agent"), "{text}");
    assert_eq!(read(&client, &c.base(), "/", "").await.0, 404);
    assert!(!c.dir.path().join("bootstrap-admin-password").exists());
    // Six one-card jobs on six cards: two land on each node.
    let script = "for i in $(seq 1 80); do echo line $i; sleep 0.5; done";
    let spec = json!({ "image": "gpuq-test/busybox:latest", "command": ["sh", "-c", script],
                       "min_vram_mb": 20000 });
    let mut ids = Vec::new();
    for _ in 0..6 {
        ids.push(post_job(&client, a.port, &admin, &spec).await);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let placed = loop {
        let placed = placements(&app.pool, &ids).await;
        if placed.iter().all(|(s, _)| s == "running") {
            break placed;
        }
        assert!(Instant::now() < deadline, "not all running: {placed:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let on = |node: &str| -> Vec<Uuid> {
        ids.iter()
            .zip(&placed)
            .filter(|(_, (_, n))| n.as_deref() == Some(node))
            .map(|(id, _)| *id)
            .collect()
    };
    for node in ["trio-a", "trio-b", "trio-c"] {
        assert_eq!(on(node).len(), 2, "{node}: {placed:?}");
    }
    // A job on the agent, read through trio-a; a job on trio-a followed through trio-b to its end.
    let on_c = on("trio-c");
    let path = format!("/api/v1/jobs/{}/logs?tail=1", on_c[0]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, text) = read(&client, &a.base(), &path, &admin).await;
        assert_eq!(status, 200, "{text}");
        if text.starts_with("line ") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no line of trio-c's job via trio-a"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let followed = {
        let url = format!(
            "{}/api/v1/jobs/{}/logs?follow=true",
            b.base(),
            on("trio-a")[0]
        );
        let req = client.get(url).header("authorization", admin.clone());
        tokio::spawn(async move { req.send().await.unwrap().text().await.unwrap() })
    };
    // kill -9 of the agent: within 15 s (the default lost time) its cards are offered no more.
    c_proc.kill9();
    let killed = Instant::now();
    loop {
        let states: Vec<String> =
            sqlx::query_scalar("SELECT state FROM nodes WHERE name = 'trio-c'")
                .fetch_all(&app.pool)
                .await
                .unwrap();
        let gpus: serde_json::Value =
            get_with(&client, &format!("{}/api/v1/gpus", b.base()), &admin)
                .await
                .json()
                .await
                .unwrap();
        let c_cards: Vec<&str> = gpus["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|g| g["node"] == "trio-c")
            .map(|g| g["state"].as_str().unwrap())
            .collect();
        if c_cards == ["lost", "lost"] {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(15),
            "trio-c's cards still offered {:?} after the kill: {c_cards:?} {states:?}",
            killed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!("trio-c withdrawn {:?} after kill -9", killed.elapsed());
    // Its log is said to be out of reach, not answered empty.
    let (status, text) = read(&client, &a.base(), &path, &admin).await;
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("node `trio-c`, which is lost"), "{text}");
    // Free trio-a's and trio-b's cards; new jobs go there, never to trio-c, whose jobs stay
    // running (node lost) and are started nowhere else.
    for id in on("trio-a")[1..].iter().chain(&on("trio-b")) {
        let url = format!("{}/api/v1/jobs/{id}/cancel", a.base());
        let r = client
            .post(url)
            .header("authorization", admin.clone())
            .send()
            .await
            .unwrap();
        if !r.status().is_success() {
            let (_, job) = read(&client, &a.base(), &format!("/api/v1/jobs/{id}"), &admin).await;
            panic!("{}: {job}", r.text().await.unwrap());
        }
    }
    let short = json!({ "image": "gpuq-test/busybox:latest", "command": ["true"],
                        "min_vram_mb": 20000 });
    let mut later = Vec::new();
    for _ in 0..3 {
        later.push(post_job(&client, b.port, &admin, &short).await);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let done = placements(&app.pool, &later).await;
        if done.iter().all(|(s, _)| s == "succeeded") {
            assert!(
                done.iter().all(|(_, n)| n.as_deref() != Some("trio-c")),
                "{done:?}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "later jobs: {done:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let job_page: serde_json::Value = get_with(
        &client,
        &format!("{}/api/v1/jobs/{}", a.base(), on_c[0]),
        &admin,
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(job_page["status"], "running", "{job_page}");
    assert_eq!(job_page["node_lost"], true, "{job_page}");
    // Restarted, trio-c re-adopts its two jobs; they end succeeded with their whole logs, read
    // through trio-a.
    let _c = c.start("c2.log").await;
    for id in on_c.iter() {
        let v = wait_status(&app, &admin, *id, &["succeeded", "failed"], 90).await;
        assert_eq!(v["status"], "succeeded", "{v}");
        let (status, text) = read(
            &client,
            &a.base(),
            &format!("/api/v1/jobs/{id}/logs"),
            &admin,
        )
        .await;
        assert_eq!(status, 200, "{text}");
        let want: Vec<String> = (1..=80).map(|i| format!("line {i}")).collect();
        assert_eq!(text.lines().collect::<Vec<_>>(), want, "job {id}");
    }
    let readopted: i64 =
        sqlx::query_scalar("SELECT count(*) FROM job_events WHERE kind = 'readopted'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(readopted, 2);
    // Every job was started once: one attempt each, one container each.
    let attempts: Vec<i32> = sqlx::query_scalar("SELECT attempt FROM jobs")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert!(attempts.iter().all(|a| *a == 1), "{attempts:?}");
    let started: i64 = sqlx::query_scalar("SELECT count(*) FROM job_events WHERE kind = 'started'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(started, attempts.len() as i64);
    let followed = followed.await.unwrap();
    let want: Vec<String> = (1..=80).map(|i| format!("line {i}")).collect();
    assert_eq!(
        followed.lines().collect::<Vec<_>>(),
        want,
        "the follow through trio-b"
    );
    assert_eq!(ledger_violations(&app.pool).await, Vec::<String>::new());
}
