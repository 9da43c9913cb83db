//! Starving the box: over-cap submits, a flood of CPU jobs, raising one's own priority, packing a
//! card with tiny jobs. Each cap is one of the launch policy's, set by an admin; a member's attempt
//! to go past it is refused (at submit) or held back (at admission), and admins are not capped.

use crate::support::TestApp;
use gpuq::model::Role;
use serde_json::{json, Value};
use sqlx::PgPool;

const IMAGE: &str = "gpuq-test/busybox:latest";

async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

/// An app with one card on node `bounds` whose launch policy its admin set to `policy`, and a
/// member `mallory`: the app and the admin's and the member's bearer headers.
async fn capped(pool: PgPool, policy: Value) -> (TestApp, String, String) {
    let app = TestApp::with_one_card(pool, "bounds").await;
    let (admin, member) = app.admin_and_member("mallory").await;
    app.set_policy(&admin, policy).await;
    (app, admin, member)
}

#[sqlx::test(migrations = false)]
async fn forty_parallel_submits_past_the_queued_cap_queue_exactly_the_cap(pool: PgPool) {
    let (app, admin, member) = capped(pool.clone(), json!({ "max_queued_per_user": 5 })).await;

    // No admission pass runs here: every accepted job stays queued and counts against the cap.
    let spec = json!({ "image": IMAGE, "command": ["true"], "min_vram_mb": 1000 });
    let replies =
        futures_util::future::join_all((0..40).map(|_| app.submit(&member, spec.clone()))).await;
    let accepted = replies.iter().filter(|r| r.status == 201).count();
    let refused: Vec<_> = replies.iter().filter(|r| r.status != 201).collect();
    assert_eq!(accepted, 5, "parallel submits must not slip past the cap");
    for r in &refused {
        assert_eq!(r.status, 429, "{}", r.text);
        assert!(
            r.json()["error"]
                .as_str()
                .unwrap()
                .contains("max_queued_per_user = 5"),
            "the refusal names the cap: {}",
            r.text
        );
        let retry: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
        assert!(retry > 0);
    }
    assert_eq!(
        count(&pool, "SELECT count(*) FROM jobs WHERE status = 'queued'").await,
        5,
        "nothing past the cap was stored"
    );

    // The cap is per user, and admins are not capped.
    let other = app.bearer("olive", Role::Member).await;
    app.submit_ok(&other, spec.clone()).await;
    for _ in 0..7 {
        app.submit_ok(&admin, spec.clone()).await;
    }
    // A job that leaves the queue frees its place.
    let first: uuid::Uuid = replies
        .iter()
        .find(|r| r.status == 201)
        .map(|r| r.json()["job_id"].as_str().unwrap().parse().unwrap())
        .unwrap();
    let r = app
        .post(&format!("/api/v1/jobs/{first}/cancel"), &member)
        .await;
    assert!(r.status.is_success(), "{}", r.text);
    app.submit_ok(&member, spec.clone()).await;
    assert_eq!(app.submit(&member, spec).await.status, 429);
}

#[sqlx::test(migrations = false)]
async fn a_member_past_the_running_cap_waits_and_is_told_which_cap(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    app.sim_cards("2x24576:NVIDIA GeForce RTX 3090", "bounds")
        .await;
    let (admin, member) = app.admin_and_member("mallory").await;
    let other = app.bearer("olive", Role::Member).await;
    app.set_policy(&admin, json!({ "max_running_per_user": 2 }))
        .await;

    let spec = json!({ "image": IMAGE, "command": ["true"], "min_vram_mb": 1000 });
    let mine: Vec<uuid::Uuid> =
        futures_util::future::join_all((0..4).map(|_| app.submit_ok(&member, spec.clone()))).await;
    let theirs = app.submit_ok(&other, spec.clone()).await;
    let admins: Vec<uuid::Uuid> =
        futures_util::future::join_all((0..3).map(|_| app.submit_ok(&admin, spec.clone()))).await;
    app.pass().await;

    let status = |v: &Value| v["status"].as_str().unwrap().to_owned();
    let mut admitted = 0;
    for id in &mine {
        let j = app.job(&member, *id).await;
        if status(&j) == "admitted" {
            admitted += 1;
        } else {
            assert_eq!(status(&j), "queued");
            let why = j["wait_reason"].as_str().unwrap_or_default();
            assert!(why.contains("max_running_per_user"), "{j}");
        }
    }
    assert_eq!(
        admitted, 2,
        "two of the member's four jobs run, the rest wait"
    );
    assert_eq!(status(&app.job(&other, theirs).await), "admitted");
    for id in admins {
        assert_eq!(
            status(&app.job(&admin, id).await),
            "admitted",
            "admins are not capped"
        );
    }
    // A second pass admits nothing more of theirs while two still hold their places.
    app.pass().await;
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM jobs j JOIN users u ON u.id = j.owner_id \
             WHERE u.username = 'mallory' AND j.status = 'admitted'"
        )
        .await,
        2
    );
}

