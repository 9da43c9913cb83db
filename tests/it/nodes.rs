//! Nodes: registration and heartbeats under an epoch lease, lost nodes (derived from database
//! time) and drained nodes getting no new work, and an admin forgetting a lost node.

use crate::support::docker::docker_cli;
use crate::support::server::{api_as_admin, get_with, post_job, Serve};
use crate::support::{
    ledger_violations, one_card_job, rows, text, text_pairs, two_jobs_for_one_free_card, TestApp,
};
use gpuq::server::nodes::{self, Registered, Registration};
use serde_json::{json, Value};
use sqlx::PgPool;

const RTX: &str = "NVIDIA GeForce RTX 3090";

/// A registration of `name` as `gpuq serve` makes it.
fn reg(name: &str) -> Registration {
    Registration {
        name: name.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        advertise_url: format!("http://{name}:3000"),
        runs_jobs: true,
        lost_after_s: 15,
    }
}

async fn register(app: &TestApp, name: &str) -> Registered {
    nodes::register(&app.pool, &reg(name)).await.unwrap()
}

/// Makes `node` silent for an hour, in database time: far past its lost time.
async fn silence(app: &TestApp, node: &str) {
    app.exec_with(
        "UPDATE nodes SET heartbeat_at = now() - interval '1 hour' WHERE name = $1",
        node,
    )
    .await;
}

/// `GET /api/v1/nodes` as `bearer`, by name.
async fn node_states(app: &TestApp, bearer: &str) -> Vec<(String, String)> {
    let r = app.get("/api/v1/nodes", bearer).await;
    assert_eq!(r.status, 200, "{}", r.text);
    text_pairs(&r.json(), "name", "state")
}

/// Each card's (node, shown state).
async fn card_states(app: &TestApp, bearer: &str) -> Vec<(String, String)> {
    let gpus = app.get("/api/v1/gpus", bearer).await.json();
    text_pairs(&gpus["gpus"], "node", "state")
}

