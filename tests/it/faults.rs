//! Faults on one host. For each: no job is left stuck, no capacity leaks, no job runs twice, and
//! the trail of events says what happened.

use crate::support::db::{cluster_folder, start_cluster};
use crate::support::docker::docker_cli;
use crate::support::isolation::{container_of, event_kinds};
use crate::support::nvml::NvidiaDocker;
use crate::support::{
    api_as_admin, ledger_violations, post_job, start_server, wait_status, Node, Serve, TestApp,
};
use gpuq::model::Role;
use gpuq::server::db::embedded::EmbeddedPg;
use gpuq::server::runtime::LaunchMode;
use serde_json::{json, Value};
use sqlx::PgPool;
use std::time::{Duration, Instant};
use uuid::Uuid;

const RTX: &str = "NVIDIA GeForce RTX 3090";

fn sh(script: &str, mib: i64) -> Value {
    json!({ "image": "gpuq-test/busybox:latest", "command": ["sh", "-c", script],
            "min_vram_mb": mib })
}

/// Every job ran at most once: at most one `started` event each. (A launch deferred before its
/// container started, e.g. while the database was away, is claimed again: a second attempt, not
/// a second run.)
async fn started_once(pool: &PgPool) {
    let twice: Vec<(Uuid, i32, i64)> = sqlx::query_as(
        "SELECT j.id, j.attempt, (SELECT count(*) FROM job_events e \
           WHERE e.job_id = j.id AND e.kind = 'started') FROM jobs j",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for (id, attempt, started) in twice {
        assert!(
            started <= 1,
            "job {id}: attempt {attempt}, started {started}"
        );
    }
}

/// The job started, failed and had its cards released exactly once each.
async fn failed_once(app: &TestApp, job: Uuid) {
    let kinds = event_kinds(app, job).await;
    for kind in ["started", "failed", "released"] {
        assert_eq!(kinds.iter().filter(|k| *k == kind).count(), 1, "{kinds:?}");
    }
}

async fn reserved(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT coalesce(sum(reserved_mib), 0)::bigint FROM gpus")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrations = false)]
async fn a_container_removed_behind_gpuqs_back_fails_its_job_and_frees_its_card(pool: PgPool) {
    let app = TestApp::with_sim_devices(pool, 1).await;
    app.sim_cards(&format!("1x24576:{RTX}"), "f-rm").await;
    let member = app.bearer("alice", Role::Member).await;
    let node = Node::start(&app, "f-rm", LaunchMode::Fenced).await;
    let victim = app.submit_ok(&member, sh("sleep 300", 20000)).await;
    let next = app.submit_ok(&member, sh("echo next", 20000)).await;
    wait_status(&app, &member, victim, &["running"], 60).await;
    let container = container_of(&app, victim).await.expect("a container id");
    docker_cli(&["rm", "-f", &container]);
    let v = wait_status(&app, &member, victim, &["failed", "succeeded"], 60).await;
    assert_eq!(v["status"], "failed", "{v}");
    let reason = v["status_reason"].as_str().unwrap_or_default().to_owned();
    assert!(reason.contains("removed outside gpuq"), "{v}");
    // Its card is given back: the job waiting for the whole card runs.
    let n = wait_status(&app, &member, next, &["failed", "succeeded"], 60).await;
    assert_eq!(n["status"], "succeeded", "{n}");
    failed_once(&app, victim).await;
    node.stop().await;
    started_once(&app.pool).await;
    assert_eq!(reserved(&app.pool).await, 0);
    assert_eq!(ledger_violations(&app.pool).await, Vec::<String>::new());
}

/// Sends `sig` to a running `gpuq serve`.
fn signal(server: &crate::support::server::Server, sig: nix::sys::signal::Signal) {
    let pid = nix::unistd::Pid::from_raw(server.0.id() as i32);
    nix::sys::signal::kill(pid, sig).unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_frozen_node_wakes_to_find_itself_forgotten_and_acts_on_nothing_stale(pool: PgPool) {
    let app = TestApp::with_sim_devices(pool, 2).await;
    let fast = [
        "--heartbeat-s",
        "1",
        "--node-lost-after-s",
        "3",
        "--stop-grace-s",
        "1",
    ];
    let serve = Serve::runner(&app.pool, "frozen", &fast);
    let server = serve.start("a.log").await;
    let (client, admin) = api_as_admin(serve.port).await;
    let running = post_job(&client, serve.port, &admin, &sh("sleep 300", 20000)).await;
    let root = app.bearer("root", Role::Admin).await;
    wait_status(&app, &root, running, &["running"], 60).await;
    let container = container_of(&app, running).await.expect("a container id");
    signal(&server, nix::sys::signal::Signal::SIGSTOP);
    // Frozen past its lost time: others see it lost; an admin forgets it, which fails its job
    // `node_lost` and gives its cards back; a job admitted meanwhile cannot land on its cards.
    // The process may have frozen inside a transaction (the admission lock, rows of its jobs):
    // Postgres ends that session after `IDLE_IN_TRANSACTION`, and the forget goes through.
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let r = app.delete("/api/v1/nodes/frozen", &root).await;
        if r.status == 200 {
            break;
        }
        assert_eq!(r.status, 409, "{}", r.text);
        assert!(Instant::now() < deadline, "never lost: {}", r.text);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let v = app.job(&root, running).await;
    assert_eq!(v["status"], "failed", "{v}");
    assert_eq!(v["status_reason"], "node_lost", "{v}");
    assert_eq!(reserved(&app.pool).await, 0);
    let later = app.submit_ok(&root, sh("echo later", 20000)).await;
    app.pass().await;
    assert_eq!(app.job(&root, later).await["status"], "queued");
    // It wakes: its heartbeat is refused, it claims nothing, it does not write over the failure,
    // and it stops the container of the job that ended without it (it held a card the ledger
    // had given back).
    signal(&server, nix::sys::signal::Signal::SIGCONT);
    let docker = gpuq::server::runtime::Docker::connect().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let alive = docker.list_managed(Some("frozen")).await.unwrap();
        if !alive.iter().any(|c| c.running && c.id == container) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the stale container still runs: {alive:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let log = std::fs::read_to_string(serve.dir.path().join("a.log")).unwrap();
    assert!(log.contains("lost its node's lease"), "{log}");
    let v = app.job(&root, running).await;
    assert_eq!(
        (v["status"].as_str(), v["status_reason"].as_str()),
        (Some("failed"), Some("node_lost"))
    );
    assert_eq!(app.job(&root, later).await["status"], "queued");
    let audit: i64 = app
        .scalar(
            "SELECT count(*) FROM audit_events WHERE kind = 'node.forget' AND subject = 'frozen'",
        )
        .await;
    assert_eq!(audit, 1);
    drop(server);
    started_once(&app.pool).await;
    assert_eq!(ledger_violations(&app.pool).await, Vec::<String>::new());
}

#[sqlx::test(migrations = false)]
async fn postgres_restarted_under_a_burst_loses_no_job_and_leaks_no_card(pool: PgPool) {
    // Its own Postgres, so restarting it disturbs no other test.
    let _app = TestApp::with_sim_devices(pool, 4).await;
    let pg_dir = cluster_folder("gpuq-pgr");
    let mut pg = start_cluster(pg_dir.path()).await;
    let socket = pg_dir.path().join("pg/run");
    // The cluster wants its password on the socket too.
    let url = format!(
        "postgres://gpuq:{}@localhost/gpuq?host={}",
        pg.password(),
        socket.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let port = crate::support::free_port();
    let data_dir = dir.path().to_str().unwrap().to_owned();
    let args = [
        "--runner",
        "true",
        "--data-dir",
        &data_dir,
        "--node",
        "pg-burst",
    ];
    let _server = start_server(&url, port, &dir.path().join("a.log"), &args).await;
    let (client, admin) = api_as_admin(port).await;
    // 40 submissions from 8 clients; Postgres restarts after the first ten are in.
    let accepted = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Uuid>::new()));
    let refused = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let mut clients = Vec::new();
    for c in 0..8 {
        let (client, admin) = (client.clone(), admin.clone());
        let (accepted, refused) = (accepted.clone(), refused.clone());
        clients.push(tokio::spawn(async move {
            for i in 0..5 {
                let url = format!("http://127.0.0.1:{port}/api/v1/jobs");
                let spec = sh(&format!("echo job {c}-{i}"), 1000);
                let sent = client
                    .post(url)
                    .header("authorization", &admin)
                    .json(&spec)
                    .send();
                match sent.await {
                    Ok(r) if r.status() == 201 => {
                        let v: Value = r.json().await.unwrap();
                        let id = v["job_id"].as_str().unwrap().parse().unwrap();
                        accepted.lock().unwrap().push(id);
                    }
                    Ok(r) => {
                        let said = format!("{} {}", r.status(), r.text().await.unwrap());
                        refused.lock().unwrap().push(said);
                    }
                    Err(e) => refused.lock().unwrap().push(e.to_string()),
                }
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while accepted.lock().unwrap().len() < 10 {
        assert!(
            Instant::now() < deadline,
            "the burst did not start: {:?}",
            refused.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let restart = Instant::now();
    pg = tokio::task::spawn_blocking(move || {
        pg.stop().expect("stopping Postgres");
        std::thread::sleep(Duration::from_secs(1));
        EmbeddedPg::start(&data_dir_of(&socket), "postgres").expect("starting it again")
    })
    .await
    .unwrap();
    eprintln!("Postgres down and up again in {:?}", restart.elapsed());
    for c in clients {
        c.await.unwrap();
    }
    let accepted = accepted.lock().unwrap().clone();
    let refused = refused.lock().unwrap().clone();
    eprintln!(
        "{} accepted, {} refused: {refused:?}",
        accepted.len(),
        refused.len()
    );
    assert_eq!(accepted.len() + refused.len(), 40);
    for r in &refused {
        // A refusal that gets an answer is a 503 that names the database, never a 2xx or a bare
        // internal error; otherwise the connection itself failed.
        if r.chars().next().is_some_and(|c| c.is_ascii_digit()) {
            assert!(
                r.starts_with("503") && r.contains("database is out of reach"),
                "{r}"
            );
        }
    }
    let db = PgPool::connect_with(pg.connect_options("gpuq"))
        .await
        .unwrap();
    // Every job the database holds ends, and each accepted one is among them and succeeds.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let open: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM jobs WHERE status NOT IN ('succeeded', 'failed', 'cancelled')",
        )
        .fetch_one(&db)
        .await
        .unwrap();
        if open == 0 {
            break;
        }
        if Instant::now() > deadline {
            let stuck: Vec<(Uuid, String)> = sqlx::query_as(
                "SELECT id, status::text FROM jobs WHERE status NOT IN ('succeeded', 'failed', 'cancelled')",
            )
            .fetch_all(&db)
            .await
            .unwrap();
            let log = std::fs::read_to_string(dir.path().join("a.log")).unwrap_or_default();
            let tail: String = log.lines().rev().take(60).collect::<Vec<_>>().join("\n");
            panic!("{open} jobs still open after the restart: {stuck:?}\n{tail}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for id in &accepted {
        let status: String = sqlx::query_scalar("SELECT status::text FROM jobs WHERE id = $1")
            .bind(id)
            .fetch_one(&db)
            .await
            .unwrap();
        assert_eq!(status, "succeeded", "job {id}");
    }
    started_once(&db).await;
    assert_eq!(reserved(&db).await, 0);
    assert_eq!(ledger_violations(&db).await, Vec::<String>::new());
    db.close().await;
}

/// The data folder of an embedded cluster whose socket folder is `socket` (`<data>/pg/run`).
fn data_dir_of(socket: &std::path::Path) -> std::path::PathBuf {
    socket.parent().unwrap().parent().unwrap().to_owned()
}

#[sqlx::test(migrations = false)]
async fn dockerd_restarted_under_running_jobs_ends_them_once_and_frees_their_cards(pool: PgPool) {
    let app = TestApp::with_sim_devices(pool, 2).await;
    // A dockerd of the test's own (with the test image), so restarting it disturbs no other
    // test's containers.
    let mut dockerd = NvidiaDocker::start();
    let socket = dockerd.socket().display().to_string();
    let one_card = [
        "--gpu-source",
        "sim",
        "--sim-gpus",
        "1x24576:NVIDIA GeForce RTX 3090",
    ];
    let extra = [
        &["--docker-socket", &socket, "--stop-grace-s", "1"][..],
        &one_card,
    ]
    .concat();
    let serve = Serve::runner(&app.pool, "dockerd-restart", &extra);
    let _server = serve.start("a.log").await;
    let (client, admin) = api_as_admin(serve.port).await;
    let root = app.bearer("root", Role::Admin).await;
    let long = post_job(&client, serve.port, &admin, &sh("sleep 300", 20000)).await;
    wait_status(&app, &root, long, &["running"], 60).await;
    // dockerd crashes: its containers outlive it, out of gpuq's sight. Nothing is freed and
    // nothing starts while it is away; a job submitted meanwhile waits.
    dockerd.crash();
    let waiting = post_job(&client, serve.port, &admin, &sh("echo after", 20000)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let w = app.job(&root, waiting).await;
    assert!(w["status"] == "queued", "the one card is still held: {w}");
    let l = app.job(&root, long).await;
    assert_eq!(
        l["status"], "running",
        "nothing is freed while dockerd is away: {l}"
    );
    assert_eq!(reserved(&app.pool).await, 20000);
    // Restarted, dockerd ends what it finds of the old run: the job ends once, failed, and its
    // card goes to the waiting job, which starts and succeeds.
    dockerd.restart();
    let v = wait_status(&app, &root, long, &["failed", "succeeded"], 60).await;
    assert_eq!(v["status"], "failed", "{v}");
    let w = wait_status(&app, &root, waiting, &["failed", "succeeded"], 60).await;
    assert_eq!(w["status"], "succeeded", "{w}");
    failed_once(&app, long).await;
    started_once(&app.pool).await;
    assert_eq!(reserved(&app.pool).await, 0);
    assert_eq!(ledger_violations(&app.pool).await, Vec::<String>::new());
    drop(dockerd);
}

#[sqlx::test(migrations = false)]
async fn a_session_stalled_inside_a_transaction_is_ended_and_frees_the_admission_lock(
    pool: PgPool,
) {
    // What a node frozen in the middle of an admission pass leaves behind: a session of gpuq's,
    // idle inside a transaction that holds the admission lock.
    let app = TestApp::new(pool).await;
    let stalled = gpuq::server::db::open(&gpuq::server::db::DbOptions {
        database_url: Some(crate::support::database_url(&app.pool)),
        app_database_url: None,
        data_dir: std::env::temp_dir(),
        pg_user: "postgres".into(),
        max_connections: 1,
    })
    .await
    .unwrap();
    let mut tx = stalled.pool.begin().await.unwrap();
    gpuq::server::admission::pass::lock(&mut tx).await.unwrap();
    // Another node's pass waits for the lock only until Postgres ends the stalled session.
    let started = Instant::now();
    app.pass().await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(9) && waited < Duration::from_secs(30),
        "the pass waited {waited:?}"
    );
    assert!(
        tx.commit().await.is_err(),
        "the stalled transaction lived on"
    );
}
