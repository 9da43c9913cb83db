//! Nodes: registration and heartbeats under an epoch lease, lost nodes (derived from database
//! time) and drained nodes getting no new work, and an admin forgetting a lost node.

use crate::support::{ledger_violations, TestApp};
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
    sqlx::query("UPDATE nodes SET heartbeat_at = now() - interval '1 hour' WHERE name = $1")
        .bind(node)
        .execute(&app.pool)
        .await
        .unwrap();
}

fn one_card_job(name: &str) -> Value {
    json!({ "image": "gpuq-test/busybox:latest", "command": ["sleep", "1"], "name": name,
            "min_vram_mb": 20000 })
}

/// `GET /api/v1/nodes` as `bearer`, by name.
async fn node_states(app: &TestApp, bearer: &str) -> Vec<(String, String)> {
    let r = app.get("/api/v1/nodes", bearer).await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.json()
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["name"].as_str().unwrap().to_owned(),
                n["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Each card's (node, shown state).
async fn card_states(app: &TestApp, bearer: &str) -> Vec<(String, String)> {
    let gpus = app.get("/api/v1/gpus", bearer).await.json();
    gpus["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["node"].as_str().unwrap().to_owned(),
                g["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
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
    sqlx::query("UPDATE nodes SET heartbeat_at = now() - interval '1 minute'")
        .execute(&app.pool)
        .await
        .unwrap();
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
    let gpus = app.get("/api/v1/gpus", &member).await.json();
    assert_eq!(
        gpus["gpus"][0]["free_mib"], 0,
        "a lost node's card offers nothing"
    );
    let first = app.submit_ok(&member, one_card_job("first")).await;
    let second = app.submit_ok(&member, one_card_job("second")).await;
    app.pass().await;
    let first = app.job(&member, first).await;
    assert_eq!(first["status"], "admitted");
    assert_eq!(first["node"], "node-b");
    assert_eq!(
        app.job(&member, second).await["status"],
        "queued",
        "the lost node's free card took the second job"
    );
    // The metrics snapshot knows every node: node-a is down, with its heartbeat's age.
    let snap = gpuq::server::metrics::snapshot::read(&app.pool, "node-b")
        .await
        .unwrap();
    let a = snap.nodes.iter().find(|n| n.0 == "node-a").unwrap();
    assert!(!a.1 && a.2 >= 3600, "{a:?}");
    assert!(snap.nodes.iter().any(|n| n.0 == "node-b" && n.1));
    // The node heartbeats again (same lease): its card takes the waiting job.
    sqlx::query("UPDATE nodes SET heartbeat_at = now() WHERE name = 'node-a'")
        .execute(&app.pool)
        .await
        .unwrap();
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
    sqlx::query(
        "UPDATE jobs SET status = 'running', started_at = now(), attempt = 1 WHERE id = $1",
    )
    .bind(running)
    .execute(&app.pool)
    .await
    .unwrap();
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
