//! Flooding the queue with refused submissions, and making every list load everyone's specs.
//!
//! The attacker is a member with an API token. Before: 30 submissions of a job that can never run
//! here each got 400 and each was stored as `rejected` with its whole spec, announced on the live
//! stream; nothing bounded how many or how fast.

use crate::support::{read_stream_until, TestApp, PASSWORD};
use gpuq::model::Role;
use gpuq::server::http::HttpOptions;
use gpuq::server::limits::SubmitRate;
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde_json::{json, Value};
use sqlx::PgPool;

/// A job that fits the one 24 GiB test card, or with `mib` above it, never does.
fn job(name: &str, mib: u64) -> Value {
    json!({ "image": "gpuq-test/busybox:latest", "command": ["true"], "name": name,
            "min_vram_mb": mib })
}

async fn count(app: &TestApp, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(&app.pool).await.unwrap()
}

#[sqlx::test(migrations = false)]
async fn never_fit_submits_store_nothing_and_announce_nothing(pool: PgPool) {
    let app = TestApp::with_one_card(pool, "flood").await;
    let (admin, mallory) = app.admin_and_member("mallory").await;
    let (stop, notifier) = app.start_notifier();
    // The admin's live stream carries every job's changes.
    let mut stream = app.live_stream(&admin).await;

    for i in 0..30 {
        let r = app
            .submit(&mallory, job(&format!("never-{i}"), 30_000))
            .await;
        assert_eq!(r.status, 400, "{}", r.text);
        assert!(r.text.contains("can never run here"), "{}", r.text);
    }
    assert_eq!(count(&app, "SELECT count(*) FROM jobs").await, 0);
    assert_eq!(count(&app, "SELECT count(*) FROM job_events").await, 0);

    // The next accepted job is the first thing the stream says about any job.
    let fits = app.submit_ok(&mallory, job("fits", 1000)).await;
    let seen = read_stream_until(&mut stream, &fits.to_string(), 10).await;
    assert!(
        !seen.contains("rejected"),
        "a refused job was announced: {seen}"
    );
    assert_eq!(
        seen.matches("event: job").count(),
        1,
        "only the accepted job was announced: {seen}"
    );
    assert_eq!(count(&app, "SELECT count(*) FROM jobs").await, 1);
    let _ = stop.send(true);
    notifier.await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn submits_and_previews_are_rate_limited_per_user(pool: PgPool) {
    let app = TestApp::custom(pool, HttpOptions::default(), |ctx| {
        ctx.submit_rate = SubmitRate::new(5, 3);
    })
    .await;
    app.sim_cards("1x24576:NVIDIA GeForce RTX 3090", "flood")
        .await;
    let (admin, mallory) = app.admin_and_member("mallory").await;
    let bob = app.bearer("bob", Role::Member).await;

    // Refused submissions count too: checking them is the cost being bounded.
    for i in 0..3 {
        let r = app
            .submit(&mallory, job(&format!("never-{i}"), 30_000))
            .await;
        assert_eq!(r.status, 400, "{}", r.text);
    }
    app.submit_ok(&mallory, job("a", 1000)).await;
    app.submit_ok(&mallory, job("b", 1000)).await;
    let refused = app.submit(&mallory, job("c", 1000)).await;
    assert_eq!(refused.status, 429, "{}", refused.text);
    let message = refused.json()["error"].as_str().unwrap().to_owned();
    assert!(
        message.contains("too many job submissions: at most 5 a minute per user"),
        "{message}"
    );
    let retry: u64 = refused.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=12).contains(&retry), "{retry}");
    // Nothing was checked or stored for the refused one; a resubmit is a submit.
    assert_eq!(count(&app, "SELECT count(*) FROM jobs").await, 2);
    let first: uuid::Uuid = sqlx::query_scalar("SELECT id FROM jobs LIMIT 1")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    let again = app
        .post(&format!("/api/v1/jobs/{first}/resubmit"), &mallory)
        .await;
    assert_eq!(again.status, 429, "{}", again.text);

    // Per user: bob and the admin are not held back by mallory's flood.
    app.submit_ok(&bob, job("bob's", 1000)).await;
    for i in 0..8 {
        app.submit_ok(&admin, job(&format!("admin-{i}"), 1000))
            .await;
    }

    // The preview has its own bucket, and it is bounded too.
    let cookie = app.login("mallory", PASSWORD).await;
    let form = format!(
        "spec={}",
        utf8_percent_encode(&job("p", 1000).to_string(), NON_ALPHANUMERIC)
    );
    for _ in 0..3 {
        let p = app.signed_in_call(&cookie, "preview_job", &form).await;
        assert_eq!(p.status, 200, "{}", p.text);
    }
    let p = app.signed_in_call(&cookie, "preview_job", &form).await;
    assert_eq!(p.status, 429, "{}", p.text);
    assert!(p.text.contains("too many submit previews"), "{}", p.text);
}

/// A member's own list shows their jobs' env and volumes; nobody's list loads the stored specs
/// (a page of 500 would otherwise carry 500 whole specs through memory), and another member's
/// list row carries neither the env nor the command line, not even in the row read.
#[sqlx::test(migrations = false)]
async fn job_lists_load_only_what_they_show(pool: PgPool) {
    let app = TestApp::with_one_card(pool, "lists").await;
    let (alice, manager, admin) = app.member_manager_admin("alice").await;
    let bob = app.bearer("bob", Role::Member).await;
    let big = "x".repeat(30_000);
    let id = app
        .submit_ok(
            &alice,
            json!({ "image": "gpuq-test/busybox:latest", "command": ["echo", "marker-cmd"],
                    "min_vram_mb": 1000, "env": { "BIG": big } }),
        )
        .await;

    let list = |bearer: String| {
        let app = &app;
        async move { app.get("/api/v1/jobs", &bearer).await.json() }
    };
    let own = list(alice.clone()).await;
    assert_eq!(own["jobs"][0]["id"], id.to_string());
    assert_eq!(own["jobs"][0]["env"]["BIG"].as_str().unwrap().len(), 30_000);
    assert_eq!(own["jobs"][0]["command"], json!(["echo", "marker-cmd"]));
    let bobs = list(bob.clone()).await;
    assert!(bobs["jobs"][0]["env"].is_null(), "{bobs}");
    assert_eq!(bobs["jobs"][0]["command"], json!([]));
    assert!(!bobs.to_string().contains("marker-cmd"));
    let managers = list(manager.clone()).await;
    assert!(managers["jobs"][0]["env"].is_null());
    assert_eq!(
        managers["jobs"][0]["command"],
        json!(["echo", "marker-cmd"])
    );
    let admins = list(admin.clone()).await;
    assert!(admins["jobs"][0]["env"]["BIG"].is_string());

    // The rows the list reads from Postgres: a `ListRow` has no spec, and for a viewer who may
    // not read them, neither the env nor the command line leave the database.
    use gpuq::server::db::jobs::{list as list_rows, JobFilter, ListViewer};
    let bob_id: uuid::Uuid = sqlx::query_scalar("SELECT id FROM users WHERE username = 'bob'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    let filter = JobFilter {
        viewer: ListViewer {
            id: bob_id,
            all_details: false,
            all_env: false,
        },
        limit: 500,
        ..JobFilter::default()
    };
    let mut conn = app.pool.acquire().await.unwrap();
    let (rows, total) = list_rows(&mut conn, &filter).await.unwrap();
    assert_eq!(total, 1);
    assert!(rows[0].env.is_none() && rows[0].volumes.is_none());
    assert!(rows[0].job.command.is_empty() && rows[0].job.status_reason.is_none());
}
