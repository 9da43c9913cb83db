//! The start estimate against real Postgres: figures made from the ledger and the run-time
//! history, stored, and shown in the job's view to those who may read its details only.

use crate::support::{pass_config, TestApp, PASSWORD};
use chrono::{DateTime, Duration, Utc};
use gpuq::model::Role;
use gpuq::server::admission::estimate::{self, EstimateConfig};
use serde_json::{json, Value};
use sqlx::PgPool;

const RTX: &str = "NVIDIA GeForce RTX 3090";

fn train(timeout_s: i64) -> Value {
    json!({ "image": "gpuq-test/busybox:latest", "command": ["sleep", "1"],
            "workload": "train", "timeout_s": timeout_s })
}

fn at(v: &Value, field: &str) -> Option<DateTime<Utc>> {
    v[field]
        .as_str()
        .map(|s| s.parse().expect("an RFC 3339 time"))
}

async fn refresh(app: &TestApp) {
    let wrote = estimate::refresh(
        &app.pool,
        &pass_config(),
        &EstimateConfig::default(),
        Utc::now(),
    )
    .await
    .expect("refresh");
    assert!(wrote, "nothing else holds the estimate's lock");
}

/// Within a minute of `want`.
fn near(got: Option<DateTime<Utc>>, want: DateTime<Utc>, what: &str) {
    let got = got.unwrap_or_else(|| panic!("{what}: no figure"));
    assert!(
        (got - want).num_seconds().abs() < 60,
        "{what}: {got}, expected about {want}"
    );
}

/// One 3090, held by a `train` job that started 5 minutes ago with a one-hour deadline; `train`
/// ran 10, 20 and 30 minutes before; alice's job queued behind it.
async fn busy_card(pool: PgPool) -> (TestApp, String, uuid::Uuid) {
    let app = TestApp::new(pool).await;
    app.sim_cards(&format!("1x24576:{RTX}"), "node-a").await;
    let (admin, alice) = app.admin_and_member("alice").await;
    app.workload(&admin, "train", json!({ RTX: 20000 })).await;
    for minutes in [10, 20, 30] {
        let done = app.submit_ok(&admin, train(3600)).await;
        sqlx::query(
            "UPDATE jobs SET status = 'succeeded', released_at = now(), \
             started_at = now() - make_interval(hours => 2), \
             finished_at = now() - make_interval(hours => 2) + make_interval(mins => $2) \
             WHERE id = $1",
        )
        .bind(done)
        .bind(minutes)
        .execute(&app.pool)
        .await
        .unwrap();
    }
    let running = app.submit_ok(&admin, train(3600)).await;
    app.pass().await;
    app.exec_with(
        "UPDATE jobs SET status = 'running', started_at = now() - interval '5 minutes' WHERE id = $1",
        running,
    )
    .await;
    let queued = app.submit_ok(&alice, train(1800)).await;
    app.pass().await;
    assert_eq!(app.job(&alice, queued).await["status"], "queued");
    (app, alice, queued)
}

