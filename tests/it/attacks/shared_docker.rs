//! A dockerd gpuq shares: with another installation, and with its own restarts.
//!
//! - Two installations (each its own database) on one dockerd, with the same node name: the
//!   second's start-up settles only its own containers, never the first's running job.
//! - dockerd stopped and started again under running jobs, with gpuq up and with gpuq down: each
//!   job says the runtime's restart killed it (one whose start was not recorded runs again), and
//!   no container is left. With `live-restore` the jobs run on, their logs whole.
//!
//! The restarts are of a throw-away dockerd of the test's own (tests/it/support/nvml.rs), never of
//! the machine's, and the machine's `docker0` is still there afterwards.

use crate::support::docker::{docker, request, Cleanup};
use crate::support::isolation::{container_of, log};
use crate::support::nvml::NvidiaDocker;
use crate::support::{database_url, wait_status, Node, Serve, TestApp};
use gpuq::model::Role;
use gpuq::server::runtime::{ensure_sim_devices, Docker, LaunchMode};
use serde_json::{json, Value};
use sqlx::PgPool;
use std::time::{Duration, Instant};

const IMAGE: &str = "gpuq-test/busybox:latest";
const RESTARTED: &str = "the container runtime restarted (dockerd) and killed it";

fn sh(script: &str) -> Value {
    json!({ "image": IMAGE, "command": ["sh", "-c", script], "min_vram_mb": 1000 })
}

/// An app with `cards` simulated cards on `node`, jobs without a network, and a member's token.
async fn app_on(pool: PgPool, node: &str, cards: usize) -> (TestApp, String) {
    let app = TestApp::new(pool).await;
    ensure_sim_devices(cards).unwrap();
    app.sim_cards(&format!("{cards}x24576:NVIDIA GeForce RTX 3090"), node)
        .await;
    let admin = app.bearer("root", Role::Admin).await;
    // A throw-away dockerd's jobs need no network; the same policy for the machine's keeps the
    // two tests alike.
    app.set_policy(&admin, json!({ "network": "none" })).await;
    let member = app.bearer("alice", Role::Member).await;
    (app, member)
}

/// A second, empty database beside the test's own, dropped with it (a failed test's too).
struct OtherDatabase {
    admin_url: String,
    name: String,
}

impl OtherDatabase {
    async fn create(beside: &PgPool) -> (OtherDatabase, PgPool) {
        let name = format!("gpuq_other_{}", uuid::Uuid::new_v4().simple());
        let admin_url = database_url(beside);
        let admin = PgPool::connect(&admin_url).await.unwrap();
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await
            .unwrap();
        admin.close().await;
        let url = format!("{}/{name}", admin_url.rsplit_once('/').unwrap().0);
        let pool = PgPool::connect(&url).await.unwrap();
        (OtherDatabase { admin_url, name }, pool)
    }
}

impl Drop for OtherDatabase {
    fn drop(&mut self) {
        let (url, name) = (self.admin_url.clone(), self.name.clone());
        // Drop cannot await; a private runtime on its own thread.
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let admin = PgPool::connect(&url).await?;
                let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
                sqlx::query(&sql).execute(&admin).await.map(drop)
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("dropping the database {} failed: {dropped:?}", self.name);
        }
    }
}