#[sqlx::test(migrations = false)]
async fn a_flood_of_jobs_without_gpus_runs_at_most_the_node_cap(pool: PgPool) {
    let (app, _, member) = capped(pool.clone(), json!({ "max_cpu_jobs_per_node": 3 })).await;
    let spec = json!({ "image": IMAGE, "command": ["true"], "gpu_count": 0 });
    let ids: Vec<uuid::Uuid> =
        futures_util::future::join_all((0..6).map(|_| app.submit_ok(&member, spec.clone()))).await;
    app.pass().await;
    app.pass().await;
    let mut waiting = 0;
    for id in ids {
        let j = app.job(&member, id).await;
        if j["status"] == "queued" {
            waiting += 1;
            assert!(
                j["wait_reason"]
                    .as_str()
                    .unwrap()
                    .contains("max_cpu_jobs_per_node"),
                "{j}"
            );
        }
    }
    assert_eq!(waiting, 3, "three run, three wait for a place");
}

#[sqlx::test(migrations = false)]
async fn a_member_cannot_raise_their_priority_or_pack_a_card_with_tiny_jobs(pool: PgPool) {
    let app = TestApp::with_one_card(pool, "bounds").await;
    let member = app.bearer("mallory", Role::Member).await;
    let manager = app.bearer("mia", Role::Manager).await;

    let r = app
        .submit(
            &member,
            json!({ "image": IMAGE, "command": ["true"], "min_vram_mb": 1000, "priority": 1 }),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["field"], "priority");
    // Lowering is everyone's right; raising is a manager's.
    app.submit_ok(
        &member,
        json!({ "image": IMAGE, "command": ["true"], "min_vram_mb": 1000, "priority": -5 }),
    )
    .await;
    app.submit_ok(
        &manager,
        json!({ "image": IMAGE, "command": ["true"], "min_vram_mb": 1000, "priority": 50 }),
    )
    .await;

    // The default floor is 256 MiB per card: a thousand 1 MiB jobs cannot share one card.
    let r = app
        .submit(
            &member,
            json!({ "image": IMAGE, "command": ["true"], "min_vram_mb": 1 }),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["field"], "min_vram_mb");
    assert!(
        r.json()["error"].as_str().unwrap().contains("256 MiB"),
        "{}",
        r.text
    );
    app.submit_ok(
        &member,
        json!({ "image": IMAGE, "command": ["true"], "min_vram_mb": 256 }),
    )
    .await;
}

#[sqlx::test(migrations = false)]
async fn a_member_cannot_lift_the_framework_memory_cap(pool: PgPool) {
    // With the hints on or off, the keys are gpuq's: a job naming one is refused at submit.
    let (app, admin, member) = capped(pool.clone(), json!({})).await;
    for hints in [true, false] {
        app.set_policy(&admin, json!({ "framework_memory_hints": hints }))
            .await;
        for (key, value) in [
            ("XLA_PYTHON_CLIENT_MEM_FRACTION", "1.0"),
            ("XLA_PYTHON_CLIENT_PREALLOCATE", "true"),
            ("tf_force_gpu_allow_growth", "false"),
        ] {
            let spec = json!({
                "image": IMAGE, "command": ["true"], "min_vram_mb": 1000, "env": { key: value }
            });
            let r = app.submit(&member, spec).await;
            assert_eq!(r.status, 400, "{key}: {}", r.text);
            let body = r.json();
            assert_eq!(body["field"], format!("env.{key}"), "{}", r.text);
            let error = body["error"].as_str().unwrap();
            assert!(error.contains(key) && error.contains("reserved"), "{error}");
        }
        assert_eq!(count(&pool, "SELECT count(*) FROM jobs").await, 0);
    }
}