async fn audit_count(app: &TestApp, kind: &str, subject: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM audit_events WHERE kind = $1 AND subject = $2")
        .bind(kind)
        .bind(subject)
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

#[sqlx::test(migrations = false)]
async fn a_heartbeat_holds_the_lease_until_another_epoch_takes_the_node(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let first = register(&app, "node-a").await;
    assert!(first.lease.is_held());
    app.exec("UPDATE nodes SET heartbeat_at = now() - interval '1 minute'")
        .await;
    assert!(nodes::beat(&app.pool, &first).await);
    let age: f64 = app
        .scalar("SELECT extract(epoch FROM now() - heartbeat_at)::float8 FROM nodes")
        .await;
    assert!(age < 5.0, "the heartbeat did not advance: {age} s old");
    // Another process registers the same name: it gets a newer epoch, and the first is fenced.
    let second = register(&app, "node-a").await;
    assert!(second.epoch > first.epoch, "{second:?} vs {first:?}");
    assert!(!nodes::beat(&app.pool, &first).await);
    assert!(
        !first.lease.is_held(),
        "a refused heartbeat loses the lease"
    );
    assert!(nodes::beat(&app.pool, &second).await);
    assert!(second.lease.is_held());
    let (admin, _) = app.admin_and_member("alice").await;
    let listed = app.get("/api/v1/nodes", &admin).await.json();
    assert_eq!(listed[0]["name"], "node-a");
    assert_eq!(listed[0]["state"], "up");
    assert_eq!(listed[0]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(listed[0]["advertise_url"], "http://node-a:3000");
    assert_eq!(listed[0]["runs_jobs"], true);
}

#[sqlx::test(migrations = false)]
async fn a_lost_node_shows_lost_and_its_cards_get_no_new_work(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let spec = format!("1x24576:{RTX}");
    app.sim_cards(&spec, "node-a").await;
    app.sim_cards(&spec, "node-b").await;
    register(&app, "node-a").await;
    register(&app, "node-b").await;
    let (_, member) = app.admin_and_member("alice").await;
    silence(&app, "node-a").await;
    assert_eq!(
        node_states(&app, &member).await,
        [
            ("node-a".into(), "lost".into()),
            ("node-b".into(), "up".into())
        ]
    );
    assert_eq!(
        card_states(&app, &member).await,
        [
            ("node-a".into(), "lost".into()),
            ("node-b".into(), "online".into())
        ]
    );
    let (first, second) = two_jobs_for_one_free_card(&app, &member, &[0], "on a lost node").await;
    let first = app.job(&member, first).await;
    assert_eq!(first["status"], "admitted");
    assert_eq!(first["node"], "node-b");
    // The metrics snapshot knows every node: node-a is down, with its heartbeat's age.
    let snap = gpuq::server::metrics::snapshot::read(&app.pool, "node-b")
        .await
        .unwrap();
    let a = snap.nodes.iter().find(|n| n.0 == "node-a").unwrap();
    assert!(!a.1 && a.2 >= 3600, "{a:?}");
    assert!(snap.nodes.iter().any(|n| n.0 == "node-b" && n.1));
    // The node heartbeats again (same lease): its card takes the waiting job.
    app.exec("UPDATE nodes SET heartbeat_at = now() WHERE name = 'node-a'")
        .await;
    app.pass().await;
    let second = app.job(&member, second).await;
    assert_eq!(second["status"], "admitted");
    assert_eq!(second["node"], "node-a");
    assert!(ledger_violations(&app.pool).await.is_empty());
}

#[sqlx::test(migrations = false)]
async fn a_drained_node_takes_no_new_work_and_only_admins_drain(pool: PgPool) {
    let app = TestApp::new(pool).await;
    app.sim_cards(&format!("1x24576:{RTX}"), "node-a").await;
    register(&app, "node-a").await;
    let (admin, member) = app.admin_and_member("alice").await;
    let drain = json!({ "state": "drained" });
    // The attack: a member drains (or undrains) a node.
    let r = app
        .patch("/api/v1/nodes/node-a", &member, drain.clone())
        .await;
    assert_eq!(r.status, 403, "{}", r.text);
    assert_eq!(audit_count(&app, "node.drain", "node-a").await, 0);
    let r = app
        .patch("/api/v1/nodes/node-a", &admin, drain.clone())
        .await;
    assert_eq!(r.status, 204, "{}", r.text);
    assert_eq!(
        node_states(&app, &member).await,
        [("node-a".into(), "drained".into())]
    );
    assert_eq!(audit_count(&app, "node.drain", "node-a").await, 1);
    let job = app.submit_ok(&member, one_card_job("waits")).await;
    app.pass().await;
    assert_eq!(app.job(&member, job).await["status"], "queued");
    // A restart keeps the admin's drain.
    register(&app, "node-a").await;
    app.pass().await;
    assert_eq!(app.job(&member, job).await["status"], "queued");
    // Bad input names the field; an unknown node is 404.
    for bad in ["lost", "sideways"] {
        let r = app
            .patch("/api/v1/nodes/node-a", &admin, json!({ "state": bad }))
            .await;
        assert_eq!(r.status, 400, "{bad}: {}", r.text);
        assert_eq!(r.json()["field"], "state", "{}", r.text);
    }
    let r = app.patch("/api/v1/nodes/node-z", &admin, drain).await;
    assert_eq!(r.status, 404, "{}", r.text);
    assert!(r.text.contains("node-z"), "{}", r.text);
    let r = app
        .patch("/api/v1/nodes/node-a", &admin, json!({ "state": "up" }))
        .await;
    assert_eq!(r.status, 204, "{}", r.text);
    assert_eq!(audit_count(&app, "node.undrain", "node-a").await, 1);
    app.pass().await;
    assert_eq!(app.job(&member, job).await["status"], "admitted");
}

#[sqlx::test(migrations = false)]
async fn forgetting_a_lost_node_fails_its_jobs_releases_their_cards_and_cannot_be_undone_by_its_return(
    pool: PgPool,
) {
    let app = TestApp::new(pool).await;
    let cards = app.sim_cards(&format!("2x24576:{RTX}"), "node-a").await;
    let old = register(&app, "node-a").await;
    let (admin, member) = app.admin_and_member("alice").await;
    let admitted = app.submit_ok(&member, one_card_job("admitted")).await;
    let running = app.submit_ok(&member, one_card_job("running")).await;
    app.pass().await;
    // One of them has started on node-a.
    app.exec_with(
        "UPDATE jobs SET status = 'running', started_at = now(), attempt = 1 WHERE id = $1",
        running,
    )
    .await;
    let reserved: i64 = app
        .scalar("SELECT sum(reserved_mib)::bigint FROM gpus")
        .await;
    assert_eq!(reserved, 40000);
    // A node that heartbeats cannot be forgotten.
    let r = app.delete("/api/v1/nodes/node-a", &admin).await;
    assert_eq!(r.status, 409, "{}", r.text);
    assert!(r.text.contains("only a lost node"), "{}", r.text);
    silence(&app, "node-a").await;
    // Its jobs say so on their page, keep their cards, and are not started again.
    let page = app.job(&member, running).await;
    assert_eq!(page["node_lost"], true, "{page}");
    assert_eq!(page["status"], "running");
    app.pass().await;
    assert_eq!(app.job(&member, admitted).await["status"], "admitted");
    let reserved: i64 = app
        .scalar("SELECT sum(reserved_mib)::bigint FROM gpus")
        .await;
    assert_eq!(reserved, 40000, "a lost node's jobs keep their cards");
    // The attack: a member forgets a node to kill other people's jobs.
    let r = app.delete("/api/v1/nodes/node-a", &member).await;
    assert_eq!(r.status, 403, "{}", r.text);
    assert_eq!(app.job(&member, running).await["status"], "running");
    assert_eq!(app.delete("/api/v1/nodes/node-z", &admin).await.status, 404);
    let r = app.delete("/api/v1/nodes/node-a", &admin).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["jobs_failed"], 2);
    for id in [admitted, running] {
        let job = app.job(&member, id).await;
        assert_eq!(job["status"], "failed", "{job}");
        assert_eq!(job["status_reason"], "node_lost", "{job}");
        assert_eq!(job["node_lost"], false, "an ended job holds nothing: {job}");
        let kinds: Vec<String> = app
            .column_of(
                "SELECT kind FROM job_events WHERE job_id = $1 ORDER BY id",
                id,
            )
            .await;
        assert!(
            kinds.ends_with(&["failed".into(), "released".into()]),
            "{kinds:?}"
        );
    }
    let reserved: i64 = app
        .scalar("SELECT sum(reserved_mib)::bigint FROM gpus")
        .await;
    assert_eq!(reserved, 0, "forgetting released the cards");
    let live: i64 = app
        .scalar("SELECT count(*) FROM reservations WHERE released_at IS NULL")
        .await;
    assert_eq!(live, 0);
    assert_eq!(ledger_violations(&app.pool).await, Vec::<String>::new());
    assert_eq!(audit_count(&app, "node.forget", "node-a").await, 1);
    // A forgotten node's cards offer nothing; the process that held it is fenced.
    assert_eq!(
        card_states(&app, &member).await,
        [
            ("node-a".into(), "lost".into()),
            ("node-a".into(), "lost".into())
        ]
    );
    let later = app.submit_ok(&member, one_card_job("later")).await;
    app.pass().await;
    assert_eq!(app.job(&member, later).await["status"], "queued");
    assert!(
        !nodes::beat(&app.pool, &old).await,
        "the old lease still heartbeats"
    );
    // The node comes back: it registers again, but its old jobs stay failed, and its runner's
    // start-up reconciliation (which re-adopts the node's starting and running jobs) sees none.
    register(&app, "node-a").await;
    assert_eq!(
        node_states(&app, &member).await,
        [("node-a".into(), "up".into())]
    );
    for id in [admitted, running] {
        assert_eq!(app.job(&member, id).await["status"], "failed");
    }
    let active = gpuq::server::db::runs::active_on(&app.pool, "node-a")
        .await
        .unwrap();
    assert!(active.is_empty(), "{active:?}");
    app.pass().await;
    let later = app.job(&member, later).await;
    assert_eq!(later["status"], "admitted");
    assert_eq!(later["node"], "node-a");
    assert_eq!(cards.len(), 2);
    assert_eq!(ledger_violations(&app.pool).await, Vec::<String>::new());
}

/// Each card's (node, state) as a running `gpuq serve` shows them.
async fn served_card_states(
    client: &reqwest::Client,
    base: &str,
    bearer: &str,
) -> Vec<(String, String)> {
    let url = format!("{base}/api/v1/gpus");
    let gpus: Value = get_with(client, &url, bearer).await.json().await.unwrap();
    text_pairs(&gpus["gpus"], "node", "state")
}

#[sqlx::test(migrations = false)]
async fn a_killed_node_is_withdrawn_within_its_lost_time_and_a_name_taken_over_fences_its_holder(
    pool: PgPool,
) {
    let fast = ["--heartbeat-s", "1", "--node-lost-after-s", "3"];
    let a = Serve::new(&pool, &[&["--node", "node-a"][..], &fast].concat());
    let b = Serve::new(&pool, &[&["--node", "node-b"][..], &fast].concat());
    let a_proc = a.start("a.log").await;
    let _b_proc = b.start("b.log").await;
    let (client, admin) = api_as_admin(b.port).await;
    let nodes: Value = get_with(&client, &format!("{}/api/v1/nodes", b.base()), &admin)
        .await
        .json()
        .await
        .unwrap();
    let states = rows(&nodes, |n| text(n, "state"));
    assert_eq!(states, ["up", "up"], "{nodes}");
    a_proc.kill9();
    let killed = std::time::Instant::now();
    loop {
        let cards = served_card_states(&client, &b.base(), &admin).await;
        let a_cards: Vec<&str> = cards
            .iter()
            .filter(|c| c.0 == "node-a")
            .map(|c| c.1.as_str())
            .collect();
        if a_cards.len() == 4 && a_cards.iter().all(|s| *s == "lost") {
            break;
        }
        // Lost after 3 s without a heartbeat; the last one came at most 1 s before the kill.
        assert!(
            killed.elapsed() < std::time::Duration::from_secs(3 + 1 + 2),
            "node-a's cards still offered {:?} after the kill: {cards:?}",
            killed.elapsed()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    // New jobs go to node-b only; once its four cards are taken the fifth waits.
    let mut jobs = Vec::new();
    for i in 0..5 {
        let spec = one_card_job(&format!("after-kill-{i}"));
        jobs.push(post_job(&client, b.port, &admin, &spec).await);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let placed = loop {
        let mut placed = Vec::new();
        for id in &jobs {
            let url = format!("{}/api/v1/jobs/{id}", b.base());
            let job: Value = get_with(&client, &url, &admin).await.json().await.unwrap();
            if job["status"] == "admitted" {
                placed.push(job["node"].as_str().unwrap().to_owned());
            }
        }
        if placed.len() >= 4 || std::time::Instant::now() > deadline {
            break placed;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert_eq!(placed, ["node-b"; 4], "jobs placed after the kill");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let url = format!("{}/api/v1/jobs/{}", b.base(), jobs[4]);
    let fifth: Value = get_with(&client, &url, &admin).await.json().await.unwrap();
    assert_eq!(fifth["status"], "queued", "{fifth}");
    // A second process registers as node-b: the first one's next heartbeat is refused and it says
    // it lost its lease (its runner, were it on, would claim nothing more).
    let thief = Serve::new(&pool, &[&["--node", "node-b"][..], &fast].concat());
    let _thief_proc = thief.start("thief.log").await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let log = b.dir.path().join("b.log");
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("lost its node's lease")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "node-b's first process did not notice the takeover: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

#[sqlx::test(migrations = false)]
async fn a_runner_that_lost_its_lease_claims_nothing(pool: PgPool) {
    use gpuq::server::runner::{DockerHealth, Runner, RunnerConfig};
    use gpuq::server::runtime::{ensure_sim_devices, Docker, LaunchMode};
    let app = TestApp::new(pool).await;
    ensure_sim_devices(1).unwrap();
    app.sim_cards(&format!("1x24576:{RTX}"), "node-l").await;
    let registered = register(&app, "node-l").await;
    let (_, member) = app.admin_and_member("alice").await;
    let spec = json!({ "image": "gpuq-test/busybox:latest", "command": ["true"],
                       "min_vram_mb": 1000 });
    let job = app.submit_ok(&member, spec).await;
    app.pass().await;
    assert_eq!(app.job(&member, job).await["status"], "admitted");
    // Another process takes the node: this one's heartbeat is refused and its lease lost.
    register(&app, "node-l").await;
    assert!(!nodes::beat(&app.pool, &registered).await);
    let cfg = RunnerConfig {
        node: "node-l".into(),
        logs_dir: app.logs_dir.clone(),
        log_max_bytes: 1 << 20,
        stop_grace: std::time::Duration::from_secs(1),
        mode: LaunchMode::Fenced,
        job_uids: Default::default(),
        never_mount: vec![app.logs_dir.clone()],
        secrets: Default::default(),
    };
    let docker = Docker::connect().await.expect("dockerd must be running");
    let runner = Runner::leased(
        app.pool.clone(),
        docker,
        cfg,
        std::sync::Arc::new(DockerHealth::default()),
        app.notifier.clone(),
        registered.lease.clone(),
    );
    let (stop_tx, mut stop) = tokio::sync::watch::channel(false);
    assert!(runner.start_up(&mut stop).await);
    // The run loop claims at once (and on every note); give it time to.
    let running = tokio::spawn(runner.run(app.notifier.subscribe(), stop));
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let _ = stop_tx.send(true);
    running.await.unwrap();
    let v = app.job(&member, job).await;
    assert_eq!(v["status"], "admitted", "a fenced-off runner claimed: {v}");
    let attempts: i32 = app.scalar("SELECT attempt FROM jobs").await;
    assert_eq!(attempts, 0);
    // The same runner with its lease held launches it.
    let node = crate::support::Node::start(&app, "node-l", LaunchMode::Fenced).await;
    crate::support::wait_status(&app, &member, job, &["succeeded", "failed"], 60).await;
    assert_eq!(app.job(&member, job).await["status"], "succeeded");
    node.stop().await;
}

#[sqlx::test(migrations = false)]
async fn a_job_that_opted_in_is_requeued_off_a_lost_node_and_its_old_run_is_stopped(pool: PgPool) {
    use crate::support::isolation::{container_of, event_kinds};
    use gpuq::server::runtime::LaunchMode;
    let app = TestApp::with_sim_devices(pool, 1).await;
    let spec = format!("1x24576:{RTX}");
    app.sim_cards(&spec, "rq-a").await;
    let old = register(&app, "rq-a").await;
    let (_, member) = app.admin_and_member("alice").await;
    let node = crate::support::Node::start(&app, "rq-a", LaunchMode::Fenced).await;
    let job = |requeue: bool| {
        json!({ "image": "gpuq-test/busybox:latest", "command": ["sleep", "300"],
                "min_vram_mb": 10000, "requeue_on_node_loss": requeue })
    };
    let mover = app.submit_ok(&member, job(true)).await;
    let stayer = app.submit_ok(&member, job(false)).await;
    for id in [mover, stayer] {
        crate::support::wait_status(&app, &member, id, &["running"], 60).await;
    }
    let old_run = container_of(&app, mover).await.expect("a container");
    let stayer_run = container_of(&app, stayer).await.expect("a container");
    // rq-a goes silent; rq-b is up. The next pass requeues the job that asked for it, which lands
    // on rq-b at once; the other waits for its node, running as far as anyone knows.
    app.sim_cards(&spec, "rq-b").await;
    register(&app, "rq-b").await;
    silence(&app, "rq-a").await;
    app.pass().await;
    let m = app.job(&member, mover).await;
    assert_eq!(
        (m["status"].as_str(), m["node"].as_str()),
        (Some("admitted"), Some("rq-b")),
        "{m}"
    );
    let s = app.job(&member, stayer).await;
    assert_eq!(
        (s["status"].as_str(), s["node"].as_str()),
        (Some("running"), Some("rq-a")),
        "{s}"
    );
    assert_eq!(s["node_lost"], true);
    let kinds = event_kinds(&app, mover).await;
    assert_eq!(
        kinds.iter().filter(|k| *k == "requeued").count(),
        1,
        "{kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|k| *k == "admitted").count(),
        2,
        "{kinds:?}"
    );
    // rq-a's lease is taken: its process, were it to wake, could claim nothing.
    assert!(
        !nodes::beat(&app.pool, &old).await,
        "the lost node kept its lease"
    );
    // rq-a's runner stops the old run, which holds a card the ledger gave back; its end is not
    // written over the requeued job.
    let docker = gpuq::server::runtime::Docker::connect().await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let alive = docker.list_managed(Some("rq-a")).await.unwrap();
        if !alive.iter().any(|c| c.running && c.id == old_run) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the old run still runs: {alive:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let m = app.job(&member, mover).await;
    assert_eq!(
        (m["status"].as_str(), m["node"].as_str()),
        (Some("admitted"), Some("rq-b")),
        "{m}"
    );
    assert_eq!(ledger_violations(&app.pool).await, Vec::<String>::new());
    // The other job's container goes too, and its end is recorded before the node stops, so no
    // task of this test is left writing to the database.
    docker_cli(&["rm", "-f", &stayer_run]);
    crate::support::wait_status(&app, &member, stayer, &["failed"], 60).await;
    node.stop().await;
}