#[sqlx::test(migrations = false)]
async fn a_queued_job_expects_the_p50_end_and_is_bound_by_the_deadline(pool: PgPool) {
    let (app, alice, queued) = busy_card(pool).await;
    let before = app.job(&alice, queued).await;
    assert_eq!(before["estimated_start_at"], Value::Null, "no figure yet");
    refresh(&app).await;
    let now = Utc::now();
    let view = app.job(&alice, queued).await;
    // The running job has run 5 minutes; its type's p50 is 20: it is expected to end in 15.
    near(
        at(&view, "estimated_start_at"),
        now + Duration::minutes(15),
        "estimate",
    );
    // Its deadline is an hour from its start (55 minutes from now), plus the bound's slack.
    near(
        at(&view, "latest_start_at"),
        now + Duration::minutes(55) + Duration::seconds(30),
        "bound",
    );
    assert_eq!(view["cannot_start"], Value::Null);

    // The list shows the same figures.
    let list = app.get("/api/v1/jobs?mine=true", &alice).await.json();
    let row = list["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["id"] == queued.to_string())
        .cloned()
        .expect("alice's job is listed");
    assert_eq!(row["estimated_start_at"], view["estimated_start_at"]);
    assert_eq!(row["latest_start_at"], view["latest_start_at"]);

    // Without history the estimate is the deadline too.
    app.exec_with(
        "UPDATE jobs SET workload = NULL WHERE status = 'succeeded' AND workload = $1",
        "train",
    )
    .await;
    refresh(&app).await;
    let view = app.job(&alice, queued).await;
    near(
        at(&view, "estimated_start_at"),
        Utc::now() + Duration::minutes(55),
        "estimate without history",
    );
}

#[sqlx::test(migrations = false)]
async fn the_estimate_is_for_those_who_may_read_the_job_only(pool: PgPool) {
    let (app, alice, queued) = busy_card(pool).await;
    refresh(&app).await;
    let bob = app.bearer("bob", Role::Member).await;
    let mia = app.bearer("mia", Role::Manager).await;
    let as_alice = app.job(&alice, queued).await;
    assert!(as_alice["estimated_start_at"].is_string());
    // Bob sees alice's job in the queue, but neither its estimate nor its bound.
    let as_bob = app.job(&bob, queued).await;
    assert_eq!(as_bob["details_hidden"], true);
    for field in ["estimated_start_at", "latest_start_at", "cannot_start"] {
        assert_eq!(
            as_bob[field],
            Value::Null,
            "{field} leaks to another member"
        );
    }
    let listed = app.get("/api/v1/jobs?status=queued", &bob).await.json();
    let row = &listed["jobs"][0];
    assert_eq!(row["id"], queued.to_string());
    assert_eq!(row["estimated_start_at"], Value::Null);
    assert_eq!(row["latest_start_at"], Value::Null);
    // Nor through the job page, which shows it to alice.
    let path = format!("/jobs/{queued}");
    let alices = app.login("alice", PASSWORD).await;
    let page = app.page(&path, Some(&alices)).await;
    assert!(
        page.text.contains("Expected to start around"),
        "{}",
        page.text
    );
    let bobs = app.login("bob", PASSWORD).await;
    let page = app.page(&path, Some(&bobs)).await;
    assert_eq!(page.status, 200);
    assert!(page.text.contains("details-hidden"), "{}", page.text);
    assert!(!page.text.contains("Expected to start"), "{}", page.text);
    // A manager reads it as the owner does.
    let as_mia = app.job(&mia, queued).await;
    assert_eq!(as_mia["estimated_start_at"], as_alice["estimated_start_at"]);
}

#[sqlx::test(migrations = false)]
async fn a_job_that_can_never_start_says_so_instead_of_a_date(pool: PgPool) {
    let (app, alice, queued) = busy_card(pool).await;
    let admin = app.bearer("root2", Role::Admin).await;
    // The manifest now asks more of a 3090 than it has: the queued job can never fit.
    app.workload(&admin, "train", json!({ RTX: 40000 })).await;
    refresh(&app).await;
    let view = app.job(&alice, queued).await;
    assert_eq!(view["estimated_start_at"], Value::Null);
    assert_eq!(view["latest_start_at"], Value::Null);
    let why = view["cannot_start"].as_str().expect("a reason");
    assert!(why.contains("40000 MiB"), "{why}");
}

#[sqlx::test(migrations = false)]
async fn one_node_writes_the_figures_at_a_time_and_only_for_queued_jobs(pool: PgPool) {
    let (app, alice, queued) = busy_card(pool).await;
    let mut other = app.pool.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(estimate::ESTIMATE_LOCK)
        .execute(&mut *other)
        .await
        .unwrap();
    let wrote = estimate::refresh(
        &app.pool,
        &pass_config(),
        &EstimateConfig::default(),
        Utc::now(),
    )
    .await
    .unwrap();
    assert!(
        !wrote,
        "another node holds the lock: this one leaves the figures be"
    );
    other.rollback().await.unwrap();
    refresh(&app).await;
    assert!(app.job(&alice, queued).await["estimated_start_at"].is_string());
    // Once the job leaves the queue its figures go with the next refresh.
    app.exec_with("UPDATE jobs SET status = 'cancelled' WHERE id = $1", queued)
        .await;
    refresh(&app).await;
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM job_estimates")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(rows, 0);
}

/// A dependent starts no earlier than its parent is expected to end, though a place for it is
/// free now; a dependent whose parent can no longer satisfy it is said to be cancelled instead of
/// given a date.
#[sqlx::test(migrations = false)]
async fn dependents_wait_for_their_parents_or_are_said_to_be_cancelled(pool: PgPool) {
    let (app, alice, queued) = busy_card(pool).await;
    let cpu = |extra: Value| {
        let mut spec = json!({ "image": "gpuq-test/busybox:latest", "command": ["true"],
                               "gpu_count": 0, "timeout_s": 600 });
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        spec
    };
    // Free now: no card needed, no parent.
    let free = app.submit_ok(&alice, cpu(json!({}))).await;
    // Waits for alice's GPU job: that one starts in about 15 minutes (the running job's p50 end)
    // and runs its type's typical 20.
    let child = app
        .submit_ok(&alice, cpu(json!({ "after_ok": [queued] })))
        .await;
    // A parent that failed: the child will be cancelled.
    let failed = app.submit_ok(&alice, cpu(json!({}))).await;
    app.exec_with(
        "UPDATE jobs SET status = 'failed', finished_at = now(), released_at = now() WHERE id = $1",
        failed,
    )
    .await;
    let doomed = app
        .submit_ok(&alice, cpu(json!({ "after_ok": [failed] })))
        .await;
    refresh(&app).await;
    let now = Utc::now();
    near(
        at(&app.job(&alice, free).await, "estimated_start_at"),
        now,
        "a free job",
    );
    near(
        at(&app.job(&alice, child).await, "estimated_start_at"),
        now + Duration::minutes(35),
        "a dependent",
    );
    let view = app.job(&alice, doomed).await;
    assert_eq!(view["estimated_start_at"], Value::Null);
    let why = view["cannot_start"].as_str().unwrap_or_default();
    assert!(
        why.contains("cancelled"),
        "says it will be cancelled: {view}"
    );
}
