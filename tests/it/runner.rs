//! Isolation end to end: real Postgres, real dockerd, simulated cards fenced through device nodes.

use crate::support::docker::docker_cli;
use crate::support::isolation::{container_of, event_kinds};
use crate::support::{api_as_admin, get_with, post_job, wait_status, Node, Serve, TestApp};
use gpuq::model::Role;
use gpuq::server::runtime::{ensure_sim_devices, Docker, LaunchMode};
use serde_json::{json, Value};
use sqlx::PgPool;
use std::time::{Duration, Instant};

const IMAGE: &str = "gpuq-test/busybox:latest";

fn sh(script: &str, extra: Value) -> Value {
    let mut spec = json!({ "image": IMAGE, "command": ["sh", "-c", script], "min_vram_mb": 1000 });
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    spec
}

async fn setup(pool: PgPool, node: &str, cards: usize) -> (TestApp, String) {
    let app = TestApp::new(pool).await;
    ensure_sim_devices(cards).unwrap();
    app.sim_cards(&format!("{cards}x24576:NVIDIA GeForce RTX 3090"), node)
        .await;
    let member = app.bearer("alice", Role::Member).await;
    (app, member)
}

/// [`setup`], then a fenced node of that name.
async fn fenced(pool: PgPool, node: &str, cards: usize) -> (TestApp, String, Node) {
    let (app, member) = setup(pool, node, cards).await;
    let node = Node::start(&app, node, LaunchMode::Fenced).await;
    (app, member, node)
}

async fn logs(app: &TestApp, bearer: &str, id: uuid::Uuid, query: &str) -> String {
    let r = app
        .get(&format!("/api/v1/jobs/{id}/logs{query}"), bearer)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.text
}

async fn reserved(app: &TestApp) -> i64 {
    app.scalar("SELECT coalesce(sum(reserved_mib), 0)::bigint FROM gpus")
        .await
}

#[sqlx::test(migrations = false)]
async fn jobs_run_log_exit_and_free_their_cards(pool: PgPool) {
    let (app, member, node) = fenced(pool, "r1", 2).await;
    let ok = app
        .submit_ok(&member, sh("echo one; echo two >&2; echo three", json!({})))
        .await;
    let bad = app
        .submit_ok(&member, sh("echo failing; exit 3", json!({})))
        .await;
    let v = wait_status(&app, &member, ok, &["succeeded", "failed"], 60).await;
    assert_eq!(v["status"], "succeeded", "{v}");
    assert_eq!(v["exit_code"], 0);
    let times: Vec<chrono::DateTime<chrono::Utc>> = [
        "created_at",
        "admitted_at",
        "started_at",
        "finished_at",
        "released_at",
    ]
    .iter()
    .map(|k| {
        v[k].as_str()
            .unwrap_or_else(|| panic!("{k} missing: {v}"))
            .parse()
            .unwrap()
    })
    .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    let text = logs(&app, &member, ok, "").await;
    assert_eq!(
        text.lines()
            .filter(|l| *l == "one" || *l == "three")
            .count(),
        2,
        "{text}"
    );
    assert!(text.contains("two"), "stderr is kept: {text}");
    assert_eq!(logs(&app, &member, ok, "?tail=1").await.lines().count(), 1);
    let kinds = event_kinds(&app, ok).await;
    for k in [
        "submitted",
        "admitted",
        "starting",
        "fence_verified",
        "start_issued",
        "started",
        "succeeded",
        "released",
    ] {
        assert!(kinds.contains(&k.to_owned()), "{k} missing from {kinds:?}");
    }
    let v = wait_status(&app, &member, bad, &["succeeded", "failed"], 60).await;
    assert_eq!(v["status"], "failed");
    assert_eq!(v["exit_code"], 3);
    assert!(v["status_reason"].as_str().unwrap().contains("code 3"));
    assert_eq!(reserved(&app).await, 0, "cards are free again");
    // Others' logs are private to members; managers may read them.
    let bob = app.bearer("bob", Role::Member).await;
    let r = app.get(&format!("/api/v1/jobs/{ok}/logs"), &bob).await;
    assert_eq!(r.status, 403);
    let mia = app.bearer("mia", Role::Manager).await;
    assert!(logs(&app, &mia, ok, "").await.contains("three"));
    // The containers were removed once their logs were kept.
    let docker = Docker::connect().await.unwrap();
    let left: Vec<_> = docker.list_managed(Some("r1")).await.unwrap();
    assert!(left.is_empty(), "{left:?}");
    node.stop().await;
}