fn docker0_exists() -> bool {
    std::process::Command::new("ip")
        .args(["link", "show", "docker0"])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[sqlx::test(migrations = false)]
async fn a_second_installation_on_the_same_dockerd_leaves_the_first_ones_jobs_alone(pool: PgPool) {
    // Both installations call their node alike, as two hosts' defaults (the hostname) would.
    let node = format!("inst-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let (a, alice) = app_on(pool.clone(), &node, 1).await;
    let node_a = Node::start(&a, &node, LaunchMode::Fenced).await;
    let job = a
        .submit_ok(&alice, sh("echo started; sleep 8; echo finished"))
        .await;
    wait_status(&a, &alice, job, &["running"], 30).await;
    let container = container_of(&a, job).await.expect("a container");

    // Containers of before the installation label: one of a job installation B never had.
    let d = docker().await;
    let cleanup = Cleanup::default();
    let mut stray = request(&["sleep", "60"], vec![]);
    stray.node = node.clone();
    stray.network = gpuq::model::JobNetwork::None;
    cleanup.track(&stray);
    let stray_id = d.create(&stray, LaunchMode::Fenced).await.unwrap();
    d.start(&stray_id).await.unwrap();

    let (other, pool_b) = OtherDatabase::create(&pool).await;
    let (b, bob) = app_on(pool_b, &node, 1).await;
    let node_b = Node::start(&b, &node, LaunchMode::Fenced).await;
    let facts = d
        .inspect(&container)
        .await
        .expect("A's container is still there");
    assert!(facts.running, "B's start stopped A's job: {facts:?}");
    assert!(
        d.inspect(&stray_id).await.unwrap().running,
        "B's start settled an unlabelled container of a job it never had"
    );
    let ids: Vec<String> =
        sqlx::query_scalar("SELECT value #>> '{}' FROM settings WHERE key = 'installation_id'")
            .fetch_all(&b.pool)
            .await
            .unwrap();
    let a_id: String = a
        .scalar("SELECT value #>> '{}' FROM settings WHERE key = 'installation_id'")
        .await;
    assert_eq!(ids.len(), 1);
    assert_ne!(ids[0], a_id, "each database has its own installation id");
    assert_eq!(facts.labels["org.gpuq.installation"], a_id, "{facts:?}");

    // B runs its own job meanwhile, and A's finishes as it would alone.
    let own = b.submit_ok(&bob, sh("echo b")).await;
    let v = wait_status(&b, &bob, own, &["succeeded", "failed"], 60).await;
    assert_eq!(v["status"], "succeeded", "{v}");
    let v = wait_status(&a, &alice, job, &["succeeded", "failed"], 60).await;
    assert_eq!(v["status"], "succeeded", "{v}");
    assert!(log(&a, &alice, job).await.contains("finished"));

    // An unlabelled container of a job B knows is B's: its restart settles (removes) it.
    node_b.stop().await;
    let mut old = request(&["true"], vec![]);
    old.job_id = own;
    old.attempt = 9;
    old.node = node.clone();
    old.network = gpuq::model::JobNetwork::None;
    cleanup.track(&old);
    let old_id = d.create(&old, LaunchMode::Fenced).await.unwrap();
    d.start(&old_id).await.unwrap();
    d.wait(&old_id).await.unwrap();
    let node_b = Node::start(&b, &node, LaunchMode::Fenced).await;
    assert!(
        matches!(
            d.inspect(&old_id).await,
            Err(gpuq::server::runtime::RuntimeError::NotFound(_))
        ),
        "B left its own unlabelled container behind"
    );
    assert!(d.inspect(&stray_id).await.unwrap().running);
    node_b.stop().await;
    node_a.stop().await;
    b.pool.close().await;
    drop(other);
}

/// Waits until the throw-away dockerd holds no container at all.
fn wait_no_container(dockerd: &NvidiaDocker) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ps = dockerd.cli(&["ps", "-aq"]);
        let left = String::from_utf8_lossy(&ps.stdout).trim().to_owned();
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "containers left behind: {left}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

async fn assert_killed_by_restart(app: &TestApp, bearer: &str, id: uuid::Uuid) {
    let v = wait_status(app, bearer, id, &["succeeded", "failed", "cancelled"], 90).await;
    assert_eq!(v["status"], "failed", "{v}");
    let reason = v["status_reason"].as_str().unwrap();
    assert!(reason.contains(RESTARTED), "{reason}");
    assert!(reason.contains("resubmit"), "{reason}");
    assert!(matches!(v["exit_code"].as_i64(), Some(137 | 143)), "{v}");
}

#[sqlx::test(migrations = false)]
async fn a_dockerd_restart_says_it_killed_the_jobs_requeues_unstarted_ones_and_leaves_no_container(
    pool: PgPool,
) {
    let had_docker0 = docker0_exists();
    let mut dockerd = NvidiaDocker::start();
    let app = TestApp::with_sim_devices(pool, 4).await;
    let (admin, alice) = app.admin_and_member("alice").await;
    app.set_policy(&admin, json!({ "network": "none" })).await;
    let socket = dockerd.socket().display().to_string();
    let args = ["--docker-socket", &socket, "--stop-grace-s", "1"];
    let serve = Serve::runner(&app.pool, "restarts", &args);
    let server = serve.start("a.log").await;
    let mut first = Vec::new();
    for i in 0..2 {
        first.push(
            app.submit_ok(&alice, sh(&format!("echo up {i}; sleep 300")))
                .await,
        );
    }
    for id in &first {
        wait_status(&app, &alice, *id, &["running"], 60).await;
    }

    // gpuq up: dockerd stops (stopping its containers) and starts again.
    dockerd.stop();
    dockerd.restart();
    for id in &first {
        assert_killed_by_restart(&app, &alice, *id).await;
    }
    wait_no_container(&dockerd);

    // gpuq down across the restart: its start-up finds what the restart did.
    let killed = app.submit_ok(&alice, sh("echo up; sleep 300")).await;
    let unstarted = app.submit_ok(&alice, sh("echo up; sleep 300")).await;
    for id in [killed, unstarted] {
        wait_status(&app, &alice, id, &["running"], 60).await;
    }
    server.kill9();
    // As if gpuq had gone down between starting the container and recording that it had.
    app.exec_with(
        "UPDATE jobs SET status = 'starting', started_at = NULL WHERE id = $1",
        unstarted,
    )
    .await;
    dockerd.stop();
    dockerd.restart();
    let _server = serve.start("b.log").await;
    assert_killed_by_restart(&app, &alice, killed).await;
    wait_status(&app, &alice, unstarted, &["running"], 60).await;
    let attempt: i32 = app
        .scalar_of("SELECT attempt FROM jobs WHERE id = $1", unstarted)
        .await;
    assert_eq!(attempt, 2, "queued again and launched afresh");
    let reasons: Vec<Value> = app
        .column_of(
            "SELECT detail FROM job_events WHERE job_id = $1 AND kind = 'launch_deferred'",
            unstarted,
        )
        .await;
    assert!(
        reasons.iter().any(|r| r["reason"]
            .as_str()
            .is_some_and(|r| r.contains("before it started: queued again"))),
        "{reasons:?}"
    );
    let c = app
        .post(&format!("/api/v1/jobs/{unstarted}/cancel"), &alice)
        .await;
    assert_eq!(c.status, 200, "{}", c.text);
    wait_status(&app, &alice, unstarted, &["cancelled"], 30).await;
    wait_no_container(&dockerd);
    drop(dockerd);
    if had_docker0 {
        assert!(docker0_exists(), "the machine's docker0 is gone");
    }
}

#[sqlx::test(migrations = false)]
async fn with_live_restore_a_dockerd_restart_leaves_jobs_running_and_their_logs_whole(
    pool: PgPool,
) {
    let mut dockerd = NvidiaDocker::start_with(r#"{ "live-restore": true }"#);
    let (app, alice) = app_on(pool, "live-restore", 1).await;
    let socket = dockerd.socket().display().to_string();
    let docker = Docker::connect_socket(&socket).await.unwrap();
    assert!(docker.host_facts().await.unwrap().live_restore);
    let node = Node::start_on(&app, "live-restore", docker).await;
    let job = app
        .submit_ok(
            &alice,
            sh("for i in $(seq 1 12); do echo line$i; sleep 1; done"),
        )
        .await;
    wait_status(&app, &alice, job, &["running"], 60).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !log(&app, &alice, job).await.contains("line2") {
        assert!(Instant::now() < deadline, "no output");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    dockerd.stop();
    dockerd.restart();
    let v = wait_status(&app, &alice, job, &["succeeded", "failed"], 60).await;
    assert_eq!(v["status"], "succeeded", "{v}");
    let text = log(&app, &alice, job).await;
    for i in 1..=12 {
        let line = format!("line{i}");
        assert_eq!(
            text.lines().filter(|l| *l == line).count(),
            1,
            "{line} once: {text}"
        );
    }
    wait_no_container(&dockerd);
    node.stop().await;
}