#[sqlx::test(migrations = false)]
async fn deadlines_and_cancellation_stop_running_jobs(pool: PgPool) {
    let (app, member, node) = fenced(pool, "r2", 2).await;
    let spec = sh("echo started; sleep 60", json!({ "timeout_s": 2 }));
    let slow = app.submit_ok(&member, spec).await;
    let spec = sh("trap 'exit 0' TERM; echo up; sleep 60 & wait", json!({}));
    let cancel_me = app.submit_ok(&member, spec).await;
    wait_status(&app, &member, cancel_me, &["running"], 30).await;
    let c = app
        .post(&format!("/api/v1/jobs/{cancel_me}/cancel"), &member)
        .await;
    assert_eq!(c.status, 200, "{}", c.text);
    let started = Instant::now();
    let v = wait_status(&app, &member, cancel_me, &["cancelled"], 30).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "cancelled within the grace period"
    );
    assert!(v["finished_at"].is_string());
    assert_eq!(v["stop_cause"], "owner", "its owner stopped it: {v}");
    assert_eq!(v["status_reason"], "cancelled while running", "{v}");
    let v = wait_status(&app, &member, slow, &["timed_out"], 30).await;
    assert_eq!(v["stop_cause"], "timeout", "{v}");
    assert!(
        v["status_reason"].as_str().unwrap().contains("deadline"),
        "{v}"
    );
    assert!(logs(&app, &member, slow, "").await.contains("started"));
    assert_eq!(reserved(&app).await, 0);
    node.stop().await;
}

#[sqlx::test(migrations = false)]
async fn each_job_sees_exactly_its_own_card(pool: PgPool) {
    let (app, member, node) = fenced(pool, "r3", 3).await;
    let probe = "ls /dev | grep gpuq-sim; echo \"NV=$NVIDIA_VISIBLE_DEVICES\"; sleep 1";
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(
            app.submit_ok(&member, sh(probe, json!({ "min_vram_mb": 20000 })))
                .await,
        );
    }
    for id in ids {
        let v = wait_status(&app, &member, id, &["succeeded", "failed"], 60).await;
        assert_eq!(v["status"], "succeeded", "{v}");
        let card = &v["assigned_gpus"][0];
        let text = logs(&app, &member, id, "").await;
        let devices: Vec<&str> = text.lines().filter(|l| l.starts_with("gpuq-sim")).collect();
        assert_eq!(devices, [format!("gpuq-sim{}", card["index"])], "{text}");
        assert!(
            text.contains(&format!("NV={}", card["uuid"].as_str().unwrap())),
            "{text}"
        );
    }
    node.stop().await;
}

#[sqlx::test(migrations = false)]
async fn launch_problems_fail_the_job_with_a_reason(pool: PgPool) {
    let (app, member, node) = fenced(pool, "r4", 1).await;
    // Local images only: an image that is not on the node fails at once instead of being pulled
    // (pulling is tests/it/pull.rs).
    let admin = app.bearer("root", Role::Admin).await;
    app.set_policy(&admin, json!({ "pull": "never" })).await;
    let spec = json!({ "image": "gpuq-test/not-here:1", "command": ["true"], "min_vram_mb": 1000 });
    let missing = app.submit_ok(&member, spec).await;
    let v = wait_status(&app, &member, missing, &["failed"], 30).await;
    assert!(
        v["status_reason"].as_str().unwrap().contains("not present"),
        "{v}"
    );
    // A container removed behind gpuq's back: the job fails with a reason and frees its card.
    let doomed = app.submit_ok(&member, sh("sleep 60", json!({}))).await;
    wait_status(&app, &member, doomed, &["running"], 30).await;
    let container = container_of(&app, doomed).await.unwrap();
    docker_cli(&["rm", "-f", &container]);
    let v = wait_status(&app, &member, doomed, &["failed"], 30).await;
    assert!(
        v["status_reason"]
            .as_str()
            .unwrap()
            .contains("removed outside gpuq"),
        "{v}"
    );
    assert_eq!(reserved(&app).await, 0);
    node.stop().await;
}

#[sqlx::test(migrations = false)]
async fn privileged_launches_are_refused_by_the_fence_check(pool: PgPool) {
    // The test-only switch: same admission, only the launch differs. The post-create inspection
    // refuses a privileged container (and on this host dockerd could not start one anyway).
    let (app, member) = setup(pool, "r5", 1).await;
    let node = Node::start(&app, "r5", LaunchMode::PrivilegedForTest).await;
    let id = app.submit_ok(&member, sh("ls /dev", json!({}))).await;
    let v = wait_status(&app, &member, id, &["failed", "succeeded"], 30).await;
    assert_eq!(
        v["assigned_gpus"].as_array().unwrap().len(),
        1,
        "admitted like any job"
    );
    assert_eq!(v["status"], "failed", "{v}");
    let reason = v["status_reason"].as_str().unwrap();
    assert!(
        reason.contains("privileged") || reason.contains("apply caps"),
        "{reason}"
    );
    node.stop().await;
}

#[sqlx::test(migrations = false)]
async fn killed_server_readopts_its_running_containers(pool: PgPool) {
    let app = TestApp::with_sim_devices(pool, 4).await;
    let serve = Serve::runner(&app.pool, "k9", &["--stop-grace-s", "1"]);
    let server = serve.start("a.log").await;
    let port = serve.port;
    let (client, bearer) = api_as_admin(port).await;
    let script = "for i in $(seq 1 40); do echo line $i; sleep 0.2; done";
    let mut ids = Vec::new();
    for _ in 0..2 {
        ids.push(post_job(&client, port, &bearer, &sh(script, json!({}))).await);
    }
    let running = |app: &TestApp| {
        let pool = app.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM jobs WHERE status = 'running'")
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while running(&app).await < 2 {
        assert!(Instant::now() < deadline, "jobs never started");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ledger = reservations(&app).await;
    // kill -9: no shutdown code runs.
    server.kill9();
    let docker = Docker::connect().await.unwrap();
    let alive = docker.list_managed(Some("k9")).await.unwrap();
    assert_eq!(
        alive.iter().filter(|c| c.running).count(),
        2,
        "containers outlive gpuq: {alive:?}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = reservations(&app).await;
    assert_eq!(ledger, after, "the ledger did not move while gpuq was down");

    let restarted_at = Instant::now();
    let _again = serve.start("b.log").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let readopted: i64 =
            sqlx::query_scalar("SELECT count(*) FROM job_events WHERE kind = 'readopted'")
                .fetch_one(&app.pool)
                .await
                .unwrap();
        if readopted == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not re-adopted within 10 s of the restart"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "re-adopted {:?} after the restart began",
        restarted_at.elapsed()
    );
    let admin = app.bearer("root", Role::Admin).await;
    for id in ids {
        let v = wait_status(&app, &admin, id, &["succeeded", "failed"], 60).await;
        assert_eq!(v["status"], "succeeded", "{v}");
        assert_eq!(v["exit_code"], 0);
        let text = logs(&app_with_logs(&app, serve.dir.path()), &admin, id, "").await;
        let expected: Vec<String> = (1..=40).map(|i| format!("line {i}")).collect();
        let got: Vec<&str> = text.lines().collect();
        assert_eq!(got, expected, "no duplicated or missing lines");
    }
    assert_eq!(reserved(&app).await, 0);
}

/// Each card's reservation, by card.
async fn reservations(app: &TestApp) -> Vec<(uuid::Uuid, i64)> {
    let sql = "SELECT uuid, reserved_mib FROM gpus ORDER BY uuid";
    sqlx::query_as(sql).fetch_all(&app.pool).await.unwrap()
}

/// The test app reading logs from a server's data directory.
fn app_with_logs(app: &TestApp, data_dir: &std::path::Path) -> TestApp {
    app.with_logs_dir(data_dir.join("logs"))
}

#[sqlx::test(migrations = false)]
async fn two_servers_on_one_docker_launch_every_job_once(pool: PgPool) {
    let app = TestApp::with_sim_devices(pool, 4).await;
    let serves = [(); 2].map(|_| Serve::runner(&app.pool, "dup", &[]));
    let mut servers = Vec::new();
    for (n, serve) in serves.iter().enumerate() {
        servers.push(serve.start(&format!("{n}.log")).await);
    }
    let ports = serves.each_ref().map(|s| s.port);
    let (client, bearer) = api_as_admin(ports[0]).await;
    let mut ids = Vec::new();
    for i in 0..12 {
        ids.push(post_job(&client, ports[i % 2], &bearer, &sh("echo hi", json!({}))).await);
    }
    let admin = app.bearer("root", Role::Admin).await;
    for id in &ids {
        let v = wait_status(&app, &admin, *id, &["succeeded", "failed"], 60).await;
        assert_eq!(v["status"], "succeeded", "{v}");
    }
    let launches: Vec<(uuid::Uuid, i64)> = sqlx::query_as(
        "SELECT job_id, count(*) FROM job_events WHERE kind = 'start_issued' GROUP BY job_id",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(launches.len(), ids.len());
    assert!(launches.iter().all(|(_, n)| *n == 1), "{launches:?}");
    let attempts: Vec<i32> = sqlx::query_scalar("SELECT attempt FROM jobs")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert!(attempts.iter().all(|a| *a == 1), "{attempts:?}");
}

#[sqlx::test(migrations = false)]
async fn without_docker_the_node_starts_nothing_frees_nothing_and_says_why(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let socket = ["--docker-socket", "/nonexistent/docker.sock"];
    let serve = Serve::runner(&app.pool, "nodocker", &socket);
    let _server = serve.start("s.log").await;
    let port = serve.port;
    // The checks are shown to admins only.
    let (client, admin) = api_as_admin(port).await;
    let ready_url = format!("http://127.0.0.1:{port}/readyz");
    let ready = get_with(&client, &ready_url, &admin).await;
    assert_eq!(ready.status(), 503);
    let body: Value = ready.json().await.unwrap();
    assert_eq!(body["checks"]["database"], "ok");
    assert!(
        body["checks"]["docker"]
            .as_str()
            .unwrap()
            .contains("docker"),
        "{body}"
    );
    // Admission elsewhere may hand this node work: it is not started, and its cards stay held.
    app.sim_cards("4x24576:NVIDIA GeForce RTX 3090", "nodocker")
        .await;
    let member = app.bearer("alice", Role::Member).await;
    let id = app.submit_ok(&member, sh("echo hi", json!({}))).await;
    app.pass().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let v = app.job(&member, id).await;
    assert_eq!(v["status"], "admitted", "{v}");
    assert_eq!(reserved(&app).await, 1000);
}

#[sqlx::test(migrations = false)]
async fn gpuq_logs_follows_a_running_job_to_its_end(pool: PgPool) {
    let app = TestApp::with_sim_devices(pool, 4).await;
    let serve = Serve::runner(&app.pool, "cli-logs", &[]);
    let _server = serve.start("s.log").await;
    let (server, port) = (serve.base(), serve.port);
    let (client, bearer) = api_as_admin(port).await;
    let script = "for i in 1 2 3 4 5; do echo tick $i; sleep 0.3; done";
    let job = post_job(&client, port, &bearer, &sh(script, json!({}))).await;
    let id = job.to_string();
    let token = bearer.trim_start_matches("Bearer ").to_owned();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_gpuq"))
            .args(["logs", "-f", &id])
            .env("GPUQ_URL", &server)
            .env("GPUQ_TOKEN", &token)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let expected: Vec<String> = (1..=5).map(|i| format!("tick {i}")).collect();
    assert_eq!(text.lines().collect::<Vec<_>>(), expected);
    // `logs -f` returns at the job's end; its runner removes the container just after. Stopping
    // the server before that would leave the container on the host.
    crate::support::isolation::wait_container_removed(&app, job).await;
}
